"""End to end: every service as a real process on the simulated cluster, driven by a trace.

Runs `tidegate demo` exactly as a user would (a subprocess) on a small tidal scenario: two
training gangs each required in one rack fill the cluster; an inference Deployment arrives and
reclaims a whole training gang; the victim goes back to its queue and is admitted again once
the other finishes; a malformed workload is marked Invalid and nothing else is disturbed.
Then the traces the services wrote have the shape docs/operations.md promises (one admission
trace per workload, no missing parent, victims linked, a span of each of the five services,
the topology-cache's included, in every admitted workload's trace), and ``tidegate explain`` /
``tidegate queues`` answer for every workload from the bus the demo left behind. The built-in
day (``tidegate demo`` as shipped) is held to the same trace shape, and ``tidegate explain``
answers for each of its workloads.
"""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tidegate.bus.server import NatsServerProcess
from tidegate.cli.main import main as tidegate_main
from tidegate.cli.stack import SERVICES as STACK_SERVICES
from tidegate.testing.traces import SpanRecord, admission_trace_problems, spans_from_json_lines

TRACE = Path(__file__).with_name("tidal-trace.yaml")


@pytest.mark.slow(40)
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
    # missing parent anywhere, decisions naming queue, reason and placement, victims linked,
    # and a span of every service (the topology-cache's included) in each admitted one.
    assert trace_problems(spans, report) == []
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


SERVICES = [f"tidegate-{name}" for name in STACK_SERVICES]
"""Each service's ``service.name`` in the demo's spans."""


def trace_problems(spans: list[SpanRecord], report: dict[str, Any]) -> list[str]:
    """:func:`admission_trace_problems` for every workload the demo report says was admitted,
    and for each of its preemptions (one call each: a preemptor may preempt more than once)."""
    admitted = [name for name, w in report["workloads"].items() if w["admitted_at"]]
    problems = admission_trace_problems(spans, admitted=admitted, services=SERVICES)
    for p in report["preemptions"]:
        problems += admission_trace_problems(
            spans, admitted=(), preemptions={p["preemptor"]: p["victims"]}
        )
    return list(dict.fromkeys(problems))


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


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow(145)
@pytest.mark.timeout(480)
def test_the_built_in_tidal_day(tmp_path: Path) -> None:
    """`tidegate demo` as shipped: a compressed day on 512 GPUs. The report, computed from the
    pods the API server listed and the decisions on the bus, shows the HPA-like driver scaling
    inference up by day and down at night, inference running more by day, training filling
    the night, two training teams of one cohort borrowing and giving back by reclaim, and
    charts beside report.md; the traces it wrote have the admission shape, and
    `tidegate explain` answers for every workload it ran."""
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "tidegate.cli", "demo", "--workdir", str(workdir), "--json"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["total_gpus"] >= 512
    day = report["day_length"]
    hour = day / 24

    # The driver changed replicas through the API: up in the morning, down in the evening.
    scalings = report["scalings"]
    for name in ("research/chat", "research/code-assist", "research/embed"):
        ups = [s for s in scalings if s["workload"] == name and s["to"] > s["from"]]
        downs = [s for s in scalings if s["workload"] == name and s["to"] < s["from"]]
        assert ups, name
        assert downs, name
        assert min(s["at"] for s in ups) < 12 * hour < max(s["at"] for s in downs), name

    # GPU use by service type, per 6 hours, from the sampled pods.
    night, morning, afternoon, evening = report["usage_by_period"]

    def wanted(period: dict[str, Any]) -> float:
        return float(period["running"]["inference"] + period["gated"]["inference"])

    assert wanted(morning) > wanted(night)
    assert wanted(afternoon) > wanted(night)
    assert wanted(evening) < wanted(afternoon)
    # Inference runs more by day than at night (the ranking service starts in the morning;
    # replicas added to a running Deployment run only once elastic growth is admitted).
    assert afternoon["running"]["inference"] > night["running"]["inference"]
    # Training fills what inference leaves: at some moment of each night, most GPUs are busy.
    usage = report["usage"]
    total = report["total_gpus"]
    for start, end in ((0, 6 * hour), (18 * hour, day)):
        busiest = max(
            inference + training
            for at, inference, training in zip(
                usage["at"],
                usage["running"]["inference"],
                usage["running"]["training"],
                strict=True,
            )
            if start <= at < end
        )
        assert busiest >= 0.8 * total, (start, busiest)
    assert night["running"]["training"] > night["running"]["inference"]
    # As the tide goes out in the evening, training takes the room back.
    assert evening["running"]["training"] > afternoon["running"]["training"]

    # Waits per queue; preemptions only of training: by inference (the tidal rules), or by
    # training of the other team of its cohort getting its lent GPUs back (a reclaim).
    queues = report["waits_per_queue"]
    for queue in ("pretrain", "team-a", "team-b"):
        assert queues[queue]["admitted"] > 0, queue
    workloads = report["workloads"]
    reclaimed = {(r["at"], r["preemptor"]) for r in report["reclaims"]}
    for preemption in report["preemptions"]:
        preemptor = workloads[preemption["preemptor"]]
        for victim in preemption["victims"]:
            assert workloads[victim]["service_type"] == "training"
        if preemptor["service_type"] == "training":
            assert (preemption["at"], preemption["preemptor"]) in reclaimed
            assert {workloads[v]["queue"] for v in preemption["victims"]} == (
                {"team-a", "team-b"} - {preemptor["queue"]}
            )
        else:
            assert preemptor["service_type"] == "inference"

    # Two teams share the cohort research: each borrowed the other's idle GPUs at some
    # moment, and team-a got what it lent back from team-b's sweep by reclaim, whole.
    teams = report["teams"]
    assert {teams[t]["cohort"] for t in ("team-a", "team-b")} == {"research"}
    assert teams["team-b"]["peak_borrowed"] > 0
    assert teams["team-a"]["peak_lent"] > 0
    assert teams["team-b"]["borrowed_gpu_hours"] > 0
    # team-a (team-a-finetune, or an sft-* Job that asks first) takes the sweep back whole.
    assert any(
        (r["preemptor"] == "research/team-a-finetune" or r["preemptor"].startswith("research/sft-"))
        and r["victims"] == {"research/team-b-sweep": "InCohortReclamation"}
        for r in report["reclaims"]
    ), report["reclaims"]
    assert teams["team-a"]["took_back"] >= 1
    assert teams["team-b"]["gave_back"] >= 1
    series = report["team_usage"]
    assert len(series["at"]) == len(series["queues"]["team-a"]["usage"]) > 0
    losses = report["preemption_losses"]
    assert len(losses["victims"]) == sum(len(p["victims"]) for p in report["preemptions"])
    assert losses["gpu_hours"] == pytest.approx(
        sum(v["gpu_seconds"] for v in losses["victims"]) * (86400 / day) / 3600
    )
    locality = report["gang_locality"]
    assert {"tidegate.io/rack", "tidegate.io/block"} <= set(locality)
    assert locality["tidegate.io/block"]["share"] >= locality["tidegate.io/rack"]["share"] > 0

    # report.md with its charts beside report.json.
    markdown = (workdir / "report.md").read_text()
    for chart in ("gpu-use.png", "waits.png", "placement.png"):
        assert f"]({chart})" in markdown
        data = (workdir / chart).read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 10_000, chart
    assert json.loads((workdir / "report.json").read_text()) == report

    # The traces the demo wrote: one admission trace per admitted or preempted workload, as in
    # the small scenario above.
    spans = spans_from_json_lines(workdir / "traces.jsonl")
    assert trace_problems(spans, report) == []
    traces = {span.trace_id for span in spans}

    # `tidegate explain --json` (in this process) answers for every workload the demo ran. The
    # services run on after the report is taken: a running workload may complete, a pending one
    # may wait for another reason (a Job's end freed its quota) or be admitted.
    answers = explained(workdir / "jetstream", list(workloads))
    for name, entry in workloads.items():
        reported = as_reported(answers[name])
        if entry["state"].startswith("Pending(") and reported.startswith("Pending("):
            continue
        later = {
            "Admitted": {"Completed"},
            "Pending": {"Admitted", "Completed"},
        }.get(entry["state"].split("(")[0], set())
        assert reported in {entry["state"], *later}, (name, answers[name])
        assert answers[name]["trace_id"] in traces, (name, answers[name])


def explained(store: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """``tidegate explain NAME --json`` run in this process for each name, from the demo bus
    kept in ``store``; fails on a non-zero exit status."""
    answers: dict[str, dict[str, Any]] = {}
    with NatsServerProcess(store_dir=store) as nats:
        for name in names:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = tidegate_main(
                    ["explain", name, "--json", "--cluster", "demo", "--nats-url", nats.url]
                )
            assert status == 0, name
            answers[name] = json.loads(out.getvalue())
    return answers
