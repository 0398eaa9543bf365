"""The rules admission, preemption and the ungater share: queue, Topology, capacity, usage."""

from hypothesis import given
from hypothesis import strategies as st

from tidegate.model import PodState, QueueConfig
from tidegate.model.names import ADMISSION_GATE
from tidegate.policy.common import (
    TopologyProblem,
    active,
    choose_topology,
    evictable,
    holds_capacity,
    queue_of,
    runs,
)
from tidegate.testing.messages import Messages

msg = Messages(namespace="ns", queue=None, defaults={"workload": {"uid": "u"}})

GPU = "nvidia.com/gpu"


def test_a_workload_is_in_its_own_queue_else_the_default() -> None:
    assert queue_of(msg.workload("w", queue="a"), "default") == "a"
    assert queue_of(msg.workload("w"), "default") == "default"
    assert queue_of(msg.workload("w"), None) is None


def test_topology_is_the_queues_then_the_workloads_then_the_only_or_default() -> None:
    known = ["default", "gpu"]
    assert (
        choose_topology(
            msg.workload("w"), QueueConfig(name="q", topology="gpu"), known=known, default="x"
        )
        == "gpu"
    )
    assert (
        choose_topology(
            msg.workload("w", topology="gpu"), QueueConfig(name="q"), known=known, default="x"
        )
        == "gpu"
    )
    assert choose_topology(msg.workload("w"), None, known=["only"], default="x") == "only"
    assert choose_topology(msg.workload("w"), None, known=known, default="default") == "default"
    none = choose_topology(msg.workload("w"), QueueConfig(name="q"), known=known, default="x")
    assert isinstance(none, TopologyProblem)
    assert none.reason == "TopologyPlacementFailed"
    clash = choose_topology(
        msg.workload("w", topology="default"),
        QueueConfig(name="q", topology="gpu"),
        known=known,
        default="x",
    )
    assert isinstance(clash, TopologyProblem)
    assert clash.reason == "Invalid"
    missing = choose_topology(msg.workload("w", topology="nope"), None, known=known, default="x")
    assert isinstance(missing, TopologyProblem)
    assert "nope does not exist" in missing.message


@given(
    queue_topology=st.sampled_from([None, "a", "b", "c"]),
    own=st.sampled_from([None, "a", "b", "c"]),
    known=st.lists(st.sampled_from(["a", "b", "default"]), unique=True, max_size=3),
)
def test_a_chosen_topology_exists_and_honours_what_was_asked(
    queue_topology: str | None, own: str | None, known: list[str]
) -> None:
    queue = QueueConfig(name="q", topology=queue_topology)
    chosen = choose_topology(msg.workload("w", topology=own), queue, known=known, default="default")
    if isinstance(chosen, TopologyProblem):
        return
    assert chosen in known
    if queue_topology is not None:
        assert chosen == queue_topology == (own or queue_topology)
    elif own is not None:
        assert chosen == own


@given(
    node=st.sampled_from([None, "n1"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    terminating=st.booleans(),
)
def test_a_running_member_always_holds_capacity(
    node: str | None, phase: str, terminating: bool
) -> None:
    pod = PodState(
        namespace="ns", name="p", uid="u", node_name=node, phase=phase, terminating=terminating
    )
    assert not runs(pod) or holds_capacity(pod)
    assert holds_capacity(pod) == (node is not None and phase in ("Pending", "Running"))
    assert runs(pod) == (holds_capacity(pod) and not terminating)
    assert active(pod) == (phase in ("Pending", "Running") and not terminating)
    assert runs(pod) == (active(pod) and node is not None)


@given(
    node=st.sampled_from([None, "n1"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    terminating=st.booleans(),
    gated=st.booleans(),
)
def test_an_eviction_removes_every_active_released_pod_and_nothing_else(
    node: str | None, phase: str, terminating: bool, gated: bool
) -> None:
    pod = PodState(
        namespace="ns",
        name="p",
        uid="u",
        node_name=node,
        phase=phase,
        terminating=terminating,
        scheduling_gates=[ADMISSION_GATE] if gated else [],
    )
    assert evictable(pod) == (active(pod) and not gated)
    # A released member of a running gang is always evictable.
    assert not runs(pod) or gated or evictable(pod)
