"""End to end: every service as a real process on the simulated cluster, driven by a trace.

Runs `tidegate demo` exactly as a user would (a subprocess) on a small tidal scenario: two
training gangs each required in one rack fill the cluster; an inference Deployment arrives and
reclaims a whole training gang; the victim goes back to its queue and is admitted again once
the other finishes; a malformed workload is marked Invalid and nothing else is disturbed.
Then the traces the services wrote have the shape docs/operations.md promises (one admission
trace per workload, no missing parent, victims linked), and ``tidegate explain`` / ``tidegate
queues`` answer for every workload from the bus the demo left behind.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tidegate.bus.server import NatsServerProcess
from tidegate.testing.traces import admission_trace_problems, spans_from_json_lines

TRACE = Path(__file__).with_name("tidal-trace.yaml")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tidal_scenario_end_to_end(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegate.cli",
            "demo",
            "--trace",
            str(TRACE),
            "--nodes",
            "1x2x8x8gpu",
            "--time-scale",
            "0.03",
            "--workdir",
            str(workdir),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    workloads = report["workloads"]

    for name in ("e2e/train-a", "e2e/train-b"):
        first = workloads[name]["placements"][0]
        assert "8 pods in 1 tidegate.io/rack" in first, first

    assert workloads["e2e/serve"]["state"] == "Admitted"
    assert len(report["preemptions"]) == 1
    preemption = report["preemptions"][0]
    assert preemption["preemptor"] == "e2e/serve"
    (victim,) = preemption["victims"]
    assert victim in ("e2e/train-a", "e2e/train-b")
    # The victim was evicted whole, went back to its queue, and was admitted again later.
    assert workloads[victim]["preempted_by"] == ["e2e/serve"]
    assert len(workloads[victim]["admitted_at"]) == 2
    assert workloads[victim]["admitted_at"][1] > preemption["at"]
    # Inference is never a victim, and training never preempts.
    assert all(p["preemptor"] == "e2e/serve" for p in report["preemptions"])

    assert workloads["e2e/broken"]["pending_reasons"][-1] == "Invalid"
    assert not workloads["e2e/broken"]["admitted_at"]

    # One trace per workload, from the watcher's publish through every service that acted on it.
    spans = spans_from_json_lines(workdir / "traces.jsonl")
    services_by_trace: dict[str, set[str]] = {}
    workload_traces: set[str] = set()
    for span in spans:
        services_by_trace.setdefault(span.trace_id, set()).add(span.service)
        if span.name == "tg.demo.workload.e2e.serve publish":
            workload_traces.add(span.trace_id)
    assert workload_traces
    assert any(
        {"tidegate-watcher", "tidegate-admission", "tidegate-preemption", "tidegate-ungater"}
        <= services_by_trace[trace_id]
        for trace_id in workload_traces
    ), {t: services_by_trace[t] for t in workload_traces}

    # Every admitted or preempted workload: exactly one admission trace, its root exported, no
    # missing parent anywhere, decisions naming queue, reason and placement, victims linked.
    admitted = [name for name, w in workloads.items() if w["admitted_at"]]
    preemptions = {p["preemptor"]: p["victims"] for p in report["preemptions"]}
    assert admission_trace_problems(spans, admitted=admitted, preemptions=preemptions) == []
    # Transport (pods, nodes, capacity) is not traced by default: only workload traces remain.
    assert not [s for s in spans if ".pod." in s.name or ".capacity." in s.name]

    # `tidegate explain` answers for every workload the demo ran, from the bus it left behind.
    with NatsServerProcess(store_dir=workdir / "jetstream") as nats:
        for name, entry in workloads.items():
            answer = cli("explain", name, "--json", "--cluster", "demo", "--nats-url", nats.url)
            assert as_reported(answer) == entry["state"], answer
            assert answer["trace_id"] in services_by_trace
        table = cli("queues", "--json", "--cluster", "demo", "--nats-url", nats.url)
        queues = {row["queue"]: row for row in table}
        assert queues["online"]["admitted"] == 1
        assert queues["offline"]["pending"] == {"Invalid": 1}


def cli(*args: str) -> Any:
    """Run ``tidegate ARGS`` as a user would; its JSON output."""
    completed = subprocess.run(
        [sys.executable, "-m", "tidegate.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def as_reported(answer: dict[str, str]) -> str:
    """`tidegate explain`'s state in the demo report's words."""
    if answer["state"] == "Finished":
        return answer["reason"]
    if answer["state"] in ("Pending", "Released"):
        return f"{answer['state']}({answer['reason']})"
    return answer["state"]
