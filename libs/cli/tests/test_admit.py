"""``tidegate admit SCENARIO``: who is admitted over a queue tree, what each borrows, whose
lent quota is reclaimed and why the others wait (WHAT-IF.md, section ``tidegate admit``)."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tidegate.cli.main import main
from tidegate.cli.whatif import assignments_json
from tidegate.model import (
    Admitted,
    CapacityNode,
    PodSetSpec,
    QueueConfig,
    Reserved,
    TopologyConfig,
    TopologyRequest,
    WorkloadState,
)
from tidegate.policy.admission import Admission

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


def test_the_cli_answers_what_the_admission_cycle_decides_on_the_same_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The admission service's cycle, fed as the service feeds it (capacity reports, the
    running gangs admitted by an earlier cycle), and ``tidegate admit`` given that state as a
    scenario, make the same decisions: admissions and their placement, reasons, reservation."""
    t0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC).timestamp()
    levels = [RACK, HOST]
    admission = Admission()
    admission.capacity.set_topology(TopologyConfig(name="default", levels=levels))
    allocatable = {"cpu": 32000, GPU: 8, "pods": 110}

    def report(used: dict[str, dict[str, int]]) -> None:
        for node, rack in RACKS.items():
            taken = used.get(node, {})
            free = {r: a - taken.get(r, 0) for r, a in allocatable.items()}
            admission.capacity.update(
                CapacityNode(
                    topology="default",
                    node=node,
                    domain=[rack, node],
                    allocatable=allocatable,
                    free=free,
                    applied_sequence=admission.sequence,
                )
            )

    def workload(name: str, pods: int, created: float, **extra: Any) -> WorkloadState:
        return WorkloadState(
            namespace="default",
            name=name,
            uid=f"uid-default/{name}",
            owner_kind="Job",
            queue="q",
            service_type="training",
            podsets=[PodSetSpec(name="w", count=pods, requests={GPU: 8}, **extra)],
            created_at=created,
            max_runtime_seconds=None,
        )

    report({})
    admission.set_queue(QueueConfig(name="q"))
    running = {"g1": (1, 3600.0), "g2": (2, 7200.0)}
    for name, (pods, runtime) in running.items():
        admission.set_workload(
            msgspec.structs.replace(workload(name, pods, t0), max_runtime_seconds=runtime)
        )
    first = admission.cycle(now=t0)
    usage = {str(d.body.workload): d.node_usage for d in first if isinstance(d.body, Admitted)}
    assert set(usage) == {"default/g1", "default/g2"}
    used: dict[str, dict[str, int]] = {}
    for taken in usage.values():
        for node, amounts in taken.items():
            used[node] = {r: used.get(node, {}).get(r, 0) + a for r, a in amounts.items()}
    report(used)
    rack_request = TopologyRequest(required=RACK)
    pending = [
        workload("big", 2, t0 + 60, topology=rack_request),
        workload("long", 1, t0 + 120),
        msgspec.structs.replace(workload("short", 1, t0 + 180), max_runtime_seconds=1800.0),
    ]
    for item in pending:
        admission.set_workload(item)
    decisions = admission.cycle(now=t0 + 300)
    service_admitted = {
        d.body.workload: assignments_json(d.body.assignments)
        for d in decisions
        if isinstance(d.body, Admitted)
    }
    service_reserved = [
        (d.body.workload, d.body.level, d.body.domain, d.body.expected_start)
        for d in decisions
        if isinstance(d.body, Reserved)
    ]
    assert service_reserved  # the scenario is one where a reservation is made
    assert service_admitted  # and a short job backfills

    def as_running(name: str) -> dict[str, Any]:
        pods = [
            {"node": node, "requests": {GPU: str(amounts[GPU])}}
            for node, amounts in sorted(usage[f"default/{name}"].items())
            for _ in range(amounts["pods"])
        ]
        started = datetime.fromtimestamp(t0, UTC).isoformat()
        runtime = running[name][1]
        return {
            "name": name,
            "queue": "q",
            "pods": pods,
            "started": started,
            "max_runtime_seconds": runtime,
        }

    def as_pending(item: WorkloadState) -> dict[str, Any]:
        podset = item.podsets[0]
        spec: dict[str, Any] = {"name": "w", "count": podset.count, "requests": {GPU: "8"}}
        if podset.topology.required is not None:
            spec["topology"] = {"required": podset.topology.required}
        doc: dict[str, Any] = {
            "name": item.name,
            "queue": "q",
            "created": datetime.fromtimestamp(item.created_at, UTC).isoformat(),
            "podsets": [spec],
        }
        if item.max_runtime_seconds is not None:
            doc["max_runtime_seconds"] = item.max_runtime_seconds
        return doc

    doc = cluster_doc(
        queues=[{"name": "q"}],
        running=[as_running(name) for name in running],
        pending=[as_pending(item) for item in pending],
        now=datetime.fromtimestamp(t0 + 300, UTC).isoformat(),
    )
    out = admit(doc, capsys, tmp_path)
    assert {a["workload"]: a["placement"] for a in out["admitted"]} == service_admitted
    assert [
        (
            r["workload"],
            r["domain"]["level"],
            r["domain"]["values"],
            datetime.fromisoformat(r["expected_start"]).timestamp(),
        )
        for r in out["reserved"]
    ] == service_reserved
    assert {p["workload"]: p["reason"] for p in out["pending"]} == admission.waiting()


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
