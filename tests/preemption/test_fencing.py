"""A deposed preemption leader is fenced off: it can neither record a preemption, nor publish
``preempted``, nor evict, even while its own clock says it still leads."""

import pytest

from tidegate.bus import layout
from tidegate.model import Preempted
from tidegate.testing import take_over

from .conftest import Harness
from .test_preemption_service import inference_arrives, live, running_training_job


async def test_a_leader_whose_lease_was_taken_writes_nothing_publishes_nothing_evicts_nothing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    originals = await running_training_job(h)
    # A long TTL: the deposed leader's own renewal would not notice the takeover for 20 s, so
    # only the fence can stop it when the request arrives.
    deposed = await h.start_preemption(lease_ttl_seconds=60.0)

    def leading() -> bool:
        value = deposed.metrics.registry.get_sample_value("tidegate_leader", {"role": "preemption"})
        return value == 1

    await h.until(leading, what="the first instance leading")

    async def acting() -> bool:
        # The request consumer exists once the instance has taken over.
        try:
            await h.bus.jetstream.consumer_info(layout.decisions_stream(h.cluster), "preemption")
        except Exception:
            return False
        return True

    await h.until_async(acting, what="the first instance acting")

    # Another instance takes the lease over (as after a pause past the TTL) and claims the
    # fences, as its takeover does; the first instance does not know yet.
    await take_over(h.bus, h.cluster, "preemption")

    # A preempt request reaches the deposed instance: its first write is refused, it exits.
    await inference_arrives(h)
    assert await h.services.exited(deposed) == 1

    assert await h.record("serve") is None
    assert not h.of(Preempted)
    still = live(await h.pods("train-"))
    assert {p["metadata"]["uid"] for p in still} == originals
    assert "refused by fence" in caplog.text  # not its lease renewal: the fence stopped it
