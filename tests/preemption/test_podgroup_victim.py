"""A PodGroup gang written like deploy/examples/podgroup.yaml (members without a
``tidegate.io/role``) stays a victim after its release: the watcher keeps it one podset, not
one-pod podsets pinned to hosts (issue 12, finding 10)."""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tidegate.kube import PODS, ResourceType
from tidegate.model import PodState, Preempted, WorkloadState

from .conftest import GATE, NAMESPACE, Harness, pod_template
from .test_announce_first import nodes_on_the_bus, one_pod_per_node
from .test_preemption_service import inference_arrives, live

T = TypeVar("T")

PODGROUPS = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="podgroups", kind="PodGroup"
)


def _async(check: Callable[[], T | None]) -> Callable[[], Awaitable[T | None]]:
    async def run() -> T | None:
        return check()

    return run


def member(index: int) -> dict[str, Any]:
    template = pod_template(queue="offline", priority_class="low", gpus=8)
    spec = {**template["spec"], "schedulingGates": [{"name": GATE}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pair-{index}",
            "labels": {
                **template["metadata"]["labels"],
                "scheduling.k8s.io/group-name": "pair",
                "tidegate.io/pod-index": str(index),
            },
        },
        "spec": spec,
    }


async def test_a_released_podgroup_without_roles_is_still_a_victim(harness: Harness) -> None:
    h = harness
    await h.create(
        PODGROUPS,
        {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "PodGroup",
            # A PodGroup has no default service type: training makes it a candidate victim.
            "metadata": {"name": "pair", "annotations": {"volcano.sh/service.type": "training"}},
            "spec": {"minMember": 4, "queue": "offline"},
        },
    )
    for index in range(4):
        await h.create(PODS, member(index))

    def one_podset() -> WorkloadState | None:
        workload = h.workload("pair")
        return workload if workload is not None and len(workload.podsets) == 1 else None

    gang = await h.until_async(_async(one_podset), what="the PodGroup on the bus")
    await h.until(
        lambda: len(nodes_on_the_bus(h)) == len(h.sim.layout.nodes), what="every node on the bus"
    )
    # The real ungater releases each member into its slot: block, rack and host selectors.
    await h.start_ungater()
    await h.admit("pair", assignments={gang.podsets[0].name: one_pod_per_node(h)})

    def all_running() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/pair"
        ]
        return len(pods) == 4 and all(p.phase == "Running" and p.node_name for p in pods)

    await h.until(all_running, what="the gang running")
    released = h.workload("pair")
    assert released is not None
    assert [(ps.count, ps.node_selector) for ps in released.podsets] == [(4, {})]

    await h.start_preemption()
    await inference_arrives(h)
    await h.until(lambda: h.of(Preempted), within=30, what="the preempted decision")
    (decision,) = h.of(Preempted)
    assert decision.victims == [f"{NAMESPACE}/pair"]

    async def evicted() -> bool:
        return not live(await h.pods("pair-"))

    await h.until_async(evicted, what="the gang evicted whole")
