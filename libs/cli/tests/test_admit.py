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


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"queues": [{"name": "a", "nominal": {GPU: "x"}}]}, "queues[0].nominal"),
        ({"queues": [{"name": "a", "wat": 1}]}, "queues[0]"),
        ({"nodes": [{"name": "n1"}]}, "nodes"),
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
