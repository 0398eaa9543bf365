"""The invariants read the real API server's objects through :class:`ApiSnapshot`: shown here
to fire on hand-made objects shaped as the API server returns them."""

from typing import cast

from tidegate.sim import SimCluster

from .invariants import Invariants
from .real import ApiSnapshot


def node(name: str, gpus: int) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"tidegate.io/rack": "r0"}},
        "status": {"allocatable": {"cpu": "128", "nvidia.com/gpu": str(gpus), "pods": "110"}},
    }


def pod(name: str, node_name: str, gpus: int, *, gated: bool = False) -> dict[str, object]:
    spec: dict[str, object] = {
        "nodeName": node_name,
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    if gated:
        spec["schedulingGates"] = [{"name": "tidegate.io/admission"}]
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name, "labels": {}},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def test_an_overcommitted_node_in_the_snapshot_is_named() -> None:
    snapshot = ApiSnapshot(
        pods=[pod("a", "n0", 8), pod("b", "n0", 8)], nodes=[node("n0", 8), node("n1", 8)]
    )
    checks = Invariants(cast(SimCluster, snapshot), grace_seconds=1.0)
    checks.sample()
    assert any("n0 overcommitted" in v for v in checks.violations), checks.violations

    fine = ApiSnapshot(pods=[pod("a", "n0", 8), pod("b", "n1", 8)], nodes=snapshot.nodes)
    quiet = Invariants(cast(SimCluster, fine), grace_seconds=1.0)
    quiet.sample()
    assert quiet.violations == []


def test_the_snapshot_serves_pods_by_namespace_and_nodes() -> None:
    snapshot = ApiSnapshot(pods=[pod("a", "n0", 1)], nodes=[node("n0", 8)])
    assert [p["metadata"]["name"] for p in snapshot.store.objects(("", "pods"), "ns")] == ["a"]  # type: ignore[index]
    assert snapshot.store.objects(("", "pods"), "other") == []
    assert len(snapshot.store.objects(("", "nodes"))) == 1
    assert snapshot.store.objects(("batch", "jobs")) == []
