"""End to end: every service as a real process on the simulated cluster, driven by a trace.

Runs `tidegate demo` exactly as a user would (a subprocess) on a small tidal scenario: two
training gangs each required in one rack fill the cluster; an inference Deployment arrives and
reclaims a whole training gang; the victim goes back to its queue and is admitted again once
the other finishes; a malformed workload is marked Invalid and nothing else is disturbed.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    spans = [json.loads(line) for line in (workdir / "traces.jsonl").read_text().splitlines()]
    services_by_trace: dict[str, set[str]] = {}
    workload_traces: set[str] = set()
    for span in spans:
        trace_id = span["context"]["trace_id"]
        services_by_trace.setdefault(trace_id, set()).add(
            span["resource"]["attributes"]["service.name"]
        )
        if span["name"] == "tg.demo.workload.e2e.serve publish":
            workload_traces.add(trace_id)
    assert workload_traces
    assert any(
        {"tidegate-watcher", "tidegate-admission", "tidegate-preemption", "tidegate-ungater"}
        <= services_by_trace[trace_id]
        for trace_id in workload_traces
    ), {t: services_by_trace[t] for t in workload_traces}
