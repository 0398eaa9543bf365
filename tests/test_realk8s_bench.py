"""bench/realk8s.py on the simulated cluster (``--simulator``), run as a user runs it at a tiny
size, and what it says where there is no cluster to run on. The benchmark at its full size is
never run in the test command; tests/nodes/ runs it on the real control plane."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidegate.cli.stack import SERVICES
from tidegate.testing.bench import BENCH, load_script

rk = load_script("realk8s.py", "realk8s_bench")


@pytest.mark.slow(12)
@pytest.mark.timeout(180)
def test_the_benchmark_runs_bare_and_with_tidegate_on_the_simulated_cluster(
    tmp_path: Path,
) -> None:
    out = tmp_path / "realk8s.json"
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH / "realk8s.py"),
            "--simulator",
            "--nodes",
            "32",
            "--pods",
            "16",
            "--jobs",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
        cwd=BENCH.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    # The printed output says what the bare run is on the simulator.
    assert "bare is not kube-scheduler" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["cluster"] == "simulator"
    assert "stands in for kube-scheduler" in figures["bare_means"]
    assert (figures["big_job_pods"], figures["small_jobs"]) == (16, 4)
    for mode in ("bare", "tidegate"):
        assert figures[mode]["big_job_s"] > 0
        assert figures[mode]["small_jobs_p99_s"] >= figures[mode]["small_jobs_p50_s"] > 0
    assert figures["ratio"]["big_job"] == pytest.approx(
        figures["tidegate"]["big_job_s"] / figures["bare"]["big_job_s"], rel=0.01
    )
    # CPU seconds of every process of the tidegate run; the bare run had no services.
    cpu = figures["tidegate"]["cpu_s"]
    assert set(SERVICES) | {"nats-server", "harness+simulator"} <= set(cpu)
    assert all(seconds >= 0 for seconds in cpu.values())
    assert not set(SERVICES) & set(figures["bare"]["cpu_s"])


def test_without_binaries_or_a_kubeconfig_the_error_points_to_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    with pytest.raises(SystemExit, match="--simulator"):
        asyncio.run(rk.main(rk.parse_args(["--nodes", "32", "--json"])))
