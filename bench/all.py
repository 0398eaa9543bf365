"""Run every benchmark in turn and write their figures as one JSON object.

    python bench/all.py [--full] [--only NAME ...] [--out bench/results/all.json]

Each benchmark runs as its own process, one after another, and its JSON becomes one entry with
its wall time and the load average before and after. Quick by default (about two minutes);
``--full`` adds the simulator at 10,000 nodes / 100,000 pods and ``e2e.py`` at 1,024 nodes. At
the end each target is printed beside the figure measured. It exits 1 only when a benchmark
fails to run, never on a missed target.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
QUICK_SIM = ["--nodes", "2x10x50x8gpu", "--jobs", "10", "--pods-per-job", "1000"]


@dataclass(frozen=True)
class Run:
    """One benchmark invocation: its name in the combined JSON, script and arguments."""

    name: str
    script: str
    arguments: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """A figure an issue names, where to find it in a run's JSON, and the bound it must meet."""

    issue: int
    what: str
    run: str
    path: tuple[str, ...]
    bound: float
    at_most: bool = True

    def measured(self, figures: dict[str, Any]) -> float | None:
        """The figure in ``figures`` (one run's JSON), or None if it is missing."""
        value: Any = figures
        for key in self.path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value) if isinstance(value, int | float) else None

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the bound."""
        return value <= self.bound if self.at_most else value >= self.bound


def runs(full: bool) -> list[Run]:
    """Every benchmark, with the parameters its issue names."""
    return [
        Run("placement_16384", "placement.py", ("--nodes", "16384")),
        Run("placement_65536", "placement.py", ("--nodes", "65536")),
        Run("admission", "admission.py"),
        Run("admission_backlog", "admission_backlog.py"),
        Run("admission_cohorts", "admission_cohorts.py"),
        Run("preemption", "preemption.py"),
        Run("bus", "bus.py"),
        Run("topology_cache", "topology_cache.py"),
        Run("ungater", "ungater.py"),
        Run("explain", "explain.py"),
        Run("sim", "sim.py", () if full else tuple(QUICK_SIM)),
        *([Run("e2e_1024", "e2e.py")] if full else []),
    ]


TARGETS = [
    Target(
        3, "block gang p50 at 16,384 nodes (ms)", "placement_16384", ("block_gang", "p50_ms"), 5
    ),
    Target(3, "rack gang p50 at 16,384 nodes (ms)", "placement_16384", ("rack_gang", "p50_ms"), 5),
    Target(
        3, "block gang p50 at 65,536 nodes (ms)", "placement_65536", ("block_gang", "p50_ms"), 20
    ),
    Target(3, "rack gang p50 at 65,536 nodes (ms)", "placement_65536", ("rack_gang", "p50_ms"), 20),
    Target(
        6,
        "burst decisions per second (idle cluster, no topology-cache)",
        "admission",
        ("burst_decisions_per_s",),
        500,
        False,
    ),
    Target(
        6, "decision latency p99 at 100 workloads/s (ms)", "admission", ("latency_ms", "p99"), 50
    ),
    Target(8, "victim search p50 (ms)", "preemption", ("victim_search_ms", "p50"), 200),
    Target(
        14,
        "Job created -> last pod ungated p50 at 1,024 nodes, 20 Jobs/s (ms)",
        "e2e_1024",
        ("created_to_ungated", "p50_ms"),
        100,
    ),
    Target(
        14,
        "Job created -> last pod ungated p99 at 1,024 nodes, 20 Jobs/s (ms)",
        "e2e_1024",
        ("created_to_ungated", "p99_ms"),
        500,
    ),
    Target(14, "decisions lost at 1,024 nodes", "e2e_1024", ("decisions_lost",), 0),
    Target(14, "decisions duplicated at 1,024 nodes", "e2e_1024", ("decisions_duplicated",), 0),
]


def load_average() -> float:
    """The 1-minute load average, rounded."""
    return round(os.getloadavg()[0], 2)


def run_one(run: Run, scratch: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Run one benchmark; its figures with wall time and load, or the error it ended with."""
    out = scratch / f"{run.name}.json"
    command = [sys.executable, str(BENCH / run.script), *run.arguments, "--out", str(out)]
    log(f"== {run.name}: {' '.join(command[1:])}")
    entry: dict[str, Any] = {"command": " ".join(["python", *command[1:-2]])}
    entry["load_before_1m"] = load_average()
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    entry["wall_s"] = round(time.perf_counter() - started, 2)
    entry["load_after_1m"] = load_average()
    if finished.returncode != 0 or not out.exists():
        failure = f"exit status {finished.returncode}"
        if finished.returncode == 0:
            failure = f"it wrote no figures to --out {out}"
        entry["error"] = f"{failure}\n{finished.stderr[-2000:]}".strip()
        log(f"   failed ({failure}) after {entry['wall_s']} s")
        return entry
    entry["figures"] = json.loads(out.read_text())
    log(
        f"   done in {entry['wall_s']} s (load {entry['load_before_1m']} → {entry['load_after_1m']})"
    )
    return entry


def verdicts(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target of the runs that happened, with the figure measured and whether it is met."""
    out = []
    for target in TARGETS:
        if target.run not in results:
            continue
        value = target.measured(results[target.run].get("figures", {}))
        out.append(
            {
                "issue": target.issue,
                "what": target.what,
                "target": f"{'≤' if target.at_most else '≥'} {target.bound:g}",
                "measured": value,
                "met": None if value is None else target.met(value),
            }
        )
    return out


def git_commit() -> str | None:
    """The commit the benchmarks ran on, if this is a git checkout."""
    found = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCH, capture_output=True, text=True, check=False
    )
    return found.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print the targets, write the combined JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="simulator at 10k nodes / 100k pods")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these entries")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "all.json")
    args = parser.parse_args(argv)
    selected = [r for r in runs(args.full) if not args.only or r.name in args.only]
    unknown = set(args.only or ()) - {r.name for r in runs(args.full)}
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; known: {[r.name for r in runs(True)]}")

    def log(line: str) -> None:
        print(line, flush=True)

    results: dict[str, dict[str, Any]] = {}
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        for run in selected:
            results[run.name] = run_one(run, Path(scratch), log)
    combined = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": git_commit(),
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "full": args.full,
        "targets": verdicts(results),
        "runs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(combined, indent=2) + "\n")
    log("")
    for verdict in combined["targets"]:
        state = {True: "met", False: "MISSED", None: "no figure"}[verdict["met"]]
        log(
            f"issue {verdict['issue']}: {verdict['what']}: {verdict['measured']} "
            f"(target {verdict['target']}) {state}"
        )
    log(f"written to {args.out}")
    return 1 if any("error" in entry for entry in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
