"""The index over a sequence of events: managed workloads, owner chains arriving out of order,
deletions, PodGroups created late, configuration changes, versions."""

from typing import Any

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import PodState, TopologyConfig, WorkloadState

W = "workload"


def wkey(name: str) -> StateKey:
    return StateKey("workload", "default", name)


def pkey(name: str) -> StateKey:
    return StateKey("pod", "default", name)


def pod_workload(index: ClusterIndex, name: str) -> str | None:
    message = index.desired(pkey(name)).message
    assert isinstance(message, PodState)
    return message.workload


def test_a_job_without_gated_pods_is_not_a_workload(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Job", "ADDED", k8s.job("plain"))
    index.apply(
        "Pod", "ADDED", k8s.pod("plain-0", owner=k8s.owner_ref("Job", "plain"), gated=False)
    )
    assert index.desired(wkey("plain")).message is None
    assert wkey("plain") not in index.state_keys()
    assert pod_workload(index, "plain-0") is None


def test_the_first_gated_pod_makes_the_workload_managed_and_republishes_its_siblings(
    k8s: Any,
) -> None:
    index = ClusterIndex()
    owner = k8s.owner_ref("Job", "j")
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner, gated=False))
    applied = index.apply("Pod", "ADDED", k8s.pod("j-1", owner=owner))
    assert {pkey("j-0"), pkey("j-1"), wkey("j")} <= applied.affected
    assert pod_workload(index, "j-0") == "default/j"
    # Once admitted and ungated, the workload stays managed.
    index.apply("Pod", "MODIFIED", k8s.pod("j-1", owner=owner, gated=False, nodeName="n1"))
    assert isinstance(index.desired(wkey("j")).message, WorkloadState)


def test_a_pod_seen_before_its_replicaset_waits_instead_of_making_a_wrong_workload(
    k8s: Any,
) -> None:
    index = ClusterIndex()
    rs_ref = k8s.owner_ref("ReplicaSet", "web-1", "apps/v1")
    index.apply("Pod", "ADDED", k8s.pod("web-1-a", owner=rs_ref))
    assert pod_workload(index, "web-1-a") is None
    assert index.desired(wkey("web-1")).message is None
    index.apply("ReplicaSet", "ADDED", k8s.replicaset("web-1", deployment="web"))
    assert pod_workload(index, "web-1-a") is None  # still waiting for the Deployment
    applied = index.apply("Deployment", "ADDED", k8s.deployment("web", replicas=2))
    assert {pkey("web-1-a"), wkey("web")} <= applied.affected
    assert pod_workload(index, "web-1-a") == "default/web"
    message = index.desired(wkey("web")).message
    assert isinstance(message, WorkloadState)
    assert (message.owner_kind, message.podsets[0].count) == ("Deployment", 2)
    assert index.desired(wkey("web-1")).message is None


def test_a_replicaset_without_a_deployment_is_its_own_top_owner(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("ReplicaSet", "ADDED", k8s.replicaset("rs", deployment=None, replicas=3))
    index.apply("Pod", "ADDED", k8s.pod("rs-a", owner=k8s.owner_ref("ReplicaSet", "rs", "apps/v1")))
    message = index.desired(wkey("rs")).message
    assert isinstance(message, WorkloadState)
    assert (message.owner_kind, message.service_type, message.podsets[0].count) == (
        "ReplicaSet",
        "inference",
        3,
    )


def test_deleting_the_owner_removes_the_workload(k8s: Any) -> None:
    index = ClusterIndex()
    job = k8s.job("j")
    index.apply("Job", "ADDED", job)
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=k8s.owner_ref("Job", "j")))
    applied = index.apply("Job", "DELETED", job)
    assert {wkey("j"), pkey("j-0")} <= applied.affected
    assert index.desired(wkey("j")).message is None
    assert pod_workload(index, "j-0") is None
    assert ("default", "j") not in index.managed


def test_deleting_pods_updates_a_podgroup_and_a_bare_pod_goes_with_its_pod(k8s: Any) -> None:
    index = ClusterIndex()
    group = {"scheduling.k8s.io/group-name": "g"}
    index.apply("PodGroup", "ADDED", k8s.podgroup("g", min_member=2))
    a, b, solo = k8s.pod("a", labels=group), k8s.pod("b", labels=group), k8s.pod("solo")
    for obj in (a, b, solo):
        index.apply("Pod", "ADDED", obj)
    applied = index.apply("Pod", "DELETED", b)
    assert {pkey("b"), wkey("g")} <= applied.affected
    assert index.desired(pkey("b")).message is None
    message = index.desired(wkey("g")).message
    assert isinstance(message, WorkloadState)
    assert sum(ps.count for ps in message.podsets) == 1
    index.apply("Pod", "DELETED", solo)
    assert index.desired(wkey("solo")).message is None


def test_podgroup_members_wait_for_their_group(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Pod", "ADDED", k8s.pod("m", labels={"scheduling.k8s.io/group-name": "late"}))
    assert pod_workload(index, "m") is None
    assert index.desired(wkey("late")).message is None
    applied = index.apply("PodGroup", "ADDED", k8s.podgroup("late", min_member=1))
    assert {pkey("m"), wkey("late")} <= applied.affected
    assert pod_workload(index, "m") == "default/late"
    index.apply("PodGroup", "DELETED", k8s.podgroup("late"))
    assert index.desired(wkey("late")).message is None
    assert pod_workload(index, "m") is None


def test_topology_changes_re_recognize_workloads_and_tidegate_wins_a_name_clash(
    k8s: Any,
) -> None:
    index = ClusterIndex()
    job = k8s.job(
        "j", annotations={"tidegate.io/topology": "dc", "tidegate.io/topology-required": "rack"}
    )
    index.apply("Job", "ADDED", job)
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=k8s.owner_ref("Job", "j")))
    before = index.desired(wkey("j")).message
    assert isinstance(before, WorkloadState)
    assert before.podsets[0].topology.required == "rack"  # no Topology yet: left as written

    index.apply("KueueTopology", "ADDED", k8s.topology("dc", ["k/block", "k/rack"], kueue=True))
    applied = index.apply("Topology", "ADDED", k8s.topology("dc", ["t/block", "t/rack"]))
    assert wkey("j") in applied.affected
    topology = index.desired(StateKey("topology", None, "dc")).message
    assert isinstance(topology, TopologyConfig)
    assert topology.levels == ["t/block", "t/rack"]
    after = index.desired(wkey("j")).message
    assert isinstance(after, WorkloadState)
    assert after.podsets[0].topology.required == "t/rack"

    index.apply("Topology", "DELETED", k8s.topology("dc", ["t/block", "t/rack"]))
    topology = index.desired(StateKey("topology", None, "dc")).message
    assert isinstance(topology, TopologyConfig)
    assert topology.levels == ["k/block", "k/rack"]


def test_a_malformed_topology_is_not_published_and_says_why(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Topology", "ADDED", k8s.topology("empty", []))
    desired = index.desired(StateKey("topology", None, "empty"))
    assert desired.message is None
    assert desired.problems == (
        "Topology empty: spec.levels: a Topology needs at least one level (not published)",
    )


def test_versions_only_grow_and_seeded_workloads_count_as_managed(k8s: Any) -> None:
    index = ClusterIndex()
    index.seed_managed([("default", "j")])
    job = k8s.job("j")
    index.apply("Job", "ADDED", job)
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=k8s.owner_ref("Job", "j"), gated=False))
    assert isinstance(index.desired(wkey("j")).message, WorkloadState)
    v1 = index.version(wkey("j"))
    assert v1 is not None
    older = dict(job, metadata=dict(job["metadata"], resourceVersion="5"))
    index.apply("Job", "MODIFIED", older)
    assert index.version(wkey("j")) == v1
    index.forget(wkey("j"))
    assert index.version(wkey("j")) is None


def test_queue_and_node_lifecycle(k8s: Any) -> None:
    index = ClusterIndex()
    node = k8s.node("n1")
    queue = k8s.queue("q", {"priority": 5})
    index.apply("Node", "ADDED", node)
    index.apply("Queue", "ADDED", queue)
    assert StateKey("node", None, "n1") in index.state_keys()
    assert index.desired(StateKey("queue", None, "q")).uid == "uid-q"
    index.apply("Node", "DELETED", node)
    index.apply("Queue", "DELETED", queue)
    assert index.desired(StateKey("node", None, "n1")).message is None
    assert index.desired(StateKey("queue", None, "q")).message is None


def test_a_podgroup_is_published_once_it_has_min_member_pods_and_then_stays(k8s: Any) -> None:
    index = ClusterIndex()
    group = {"scheduling.k8s.io/group-name": "g"}
    index.apply("PodGroup", "ADDED", k8s.podgroup("g", min_member=2))
    a = k8s.pod("a", labels=group)
    index.apply("Pod", "ADDED", a)
    assert index.desired(wkey("g")).message is None  # 1 of 2: not admissible yet
    assert pod_workload(index, "a") == "default/g"
    index.apply("Pod", "ADDED", k8s.pod("b", labels=group))
    assert isinstance(index.desired(wkey("g")).message, WorkloadState)
    index.apply("Pod", "DELETED", a)  # a member finished and was removed
    message = index.desired(wkey("g")).message
    assert isinstance(message, WorkloadState)
    assert message.podsets[0].count == 1


def test_a_rolling_deployment_counts_its_replicasets_surge_included(k8s: Any) -> None:
    """Surge pods of a rollout are a temporary growth; old pods leaving shrink it back."""
    index = ClusterIndex()
    index.apply("Deployment", "ADDED", k8s.deployment("web", replicas=1))
    index.apply("ReplicaSet", "ADDED", k8s.replicaset("web-old", deployment="web", replicas=1))
    rs_ref = k8s.owner_ref("ReplicaSet", "web-old", "apps/v1")
    index.apply("Pod", "ADDED", k8s.pod("web-old-a", owner=rs_ref))

    def count() -> int:
        message = index.desired(wkey("web")).message
        assert isinstance(message, WorkloadState)
        return message.podsets[0].count

    assert count() == 1
    applied = index.apply(
        "ReplicaSet", "ADDED", k8s.replicaset("web-new", deployment="web", replicas=1)
    )
    assert wkey("web") in applied.affected
    assert count() == 2  # the surge pod
    index.apply("ReplicaSet", "MODIFIED", k8s.replicaset("web-old", deployment="web", replicas=0))
    assert count() == 1
    # Scaled down: the spec says 1 at once, the ReplicaSet follows; the count follows it.
    index.apply("Deployment", "MODIFIED", k8s.deployment("web", replicas=6))
    assert count() == 6  # the spec leads a scale-up
    index.apply("ReplicaSet", "MODIFIED", k8s.replicaset("web-new", deployment="web", replicas=6))
    index.apply("Deployment", "MODIFIED", k8s.deployment("web", replicas=1))
    assert count() == 6  # its pods are still there
    index.apply("ReplicaSet", "MODIFIED", k8s.replicaset("web-new", deployment="web", replicas=1))
    assert count() == 1


def test_a_status_update_of_the_owner_touches_its_workload_not_each_of_its_pods(
    k8s: Any,
) -> None:
    # A Job counting its finished pods must not make every pod of a big gang be looked at
    # again (O(pods) per event); a change of its spec still does.
    index = ClusterIndex()
    owner = k8s.owner_ref("Job", "big")
    index.apply("Job", "ADDED", k8s.job("big", parallelism=3))
    for i in range(3):
        index.apply("Pod", "ADDED", k8s.pod(f"big-{i}", owner=owner))
    counted = k8s.job("big", parallelism=3)
    counted["status"] = {"succeeded": 1, "active": 2}
    applied = index.apply("Job", "MODIFIED", counted)
    assert applied.affected == {wkey("big")}
    grown = k8s.job("big", parallelism=4)
    applied = index.apply("Job", "MODIFIED", grown)
    assert {pkey(f"big-{i}") for i in range(3)} <= applied.affected
    assert pod_workload(index, "big-2") == "default/big"


def test_the_workloads_of_a_namespace_being_deleted_say_so(k8s: Any) -> None:
    index = ClusterIndex()
    owner = k8s.owner_ref("Job", "j")
    index.apply("Job", "ADDED", k8s.job("j"))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    assert index.apply("Namespace", "ADDED", namespace).affected == set()
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert not message.namespace_deleting
    deleting = {
        **namespace,
        "metadata": {"name": "default", "deletionTimestamp": "2026-11-27T20:00:00Z"},
    }
    assert index.apply("Namespace", "MODIFIED", deleting).affected == {wkey("j")}
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert message.namespace_deleting
    other = {
        **namespace,
        "metadata": {"name": "other", "deletionTimestamp": "2026-11-27T20:00:00Z"},
    }
    assert index.apply("Namespace", "MODIFIED", other).affected == set()


def test_pods_that_started_without_the_gate_make_their_workload_managed_and_are_counted(
    k8s: Any,
) -> None:
    """A Job whose pods were created while the webhook was down (failurePolicy
    Ignore) and that names a queue runs ungated; the watcher publishes it with those pods, so
    admission charges them. A pod released by tidegate (its selector names a Topology level)
    is not counted; nor are pods that name no queue or are DaemonSets'."""
    index = ClusterIndex()
    index.apply("Topology", "ADDED", k8s.topology("default", ["tidegate.io/rack"]))
    owner = k8s.owner_ref("Job", "j")
    queue = {"kueue.x-k8s.io/queue-name": "q"}
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2, labels=queue))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner, gated=False, labels=queue))
    assert index.desired(wkey("j")).message is None  # not bound yet: the webhook may gate it
    index.apply(
        "Pod",
        "MODIFIED",
        k8s.pod("j-0", owner=owner, gated=False, labels=queue, nodeName="n1", phase="Running"),
    )
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert (message.bypassed_pods, message.queue) == (1, "q")
    assert message.bypassed_requests == k8s_requests(index, "j-0")
    assert pod_workload(index, "j-0") == "default/j"
    # A pod tidegate released carries the slot's levels: it passed the gate.
    released = k8s.pod(
        "j-1", owner=owner, gated=False, labels=queue, nodeName="n2", phase="Running",
        nodeSelector={"tidegate.io/rack": "r1"},
    )  # fmt: skip
    index.apply("Pod", "ADDED", released)
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert message.bypassed_pods == 1
    # Finished pods hold nothing.
    index.apply(
        "Pod",
        "MODIFIED",
        k8s.pod("j-0", owner=owner, gated=False, labels=queue, nodeName="n1", phase="Succeeded"),
    )
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert (message.bypassed_pods, message.bypassed_requests) == (0, {})

    plain = k8s.owner_ref("Job", "plain")
    index.apply("Job", "ADDED", k8s.job("plain"))
    index.apply("Pod", "ADDED", k8s.pod("plain-0", owner=plain, gated=False, nodeName="n1"))
    assert index.desired(wkey("plain")).message is None
    daemon = k8s.owner_ref("DaemonSet", "agent", "apps/v1")
    index.apply(
        "Pod", "ADDED", k8s.pod("agent-x", owner=daemon, gated=False, labels=queue, nodeName="n1")
    )
    assert pod_workload(index, "agent-x") is None


def test_in_a_managed_namespace_every_pod_started_ungated_bypassed_the_gate(k8s: Any) -> None:
    index = ClusterIndex()
    index.apply("Topology", "ADDED", k8s.topology("default", ["tidegate.io/rack"]))
    owner = k8s.owner_ref("Job", "j")
    index.apply("Job", "ADDED", k8s.job("j"))
    index.apply("Pod", "ADDED", k8s.pod("j-0", owner=owner, gated=False, nodeName="n1"))
    assert index.desired(wkey("j")).message is None
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "default", "labels": {"tidegate.io/managed": "true"}},
    }
    assert wkey("j") in index.apply("Namespace", "MODIFIED", namespace).affected
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert message.bypassed_pods == 1


def test_the_cards_of_pods_that_bypassed_the_gate_are_counted_by_their_nodes_gpu_model(
    k8s: Any,
) -> None:
    """A bypassing pod's GPUs are cards of its node's ``nvidia.com/gpu.product``
    model, so that admission charges them to the queue's card quota; a node's label seen late
    (or changed) counts them again."""
    index = ClusterIndex()
    index.apply("Topology", "ADDED", k8s.topology("default", ["tidegate.io/rack"]))
    index.apply("Node", "ADDED", k8s.node("h1", labels={"nvidia.com/gpu.product": "H200"}))
    owner = k8s.owner_ref("Job", "j")
    queue = {"kueue.x-k8s.io/queue-name": "q"}
    gpu_pod = {"containers": [k8s.container(gpu=2, limits=True)]}
    index.apply("Job", "ADDED", k8s.job("j", parallelism=2, labels=queue))
    for name, node in (("j-0", "h1"), ("j-1", "a1")):
        pod = k8s.pod(
            name, owner=owner, gated=False, labels=queue, nodeName=node, phase="Running",
            **gpu_pod,
        )  # fmt: skip
        index.apply("Pod", "ADDED", pod)
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert message.bypassed_pods == 2
    assert message.bypassed_cards == {"H200": 2}  # node a1 not seen yet: no model known
    a1 = k8s.node("a1", labels={"nvidia.com/gpu.product": "A100"})
    assert wkey("j") in index.apply("Node", "ADDED", a1).affected
    message = index.desired(wkey("j")).message
    assert isinstance(message, WorkloadState)
    assert message.bypassed_cards == {"H200": 2, "A100": 2}
    # A node change that leaves its GPU model alone touches no workload.
    a1_again = k8s.node("a1", labels={"nvidia.com/gpu.product": "A100"}, unschedulable=True)
    assert wkey("j") not in index.apply("Node", "MODIFIED", a1_again).affected


def k8s_requests(index: ClusterIndex, name: str) -> dict[str, int]:
    message = index.desired(pkey(name)).message
    assert isinstance(message, PodState)
    return dict(message.requests)
