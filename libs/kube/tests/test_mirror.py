"""The mirror's publication plan (snapshots, tombstones, no-ops, event ids)."""

from typing import Any

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.kube.read.mirror import Mirror
from tidegate.model import CohortConfig, Envelope, PodState, Tombstone, WorkloadState

POD = StateKey("pod", "default", "p")
JOB = StateKey("workload", "default", "j")


def replayed(body: Any, rv: str = "1") -> Envelope:
    return Envelope(
        event_id="x", cluster="c1", source="watcher", time=0.0, body=body, resource_version=rv
    )


def test_new_objects_are_published_once_with_deterministic_ids(k8s: Any) -> None:
    mirror = Mirror("c1", ClusterIndex())
    mirror.index.apply("Pod", "ADDED", k8s.pod("p", gated=False))
    plan = mirror.plan({POD}, now=5.0)
    [publication] = plan.publications
    assert publication.subject == "tg.c1.pod.default.p"
    envelope = publication.envelope
    assert isinstance(envelope.body, PodState)
    assert (envelope.source, envelope.time, envelope.source_uid) == ("watcher", 5.0, "uid-p")
    kind, uid, version, digest = envelope.event_id.split("/")
    assert (kind, uid, version, len(digest)) == ("pod", "uid-p", "100", 16)
    # Planning again before it is stored gives the same id (a retry JetStream will drop) ...
    assert mirror.plan({POD}, now=6.0).publications[0].envelope.event_id == envelope.event_id
    # ... and once stored, an unchanged object costs nothing.
    mirror.stored(publication)
    assert mirror.plan({POD}, now=7.0).publications == []


def test_a_change_gets_a_new_id_and_a_deletion_a_tombstone(k8s: Any) -> None:
    mirror = Mirror("c1", ClusterIndex())
    pod = k8s.pod("p", gated=False)
    mirror.index.apply("Pod", "ADDED", pod)
    first = mirror.plan({POD}, now=0).publications[0]
    mirror.stored(first)
    mirror.index.apply("Pod", "MODIFIED", k8s.pod("p", gated=False, nodeName="n1"))
    second = mirror.plan({POD}, now=0).publications[0]
    assert second.envelope.event_id != first.envelope.event_id
    mirror.stored(second)
    mirror.index.apply("Pod", "DELETED", k8s.pod("p", gated=False, nodeName="n1"))
    [tomb] = mirror.plan({POD}, now=0).publications
    assert tomb.envelope.body == Tombstone(
        object_kind="pod", name="p", namespace="default", uid="uid-p"
    )
    assert tomb.envelope.event_id.endswith("/deleted")
    mirror.stored(tomb)
    assert mirror.plan({POD}, now=0).publications == []
    assert mirror.stored_keys() == set()


def test_replayed_state_is_compared_and_vanished_objects_get_tombstones(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Pod", "ADDED", k8s.pod("p", gated=False))
    current = index.desired(POD).message
    mirror = Mirror("c1", index)
    mirror.seed(replayed(current))
    gone = WorkloadState(namespace="default", name="j", uid="uid-j", owner_kind="Job")
    mirror.seed(replayed(gone, rv="42"))
    mirror.seed(replayed(Tombstone(object_kind="pod", name="old", namespace="default")))
    assert ("default", "j") in index.managed
    assert mirror.all_keys() == {POD, JOB}
    [tomb] = mirror.plan(mirror.all_keys(), now=0).publications
    assert tomb.key == JOB
    assert tomb.envelope.event_id == "workload/uid-j/42/deleted"


def test_problems_of_objects_that_are_not_published_are_reported(k8s: Any) -> None:
    mirror = Mirror("c1", ClusterIndex())
    mirror.index.apply("Topology", "ADDED", k8s.topology("t", []))
    plan = mirror.plan({StateKey("topology", None, "t")}, now=0)
    assert plan.publications == []
    assert plan.problems == [
        "Topology t: spec.levels: a Topology needs at least one level (not published)"
    ]


def test_the_mirror_sums_the_bypassing_pods_it_published(k8s: Any) -> None:
    """What ``tidegate_watcher_bypassed_pods`` reports."""
    index = ClusterIndex()
    mirror = Mirror("c1", index)
    index.apply("Topology", "ADDED", k8s.topology("default", ["tidegate.io/rack"]))
    owner = k8s.owner_ref("Job", "j")
    queue = {"tidegate.io/queue": "q"}
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2, labels=queue))
    for name in ("j-0", "j-1"):
        pod = k8s.pod(name, owner=owner, gated=False, labels=queue, nodeName="n1", phase="Running")
        index.apply("Pod", "ADDED", pod)
    for publication in mirror.plan(mirror.all_keys(), now=1.0).publications:
        mirror.stored(publication)
    assert mirror.bypassed_pods() == 2
    index.apply("Job", "DELETED", k8s.job("j", parallelism=2, labels=queue))
    for publication in mirror.plan({JOB}, now=2.0).publications:
        mirror.stored(publication)
    assert mirror.bypassed_pods() == 0


def test_a_finished_podgroup_whose_pods_went_stays_finished_after_a_restart(
    k8s: Any,
) -> None:
    group = {"scheduling.k8s.io/group-name": "g"}
    before = ClusterIndex()
    before.apply("PodGroup", "ADDED", k8s.podgroup("g", min_member=2))
    for i in range(2):
        before.apply("Pod", "ADDED", k8s.pod(f"g-{i}", labels=group))
    for i in range(2):
        pod = k8s.pod(f"g-{i}", labels=group, gated=False, nodeName="n1", phase="Succeeded")
        before.apply("Pod", "MODIFIED", pod)
    published = before.desired(StateKey("workload", "default", "g")).message
    assert isinstance(published, WorkloadState)
    assert published.finished == "Completed"

    # A new watcher replays the state stream, then lists a cluster where the pods are gone.
    index = ClusterIndex()
    mirror = Mirror("c1", index)
    mirror.seed(Envelope(event_id="e", cluster="c1", source="watcher", time=0, body=published))
    index.apply("PodGroup", "ADDED", k8s.podgroup("g", min_member=2))
    again = index.desired(StateKey("workload", "default", "g")).message
    assert isinstance(again, WorkloadState)
    assert again.finished == "Completed"
    # What it publishes is a snapshot (no pods left in its podsets), never a tombstone.
    (publication,) = mirror.plan(mirror.all_keys(), now=1.0).publications
    body = publication.envelope.body
    assert isinstance(body, WorkloadState)
    assert (body.finished, body.podsets) == ("Completed", [])


def test_a_volcano_parent_turns_from_queue_to_cohort_with_a_tombstone_and_nothing_kept(
    k8s: Any,
) -> None:
    """A queue another names as its parent becomes a cohort: the queue subject gets a
    tombstone, the cohort subject a snapshot; a key that never held anything is forgotten."""
    volcano = "scheduling.volcano.sh/v1beta1"
    mirror = Mirror("c1", ClusterIndex())
    queue_key, cohort_key = StateKey("queue", None, "vp"), StateKey("cohort", None, "vp")
    affected = mirror.index.apply(
        "VolcanoQueue", "ADDED", k8s.custom(volcano, "Queue", "vp", {"deserved": {"cpu": 4}})
    ).affected
    # vp names no parent: it is published under Volcano's root (an implicit cohort).
    root, queue = sorted(mirror.plan(affected, now=0).publications, key=lambda p: p.subject)
    assert (queue.subject, queue.envelope.body.name) == ("tg.c1.config.queue.vp", "vp")
    assert root.subject == "tg.c1.config.cohort.root"
    mirror.stored(queue)
    mirror.stored(root)
    child = k8s.custom(volcano, "Queue", "vc", {"parent": "vp", "deserved": {"cpu": 1}})
    affected = mirror.index.apply("VolcanoQueue", "ADDED", child).affected
    plan = mirror.plan(affected, now=0)
    bodies = {p.subject: p.envelope.body for p in plan.publications}
    assert bodies["tg.c1.config.queue.vp"] == Tombstone(object_kind="queue", name="vp")
    assert bodies["tg.c1.config.cohort.vp"] == CohortConfig(
        name="vp", parent="root", nominal={"cpu": 3000}
    )
    for publication in plan.publications:
        mirror.stored(publication)
    assert mirror.index.version(queue_key) is None
    assert mirror.index.version(cohort_key) is not None
    # The child goes: vp is a queue again, the cohort is tombstoned; then all goes.
    mirror.index.apply("VolcanoQueue", "DELETED", child)
    mirror.index.apply("VolcanoQueue", "DELETED", k8s.custom(volcano, "Queue", "vp"))
    plan = mirror.plan({queue_key, cohort_key, StateKey("queue", None, "vc")}, now=0)
    assert {p.subject for p in plan.publications} == {
        "tg.c1.config.cohort.vp",
        "tg.c1.config.queue.vc",
    }
    assert mirror.index.version(queue_key) is None  # never published again: not kept
