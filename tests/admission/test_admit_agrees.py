"""``tidegate admit`` and the admission service agree (WHAT-IF.md: "what they answer is what the
services would decide"): the service, over a real nats-server, decides a reservation, a
backfill and a wait; the what-if command, given the same cluster as a scenario, answers the
same decisions."""

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tidegate.cli.main import main
from tidegate.cli.whatif import assignments_json
from tidegate.model import Admitted, Pending, Reserved, TopologyRequest, WorkloadState

from .conftest import GPU, LEVELS, Harness
from .test_admission_service import small_cluster, workers, workload

HOUR = 3600.0
RACKS = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"}


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def pods_on(admitted: Admitted) -> list[str]:
    """The node of each pod of an admission (its domains end at the host)."""
    return [
        d.values[-1]
        for a in admitted.assignments.values()
        for d in a.domains
        for _ in range(d.count)
    ]


def as_pending(item: WorkloadState) -> dict[str, Any]:
    """A pending workload of the service's, as a scenario's ``pending`` entry."""
    podsets = []
    for podset in item.podsets:
        spec: dict[str, Any] = {
            "name": podset.name,
            "count": podset.count,
            "requests": {"cpu": "1", GPU: str(podset.requests[GPU])},
        }
        if podset.topology.required is not None:
            spec["topology"] = {"required": podset.topology.required}
        podsets.append(spec)
    doc: dict[str, Any] = {
        "name": item.name,
        "namespace": item.namespace,
        "queue": item.queue,
        "created": rfc3339(item.created_at),
        "podsets": podsets,
    }
    if item.max_runtime_seconds is not None:
        doc["max_runtime_seconds"] = item.max_runtime_seconds
    return doc


async def test_tidegate_admit_answers_what_the_admission_service_decided(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await small_cluster(harness)
    await harness.start_admission()
    start = time.time()
    g1 = workload("g1", workers(1, 8), created_at=start - 50, max_runtime_seconds=HOUR)
    g2 = workload("g2", workers(2, 8), created_at=start - 40, max_runtime_seconds=2 * HOUR)
    for item in (g1, g2):
        await harness.workload(item)
    await harness.until(
        lambda: harness.of(Admitted, "ns/g1") and harness.of(Admitted, "ns/g2"), what="g1, g2"
    )
    running: dict[str, Admitted] = {}
    for name in ("g1", "g2"):
        (admitted,) = harness.of(Admitted, f"ns/{name}")
        assert isinstance(admitted, Admitted)
        running[name] = admitted
    used: dict[str, int] = {}
    for admitted in running.values():
        for node in pods_on(admitted):
            used[node] = used.get(node, 0) + 8
    applied = max(getattr(d, "sequence", 0) for d in harness.decisions)
    for name, rack in RACKS.items():
        await harness.node(name, rack, free_gpus=8 - used.get(name, 0), applied=applied)

    big = workload(
        "big",
        msgspec.structs.replace(workers(2, 8), topology=TopologyRequest(required=LEVELS[1])),
        created_at=start - 30,
    )
    await harness.workload(big)
    await harness.until(lambda: harness.of(Reserved, "ns/big"), what="the reservation")
    long = workload("long", workers(1, 8), created_at=start - 20)
    short = workload("short", workers(1, 8), created_at=start - 10, max_runtime_seconds=600)
    for item in (long, short):
        await harness.workload(item)
    await harness.until(
        lambda: harness.of(Pending, "ns/long") and harness.of(Admitted, "ns/short"),
        what="long to wait and short to backfill",
    )
    (reserved,) = harness.of(Reserved, "ns/big")
    assert isinstance(reserved, Reserved)
    (backfilled,) = harness.of(Admitted, "ns/short")
    assert isinstance(backfilled, Admitted)
    waiting = {
        d.workload: d.reason
        for d in harness.decisions
        if isinstance(d, Pending) and d.workload in ("ns/big", "ns/long")
    }

    # The same cluster as a scenario: the running gangs on the nodes the service put them,
    # started when the service admitted them (a reservation's waits_for says when g1 ends).
    (g1_end,) = [w.expected_end for w in reserved.waits_for if w.workload == "ns/g1"]
    started = g1_end - HOUR
    doc = {
        "topology": {"name": "default", "levels": LEVELS},
        "nodes": [
            {
                "name": node,
                "labels": {LEVELS[0]: "b1", LEVELS[1]: rack, LEVELS[2]: node},
                "allocatable": {"cpu": "64", GPU: "8", "pods": "110"},
            }
            for node, rack in RACKS.items()
        ],
        "queues": [{"name": "q"}],
        "running": [
            {
                "name": item.name,
                "namespace": "ns",
                "queue": "q",
                "created": rfc3339(item.created_at),
                "started": rfc3339(started),
                "max_runtime_seconds": item.max_runtime_seconds,
                "pods": [
                    {"node": node, "requests": {"cpu": "1", GPU: "8"}}
                    for node in pods_on(running[item.name])
                ],
            }
            for item in (g1, g2)
        ],
        "pending": [as_pending(item) for item in (big, long, short)],
        "now": rfc3339(time.time()),
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["admit", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)

    assert {a["workload"]: a["placement"] for a in out["admitted"]} == {
        "ns/short": assignments_json(backfilled.assignments)
    }
    (answer,) = out["reserved"]
    assert answer["workload"] == "ns/big"
    assert answer["domain"] == {"level": reserved.level, "values": reserved.domain}
    assert answer["nodes"] == reserved.nodes
    assert datetime.fromisoformat(answer["expected_start"]).timestamp() == pytest.approx(
        reserved.expected_start, abs=1.0
    )
    assert {p["workload"]: p["reason"] for p in out["pending"]} == waiting
