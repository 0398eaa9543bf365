"""The capacity recomputation counts what kube-scheduler counts and names every difference.

Each situation is written by hand into a simulated API server without scheduler, kubelets or
controllers, so nothing changes but what the test writes.
"""

from collections.abc import AsyncIterator

import pytest

from tidegate.model import CapacityDomain, CapacityNode
from tidegate.placement.accounting import DomainKey, NodeKey
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import NAMESPACES, NODES, PODS
from tidegate.testing import (
    DomainFigures,
    NodeFigures,
    capacity_differences,
    node_schedulable,
    pod_requests,
    published_capacity,
    recompute_capacity,
)
from tidegate.testing.manifests import Builders

NODE = "block0-rack0-node0"
OTHER = "block0-rack0-node1"
RACK = ("block0", "block0-rack0")
GPU = "nvidia.com/gpu"

k8s = Builders(server_fields=False)
"""Pods bound to a node, asking for one cpu and some GPUs."""
MERGE = "application/merge-patch+json"


@pytest.fixture
async def bare() -> AsyncIterator[SimCluster]:
    """Two 8-GPU nodes in one rack, an API server and nothing else."""
    settings = SimSettings(nodes="1x1x2x8gpu", scheduler=False, kubelet=False, controllers=False)
    async with SimCluster.running(settings) as sim:
        sim.api.create(NAMESPACES, None, {"metadata": {"name": "t"}})
        yield sim


def test_requests_count_containers_the_largest_init_container_and_overhead() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "2"}}},
            {"resources": {"requests": {"memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests({"spec": spec}) == {"cpu": 2100, "memory": 2**30}


def test_a_node_is_schedulable_only_ready_uncordoned_and_untainted() -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert node_schedulable({"status": ready})
    assert not node_schedulable({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not node_schedulable({"status": ready, "spec": {"unschedulable": True}})
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    assert not node_schedulable({"status": ready, "spec": {"taints": [taint]}})
    soft = {"key": "node.kubernetes.io/unreachable", "effect": "PreferNoSchedule"}
    assert node_schedulable({"status": ready, "spec": {"taints": [soft]}})


async def test_bound_unfinished_pods_use_capacity_and_cordoned_nodes_leave_their_domains(
    bare: SimCluster,
) -> None:
    bare.api.create(
        PODS,
        "t",
        k8s.pod(
            "a",
            gated=False,
            nodeName=NODE,
            containers=[k8s.container("1", None, limits=True, gpu=3)],
        ),
    )
    bare.api.create(
        PODS,
        "t",
        k8s.pod(
            "done",
            gated=False,
            nodeName=NODE,
            containers=[k8s.container("1", None, limits=True, gpu=4)],
        ),
    )
    finished = {"status": {"phase": "Succeeded"}}
    bare.api.patch(PODS, "t", "done", finished, MERGE, subresource="status")
    bare.api.create(
        PODS,
        "t",
        k8s.pod(
            "b",
            gated=False,
            nodeName=OTHER,
            containers=[k8s.container("1", None, limits=True, gpu=8)],
        ),
    )
    bare.api.patch(NODES, None, OTHER, {"spec": {"unschedulable": True}}, MERGE)

    view = recompute_capacity(bare.store, bare.levels)

    node = view[NodeKey("default", NODE)]
    assert isinstance(node, NodeFigures)
    assert node.domain == (*RACK, NODE)
    assert node.schedulable
    assert node.free[GPU] == 5
    assert node.free["cpu"] == 128_000 - 1000
    assert node.free["pods"] == 110 - 1
    other = view[NodeKey("default", OTHER)]
    assert isinstance(other, NodeFigures)
    assert not other.schedulable
    assert other.free[GPU] == 0
    rack = view[DomainKey("default", 1, RACK)]
    assert rack == DomainFigures(1, node.free)
    assert DomainKey("default", 2, (*RACK, OTHER)) not in view


async def test_differences_name_missing_extra_and_different_records(bare: SimCluster) -> None:
    want = recompute_capacity(bare.store, bare.levels)
    first = want[NodeKey("default", NODE)]
    assert isinstance(first, NodeFigures)
    published = [
        CapacityNode(
            topology="default",
            node=NODE,
            domain=list(first.domain),
            allocatable=first.free,
            free={**first.free, GPU: 7},
        ),
        CapacityNode(
            topology="default", node="ghost", domain=["x", "y", "ghost"], allocatable={}, free={}
        ),
        CapacityNode(
            topology="other", node=OTHER, domain=["x", "y", OTHER], allocatable={}, free={}
        ),
        CapacityDomain(topology="default", level="block", domain=["empty"], free={}, nodes=0),
    ]
    got = published_capacity(published)
    assert set(got) == {NodeKey("default", NODE), NodeKey("default", "ghost")}
    problems = capacity_differences(want, got)
    assert f"missing {NodeKey('default', OTHER)}" in problems
    assert f"extra {NodeKey('default', 'ghost')}" in problems
    (changed,) = [p for p in problems if p.startswith(f"{NodeKey('default', NODE)}: bus says")]
    assert "'nvidia.com/gpu': 7" in changed
    assert f"missing {DomainKey('default', 0, ('block0',))}" in problems
    assert capacity_differences(want, want) == []
