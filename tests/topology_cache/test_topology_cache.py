"""The topology-cache over a real nats-server: churn, reservations, restarts, bad input.

Every test ends by comparing the capacity view a follower of the capacity stream holds with a
fresh accounting fed the final inputs from scratch.
"""

import aiohttp

from tidegate.bus import layout
from tidegate.model import (
    Admitted,
    CapacityDomain,
    DomainCount,
    NodeState,
    PodState,
    Preempted,
    Released,
    Taint,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    subjects,
)

from .conftest import GPU, LEVELS, Harness

NAMESPACE = "team"


def node(name: str, rack: str = "r1", *, gpus: int = 8, **kwargs: object) -> NodeState:
    return NodeState(
        name=name,
        labels={
            LEVELS[0]: "b1",
            LEVELS[1]: rack,
            LEVELS[2]: name,
            "nvidia.com/gpu.product": "H200",
        },
        allocatable={"cpu": 64_000, GPU: gpus, "pods": 110},
        **kwargs,  # type: ignore[arg-type]
    )


def pod(
    name: str,
    node_name: str | None,
    *,
    gpus: int = 1,
    workload: str | None = None,
    phase: str = "Running",
) -> PodState:
    return PodState(
        namespace=NAMESPACE,
        name=name,
        uid=f"uid-{name}",
        node_name=node_name,
        phase=phase,
        requests={"cpu": 1000, GPU: gpus},
        workload=workload,
        podset="workers" if workload else None,
    )


def admitted(workload: str, domains: dict[str, int], *, sequence: int, gpus: int) -> Admitted:
    return Admitted(
        workload=workload,
        uid=f"uid-{workload}",
        queue="q",
        sequence=sequence,
        epoch=1,
        assignments={
            "workers": TopologyAssignment(
                levels=LEVELS,
                domains=[
                    DomainCount(values=["b1", rack_of(n), n], count=c) for n, c in domains.items()
                ],
            )
        },
        requests={"workers": {"cpu": 1000, GPU: gpus}},
    )


def rack_of(name: str) -> str:
    return "r1" if int(name.removeprefix("n")) < 4 else "r2"


async def cluster(harness: Harness, nodes: int = 8) -> None:
    await harness.put(TopologyConfig(name="default", levels=LEVELS))
    for i in range(nodes):
        await harness.put(node(f"n{i}", rack_of(f"n{i}")))


async def test_node_and_pod_churn_keeps_the_view_equal_to_a_recomputation(
    harness: Harness,
) -> None:
    await cluster(harness)
    await harness.start_cache()
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 8

    for i in range(12):  # DaemonSet-like pods tidegate does not manage, and plain pods
        await harness.put(pod(f"p{i}", f"n{i % 8}", gpus=i % 3))
    await harness.put(pod("gated", None, gpus=8))
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 6  # p0 asks for no GPU, p8 for two
    await harness.delete("pod", "p3", NAMESPACE)
    await harness.put(pod("p4", "n4", gpus=1, phase="Succeeded"))
    await harness.put(node("n5", "r2", ready=False))  # node failure
    await harness.put(node("n6", "r2", unschedulable=True))  # cordon
    await harness.put(
        node("n7", "r2", taints=[Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")])
    )
    await harness.delete("node", "n1")
    await harness.put(node("n9", "r2"))
    await harness.until_consistent()

    assert not harness.node_record("n5").schedulable
    assert not harness.node_record("n6").schedulable
    assert not harness.node_record("n7").schedulable
    gone = harness.capacity[subjects.capacity_node(harness.cluster, "default", "n1")]
    assert gone == Tombstone(object_kind="node", name="n1")
    rack = harness.capacity[subjects.capacity_domain(harness.cluster, "default", 1, ["b1", "r2"])]
    assert isinstance(rack, CapacityDomain)
    assert rack.nodes == 2  # n4 and n9; n5, n6, n7 are out


async def test_admitted_pods_move_from_reserved_to_used_without_double_counting(
    harness: Harness,
) -> None:
    await cluster(harness)
    service = await harness.start_cache()
    await harness.until_consistent()

    await harness.decide(admitted("team/train", {"n0": 2, "n1": 2}, sequence=7, gpus=4))
    await harness.until(lambda: harness.node_record("n0").applied_sequence == 7, what="seq 7")
    await harness.until_consistent()
    assert harness.node_record("n1").applied_sequence == 7
    assert harness.node_record("n0").free[GPU] == 0
    assert harness.node_record("n1").free[GPU] == 0
    assert harness.node_record("n2").free[GPU] == 8

    for i, where in enumerate(["n0", "n0", "n1"]):
        await harness.put(pod(f"w-{i}", where, gpus=4, workload="team/train"))
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 0  # two bound, none reserved
    assert harness.node_record("n1").free[GPU] == 0  # one bound, one reserved

    def gpus(state: str, domain: str = "b1/r1", level: str = LEVELS[1]) -> float | None:
        labels = {"topology": "default", "level": level, "domain": domain, "state": state}
        return service.metrics.registry.get_sample_value("tidegate_topology_gpus", labels)

    # GPU use by topology level: rack r1 is n0-n3, block b1 all eight nodes.
    assert [gpus(s) for s in ("allocatable", "used", "reserved", "free")] == [32, 12, 4, 16]
    assert gpus("allocatable", "b1", LEVELS[0]) == 64
    assert gpus("free", "b1/r2") == 32

    await harness.decide(
        Released(
            workload="team/train", uid="uid-team/train", queue="q", reason="Completed", sequence=9
        )
    )
    await harness.until_consistent()
    assert harness.node_record("n1").free[GPU] == 4  # only the bound pod remains
    assert harness.node_record("n1").applied_sequence == 9

    await harness.decide(admitted("team/online", {"n2": 1}, sequence=11, gpus=8))
    await harness.decide(Preempted(preemptor="team/x", preemptor_uid="u", victims=["team/online"]))
    await harness.until_consistent()
    assert harness.node_record("n2").free[GPU] == 8


async def test_an_applied_decision_is_reported_even_where_nothing_changed(
    harness: Harness,
) -> None:
    await cluster(harness, nodes=2)
    await harness.put(pod("w-0", "n0", gpus=2, workload="team/fast"))
    await harness.start_cache()
    await harness.until_consistent()
    before = harness.node_record("n0")
    # The ungater was quicker than this decision: the pod is bound already.
    await harness.decide(admitted("team/fast", {"n0": 1}, sequence=4, gpus=2))
    await harness.until(lambda: harness.node_record("n0").applied_sequence == 4, what="seq 4")
    assert harness.node_record("n0").free == before.free
    assert harness.node_record("n1").applied_sequence == 0  # not concerned, not republished


async def test_a_restart_rebuilds_the_same_view_and_publishes_only_what_changed(
    harness: Harness,
) -> None:
    await cluster(harness)
    cache = await harness.start_cache()
    await harness.decide(admitted("team/a", {"n0": 2, "n4": 1}, sequence=3, gpus=2))
    for i in range(6):
        await harness.put(pod(f"p{i}", f"n{i}", gpus=1))
    await harness.put(pod("a-0", "n0", gpus=2, workload="team/a"))
    await harness.until_consistent()
    assert await harness.stop_cache(cache) == 0

    # Nothing changed while it was down: the restarted cache publishes nothing.
    seen = len(harness.capacity_log)
    cache = await harness.start_cache()
    await harness.until_consistent()
    assert harness.capacity_log[seen:] == []
    assert await harness.stop_cache(cache) == 0

    # Changes while it is down are published once it is back, and only those.
    await harness.delete("node", "n7")
    await harness.delete("pod", "p2", NAMESPACE)
    await harness.put(pod("a-1", "n4", gpus=2, workload="team/a"))
    await harness.decide(admitted("team/b", {"n3": 1}, sequence=5, gpus=1))
    seen = len(harness.capacity_log)
    service = await harness.start_cache()
    stored_when_ready = await harness.bus.last_sequence(layout.capacity_stream(harness.cluster))
    await harness.until_consistent()
    # Ready meant the rebuilt view was stored already: nothing was published after that.
    assert await harness.bus.last_sequence(layout.capacity_stream(harness.cluster)) == (
        stored_when_ready
    )
    # Only what changed: n2 (p2 gone), n3 (b's decision), n7's tombstone, their host domains,
    # rack r2 and the block. a-1 binding on n4 turned a reservation into usage, and rack r1
    # lost on n3 what it gained on n2: both unchanged.
    c = harness.cluster
    assert set(harness.capacity_log[seen:]) == {
        subjects.capacity_node(c, "default", "n2"),
        subjects.capacity_node(c, "default", "n3"),
        subjects.capacity_node(c, "default", "n7"),
        subjects.capacity_domain(c, "default", 2, ["b1", "r1", "n2"]),
        subjects.capacity_domain(c, "default", 2, ["b1", "r1", "n3"]),
        subjects.capacity_domain(c, "default", 2, ["b1", "r2", "n7"]),
        subjects.capacity_domain(c, "default", 1, ["b1", "r2"]),
        subjects.capacity_domain(c, "default", 0, ["b1"]),
    }
    assert harness.node_record("n3").applied_sequence == 5

    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{service.http_port}"
        async with http.get(f"{url}/readyz") as response:
            assert response.status == 200
        async with http.get(f"{url}/metrics") as response:
            text = await response.text()
    assert "tidegate_capacity_applied_sequence 5.0" in text
    assert 'tidegate_capacity_records_published_total{kind="tombstone"} 1.0' in text


async def test_bad_input_is_reported_and_the_rest_applied(harness: Harness) -> None:
    await cluster(harness, nodes=2)
    await harness.put(TopologyConfig(name="broken", levels=[LEVELS[0], LEVELS[0]]))
    cache = await harness.start_cache()
    bad = Admitted(
        workload="team/odd",
        uid="u",
        queue="q",
        sequence=2,
        epoch=1,
        assignments={
            "workers": TopologyAssignment(
                levels=LEVELS,
                domains=[
                    DomainCount(values=["b1", "r1", "n0"], count=-3),
                    DomainCount(values=["b1", "r1", "n1"], count=1),
                ],
            )
        },
        requests={"workers": {GPU: 2}},
    )
    await harness.decide(bad)
    await harness.until(lambda: harness.node_record("n1").free[GPU] == 6, what="good part")
    assert harness.node_record("n0").free[GPU] == 8
    assert not any("broken" in subject for subject in harness.capacity)
    await harness.put(node("n2"))  # still following
    await harness.until_consistent()
    assert cache.readiness.ready
