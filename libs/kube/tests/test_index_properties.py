"""Properties of the index: the outcome does not depend on the order events arrive in, and
deleting everything leaves nothing behind (no memory growth with churn)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.kube.read.index import ClusterIndex, ObjectKind, StateKey
from tidegate.model import WorkloadState

from .conftest import Builders

KUEUE = "kueue.x-k8s.io/v1beta1"
VOLCANO = "scheduling.volcano.sh/v1beta1"


def world() -> list[tuple[ObjectKind, dict[str, Any]]]:
    """Objects of every owner chain, each with gated pods, as (kind, object)."""
    k = Builders()
    group = {"scheduling.k8s.io/group-name": "g"}
    jobset_ref = k.owner_ref("JobSet", "s", "jobset.x-k8s.io/v1alpha2")
    kueue_job = k.job("kq", labels={"kueue.x-k8s.io/queue-name": "lq"})
    return [
        ("Deployment", k.deployment("d", replicas=2)),
        ("ReplicaSet", k.replicaset("d-1", deployment="d")),
        ("Pod", k.pod("d-1-a", owner=k.owner_ref("ReplicaSet", "d-1", "apps/v1"))),
        ("Job", k.job("j", parallelism=2)),
        ("Pod", k.pod("j-0", owner=k.owner_ref("Job", "j"))),
        ("Pod", k.pod("j-1", owner=k.owner_ref("Job", "j"), gated=False)),
        (
            "JobSet",
            k.jobset("s", [k.replicated_job("w", replicas=2, parallelism=1)]),
        ),
        ("Job", k.job("s-w-0", owner=jobset_ref)),
        (
            "Pod",
            k.pod(
                "s-w-0-0",
                owner=k.owner_ref("Job", "s-w-0"),
                labels={
                    "jobset.sigs.k8s.io/replicatedjob-name": "w",
                    "jobset.sigs.k8s.io/job-index": "0",
                },
            ),
        ),
        ("PodGroup", k.podgroup("g", min_member=2)),
        ("Pod", k.pod("g-0", labels=group)),
        ("Pod", k.pod("g-1", labels=group)),
        ("Pod", k.pod("bare")),
        # Finished ones: what the index keeps about them must go with them too.
        (
            "Job",
            {**k.job("done"), "status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        ),
        ("Pod", k.pod("done-0", owner=k.owner_ref("Job", "done"))),
        ("Pod", k.pod("fin", phase="Succeeded")),
        ("PodGroup", k.podgroup("h", min_member=1)),
        ("Pod", k.pod("h-0", labels={"scheduling.k8s.io/group-name": "h"}, phase="Failed")),
        ("Pod", k.pod("ds-x", owner=k.owner_ref("DaemonSet", "ds", "apps/v1"), gated=False)),
        ("PriorityClass", k.priority_class("high", 10, global_default=True)),
        ("Topology", k.topology("t", ["a", "b"])),
        ("Node", k.node("n1")),
        ("Queue", k.queue("q")),
        # Queues of other systems: a parent made a cohort by its child, a name clash, and a
        # Kueue LocalQueue standing for its ClusterQueue in a suspended Job's queue.
        ("VolcanoQueue", k.custom(VOLCANO, "Queue", "vp", {"deserved": {"cpu": 4}})),
        ("VolcanoQueue", k.custom(VOLCANO, "Queue", "vc", {"parent": "vp"})),
        ("KaiQueue", k.custom("scheduling.run.ai/v2", "Queue", "q", {"priority": 9})),
        ("KueueClusterQueue", k.custom(KUEUE, "ClusterQueue", "cq", {"cohort": "vp"})),
        (
            "KueueLocalQueue",
            k.custom(KUEUE, "LocalQueue", "lq", {"clusterQueue": "cq"}, namespace="default"),
        ),
        ("Cohort", k.custom("tidegate.io/v1alpha1", "Cohort", "org", {})),
        ("Job", {**kueue_job, "spec": {**kueue_job["spec"], "suspend": True}}),
    ]


def snapshot(index: ClusterIndex) -> dict[StateKey, object]:
    return {key: index.desired(key).message for key in index.state_keys()}


CANONICAL = ClusterIndex()
for _kind, _obj in world():
    CANONICAL.apply(_kind, "ADDED", _obj)
EXPECTED = snapshot(CANONICAL)


def test_the_canonical_world_is_recognised() -> None:
    workloads = sorted(k.name for k, v in EXPECTED.items() if k.kind == "workload" and v)
    assert workloads == ["bare", "d", "done", "fin", "g", "h", "j", "kq", "s"]
    kq = EXPECTED[StateKey("workload", "default", "kq")]
    assert isinstance(kq, WorkloadState)
    assert kq.queue == "cq"
    queues = sorted(k.name for k, v in EXPECTED.items() if k.kind == "queue")
    cohorts = sorted(k.name for k, v in EXPECTED.items() if k.kind == "cohort")
    # vp names no parent: it goes under Volcano's root, which shares out the cluster.
    assert (queues, cohorts) == (["cq", "q", "vc"], ["org", "root", "vp"])
    finished = {k.name: v.finished for k, v in EXPECTED.items() if isinstance(v, WorkloadState)}
    assert (finished["done"], finished["fin"], finished["h"], finished["j"]) == (
        "Completed",
        "Completed",
        "Failed",
        None,
    )


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(len(world()))))
def test_the_outcome_does_not_depend_on_event_order(order: list[int]) -> None:
    events = world()
    index = ClusterIndex()
    for i in order:
        kind, obj = events[i]
        index.apply(kind, "ADDED", obj)
    assert snapshot(index) == EXPECTED


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(len(world()))))
def test_deleting_everything_leaves_nothing_behind(order: list[int]) -> None:
    events = world()
    index = ClusterIndex()

    def mirror(affected: set[StateKey]) -> None:
        # What the watcher's mirror does: a key with nothing to hold is forgotten once its
        # tombstone is published, or at once when it never held anything (a Volcano parent
        # that was a queue until its child arrived).
        for key in affected:
            if index.desired(key).message is None:
                index.forget(key)

    for kind, obj in events:
        mirror(index.apply(kind, "ADDED", obj).affected)
    for i in order:
        kind, obj = events[i]
        mirror(index.apply(kind, "DELETED", obj).affected)
    assert index.state_keys() == set()
    internals = {
        name: value
        for name, value in vars(index).items()
        if isinstance(value, (dict, set)) and value and name != "_service_types"
    }
    assert internals == {}
