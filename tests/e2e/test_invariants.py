"""The end-to-end invariants catch what they are meant to catch.

The crash and malformed-input tests pass when nothing is broken, which proves little unless
each check fails on the situation it guards against. Here each situation is built by hand on a
simulated API server without scheduler, kubelets or controllers (so nothing moves but what the
test writes), or as a decision log, and the check must name it.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tidegate.model import (
    Admitted,
    CapacityNode,
    DomainCount,
    Message,
    PodState,
    Preempted,
    Released,
    TopologyAssignment,
)
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import NAMESPACES, PODS

from .invariants import (
    GATE,
    Invariants,
    capacity_differences,
    double_admissions,
    mirror_differences,
    sim_objects,
    unreleased_victims,
)

NAMESPACE = "t"
NODE = "block0-rack0-node0"
OTHER = "block0-rack0-node1"


@pytest.fixture
async def bare() -> AsyncIterator[SimCluster]:
    """Two 8-GPU nodes, an API server and nothing else."""
    settings = SimSettings(nodes="1x1x2x8gpu", scheduler=False, kubelet=False, controllers=False)
    async with SimCluster.running(settings) as sim:
        sim.api.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        yield sim


def pod(name: str, *, app: str, node: str | None = None, gated: bool = False) -> dict[str, Any]:
    """A pod of trace workload ``app`` asking for 8 GPUs, bound to ``node`` if given."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "m", "image": "m", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": {"name": name, "labels": {"app": app}}, "spec": spec}


def admitted(
    workload: str, sequence: int, *, count: int = 1, replaces: int | None = None
) -> Admitted:
    assignment = TopologyAssignment(
        levels=["kubernetes.io/hostname"], domains=[DomainCount(values=[NODE], count=count)]
    )
    return Admitted(
        workload=workload,
        uid=f"uid-{workload}",
        queue="q",
        sequence=sequence,
        epoch=1,
        assignments={"main": assignment},
        replaces=replaces,
    )


def released(workload: str, sequence: int) -> Released:
    return Released(
        workload=workload, uid=f"uid-{workload}", queue="q", reason="Evicted", sequence=sequence
    )


async def sample_twice(checks: Invariants) -> None:
    """Two samples a moment apart (a grace period of 0 has then run out)."""
    checks.sample()
    await asyncio.sleep(0.02)
    checks.sample()


async def test_a_gang_left_partly_released_is_named(bare: SimCluster) -> None:
    checks = Invariants(bare, grace_seconds=0)
    bare.api.create(PODS, NAMESPACE, pod("g-0", app="g", node=NODE))
    bare.api.create(PODS, NAMESPACE, pod("g-1", app="g", gated=True))
    checks.restarting.add("ungater")
    await sample_twice(checks)
    assert checks.violations == [], "no grace runs out while a service is down"
    checks.restarting.clear()
    await sample_twice(checks)
    assert len(checks.violations) == 1
    assert "gang t/g partly released: 1 of 2 live pods released" in checks.violations[0]
    assert "t/g-1" in checks.violations[0]


async def test_overcommit_unscheduled_and_overrelease_are_named(bare: SimCluster) -> None:
    checks = Invariants(bare, grace_seconds=0)
    checks.decided(admitted(f"{NAMESPACE}/a", 1, count=2))
    bare.api.create(PODS, NAMESPACE, pod("a-0", app="a", node=NODE))
    bare.api.create(PODS, NAMESPACE, pod("a-1", app="a", node=NODE))
    bare.api.create(PODS, NAMESPACE, pod("a-2", app="a"))
    await sample_twice(checks)
    found = "\n".join(checks.violations)
    assert f"node {NODE} overcommitted: {{'nvidia.com/gpu': (16, 8)}}" in found
    assert "pod t/a-2 released but not scheduled" in found
    assert "3 pods of t/a released but its admission assigned 2" in found


async def test_a_preempted_gangs_new_pods_released_before_readmission_are_named(
    bare: SimCluster,
) -> None:
    checks = Invariants(bare, grace_seconds=10, observer_lag_seconds=0)
    checks.decided(admitted(f"{NAMESPACE}/v", 1))
    bare.api.create(PODS, NAMESPACE, pod("v-old", app="v", node=NODE))
    checks.decided(Preempted(preemptor="t/s", preemptor_uid="s", victims=[f"{NAMESPACE}/v"]))
    bare.api.delete(PODS, NAMESPACE, "v-old", {})  # evicted: terminating, no kubelet to finish
    bare.api.create(PODS, NAMESPACE, pod("v-new", app="v", node=OTHER))
    await sample_twice(checks)
    assert len(checks.violations) == 1, checks.violations
    assert "pod t/v-new of preempted t/v released without a new admission" in checks.violations[0]


async def test_a_preempted_gang_not_evicted_whole_is_named(bare: SimCluster) -> None:
    checks = Invariants(bare, grace_seconds=0, observer_lag_seconds=0)
    checks.decided(admitted(f"{NAMESPACE}/v", 1, count=2))
    bare.api.create(PODS, NAMESPACE, pod("v-0", app="v", node=NODE))
    bare.api.create(PODS, NAMESPACE, pod("v-1", app="v", node=OTHER))
    checks.decided(Preempted(preemptor="t/s", preemptor_uid="s", victims=[f"{NAMESPACE}/v"]))
    bare.api.delete(PODS, NAMESPACE, "v-0", {})  # evicted: terminating, no kubelet to finish
    await sample_twice(checks)
    assert len(checks.violations) == 1, checks.violations
    assert "preempted t/v not evicted whole: ['t/v-1'] still running" in checks.violations[0]
    # Once the last pod is evicted too, the gang is no longer watched.
    bare.api.delete(PODS, NAMESPACE, "v-1", {})
    await sample_twice(checks)
    assert len(checks.violations) == 1, checks.violations


def test_double_admissions_and_unreleased_victims_are_named() -> None:
    log: list[Message] = [
        admitted("t/a", 1),
        released("t/a", 2),
        admitted("t/a", 3),  # after a release: fine
        admitted("t/a", 3),  # the same decision again: fine
        admitted("t/a", 4, replaces=3),  # moves slots of the admission in force: fine
        admitted("t/a", 5),  # no release in between
        Preempted(preemptor="t/s", preemptor_uid="s", victims=["t/a", "t/b"]),
        released("t/a", 6),
    ]
    assert double_admissions(log) == [
        "t/a (uid uid-t/a) admitted again (sequence 5) while admission 4 was in force: "
        "no release in between"
    ]
    assert unreleased_victims(log) == ["t/b was preempted for t/s but never released as Evicted"]


async def test_capacity_and_mirror_differences_are_named(bare: SimCluster) -> None:
    bare.api.create(PODS, NAMESPACE, pod("p", app="p", node=NODE))
    (stored,) = sim_objects(bare, PODS, NAMESPACE)
    wrong_node = PodState(
        namespace=NAMESPACE, name="p", uid=stored["metadata"]["uid"], node_name="elsewhere"
    )
    assert mirror_differences(bare, [wrong_node]) == [
        f"pod t/p: bus says ({stored['metadata']['uid']!r}, 'elsewhere', 'Pending', False, "
        f"False), simulator says ({stored['metadata']['uid']!r}, {NODE!r}, 'Pending', False, "
        "False)"
    ]
    stale = CapacityNode(
        topology="default",
        node=NODE,
        domain=["block0", "block0-rack0", NODE],
        allocatable={"nvidia.com/gpu": 8},
        free={"nvidia.com/gpu": 8},
    )
    problems = capacity_differences(bare, [stale])
    assert any(
        p.startswith(f"NodeKey(topology='default', node='{NODE}'): bus says") for p in problems
    )
    assert any(
        "missing NodeKey(topology='default', node='block0-rack0-node1')" in p for p in problems
    )
