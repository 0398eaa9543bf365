"""``tidegate place`` as a user runs it: a subprocess reading JSON, YAML or stdin.

Covers the WHAT-IF.md contract (output keys, exit 0 whether or not it fits, exit 2 with one
line naming the field on malformed input) and a realistic cluster: the 847 GPU hosts of the
Lingjun dataset (/work/shared/data/lingjun-topology.csv; levels block = PSW, rack = ASW,
host = ip; ASW names repeat under different PSWs).
"""

import copy
import csv
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LINGJUN = Path("/work/shared/data/lingjun-topology.csv")

EXAMPLE: dict[str, Any] = {
    "topology": {"name": "default", "levels": [BLOCK, RACK, HOST]},
    "nodes": [
        {
            "name": f"n{i}",
            "labels": {BLOCK: "b1", RACK: f"r{1 + i // 2}", HOST: f"n{i}"},
            "allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "used": {"cpu": "1"},
            "taints": [],
            "ready": True,
            "unschedulable": False,
        }
        for i in range(4)
    ],
    "workload": {
        "name": "train-1",
        "namespace": "default",
        "podsets": [
            {
                "name": "workers",
                "count": 2,
                "requests": {"cpu": "4", "nvidia.com/gpu": "8"},
                "topology": {
                    "required": RACK,
                    "preferred": None,
                    "unconstrained": False,
                    "slice_size": None,
                    "slice_required": None,
                },
                "node_selector": {},
                "tolerations": [],
                "group": None,
            }
        ],
    },
    "profile": None,
}


def tidegate_place(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidegate.cli", "place", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer(process: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert process.returncode == 0, process.stderr
    assert process.stderr == ""
    result: dict[str, Any] = json.loads(process.stdout)
    return result


def test_json_file_fits(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(EXAMPLE))
    result = answer(tidegate_place(str(path)))
    assert result["fits"] is True
    assert result["reason"] is None
    assert result["assignments"] == {
        "workers": {
            "levels": [BLOCK, RACK, HOST],
            "domains": [
                {"values": ["b1", "r1", "n0"], "count": 1},
                {"values": ["b1", "r1", "n1"], "count": 1},
            ],
        }
    }
    assert result["levels_chosen"] == {"workers": RACK}
    assert result["nodes"] == {"workers": {"n0": 1, "n1": 1}}
    assert result["profile"] == "best-fit"


def test_yaml_on_stdin_that_does_not_fit() -> None:
    snapshot = copy.deepcopy(EXAMPLE)
    snapshot["workload"]["podsets"][0]["count"] = 3
    result = answer(tidegate_place("-", stdin=yaml.safe_dump(snapshot)))
    assert result["fits"] is False
    assert result["assignments"] == {}
    assert result["reason"] == (
        "workers: needs 3 pods in one example.com/rack; the best rack fits 2 "
        "(limited by cpu and nvidia.com/gpu)"
    )


def test_yaml_file_with_spread_profile_and_no_argument_reads_stdin(tmp_path: Path) -> None:
    snapshot = copy.deepcopy(EXAMPLE)
    snapshot["nodes"][0]["used"] = {"nvidia.com/gpu": 8}
    snapshot["workload"]["podsets"][0]["count"] = 1
    snapshot["profile"] = "spread"
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    spread = answer(tidegate_place(str(path)))
    assert spread["profile"] == "spread"
    snapshot["profile"] = None
    best_fit = answer(tidegate_place(stdin=yaml.safe_dump(snapshot)))
    # Rack r1 has one free node left, r2 two: best-fit packs r1, spread picks r2.
    assert best_fit["nodes"] == {"workers": {"n1": 1}}
    assert spread["nodes"] == {"workers": {"n2": 1}}


def test_quantities_in_every_notation() -> None:
    snapshot = copy.deepcopy(EXAMPLE)
    snapshot["nodes"] = snapshot["nodes"][:1]
    snapshot["nodes"][0]["allocatable"] = {"cpu": 8, "memory": "64Gi", "nvidia.com/gpu": 8}
    snapshot["nodes"][0]["used"] = {"cpu": "7500m", "memory": "63Gi"}
    podset = snapshot["workload"]["podsets"][0]
    podset.update(count=1, requests={"cpu": "500m", "memory": "1024Mi"}, topology={})
    assert answer(tidegate_place(stdin=json.dumps(snapshot)))["fits"] is True
    podset["requests"] = {"cpu": "0.6"}
    result = answer(tidegate_place(stdin=json.dumps(snapshot)))
    assert result["reason"] == "workers: needs 1 pods; the cluster fits 0 (limited by cpu)"


def broken(change: str) -> str:
    """The example with one thing broken, as JSON."""
    snapshot = copy.deepcopy(EXAMPLE)
    scope: dict[str, Any] = {"s": snapshot}
    exec(change, scope)
    return json.dumps(scope["s"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "s['nodes'][3]['allocatable']['cpu'] = 'abc'",
            'nodes[3].allocatable.cpu: "abc" is not a quantity',
        ),
        ("s['nodes'][0]['used']['cpu'] = '-1'", 'nodes[0].used.cpu: "-1" is negative'),
        ("s['nodes'][1]['ready'] = 'yes'", 'nodes[1].ready: expected true or false, got "yes"'),
        ("s['nodes'][1]['name'] = 'n0'", 'nodes[1].name: duplicate node "n0"'),
        ("del s['nodes'][2]['allocatable']", "nodes[2].allocatable: is required"),
        (
            "s['nodes'][0]['taints'] = [{'key': 'k', 'effect': 'Never'}]",
            'nodes[0].taints[0].effect: "Never" is not one of NoSchedule, PreferNoSchedule, '
            "NoExecute",
        ),
        (
            "s['workload']['podsets'][0]['topology']['requird'] = 'x'",
            "workload.podsets[0].topology.requird: unknown field (known: required, preferred, "
            "unconstrained, slice_size, slice_required)",
        ),
        ("del s['workload']['podsets'][0]['count']", "workload.podsets[0].count: is required"),
        (
            "s['workload']['podsets'][0]['count'] = 'many'",
            'workload.podsets[0].count: expected an integer, got "many"',
        ),
        ("s['workload']['podsets'][0]['count'] = -1", "workload.podsets[0].count: -1 is negative"),
        (
            "s['workload']['podsets'][0]['topology']['required'] = 'rack'",
            "workload.podsets[0].topology.required: unknown level 'rack' (levels: "
            "example.com/block, example.com/rack, kubernetes.io/hostname, or 'auto')",
        ),
        (
            "s['workload']['podsets'][0]['topology']['slice_size'] = 3;"
            "s['workload']['podsets'][0]['topology']['slice_required'] = 'kubernetes.io/hostname'",
            "workload.podsets[0].topology.slice_size: 3 is larger than count 2",
        ),
        (
            "s['profile'] = 'tight'",
            "profile: unknown profile 'tight' (known: best-fit, spread)",
        ),
        (
            "s['workload']['profile'] = 'tight'",
            "workload.profile: unknown profile 'tight' (known: best-fit, spread)",
        ),
        ("s['topology']['levels'] = []", "topology.levels: a topology needs at least one level"),
        ("s['topology']['levels'] = [1]", "topology.levels[0]: expected a string, got a number"),
        ("del s['workload']", "workload: is required"),
        ("s['extra'] = 1", "extra: unknown field (known: topology, nodes, workload, profile)"),
        ("s = [1]", "input: expected an object, got a list"),
    ],
)
def test_malformed_input_exits_2_naming_the_field(change: str, message: str) -> None:
    process = tidegate_place("-", stdin=broken(change))
    assert process.returncode == 2
    assert process.stdout == ""
    assert process.stderr == message + "\n"


def test_not_json_or_yaml_and_missing_file(tmp_path: Path) -> None:
    process = tidegate_place(stdin="{nodes: [")
    assert process.returncode == 2
    assert process.stderr.startswith("input: not valid JSON or YAML at line 1")
    assert process.stderr.count("\n") == 1
    missing = tmp_path / "nope.json"
    process = tidegate_place(str(missing))
    assert process.returncode == 2
    assert process.stderr == f"{missing}: No such file or directory\n"
    process = tidegate_place(stdin="   \n")
    assert (process.returncode, process.stderr) == (2, "stdin: is empty\n")


# --------------------------------------------------------------------------- Lingjun


PSW, ASW, IP = "lingjun/psw", "lingjun/asw", "kubernetes.io/hostname"


def lingjun_snapshot(count: int, topology: dict[str, Any]) -> dict[str, Any]:
    """The Lingjun hosts with 8 GPUs each; every third host (in file order) is fully used."""
    with LINGJUN.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    nodes = [
        {
            "name": row["ip"],
            "labels": {PSW: row["PSW"], ASW: row["ASW"], IP: row["ip"]},
            "allocatable": {"nvidia.com/gpu": 8, "cpu": "96", "memory": "1Ti"},
            "used": {"nvidia.com/gpu": 8} if index % 3 == 0 else {},
        }
        for index, row in enumerate(rows)
    ]
    return {
        "topology": {"name": "lingjun", "levels": [PSW, ASW, IP]},
        "nodes": nodes,
        "workload": {
            "name": "train",
            "podsets": [
                {
                    "name": "trainers",
                    "count": count,
                    "requests": {"nvidia.com/gpu": 8, "cpu": "32"},
                    "topology": topology,
                }
            ],
        },
    }


def free_hosts_per_rack(snapshot: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter((n["labels"][PSW], n["labels"][ASW]) for n in snapshot["nodes"] if not n["used"])


def test_lingjun_block_gang_uses_fewest_racks_in_one_psw(tmp_path: Path) -> None:
    snapshot = lingjun_snapshot(64, {"required": PSW, "preferred": ASW})
    path = tmp_path / "lingjun.json"
    path.write_text(json.dumps(snapshot))
    result = answer(tidegate_place(str(path)))
    assert result["fits"] is True
    domains = result["assignments"]["trainers"]["domains"]
    assert sum(d["count"] for d in domains) == 64
    assert all(d["count"] == 1 for d in domains)  # one 8-GPU pod per host
    psws = {d["values"][0] for d in domains}
    assert len(psws) == 1
    (psw,) = psws
    used_racks = Counter((d["values"][0], d["values"][1]) for d in domains)
    # The fewest racks of that PSW that hold 64 free hosts.
    free = sorted(
        (c for (p, _), c in free_hosts_per_rack(snapshot).items() if p == psw), reverse=True
    )
    fewest = next(k for k in range(1, len(free) + 1) if sum(free[:k]) >= 64)
    assert len(used_racks) == fewest
    assert result["levels_chosen"] == {"trainers": PSW}


def test_lingjun_racks_with_the_same_asw_name_stay_apart() -> None:
    snapshot = lingjun_snapshot(1, {"required": ASW})
    free = free_hosts_per_rack(snapshot)
    by_name: dict[str, list[int]] = {}
    for (_, asw), hosts in free.items():
        by_name.setdefault(asw, []).append(hosts)
    # An ASW name that appears under several PSWs with more free hosts in total than in any
    # one of them: requiring one rack must not add them up.
    name, counts = max(
        ((asw, counts) for asw, counts in by_name.items() if len(counts) > 1),
        key=lambda item: sum(item[1]) - max(item[1]),
    )
    best_rack = max(free.values())
    assert sum(counts) > best_rack
    snapshot["workload"]["podsets"][0]["count"] = best_rack + 1
    result = answer(tidegate_place(stdin=json.dumps(snapshot)))
    assert result["fits"] is False
    assert result["reason"] == (
        f"trainers: needs {best_rack + 1} pods in one lingjun/asw; "
        f"the best asw fits {best_rack} (limited by nvidia.com/gpu)"
    )
    del name
    snapshot["workload"]["podsets"][0]["count"] = best_rack
    result = answer(tidegate_place(stdin=json.dumps(snapshot)))
    assert result["fits"] is True
    assert len({tuple(d["values"][:2]) for d in result["assignments"]["trainers"]["domains"]}) == 1
