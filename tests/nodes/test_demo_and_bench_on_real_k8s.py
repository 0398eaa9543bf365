"""`tidegate demo --kubeconfig` and `bench/realk8s.py` on the session's real control plane.

Both run as a user runs them (subprocesses) against the real kube-apiserver, controller-manager
and scheduler, with fake nodes from the node agent. The demo replays the end-to-end test's tidal
trace (in a namespace and queues of its own, the inference Deployment scaled down by the demo's
HPA-like driver through the real scale subresource): the outcome is read from its report,
which it builds from the bus and the real API server, down to the evicted gang's replacement
pods running to completion (what failed in the built-in tidal day on the real control plane). The benchmark runs at its smoke size only.
"""

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidegate.kube import NAMESPACES, KubeSettings, NotFound, connect

pytestmark = pytest.mark.real_k8s

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "e2e" / "tidal-trace.yaml"


def own_trace(path: Path, suffix: str) -> tuple[Path, str]:
    """The tidal trace with a namespace and queue names of this test's own."""
    trace: Any = yaml.safe_load(TRACE.read_text())
    namespace = f"demo-{suffix}"
    trace["namespace"] = namespace
    for queue in trace["queues"]:
        queue["name"] = f"{queue['name']}-{suffix}"
    for workload in trace["workloads"]:
        workload["queue"] = f"{workload['queue']}-{suffix}"
        if workload["name"] == "serve":
            # The demo's HPA-like driver, through the real scale subresource: 4 -> 3 -> 2
            # (or 4 -> 2 when a look comes late).
            workload["autoscale"] = {
                "target_per_replica": 100,
                "min_replicas": 1,
                "max_replicas": 4,
                "every": 30,
                "load": [[0, 400], [150, 400], [200, 150]],
            }
    path.write_text(yaml.safe_dump(trace))
    return path, namespace


async def namespace_exists(kubeconfig: Path, name: str) -> bool:
    """Whether the API server still has namespace ``name`` (terminating or not)."""
    async with await connect(KubeSettings(kubeconfig=kubeconfig)) as kube:
        try:
            await kube.get(NAMESPACES, name)
        except NotFound:
            return False
        return True


@pytest.mark.slow(40)
@pytest.mark.timeout(360)
def test_demo_runs_on_the_real_control_plane_with_fake_nodes(
    real_cluster: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    trace, namespace = own_trace(tmp_path / "trace.yaml", suffix)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegate.cli",
            "demo",
            "--kubeconfig",
            str(real_cluster.kubeconfig),
            "--fake-nodes",
            "1x2x8x8gpu",
            "--crds",
            str(REPO / "deploy" / "crds"),
            "--trace",
            str(trace),
            "--time-scale",
            "0.03",
            "--workdir",
            str(tmp_path / "demo"),
            "--cluster",
            f"demo{suffix}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=330,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    report = json.loads(result.stdout)
    workloads = report["workloads"]
    for name in ("train-a", "train-b"):
        first = workloads[f"{namespace}/{name}"]["placements"][0]
        assert "8 pods in 1 tidegate.io/rack" in first, first
    serve = f"{namespace}/serve"
    assert workloads[serve]["state"] == "Admitted"
    scalings = [s for s in report["scalings"] if s["workload"] == serve]
    assert scalings, report["scalings"]
    assert scalings[0]["from"] == 4
    assert scalings[-1]["to"] == 2
    assert all(s["to"] < s["from"] for s in scalings), scalings
    [preemption] = report["preemptions"]
    assert preemption["preemptor"] == serve
    (victim,) = preemption["victims"]
    # Evicted whole through the real Eviction API, re-created gated by the real Job
    # controller, admitted again once the other gang finished.
    assert workloads[victim]["preempted_by"] == [serve]
    assert len(workloads[victim]["admitted_at"]) == 2
    # ... and its replacement pods really ran: training fills the room again after the
    # re-admission (ground truth: the pods the API server listed), and the Job completed (its
    # status on the API server). Admission alone proves nothing: it admits by the Job's spec,
    # and the real Job controller delays replacements by its pod-failure backoff, ignored
    # disruptions included (10 minutes for a gang counted together: the tidal day's afternoon
    # training stayed near zero until the demo's Jobs counted per index).
    readmitted = workloads[victim]["admitted_at"][1]
    usage = report["usage"]
    training_after = [
        gpus
        for at, gpus in zip(usage["at"], usage["running"]["training"], strict=True)
        if at > readmitted
    ]
    assert max(training_after, default=0) >= 64, (readmitted, training_after)
    assert workloads[victim]["finished_at"] is not None, workloads[victim]
    broken = workloads[f"{namespace}/broken"]
    assert broken["pending_reasons"][-1] == "Invalid"
    assert not broken["admitted_at"]
    # The demo removed its namespace before its fake nodes (a Job counted per index keeps a
    # failed pod's finalizer in a terminating namespace unless the Job is deleted first).
    assert not asyncio.run(namespace_exists(real_cluster.kubeconfig, namespace))


@pytest.mark.slow(18)
@pytest.mark.timeout(300)
def test_benchmark_smoke_run_on_the_real_control_plane(real_cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "realk8s.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "realk8s.py"),
            "--nodes",
            "16",
            "--kubeconfig",
            str(real_cluster.kubeconfig),
            "--json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    figures = json.loads(out.read_text())
    assert figures["big_job_pods"] == 15
    assert figures["small_jobs"] == 2
    for mode in ("bare", "tidegate"):
        assert figures[mode]["big_job_s"] > 0
        assert figures[mode]["small_jobs_p99_s"] >= figures[mode]["small_jobs_p50_s"] > 0
    assert figures["ratio"]["big_job"] == pytest.approx(
        figures["tidegate"]["big_job_s"] / figures["bare"]["big_job_s"], rel=0.01
    )
