"""Effective pod requests and the simple conversions: nodes, pods, Topologies, Queues."""

from typing import Any

import msgspec

from tidegate.kube.read.convert import node_state, pod_state, queue_config, topology_config
from tidegate.kube.read.objects import Node, Pod, PodSpec, Topology, decode, slim_pod
from tidegate.kube.read.requests import pod_requests

GI = 2**30


def spec(**fields: Any) -> PodSpec:
    return msgspec.convert(fields, PodSpec)


def c(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        out["restartPolicy"] = restart
    return out


def test_containers_add_up_and_init_containers_take_the_max() -> None:
    requests, problems = pod_requests(
        spec(
            containers=[c("a", cpu="1", memory="1Gi"), c("b", cpu="500m", memory="1Gi")],
            initContainers=[c("init", cpu="4", memory="1Gi")],
        )
    )
    assert problems == []
    assert requests == {"cpu": 4000, "memory": 2 * GI}


def test_sidecars_add_to_the_steady_state_and_to_later_init_containers() -> None:
    requests, _ = pod_requests(
        spec(
            containers=[c("app", cpu="1")],
            initContainers=[
                c("sidecar", restart="Always", cpu="500m"),
                c("migrate", cpu="2"),
            ],
        )
    )
    # steady: app 1 + sidecar 0.5 = 1.5; init peak: migrate 2 + sidecar 0.5 = 2.5
    assert requests == {"cpu": 2500}


def test_overhead_is_added_and_limits_stand_in_for_missing_requests() -> None:
    requests, _ = pod_requests(
        spec(
            containers=[
                {"name": "a", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}
            ],
            overhead={"cpu": "250m"},
        )
    )
    assert requests == {"cpu": 2250, "nvidia.com/gpu": 1}


def test_a_bad_quantity_is_left_out_and_named() -> None:
    requests, problems = pod_requests(spec(containers=[c("a", cpu="lots", memory="1Gi")]))
    assert requests == {"memory": GI}
    assert problems == ["spec.containers[0].resources.requests.cpu: 'lots' is not a quantity"]


def test_node_state(k8s: Any) -> None:
    node = decode(
        k8s.node(
            "n1",
            labels={"tidegate.io/rack": "r1"},
            allocatable={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "pods": "110"},
            ready="False",
            unschedulable=True,
            taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
        ),
        Node,
    )
    state, problems = node_state(node)
    assert problems == []
    assert state.labels == {"tidegate.io/rack": "r1"}
    assert state.allocatable == {"cpu": 8000, "memory": 32 * GI, "nvidia.com/gpu": 8, "pods": 110}
    assert not state.ready
    assert state.unschedulable
    assert [(t.key, t.value, t.effect) for t in state.taints] == [("gpu", "yes", "NoSchedule")]


def test_a_node_without_a_ready_condition_counts_as_ready_and_bad_quantities_are_named(
    k8s: Any,
) -> None:
    state, problems = node_state(decode(k8s.node("n1", ready=None, allocatable={"cpu": "x"}), Node))
    assert state.ready
    assert state.allocatable == {}
    assert problems == ["status.allocatable.cpu: 'x' is not a quantity"]


def test_pod_state(k8s: Any) -> None:
    obj = k8s.pod("p", nodeSelector={"a": "b"}, nodeName="n1", phase="Running")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    state, problems = pod_state(decode(obj, Pod), workload="default/w", podset="main", rank=3)
    assert problems == []
    assert state.requests == {"cpu": 1000, "memory": GI}
    assert state.scheduling_gates == ["tidegate.io/admission"]
    assert state.node_name == "n1"
    assert state.phase == "Running"
    assert state.node_selector == {"a": "b"}
    assert (state.workload, state.podset, state.rank) == ("default/w", "main", 3)
    assert state.terminating
    assert state.created_at == 1767225600.0


def condition(kind: str, status: str, reason: str = "", at: str | None = None) -> dict[str, Any]:
    """A pod condition as the API server writes it."""
    out: dict[str, Any] = {"type": kind, "status": status, "message": "m", "lastProbeTime": None}
    if reason:
        out["reason"] = reason
    if at is not None:
        out["lastTransitionTime"] = at
    return out


def test_a_pod_the_scheduler_found_no_node_for_says_since_when(k8s: Any) -> None:
    obj = k8s.pod("p", nodeSelector={"a": "b"})
    obj["spec"]["schedulingGates"] = []
    obj["status"]["conditions"] = [
        condition("PodScheduled", "False", "Unschedulable", "2026-01-01T00:01:00Z"),
        condition("Initialized", "True"),
    ]
    pod = decode(obj, Pod)
    state, _ = pod_state(pod)
    assert state.unschedulable_since == 1767225660.0
    # The watcher keeps only that condition of the pods it caches.
    assert [c.type for c in slim_pod(pod).status.conditions] == ["PodScheduled"]
    assert pod_state(slim_pod(pod))[0] == state
    # No readable time: counted from the pod's creation.
    obj["status"]["conditions"] = [condition("PodScheduled", "False", "Unschedulable")]
    assert pod_state(decode(obj, Pod))[0].unschedulable_since == 1767225600.0
    # Gated (reason SchedulingGated), scheduled, or bound: not unschedulable.
    for conditions in (
        [condition("PodScheduled", "False", "SchedulingGated", "2026-01-01T00:01:00Z")],
        [condition("PodScheduled", "True", "", "2026-01-01T00:01:00Z")],
        [],
    ):
        obj["status"]["conditions"] = conditions
        assert pod_state(decode(obj, Pod))[0].unschedulable_since is None
    obj["status"]["conditions"] = [condition("PodScheduled", "False", "Unschedulable", "x")]
    obj["spec"]["nodeName"] = "n1"
    bound = decode(obj, Pod)
    assert pod_state(bound)[0].unschedulable_since is None
    assert slim_pod(bound).status.conditions == []


def test_topology_levels_and_malformed_topologies(k8s: Any) -> None:
    config, problems = topology_config(decode(k8s.topology("t", ["block", "rack"]), Topology))
    assert config is not None
    assert config.levels == ["block", "rack"]
    assert problems == []
    config, problems = topology_config(decode(k8s.topology("t", []), Topology))
    assert config is None
    assert problems == ["spec.levels: a Topology needs at least one level"]
    config, problems = topology_config(decode(k8s.topology("t", ["a", "a"]), Topology))
    assert config is None
    assert problems == ["spec.levels[1].nodeLabel: 'a' repeats an earlier level"]


def test_queue_config(k8s: Any) -> None:
    queue = queue_config(
        k8s.queue(
            "online",
            {
                "priority": 80000,
                "reclaimable": False,
                "capability": {"cpu": "4", "memory": "4Gi"},
                "cardQuota": {"NVIDIA-H200/mig-1g.18gb-mixed": 8},
                "placementProfile": "spread",
                "queueingStrategy": "StrictFIFO",
                "topology": "dc",
            },
        )
    )
    assert queue.invalid_reason is None
    assert queue.priority == 80000
    assert not queue.reclaimable
    assert queue.quota == {"cpu": 4000, "memory": 4 * GI}
    assert queue.card_quota == {"NVIDIA-H200/mig-1g.18gb-mixed": 8}
    assert (queue.profile, queue.strategy, queue.topology) == ("spread", "StrictFIFO", "dc")


def test_queue_defaults_and_volcano_card_quota_annotation(k8s: Any) -> None:
    queue = queue_config(
        k8s.queue("q", annotations={"volcano.sh/card.quota": '{"NVIDIA-GeForce-RTX-4090": 8}'})
    )
    assert queue.invalid_reason is None
    assert queue.reclaimable
    assert queue.quota is None
    assert queue.card_quota == {"NVIDIA-GeForce-RTX-4090": 8}
    assert queue.strategy == "BestEffortFIFO"


def test_malformed_queues_are_marked_invalid_naming_the_field(k8s: Any) -> None:
    assert queue_config(k8s.queue("q", {"priority": "high"})).invalid_reason == (
        "Queue q: spec.priority: expected int, got str"
    )
    assert queue_config(k8s.queue("q", {"capability": {"cpu": "four"}})).invalid_reason == (
        "Queue q: spec.capability.cpu: 'four' is not a quantity"
    )
    assert queue_config(k8s.queue("q", {"queueingStrategy": "LIFO"})).invalid_reason == (
        "Queue q: spec.queueingStrategy: 'LIFO' is not one of StrictFIFO, BestEffortFIFO"
    )
    assert queue_config(k8s.queue("q", {"cardQuota": {"H200": -1}})).invalid_reason == (
        "Queue q: spec.cardQuota[H200]: -1 is negative"
    )
    bad_json = queue_config(k8s.queue("q", annotations={"volcano.sh/card.quota": "{oops"}))
    assert bad_json.invalid_reason is not None
    assert "annotation volcano.sh/card.quota: '{oops' is not valid JSON" in bad_json.invalid_reason
