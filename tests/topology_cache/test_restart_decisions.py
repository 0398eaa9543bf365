"""Decisions the topology-cache missed while it was down are applied once it is back.

Why: at start the cache replays the decision stream's last message per subject, in stream
order, not every decision in the order it learned them. A release stored while the cache was
down must end the admission in the restarted view (the chaos harness found a Job released as
Completed while the cache was down keeping two 8-GPU reservations for good), and an `admitted`
stored again after its release (a duplicate delivery, an outbox re-publish) must not bring the
reservation back, before or after a restart: the record of ended admissions is re-derived from
the replayed releases, whatever order they come in.
"""

from .conftest import GPU, Harness, msg
from .test_topology_cache import cluster, host

JOB = "team/job-38-0"


async def _admitted_job_then_stopped(harness: Harness) -> None:
    await cluster(harness)
    cache = await harness.start_cache()
    await harness.send(
        msg.admitted(JOB, {host("n0"): 1, host("n1"): 1}, sequence=4, per_pod=msg.requests(gpus=8))
    )
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 0
    assert await harness.stop_cache(cache) == 0


async def test_a_release_while_the_cache_is_down_ends_the_reservation_after_restart(
    harness: Harness,
) -> None:
    await _admitted_job_then_stopped(harness)
    await harness.send(msg.released(JOB, sequence=9))

    cache = await harness.start_cache()
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 8
    assert harness.node_record("n1").free[GPU] == 8
    assert await harness.stop_cache(cache) == 0


async def test_an_admitted_stored_again_after_its_release_stays_ended_across_a_restart(
    harness: Harness,
) -> None:
    await _admitted_job_then_stopped(harness)
    await harness.send(msg.released(JOB, sequence=9))
    # The same admission again (a duplicate delivery, an outbox re-publish): stored after the
    # release, so a replay of the last message per subject meets it after the release.
    await harness.send(
        msg.admitted(JOB, {host("n0"): 1, host("n1"): 1}, sequence=4, per_pod=msg.requests(gpus=8))
    )

    cache = await harness.start_cache()
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 8
    assert harness.node_record("n1").free[GPU] == 8
    assert await harness.stop_cache(cache) == 0

    # And once more, while it runs, then across another restart.
    cache = await harness.start_cache()
    await harness.send(
        msg.admitted(JOB, {host("n0"): 1, host("n1"): 1}, sequence=4, per_pod=msg.requests(gpus=8))
    )
    await harness.until_consistent()
    assert await harness.stop_cache(cache) == 0
    cache = await harness.start_cache()
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 8
    assert await harness.stop_cache(cache) == 0
