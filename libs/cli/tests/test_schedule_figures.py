"""The schedule figures (utilization, waits, fragmentation) on hand-made timelines."""

import pytest

from tidegate.cli.schedule_figures import (
    Gang,
    Snapshot,
    Timeline,
    fragmented_gpus,
    nearest_rank,
    schedule_figures,
    side_by_side,
    waits,
)

RACK = "tidegate.io/rack"
HOST = "kubernetes.io/hostname"


def _cluster() -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """Two racks of two 8-GPU nodes: r1/n1, r1/n2, r2/n3, r2/n4 (32 GPUs)."""
    nodes = {
        "n1": {RACK: "r1", HOST: "n1"},
        "n2": {RACK: "r1", HOST: "n2"},
        "n3": {RACK: "r2", HOST: "n3"},
        "n4": {RACK: "r2", HOST: "n4"},
    }
    return nodes, dict.fromkeys(nodes, 8)


def test_utilization_is_time_weighted_over_the_snapshots_until_the_end() -> None:
    nodes, gpus = _cluster()
    timeline = Timeline(
        nodes=nodes,
        gpus=gpus,
        gangs=[],
        snapshots=[
            # 0..10 s: all 32 free; 10..40 s: 24 allocated; 40..50 s (end): all allocated.
            Snapshot(at=0, free=dict.fromkeys(nodes, 8)),
            Snapshot(at=10, free={"n1": 0, "n2": 0, "n3": 0, "n4": 8}),
            Snapshot(at=40, free=dict.fromkeys(nodes, 0)),
        ],
        end=50,
    )
    figures = schedule_figures(timeline)
    assert figures["utilization"] == pytest.approx((0 * 10 + 24 * 30 + 32 * 10) / 50 / 32)
    assert figures["fragmented_gpus"] == 0.0  # nothing waits: idle, not fragmented


def test_free_gpus_count_as_fragmented_only_where_no_waiting_gang_fits() -> None:
    nodes, gpus = _cluster()
    gangs = [
        # 2 pods of 8 GPUs, both in one rack.
        Gang("ns/big", pods=2, gpus_per_pod=8, submitted_at=0, required_level=RACK),
        # 1 pod of 4 GPUs, anywhere.
        Gang("ns/small", pods=1, gpus_per_pod=4, submitted_at=0),
    ]
    timeline = Timeline(nodes=nodes, gpus=gpus, gangs=gangs, snapshots=[], end=0)
    # 8 free on n1 and 8 free on n3: 16 free, but no rack has two free nodes.
    split = Snapshot(at=0, free={"n1": 8, "n2": 0, "n3": 8, "n4": 0}, waiting=("ns/big",))
    assert fragmented_gpus(timeline, split) == 16
    # The same free GPUs with the 4-GPU job also waiting: it fits on either node.
    assert fragmented_gpus(timeline, Snapshot(0, split.free, ("ns/big", "ns/small"))) == 0
    # Both free nodes in rack r2: the big gang fits there.
    together = Snapshot(at=0, free={"n1": 0, "n2": 0, "n3": 8, "n4": 8}, waiting=("ns/big",))
    assert fragmented_gpus(timeline, together) == 0
    # 3 free GPUs on a node fit no pod of either; 8 on another fit the small one only.
    crumbs = Snapshot(
        at=0, free={"n1": 3, "n2": 0, "n3": 8, "n4": 0}, waiting=("ns/big", "ns/small")
    )
    assert fragmented_gpus(timeline, crumbs) == 3
    # Nothing waiting: nothing is fragmented.
    assert fragmented_gpus(timeline, Snapshot(at=0, free=crumbs.free)) == 0


def test_a_gang_without_a_required_level_may_use_free_gpus_across_racks() -> None:
    nodes, gpus = _cluster()
    gang = Gang("ns/spread", pods=2, gpus_per_pod=8, submitted_at=0)
    timeline = Timeline(nodes=nodes, gpus=gpus, gangs=[gang], snapshots=[], end=0)
    split = Snapshot(at=0, free={"n1": 8, "n2": 0, "n3": 8, "n4": 0}, waiting=("ns/spread",))
    assert fragmented_gpus(timeline, split) == 0
    # Three pods do not fit two free nodes: all 16 free GPUs are stranded.
    three = Gang("ns/three", pods=3, gpus_per_pod=8, submitted_at=0)
    timeline = Timeline(nodes=nodes, gpus=gpus, gangs=[three], snapshots=[], end=0)
    assert fragmented_gpus(timeline, Snapshot(0, split.free, ("ns/three",))) == 16
    # With a two-pod gang of the same kind also waiting, the same GPUs are usable.
    both = Timeline(nodes=nodes, gpus=gpus, gangs=[gang, three], snapshots=[], end=0)
    assert fragmented_gpus(both, Snapshot(0, split.free, ("ns/three", "ns/spread"))) == 0


def test_fragmentation_is_time_averaged() -> None:
    nodes, gpus = _cluster()
    big = Gang("ns/big", pods=2, gpus_per_pod=8, submitted_at=0, started_at=30, required_level=RACK)
    timeline = Timeline(
        nodes=nodes,
        gpus=gpus,
        gangs=[big],
        snapshots=[
            # 0..20 s: 16 free GPUs split over the racks while the gang waits.
            Snapshot(at=0, free={"n1": 8, "n2": 0, "n3": 8, "n4": 0}, waiting=("ns/big",)),
            # 20..30 s: the room is in one rack; 30..40 s: it runs.
            Snapshot(at=20, free={"n1": 0, "n2": 0, "n3": 8, "n4": 8}, waiting=("ns/big",)),
            Snapshot(at=30, free={"n1": 0, "n2": 0, "n3": 0, "n4": 0}),
        ],
        end=40,
    )
    figures = schedule_figures(timeline, big_gpus=16)
    assert figures["fragmented_gpus"] == pytest.approx(16 * 20 / 40)
    assert figures["big"] == {
        "count": 1,
        "never_started": 0,
        "p50": 30,
        "p99": 30,
        "max": 30,
    }


def test_waits_split_big_and_small_and_count_never_started_until_the_end() -> None:
    gangs = [
        Gang("ns/g1", pods=32, gpus_per_pod=8, submitted_at=100, started_at=400),
        Gang("ns/g2", pods=16, gpus_per_pod=8, submitted_at=0),  # never starts: waits 1000
        *[
            Gang(f"ns/s{i}", pods=1, gpus_per_pod=1, submitted_at=i, started_at=i + i % 10)
            for i in range(100)
        ],
    ]
    nodes, gpus = _cluster()
    figures = schedule_figures(
        Timeline(nodes=nodes, gpus=gpus, gangs=gangs, snapshots=[], end=1000), big_gpus=128
    )
    assert figures["big"] == {
        "count": 2,
        "never_started": 1,
        "p50": 300,
        "p99": 1000,
        "max": 1000,
    }
    # Small waits: 0..9 s, ten of each; nearest rank p50 is the 50th (4 s), p99 the 99th (9 s).
    assert figures["small"] == {"count": 100, "never_started": 0, "p50": 4, "p99": 9, "max": 9}
    assert figures["max_wait"] == 1000
    assert figures["never_started"] == ["ns/g2"]
    assert figures["utilization"] is None  # no snapshots


def test_nearest_rank_and_empty_waits() -> None:
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert waits([], 10).to_json() == {
        "count": 0,
        "never_started": 0,
        "p50": None,
        "p99": None,
        "max": None,
    }


def test_side_by_side_puts_each_run_in_a_column() -> None:
    nodes, gpus = _cluster()
    timeline = Timeline(
        nodes=nodes,
        gpus=gpus,
        gangs=[Gang("ns/g", pods=32, gpus_per_pod=8, submitted_at=0, started_at=60)],
        snapshots=[Snapshot(at=0, free={"n1": 0, "n2": 0, "n3": 8, "n4": 8})],
        end=10,
    )
    table = side_by_side({"off": schedule_figures(timeline), "on": schedule_figures(timeline)})
    assert "| figure | off | on |" in table
    assert "| GPU utilization (allocated, time-averaged) | 50.0% | 50.0% |" in table
    assert "| big gangs: wait max | 60 s | 60 s |" in table
    assert "| small jobs: wait p50 | - | - |" in table
