"""``tidegate preempt``: the what-if contract of WHAT-IF.md, run as a subprocess and in-process."""

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidegate.cli.main import main

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]


def node(name: str, rack: str, *, gpus: str = "8", product: str = "NVIDIA-H200") -> dict[str, Any]:
    return {
        "name": name,
        "labels": {
            LEVELS[0]: "b1",
            LEVELS[1]: rack,
            LEVELS[2]: name,
            "nvidia.com/gpu.product": product,
        },
        "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": gpus, "pods": "110"},
    }


def training(name: str, nodes: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "default",
        "queue": "offline",
        "service_type": "training",
        "owner_kind": "Job",
        "priority": 20000,
        "preemptable": True,
        "min_available": len(nodes),
        "card": "NVIDIA-H200",
        "pods": [{"node": n, "requests": {"cpu": "4", "nvidia.com/gpu": "8"}} for n in nodes],
        **extra,
    }


def scenario() -> dict[str, Any]:
    """Two racks of two full nodes; train-a fills rack r1, train-b (higher priority) r2."""
    return {
        "topology": {"name": "default", "levels": LEVELS},
        "nodes": [node("n1", "r1"), node("n2", "r1"), node("n3", "r2"), node("n4", "r2")],
        "queues": [
            {
                "name": "online",
                "priority": 80000,
                "reclaimable": False,
                "capability": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"},
                "card_quota": {"NVIDIA-H200": 16},
            },
            {"name": "offline", "priority": 20000, "reclaimable": True},
        ],
        "running": [
            training("train-a", ["n1", "n2"], running_seconds=3600),
            training("train-b", ["n3", "n4"], priority=40000),
        ],
        "incoming": {
            "name": "serve-b",
            "namespace": "default",
            "queue": "online",
            "service_type": "inference",
            "owner_kind": "Deployment",
            "priority": 80000,
            "min_available": 2,
            "card": "NVIDIA-H200",
            "pods": [{"requests": {"cpu": "4", "nvidia.com/gpu": "8"}}] * 2,
            "topology": {"required": "example.com/rack"},
        },
        "owner_kind_service_types": {
            "ReplicaSet": "inference",
            "Deployment": "inference",
            "Job": "training",
        },
    }


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidegate.cli", "preempt", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer(
    doc: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> dict[str, Any]:
    """Run the command in-process on ``doc``; it must answer (exit 0)."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    assert main(["preempt", str(path)]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_preempts_a_whole_lower_priority_gang_as_a_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario()))
    done = run_cli(str(path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["admitted"] is True
    assert out["victims"] == ["default/train-a"]
    assert out["reason"] is None
    assert out["placement"] == {
        "serve-b": {
            "levels": LEVELS,
            "domains": [
                {"values": ["b1", "r1", "n1"], "count": 1},
                {"values": ["b1", "r1", "n2"], "count": 1},
            ],
        }
    }
    assert out["modes"] == {"default/train-a": "restart"}
    assert out["nominated"] == {
        "n1": {"cpu": "4", "nvidia.com/gpu": "8", "pods": "1"},
        "n2": {"cpu": "4", "nvidia.com/gpu": "8", "pods": "1"},
    }
    assert out["gpu_seconds_lost"] == 16 * 3600
    assert out["top_priority"] == 20000
    assert out["not_candidates"] == {}  # train-b could be taken too, but is not needed


def test_yaml_on_stdin() -> None:
    text = yaml.safe_dump(scenario())
    for args in ((), ("-",)):
        done = run_cli(*args, stdin=text)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["victims"] == ["default/train-a"]


def test_malformed_input_exits_2_with_one_line_naming_the_field() -> None:
    doc = scenario()
    doc["nodes"][3]["allocatable"]["cpu"] = "abc"
    done = run_cli(stdin=json.dumps(doc))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == 'nodes[3].allocatable.cpu: "abc" is not a quantity\n'


def test_fits_in_free_room_without_victims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    doc["running"] = doc["running"][1:]
    out = answer(doc, capsys, tmp_path)
    assert out["admitted"] is True
    assert out["victims"] == []
    assert out["outcome"] == "fits"
    assert out["placement"]["serve-b"]["domains"][0]["values"][1] == "r1"


def test_queue_capability_limits_the_preemptor(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    doc["running"].append(
        {
            "name": "serve-a",
            "queue": "online",
            "service_type": "inference",
            "priority": 80000,
            "pods": [{"node": "n1", "requests": {"cpu": "1", "nvidia.com/gpu": "2"}}],
        }
    )
    doc["running"][0]["pods"][0]["requests"]["nvidia.com/gpu"] = "6"
    doc["queues"][0]["capability"]["nvidia.com/gpu"] = "16"
    doc["incoming"]["pods"] = [{"requests": {"cpu": "4", "nvidia.com/gpu": "8"}}] * 2
    doc["incoming"]["card"] = None
    out = answer(doc, capsys, tmp_path)
    assert out["admitted"] is False
    assert out["victims"] == []
    assert out["outcome"] == "exceeds-quota"
    assert out["reason"] == "queue online: nvidia.com/gpu 2 in use + 16 requested > quota 16"


def test_no_reclaimable_workload_frees_enough_cards(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    doc["running"][0]["preemptable"] = False
    doc["running"][1]["priority"] = 90000
    out = answer(doc, capsys, tmp_path)
    assert out["admitted"] is False
    assert out["victims"] == []
    assert out["placement"] == {}
    assert out["reason"].startswith(
        "no reclaimable training workload frees enough NVIDIA-H200 cards"
    )
    assert out["not_candidates"] == {
        "default/train-a": "not preemptable",
        "default/train-b": "priority 90000 is not below the preemptor's 80000",
    }


def test_training_never_preempts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = scenario()
    doc["incoming"]["service_type"] = None
    doc["incoming"]["owner_kind"] = "Job"  # the map says training
    doc["incoming"]["queue"] = "offline"
    out = answer(doc, capsys, tmp_path)
    assert out["service_type"] == "training"
    assert out["admitted"] is False
    assert out["outcome"] == "not-a-reclaimer"
    assert "never preempts" in out["reason"]


def test_owner_kind_map_decides_when_service_type_is_null(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    for gang in doc["running"]:
        gang["service_type"] = None
    doc["incoming"]["service_type"] = None
    assert answer(copy.deepcopy(doc), capsys, tmp_path)["victims"] == ["default/train-a"]
    doc["owner_kind_service_types"] = {"Deployment": "inference"}  # Job is now unknown
    out = answer(doc, capsys, tmp_path)
    assert out["admitted"] is False
    assert out["not_candidates"]["default/train-a"] == "unknown workloads are never preempted"


def test_abort_mode_and_unconstrained_choice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    doc["running"] = [
        training("t1", ["n1"], on_preemption="abort", running_seconds=10),
        training("t2", ["n2"], running_seconds=500),
        training("t3", ["n3"], running_seconds=20),
        training("t4", ["n4"], running_seconds=30),
    ]
    doc["incoming"]["topology"] = None
    out = answer(doc, capsys, tmp_path)
    assert out["victims"] == ["default/t1", "default/t3"]
    assert out["modes"] == {"default/t1": "abort", "default/t3": "restart"}
    doc["incoming"]["topology"] = {"required": "example.com/rack"}
    out = answer(doc, capsys, tmp_path)
    assert out["victims"] == ["default/t3", "default/t4"]  # 400 GPU-s in r2 vs 4080 in r1


def test_scenario_without_topology_uses_hostnames(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    del doc["topology"]
    for n in doc["nodes"]:
        n["labels"] = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    doc["incoming"]["topology"] = None
    out = answer(doc, capsys, tmp_path)
    assert out["admitted"] is True
    assert out["placement"]["serve-b"]["levels"] == ["kubernetes.io/hostname"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["running"][0]["pods"][1].update(node="n9"),
            "running[0].pods[1].node: 'n9' is not a node of the snapshot",
        ),
        (
            lambda d: d["incoming"].update(service_type="online"),
            "incoming.service_type: 'online' is not a service type (expected inference or training)",
        ),
        (
            lambda d: d["incoming"]["topology"].update(required="example.com/zone"),
            "incoming.topology.required: unknown level 'example.com/zone'",
        ),
        (
            lambda d: d["running"][1].update(on_preemption="later"),
            "running[1].on_preemption: 'later' is not restart or abort",
        ),
        (
            lambda d: d["queues"][0]["capability"].update({"nvidia.com/gpu": "-1"}),
            'queues[0].capability.nvidia.com/gpu: "-1" is negative',
        ),
        (
            lambda d: d["nodes"][0].update(used={"cpu": "1"}),
            "nodes[0].used: unknown field",
        ),
        (
            lambda d: d["running"][0].update(card="NVIDIA-H200/mig-huge"),
            "running[0].card: card model 'NVIDIA-H200/mig-huge'",
        ),
        (
            lambda d: d["owner_kind_service_types"].update(Job="batch"),
            "owner_kind_service_types.Job: 'batch' is not a service type",
        ),
        (lambda d: d.pop("incoming"), "incoming: is required"),
        (lambda d: d["running"][1].update(name="train-a"), "running[1].name: duplicate"),
        (lambda d: d["incoming"].update(pods=[]), "incoming.pods: needs at least one pod"),
        (lambda d: d.update(extra=1), "extra: unknown field"),
    ],
)
def test_malformed_scenarios(
    mutate: Any, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = scenario()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert main(["preempt", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message), captured.err
    assert captured.err.count("\n") == 1


def test_not_a_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("nodes: [unclosed\n")
    assert main(["preempt", str(path)]) == 2
    assert capsys.readouterr().err.startswith("input: not valid JSON or YAML")
    assert main(["preempt", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_real_topology_lingjun(tmp_path: Path) -> None:
    """The 847-node Lingjun topology (block = PSW, rack = ASW; rack names repeat across PSWs),
    every node busy with two-node training gangs: a 6-pod rack gang evicts three gangs of one
    rack, and lands in that rack."""
    import csv

    with open("/work/shared/data/lingjun-topology.csv", encoding="utf-8") as data:
        rows = list(csv.DictReader(data))
    levels = ["example.com/psw", "example.com/asw", "kubernetes.io/hostname"]
    racks: dict[tuple[str, str], list[str]] = {}
    nodes = []
    for row in rows:
        racks.setdefault((row["PSW"], row["ASW"]), []).append(row["ip"])
        nodes.append(
            {
                "name": row["ip"],
                "labels": {levels[0]: row["PSW"], levels[1]: row["ASW"], levels[2]: row["ip"]},
                "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
            }
        )
    running = []
    for (psw, asw), members in sorted(racks.items()):
        for k in range(0, len(members), 2):
            pair = members[k : k + 2]
            running.append(
                {
                    "name": f"job-{psw}-{asw}-{k}".lower(),
                    "queue": "offline",
                    "owner_kind": "Job",
                    "priority": 20000,
                    "running_seconds": 100 + len(running) % 7,
                    "pods": [{"node": n, "requests": {"nvidia.com/gpu": "8"}} for n in pair],
                }
            )
    doc = {
        "topology": {"name": "lingjun", "levels": levels},
        "nodes": nodes,
        "queues": [
            {"name": "online", "priority": 80000, "reclaimable": False},
            {"name": "offline", "priority": 20000, "reclaimable": True},
        ],
        "running": running,
        "incoming": {
            "name": "llm",
            "queue": "online",
            "owner_kind": "Deployment",
            "priority": 80000,
            "pods": [{"requests": {"nvidia.com/gpu": "8"}}] * 6,
            "topology": {"required": levels[1]},
        },
    }
    path = tmp_path / "lingjun.json"
    path.write_text(json.dumps(doc))
    done = run_cli(str(path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["admitted"] is True
    assert out["exact"] is True
    assert len(out["victims"]) == 3  # six whole nodes = three two-node gangs, no more
    domains = out["placement"]["llm"]["domains"]
    assert sum(d["count"] for d in domains) == 6
    assert len({tuple(d["values"][:2]) for d in domains}) == 1  # one (PSW, ASW) rack
    victim_nodes = {
        pod["node"]
        for gang in running
        if f"default/{gang['name']}" in out["victims"]
        for pod in gang["pods"]
    }
    assert victim_nodes == {d["values"][2] for d in domains}
