"""What the ungater keeps per workload grows with the workloads that exist, not with every
name ever seen (the view's tables and the releaser's ``_resumed`` included)."""

import asyncio
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from tidegate.bus import Bus, Published
from tidegate.kube import KubeClient
from tidegate.model import Admitted, Envelope, PodState, Tombstone, WorkloadKey, WorkloadState
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.release import Memory
from tidegate.ungater.config import UngaterSettings
from tidegate.ungater.handlers import BypassReporter
from tidegate.ungater.queue_status import QueueStatusWriter
from tidegate.ungater.releaser import Releaser, ReleaserMetrics


async def _never(subject: str, envelope: Envelope) -> Published:
    raise AssertionError("nothing to publish")


def _releaser(view: ClusterView) -> Releaser:
    """A releaser on ``view`` that never reaches Kubernetes or the bus."""
    return Releaser(
        view=view,
        kube=cast(KubeClient, object()),
        bus=cast(Bus, object()),
        cluster="c",
        settings=UngaterSettings(),
        metrics=ReleaserMetrics(CollectorRegistry()),
        publish=_never,
    )


def test_deleted_workloads_leave_nothing_in_the_view_or_the_releaser() -> None:
    view = ClusterView()
    releaser = _releaser(view)
    for n in range(200):
        key = WorkloadKey(f"team/w{n}")
        view.apply(WorkloadState(namespace="team", name=f"w{n}", uid=f"u{n}", owner_kind="Job"))
        view.apply(
            Admitted(workload=key, uid=f"u{n}", queue="q", sequence=n + 1, epoch=1, assignments={})
        )
        pod = PodState(namespace="team", name=f"w{n}-0", uid=f"p{n}", workload=key)
        view.apply(pod)
        # As if it unsuspended it, and suspended it for an eviction before.
        releaser.memory[key] = Memory(resumed=(f"u{n}", n + 1), requeuing=(f"u{n}", n))
        view.apply(Tombstone(object_kind="workload", name=f"w{n}", namespace="team", uid=f"u{n}"))
        view.apply(Tombstone(object_kind="pod", name=pod.name, namespace="team"))
        releaser._plan(key)
    assert view.replica.recorded() == []
    assert view.replica.pods == {}
    assert releaser.memory == {}
    # A copy of a deleted workload's admission that comes later holds nothing.
    view.apply(
        Admitted(workload="team/w7", uid="u7", queue="q", sequence=8, epoch=1, assignments={})
    )
    assert view.admission(WorkloadKey("team/w7")) is None


def test_a_standby_keeps_no_marks_for_deleted_workloads() -> None:
    # A standby follows the streams and marks what changed, but runs no rounds: what waits
    # for a round must not grow with every workload ever seen.
    view = ClusterView()
    releaser = _releaser(view)
    queues = QueueStatusWriter(view=view, kube=cast(KubeClient, object()), interval_seconds=1.0)
    bypass = BypassReporter(view, cast(KubeClient, object()))

    def apply(body: object) -> None:
        touched = view.apply(cast(Any, body))
        for writer in (releaser, queues, bypass):
            writer.mark(sorted(touched))

    for n in range(200):
        key = WorkloadKey(f"team/w{n}")
        apply(
            WorkloadState(
                namespace="team",
                name=f"w{n}",
                uid=f"u{n}",
                owner_kind="Job",
                queue="q",
                bypassed_pods=1,
                bypassed_requests={"nvidia.com/gpu": 1},
            )
        )
        apply(
            Admitted(workload=key, uid=f"u{n}", queue="q", sequence=n + 1, epoch=1, assignments={})
        )
        pod = PodState(namespace="team", name=f"w{n}-0", uid=f"p{n}", workload=key)
        apply(pod)
        apply(Tombstone(object_kind="workload", name=f"w{n}", namespace="team", uid=f"u{n}"))
        apply(Tombstone(object_kind="pod", name=pod.name, namespace="team"))
    assert view.replica.recorded() == []
    assert (releaser._dirty, releaser._fresh) == (set(), set())
    assert queues._marked == set()
    assert bypass._marked == set()


@pytest.mark.timeout(15)  # a spinning loop starves the event loop: only the signal ends it
async def test_a_releaser_whose_marked_workload_is_deleted_before_its_round_idles() -> None:
    """A mark wakes the loop; the workload's deletion then empties what waits for a round. The
    loop must wait for the next mark, not spin on the set wake-up (it did, and an ungater under
    test never stopped: the CI run's hung ``test_queue_status``)."""
    view = ClusterView()
    releaser = _releaser(view)
    key = WorkloadKey("team/w")
    releaser.mark(view.apply(WorkloadState(namespace="team", name="w", uid="u", owner_kind="Job")))
    releaser.mark(
        view.apply(Tombstone(object_kind="workload", name="w", namespace="team", uid="u"))
    )
    assert key not in view.replica
    stop = asyncio.Event()
    running = asyncio.create_task(releaser.run(stop))
    ticks = 0

    async def count() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    counter = asyncio.create_task(count())
    await asyncio.sleep(0.2)
    stop.set()
    releaser.mark([key])  # any wake-up lets run() see ``stop``
    async with asyncio.timeout(5):
        await running
    counter.cancel()
    # Idle: the counter had the loop to itself (a spinning run() shares it tick for tick and
    # never lets the sleep above end on time, or at all).
    assert ticks > 1000, ticks
