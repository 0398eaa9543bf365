"""The topology-cache over a real nats-server: churn, reservations, restarts, bad input.

Every test ends by comparing the capacity view a follower of the capacity stream holds with a
fresh accounting fed the final inputs from scratch.
"""

import aiohttp

from tidegate.bus import layout
from tidegate.model import (
    CapacityDomain,
    Taint,
    Tombstone,
    subjects,
)

from .conftest import GPU, LEVELS, Harness, msg

NAMESPACE = "team"


def rack_of(name: str) -> str:
    return "r1" if int(name.removeprefix("n")) < 4 else "r2"


def host(name: str) -> tuple[str, str, str]:
    return ("b1", rack_of(name), name)


async def cluster(harness: Harness, nodes: int = 8) -> None:
    await harness.send(msg.topology())
    for i in range(nodes):
        await harness.send(msg.node(f"n{i}", "b1", rack_of(f"n{i}")))


async def test_node_and_pod_churn_keeps_the_view_equal_to_a_recomputation(
    harness: Harness,
) -> None:
    await cluster(harness)
    await harness.start_cache()
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 8

    for i in range(12):  # DaemonSet-like pods tidegate does not manage, and plain pods
        await harness.send(msg.pod(f"p{i}", f"n{i % 8}", gpus=i % 3))
    await harness.send(msg.pod("gated", None, gpus=8))
    await harness.until_consistent()
    assert harness.node_record("n0").free[GPU] == 6  # p0 asks for no GPU, p8 for two
    await harness.tombstone("pod", "p3", NAMESPACE)
    await harness.send(msg.pod("p4", "n4", gpus=1, phase="Succeeded"))
    await harness.send(msg.node("n5", "b1", "r2", ready=False))  # node failure
    await harness.send(msg.node("n6", "b1", "r2", unschedulable=True))  # cordon
    await harness.send(
        msg.node(
            "n7",
            "b1",
            "r2",
            taints=[Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")],
        )
    )
    await harness.tombstone("node", "n1")
    await harness.send(msg.node("n9", "b1", "r2"))
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

    await harness.send(
        msg.admitted(
            "team/train", {host("n0"): 2, host("n1"): 2}, sequence=7, per_pod=msg.requests(gpus=4)
        )
    )
    await harness.until(lambda: harness.node_record("n0").applied_sequence == 7, what="seq 7")
    await harness.until_consistent()
    assert harness.node_record("n1").applied_sequence == 7
    assert harness.node_record("n0").free[GPU] == 0
    assert harness.node_record("n1").free[GPU] == 0
    assert harness.node_record("n2").free[GPU] == 8

    for i, where in enumerate(["n0", "n0", "n1"]):
        await harness.send(
            msg.pod(f"w-{i}", where, gpus=4, workload="team/train", podset="workers")
        )
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

    await harness.send(msg.released("team/train", sequence=9))
    await harness.until_consistent()
    assert harness.node_record("n1").free[GPU] == 4  # only the bound pod remains
    assert harness.node_record("n1").applied_sequence == 9

    await harness.send(
        msg.admitted("team/online", {host("n2"): 1}, sequence=11, per_pod=msg.requests(gpus=8))
    )
    await harness.send(msg.preempted("team/x", ["team/online"], uid="u"))
    await harness.until_consistent()
    assert harness.node_record("n2").free[GPU] == 8


async def test_an_applied_decision_is_reported_even_where_nothing_changed(
    harness: Harness,
) -> None:
    await cluster(harness, nodes=2)
    await harness.send(msg.pod("w-0", "n0", gpus=2, workload="team/fast", podset="workers"))
    await harness.start_cache()
    await harness.until_consistent()
    before = harness.node_record("n0")
    # The ungater was quicker than this decision: the pod is bound already.
    await harness.send(
        msg.admitted("team/fast", {host("n0"): 1}, sequence=4, per_pod=msg.requests(gpus=2))
    )
    await harness.until(lambda: harness.node_record("n0").applied_sequence == 4, what="seq 4")
    assert harness.node_record("n0").free == before.free
    assert harness.node_record("n1").applied_sequence == 0  # not concerned, not republished


async def test_a_restart_rebuilds_the_same_view_and_publishes_only_what_changed(
    harness: Harness,
) -> None:
    await cluster(harness)
    cache = await harness.start_cache()
    await harness.send(
        msg.admitted(
            "team/a", {host("n0"): 2, host("n4"): 1}, sequence=3, per_pod=msg.requests(gpus=2)
        )
    )
    for i in range(6):
        await harness.send(msg.pod(f"p{i}", f"n{i}", gpus=1))
    await harness.send(msg.pod("a-0", "n0", gpus=2, workload="team/a", podset="workers"))
    await harness.until_consistent()
    assert await harness.stop_cache(cache) == 0

    # Nothing changed while it was down: the restarted cache publishes nothing.
    seen = len(harness.capacity_log)
    cache = await harness.start_cache()
    await harness.until_consistent()
    assert harness.capacity_log[seen:] == []
    assert await harness.stop_cache(cache) == 0

    # Changes while it is down are published once it is back, and only those.
    await harness.tombstone("node", "n7")
    await harness.tombstone("pod", "p2", NAMESPACE)
    await harness.send(msg.pod("a-1", "n4", gpus=2, workload="team/a", podset="workers"))
    await harness.send(
        msg.admitted("team/b", {host("n3"): 1}, sequence=5, per_pod=msg.requests(gpus=1))
    )
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
    await harness.send(msg.topology("broken", [LEVELS[0], LEVELS[0]]))
    cache = await harness.start_cache()
    bad = msg.admitted(
        "team/odd", {host("n0"): -3, host("n1"): 1}, sequence=2, uid="u", per_pod={GPU: 2}
    )
    await harness.send(bad)
    await harness.until(lambda: harness.node_record("n1").free[GPU] == 6, what="good part")
    assert harness.node_record("n0").free[GPU] == 8
    assert not any("broken" in subject for subject in harness.capacity)
    await harness.send(msg.node("n2", "b1", "r1"))  # still following
    await harness.until_consistent()
    assert cache.readiness.ready
