"""A PodGroup gang written like deploy/examples/podgroup.yaml (members without a
``tidegate.io/role``) stays a victim after its release: the watcher keeps it one podset, not
one-pod podsets pinned to hosts."""

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tidegate.kube import DEPLOYMENTS, PODGROUPS, PODS
from tidegate.model import PodState, Preempted, WorkloadState
from tidegate.testing.manifests import Builders

from .conftest import NAMESPACE, Harness, environment, inference_deployment, pod_template
from .test_announce_first import nodes_on_the_bus, one_pod_per_node
from .test_end_to_end import every_service
from .test_preemption_service import inference_arrives, live

T = TypeVar("T")

k8s = Builders(server_fields=False)
"""The PodGroup and its members, as a user creates them."""


def _async(check: Callable[[], T | None]) -> Callable[[], Awaitable[T | None]]:
    async def run() -> T | None:
        return check()

    return run


async def create_pair(h: Harness) -> None:
    """The PodGroup ``pair`` and its four gated members."""
    # A PodGroup has no default service type: training makes it a candidate victim.
    training = {"volcano.sh/service.type": "training"}
    await h.create(
        PODGROUPS, k8s.podgroup("pair", min_member=4, queue="offline", annotations=training)
    )
    template = pod_template(queue="offline", priority_class="low", gpus=8)
    spec = dict(template["spec"])
    containers = spec.pop("containers")
    for index in range(4):
        labels = {
            **template["metadata"]["labels"],
            "scheduling.k8s.io/group-name": "pair",
            "tidegate.io/pod-index": str(index),
        }
        member = k8s.pod(f"pair-{index}", labels=labels, containers=containers, **spec)
        await h.create(PODS, member)


def pair_pods(h: Harness) -> list[PodState]:
    """The pair's pods as the state stream last showed them."""
    return [
        m for m in h.state.values() if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/pair"
    ]


def pair_running(h: Harness) -> bool:
    """All four members running on a node."""
    pods = pair_pods(h)
    return len(pods) == 4 and all(p.phase == "Running" and p.node_name for p in pods)


async def test_a_released_podgroup_without_roles_is_still_a_victim(harness: Harness) -> None:
    h = harness
    await create_pair(h)

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

    await h.until(lambda: pair_running(h), what="the gang running")
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


@pytest.fixture
async def every_service_running(
    tmp_path: Path, nats_url: str, cluster_id: str
) -> AsyncIterator[Harness]:
    """The simulated cluster with the five services as processes (the real topology-cache)."""
    async with environment(tmp_path, nats_url, cluster_id) as h:
        h.plays_topology_cache = False
        async with every_service(h, tmp_path):
            yield h


@pytest.mark.slow
async def test_a_podgroup_victim_frees_its_room_in_the_real_capacity_view(
    every_service_running: Harness,
) -> None:
    """The same PodGroup admitted and released by the real services: the topology-cache's
    view counts its pods once (not its pods plus a reservation its republished podsets no
    longer match), so evicting it frees room and the inference Deployment runs there. With
    the members split into one-pod podsets after the release, the search would answer "at
    best 0 of 2 pods … fit after evicting every eligible workload"."""
    h = every_service_running
    await create_pair(h)

    await h.until(lambda: pair_running(h), within=60, what="the PodGroup running")
    first = {p.uid for p in pair_pods(h)}

    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=2))
    await h.until(lambda: h.of(Preempted), within=60, what="a preemption")
    assert [d.victims for d in h.of(Preempted)] == [[f"{NAMESPACE}/pair"]]

    def serving() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState)
            and m.workload == f"{NAMESPACE}/serve"
            and m.phase == "Running"
            and not m.terminating
        ]
        return len(pods) == 2

    await h.until(serving, within=60, what="the inference pods running")
    # Bare pods have no controller: the gang goes whole. The last of them may still be in
    # their termination grace (2 s) when the inference pods already run.
    await h.until(
        lambda: not first & {p.uid for p in pair_pods(h)},
        within=30,
        what="every pod of the evicted PodGroup gone",
    )
    assert len(h.of(Preempted)) == 1
