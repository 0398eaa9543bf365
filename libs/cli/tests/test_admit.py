"""``tidegate admit SCENARIO``: who is admitted over a queue tree, what each borrows, whose
lent quota is reclaimed and why the others wait (WHAT-IF.md, section ``tidegate admit``)."""

import json
from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.main import main

GPU = "nvidia.com/gpu"


def gang(name: str, queue: str, gpus: int, *, created: str, **extra: Any) -> dict[str, Any]:
    """A pending gang of ``gpus`` GPUs in one podset of 8-GPU pods."""
    return {
        "name": name,
        "queue": queue,
        "created": created,
        "podsets": [{"name": "main", "count": gpus // 8, "requests": {GPU: "8"}}],
        **extra,
    }


def holding(name: str, queue: str, gpus: int, *, created: str, **extra: Any) -> dict[str, Any]:
    """A running workload of ``gpus`` GPUs (8-GPU pods, nodes not given)."""
    pods = [{"node": None, "requests": {GPU: "8"}} for _ in range(gpus // 8)]
    return {"name": name, "queue": queue, "created": created, "pods": pods, **extra}


def team(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cohort": "research", "nominal": {GPU: str(nominal)}, **extra}


OPTED_IN = {"reclaim_within_cohort": "Any", "training_preempts_training": True}


def admit(doc: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Any:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    assert main(["admit", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_queue_borrows_its_cohorts_idle_gpus_and_the_lender_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = {
        "cohorts": [{"name": "research"}],
        "queues": [
            team("a", 8, borrowing_limit={GPU: "8"}),
            team("b", 8),
            {"name": "alone", "capability": {GPU: "8"}, "priority": -1},
        ],
        "pending": [
            gang("big", "a", 16, created="2026-11-29T10:00:00Z"),
            gang("bigger", "a", 8, created="2026-11-29T10:01:00Z"),
            gang("apart", "alone", 8, created="2026-11-29T09:00:00Z"),
        ],
    }
    out = admit(doc, capsys, tmp_path)
    # A queue outside any tree is bounded by its capability alone, in its turn (priority -1).
    assert out["admitted"][-1] == {
        "workload": "default/apart",
        "queue": "alone",
        "borrowed": {},
        "placement": None,
    }
    assert out["admitted"][:-1] == [
        {
            "workload": "default/big",
            "queue": "a",
            "borrowed": {GPU: "8"},
            "placement": None,
            "cohort": "research",
        }
    ]
    (waits,) = out["pending"]
    assert waits["workload"] == "default/bigger"
    assert waits["reason"] == "ExceedsQuota"
    assert "its tree can ever give it" not in waits["message"]
    assert out["queues"]["a"]["borrowed"] == {GPU: "8"}
    assert out["queues"]["a"]["share"] == 0.5  # 8 of the 16 the cohort can lend, weight 1
    assert out["queues"]["b"]["lent"] == {GPU: "8"}
    assert out["preempted"] == []


def test_a_lender_gets_its_quota_back_by_reclaiming_the_youngest_borrowing_gangs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = {
        "cohorts": [{"name": "research"}],
        "queues": [team("a", 16, preemption=OPTED_IN), team("b", 8)],
        "running": [
            holding("b-own", "b", 8, created="2026-11-29T09:00:00Z"),
            holding("b-old", "b", 8, created="2026-11-29T09:10:00Z"),
            holding("b-young", "b", 8, created="2026-11-29T09:20:00Z"),
        ],
        "pending": [gang("a-job", "a", 16, created="2026-11-29T10:00:00Z")],
    }
    out = admit(doc, capsys, tmp_path)
    (admitted,) = out["admitted"]
    assert admitted["workload"] == "default/a-job"
    assert admitted["borrowed"] == {}
    # b borrows 16 of a's GPUs: its two youngest gangs go, whole; b-own (its nominal) stays.
    assert admitted["after_preempting"] == ["default/b-young", "default/b-old"]
    assert [(v["workload"], v["by"], v["reason"]) for v in out["preempted"]] == [
        ("default/b-young", "default/a-job", "InCohortReclamation"),
        ("default/b-old", "default/a-job", "InCohortReclamation"),
    ]
    assert out["queues"]["b"]["borrowed"] == {}
    assert out["queues"]["b"]["usage"] == {GPU: "8"}
    assert out["queues"]["a"]["usage"] == {GPU: "16"}


def test_training_reclaims_nothing_unless_its_queue_opts_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = {
        "cohorts": [{"name": "research"}],
        "queues": [team("a", 16), team("b", 8)],
        "running": [holding("b-borrow", "b", 24, created="2026-11-29T09:00:00Z")],
        "pending": [gang("a-job", "a", 16, created="2026-11-29T10:00:00Z")],
    }
    out = admit(doc, capsys, tmp_path)
    assert out["admitted"] == []
    assert out["preempted"] == []
    (waits,) = out["pending"]
    assert waits["reason"] == "ExceedsQuota"
    assert "no set of the 0 eligible gangs frees enough" in waits["message"]


def test_until_stable_admits_what_the_first_cycle_left_and_strict_fifo_blocks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = {
        "queues": [{"name": "solo", "capability": {GPU: "16"}, "queueing_strategy": "StrictFIFO"}],
        "pending": [
            gang("huge", "solo", 24, created="2026-11-29T10:00:00Z"),
            gang("small", "solo", 8, created="2026-11-29T10:01:00Z"),
        ],
        "until_stable": True,
    }
    out = admit(doc, capsys, tmp_path)
    assert out["admitted"] == []
    reasons = {p["workload"]: p["reason"] for p in out["pending"]}
    assert reasons == {"default/huge": "ExceedsQuota", "default/small": "WaitingForCapacity"}


# --------------------------------------------------------------------------- on a cluster

RACK, HOST = "example.com/rack", "kubernetes.io/hostname"
RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}


def cluster_doc(**extra: Any) -> dict[str, Any]:
    """Two racks of two 8-GPU nodes (n1, n2 in r1; n3, n4 in r2)."""
    return {
        "topology": {"name": "default", "levels": [RACK, HOST]},
        "nodes": [
            {
                "name": node,
                "labels": {RACK: rack, HOST: node},
                "allocatable": {"cpu": "32", GPU: "8", "pods": "110"},
            }
            for node, rack in RACKS.items()
        ],
        **extra,
    }


def on(name: str, queue: str, nodes: list[str], **extra: Any) -> dict[str, Any]:
    """A running gang with one 8-GPU pod on each of ``nodes``."""
    pods = [{"node": node, "requests": {GPU: "8"}} for node in nodes]
    return {"name": name, "queue": queue, "pods": pods, **extra}


def in_rack(name: str, queue: str, pods: int, **extra: Any) -> dict[str, Any]:
    """A pending gang of ``pods`` 8-GPU pods that requires one rack."""
    podset = {"name": "w", "count": pods, "requests": {GPU: "8"}, "topology": {"required": RACK}}
    return {"name": name, "queue": queue, "podsets": [podset], **extra}


def placed(entry: dict[str, Any]) -> list[tuple[list[str], int]]:
    return [(d["values"], d["count"]) for d in entry["placement"]["w"]["domains"]]


def test_with_nodes_a_gang_is_placed_in_one_rack_and_one_that_fits_quota_but_not_room_waits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = cluster_doc(
        queues=[{"name": "q", "capability": {GPU: "64"}}],
        running=[on("busy", "q", ["n1"], created="2026-11-29T09:00:00Z")],
        pending=[
            in_rack("gang", "q", 2, created="2026-11-29T10:00:00Z"),
            in_rack("also", "q", 2, created="2026-11-29T10:01:00Z"),
        ],
    )
    out = admit(doc, capsys, tmp_path)
    assert out["placement_checked"] is True
    (gang,) = out["admitted"]
    # Rack r1 has one free node: the 2-pod gang that requires a rack goes to r2, whole.
    assert gang["workload"] == "default/gang"
    assert gang["placement"]["w"]["levels"] == [RACK, HOST]
    assert placed(gang) == [(["r2", "n3"], 1), (["r2", "n4"], 1)]
    # The queue's capability has room for the second gang (48 of 64), the racks do not.
    (waits,) = out["pending"]
    assert waits["workload"] == "default/also"
    assert waits["reason"] == "WaitingForCapacity"
    assert "example.com/rack" in waits["message"]
    # It declares no runtime and no running gang declares an end: nothing can be reserved.
    assert out["reserved"] == []


def test_a_gang_that_can_never_fit_the_cluster_waits_with_topology_placement_failed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = cluster_doc(
        queues=[{"name": "q"}],
        pending=[in_rack("huge", "q", 3, created="2026-11-29T10:00:00Z")],
    )
    out = admit(doc, capsys, tmp_path)
    assert out["admitted"] == []
    (waits,) = out["pending"]
    assert waits["reason"] == "TopologyPlacementFailed"
    assert "even with all 4 nodes empty" in waits["message"]


RESERVATION_DOC = cluster_doc(
    queues=[{"name": "q"}],
    running=[
        on("g1", "q", ["n1"], started="2026-11-29T10:00:00Z", max_runtime_seconds=3600),
        on("g2", "q", ["n3", "n4"], started="2026-11-29T10:00:00Z", max_runtime_seconds=7200),
    ],
    pending=[
        in_rack("big", "q", 2, created="2026-11-29T10:01:00Z"),
        gang("long", "q", 8, created="2026-11-29T10:02:00Z"),
        gang("short", "q", 8, created="2026-11-29T10:03:00Z", max_runtime_seconds=1800),
    ],
    now="2026-11-29T10:05:00Z",
)


def test_a_big_gang_is_reserved_the_rack_that_frees_first_and_a_short_job_backfills(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = admit(RESERVATION_DOC, capsys, tmp_path)
    # g1 ends at 11:00 (started 10:00, one hour declared), g2 at 12:00: r1 frees first.
    (reserved,) = out["reserved"]
    assert reserved["workload"] == "default/big"
    assert reserved["domain"] == {"level": RACK, "values": ["r1"]}
    assert reserved["expected_start"] == "2026-11-29T11:00:00Z"
    assert [w["workload"] for w in reserved["waits_for"]] == ["default/g1"]
    # The short job ends at 10:35, before the expected start: it backfills onto n2.
    (short,) = out["admitted"]
    assert short["workload"] == "default/short"
    assert short["placement"]["main"]["domains"] == [{"values": ["r1", "n2"], "count": 1}]
    # The one that declares no runtime may not: it waits and says why.
    reasons = {p["workload"]: p for p in out["pending"]}
    assert reasons["default/big"]["reason"] == "WaitingForCapacity"
    assert reasons["default/long"]["reason"] == "WaitingForCapacity"
    assert "declares no runtime" in reasons["default/long"]["message"]


def test_now_defaults_to_the_newest_time_in_the_scenario(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = {k: v for k, v in RESERVATION_DOC.items() if k != "now"}
    out = admit(doc, capsys, tmp_path)
    assert out["now"] == "2026-11-29T10:03:00Z"  # the newest created or started
    assert out["reserved"][0]["expected_start"] == "2026-11-29T11:00:00Z"


def test_until_stable_with_nodes_reclaims_and_the_evicted_gangs_free_their_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = cluster_doc(
        cohorts=[{"name": "research"}],
        queues=[team("a", 16, preemption=OPTED_IN), team("b", 16)],
        running=[
            on("b-own", "b", ["n1"], created="2026-11-29T09:00:00Z"),
            on("b-mid", "b", ["n2"], created="2026-11-29T09:10:00Z"),
            on("b-old", "b", ["n3"], created="2026-11-29T09:20:00Z"),
            on("b-young", "b", ["n4"], created="2026-11-29T09:30:00Z"),
        ],
        pending=[
            in_rack("a-job", "a", 2, created="2026-11-29T10:00:00Z"),
            gang("b-next", "b", 8, created="2026-11-29T10:01:00Z"),
        ],
        until_stable=True,
    )
    out = admit(doc, capsys, tmp_path)
    # b holds all 32 GPUs, 16 of them a's: its two youngest gangs go, whole, and their nodes
    # (rack r2) are where a's gang that requires a rack is placed.
    assert [(p["workload"], p["by"], p["reason"]) for p in out["preempted"]] == [
        ("default/b-old", "default/a-job", "InCohortReclamation"),
        ("default/b-young", "default/a-job", "InCohortReclamation"),
    ]
    (a_job,) = out["admitted"]
    assert a_job["workload"] == "default/a-job"
    assert a_job["after_preempting"] == ["default/b-old", "default/b-young"]
    assert placed(a_job) == [(["r2", "n3"], 1), (["r2", "n4"], 1)]
    # b is back at its nominal 16 GPUs and a uses all of its own: b's next gang has nothing
    # to borrow.
    (waits,) = out["pending"]
    assert (waits["workload"], waits["reason"]) == ("default/b-next", "ExceedsQuota")
    assert out["queues"]["a"]["usage"] == {GPU: "16"}
    assert out["queues"]["b"]["usage"] == {GPU: "16"}
    assert out["cycles"] >= 2


def test_inference_that_finds_no_room_is_given_a_training_gangs_nodes_in_one_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = cluster_doc(
        queues=[
            {"name": "online", "priority": 80000, "reclaimable": False},
            {"name": "offline", "priority": 20000},
        ],
        running=[
            on("train-a", "offline", ["n1", "n2"], created="2026-11-29T09:00:00Z", priority=1),
            on("train-b", "offline", ["n3", "n4"], created="2026-11-29T09:10:00Z", priority=2),
        ],
        pending=[
            gang(
                "serve",
                "online",
                8,
                created="2026-11-29T10:00:00Z",
                service_type="inference",
                priority=80000,
            )
        ],
    )
    out = admit(doc, capsys, tmp_path)
    # The preemption service's choice (the lower priority gang, whole), then the cycle in
    # which the preemptor takes the room nominated for it.
    assert [(p["workload"], p["by"], p["reason"]) for p in out["preempted"]] == [
        ("default/train-a", "default/serve", "Tidal")
    ]
    (serve,) = out["admitted"]
    assert serve["after_preempting"] == ["default/train-a"]
    ((values, count),) = [(d["values"], d["count"]) for d in serve["placement"]["main"]["domains"]]
    assert (values[0], count) == ("r1", 1)  # onto the freed rack
    assert out["pending"] == []


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"queues": [{"name": "a", "nominal": {GPU: "x"}}]}, "queues[0].nominal"),
        ({"queues": [{"name": "a", "wat": 1}]}, "queues[0]"),
        ({"nodes": [{"name": "n1"}]}, "nodes[0].allocatable"),
        (cluster_doc(running=[on("r", "q", ["n9"])]), "running[0].pods[0].node"),
        (
            cluster_doc(running=[{"name": "r", "queue": "q", "pods": [{"requests": {}}]}]),
            "running[0].pods[0].node",
        ),
        (
            cluster_doc(
                queues=[{"name": "q"}],
                pending=[
                    {
                        "name": "p",
                        "queue": "q",
                        "podsets": [
                            {"name": "w", "count": 1, "topology": {"required": "example.com/zone"}}
                        ],
                    }
                ],
            ),
            "pending[0].podsets[0].topology.required",
        ),
        (
            {
                "queues": [{"name": "q"}],
                "pending": [
                    gang("g", "q", 8, max_runtime_seconds=-1, created="2026-11-29T10:00:00Z")
                ],
            },
            "pending[0].max_runtime_seconds",
        ),
        ({"now": "yesterday"}, "now"),
        ({"pending": [gang("g", "nope", 8, created="2026-11-29T10:00:00Z")]}, "pending[0].queue"),
        ({"queues": [{"name": "a", "queueing_strategy": "Fast"}]}, "queues[0].queueing_strategy"),
    ],
)
def test_malformed_input_exits_2_naming_the_field(
    doc: dict[str, Any], path: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "scenario.json"
    file.write_text(json.dumps(doc))
    assert main(["admit", str(file)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(path), captured.err
