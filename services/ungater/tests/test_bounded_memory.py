"""Issue 29 seam 8: what the ungater keeps per workload grows with the workloads that exist,
not with every name ever seen (the view's tables and the releaser's ``_resumed`` did)."""

from typing import Any, cast

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


def test_deleted_workloads_leave_nothing_in_the_view_or_the_releaser() -> None:
    view = ClusterView()
    releaser = Releaser(
        view=view,
        kube=cast(KubeClient, object()),
        bus=cast(Bus, object()),
        cluster="c",
        settings=UngaterSettings(),
        metrics=ReleaserMetrics(CollectorRegistry()),
        publish=_never,
    )
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
    releaser = Releaser(
        view=view,
        kube=cast(KubeClient, object()),
        bus=cast(Bus, object()),
        cluster="c",
        settings=UngaterSettings(),
        metrics=ReleaserMetrics(CollectorRegistry()),
        publish=_never,
    )
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
