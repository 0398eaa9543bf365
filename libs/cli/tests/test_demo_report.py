"""The demo's report is computed from what it saw: decisions, samples, completions."""

from tidegate.cli.demo_report import (
    DemoRecord,
    WorkloadRecord,
    placement_summary,
    render_text,
    to_json,
)
from tidegate.model import (
    Admitted,
    DomainCount,
    Pending,
    Preempted,
    Released,
    TopologyAssignment,
)

LEVELS = ["block", "rack", "host"]


def assignment(*hosts: tuple[str, str, str, int]) -> dict[str, TopologyAssignment]:
    return {
        "main": TopologyAssignment(
            levels=LEVELS,
            domains=[DomainCount(values=[b, r, h], count=n) for b, r, h, n in hosts],
        )
    }


def record_with(*keys: str) -> DemoRecord:
    record = DemoRecord(total_gpus=64)
    for at, key in enumerate(keys):
        record.workloads[key] = WorkloadRecord(
            key=key, kind="Job", queue="q", pods=2, gpus_per_pod=8, submitted_at=float(at)
        )
    return record


def test_placement_summary_counts_pods_per_domain_above_the_host() -> None:
    summary = placement_summary(
        assignment(("b1", "r1", "h1", 2), ("b1", "r1", "h2", 2), ("b1", "r2", "h3", 1))
    )
    assert summary == "5 pods in 2 rack [b1/r1 x4, b1/r2 x1]"


def test_a_workload_s_life_is_recorded_from_decisions() -> None:
    record = record_with("ns/train", "ns/serve")
    admitted = Admitted(
        workload="ns/train",
        uid="u",
        queue="q",
        sequence=1,
        epoch=1,
        assignments=assignment(("b", "r", "h", 2)),
    )
    assert record.decision(5.0, admitted) is not None
    record.decision(
        9.0,
        Preempted(
            preemptor="ns/serve",
            preemptor_uid="s",
            victims=["ns/train"],
            mode={"ns/train": "restart"},
        ),
    )
    record.decision(9.5, Released(workload="ns/train", uid="u", queue="q", reason="Evicted"))
    train = record.workloads["ns/train"]
    assert train.first_wait == 5.0
    assert train.state == "Preempted"
    record.decision(12.0, admitted)
    assert train.state == "Admitted"
    assert record.preemptions == [(9.0, "ns/serve", ["ns/train"])]
    assert dict(record.decisions) == {"admitted": 2, "preempted": 1, "released": 1}


def test_done_waits_for_jobs_that_can_still_run() -> None:
    record = record_with("ns/a", "ns/b")
    assert not record.done()
    record.workloads["ns/a"].finished_at = 10.0
    record.decision(
        3.0, Pending(workload="ns/b", uid="u", queue="q", reason="WaitingForCapacity", message="m")
    )
    assert not record.done()
    record.decision(
        4.0, Pending(workload="ns/b", uid="u", queue="q", reason="QueueNotFound", message="m")
    )
    assert record.done()


def test_utilization_and_report() -> None:
    record = record_with("ns/a")
    for at, used in [(0.0, 0), (1.0, 32), (2.0, 64)]:
        record.sample(at, used)
    assert record.utilization() == (0.5, 1.0)
    text = render_text(record)
    assert "GPU utilization (64 GPUs): mean 50%, peak 100%" in text
    assert "ns/a" in text
    report = to_json(record)
    assert report["utilization"] == {"mean": 0.5, "peak": 1.0}
    assert report["workloads"]["ns/a"]["state"] == "Submitted"  # type: ignore[index]
