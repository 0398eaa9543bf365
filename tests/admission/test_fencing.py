"""A deposed admission leader is fenced off: once a successor has claimed the fences, the old
leader's next commit writes nothing to the ledger and publishes nothing, whatever its own clock
says (issue 12; docs/architecture.md, Fencing)."""

import asyncio

import pytest

from tidegate.bus import Fence, Lease, LeaseSettings, Ledger, layout
from tidegate.model import Admitted

from .conftest import Harness
from .test_admission_service import small_cluster, workload


async def test_a_leader_whose_lease_was_taken_commits_and_publishes_nothing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    await small_cluster(h)
    # A long TTL: its own renewal would not notice the takeover for 20 s.
    deposed = await h.start_admission(lease_ttl_seconds=60.0)
    await h.workload(workload("first"))
    await h.until(lambda: h.of(Admitted, "ns/first"), what="the first workload admitted")

    # Another instance takes the lease over and claims the fences, as its takeover does.
    leases = await h.bus.key_value(layout.leases_bucket(h.cluster))
    await leases.delete("admission")
    successor = Lease(
        h.bus,
        cluster=h.cluster,
        settings=LeaseSettings(name="admission", holder="successor", ttl_seconds=60.0),
    )
    assert await successor.try_acquire()
    await Fence.on_ledger(h.bus, successor, cluster=h.cluster).claim()
    await Fence.on_decisions(h.bus, successor, cluster=h.cluster).claim()

    await h.workload(workload("second"))
    (task,) = [t for s, t in h.services.running if s is deposed]
    h.services.running[:] = [(s, t) for s, t in h.services.running if s is not deposed]
    assert await asyncio.wait_for(task, 30) == 1

    assert not [d for d in h.decisions if getattr(d, "workload", None) == "ns/second"]
    ledger = await Ledger.open(h.bus, h.cluster)
    keys = await ledger.keys()
    assert "ns/second" not in keys
    assert not [k for k in keys if k.startswith("outbox.")], keys
    assert "refused by fence" in caplog.text  # the fence stopped it, not its renewal
