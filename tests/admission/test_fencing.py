"""A deposed admission leader is fenced off: once a successor has claimed the fences, the old
leader's next commit writes nothing to the ledger and publishes nothing, whatever its own clock
says (docs/architecture.md, Fencing)."""

import pytest

from tidegate.bus import Ledger
from tidegate.model import Admitted
from tidegate.testing import take_over

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
    await take_over(h.bus, h.cluster, "admission")

    await h.workload(workload("second"))
    assert await h.services.exited(deposed) == 1

    assert not [d for d in h.decisions if getattr(d, "workload", None) == "ns/second"]
    ledger = await Ledger.open(h.bus, h.cluster)
    keys = await ledger.keys()
    assert "ns/second" not in keys
    assert not [k for k in keys if k.startswith("outbox.")], keys
    assert "refused by fence" in caplog.text  # the fence stopped it, not its renewal
