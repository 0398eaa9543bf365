"""The demo's report is computed from what it saw: decisions, samples, completions."""

from tidegate.cli.demo_report import (
    DemoRecord,
    Reclaim,
    TeamShare,
    UsageSample,
    WorkloadRecord,
    domains_per_level,
    gang_locality,
    gpu_hours_lost,
    permanent,
    placement_summary,
    preemption_losses,
    render_markdown,
    render_text,
    reservation_figures,
    schedule_timeline,
    team_sample,
    team_summaries,
    to_json,
    usage_by_period,
    usage_series,
    waits_per_queue,
)
from tidegate.model import (
    Admitted,
    Pending,
    Preempted,
    Released,
    ReservationDropped,
    Reserved,
)
from tidegate.testing.messages import Messages

msg = Messages(levels=["block", "rack", "host"])


def record_with(*keys: str) -> DemoRecord:
    record = DemoRecord(total_gpus=64)
    for at, key in enumerate(keys):
        record.workloads[key] = WorkloadRecord(
            key=key, kind="Job", queue="q", pods=2, gpus_per_pod=8, submitted_at=float(at)
        )
    return record


def test_placement_summary_counts_pods_per_domain_above_the_host() -> None:
    summary = placement_summary(
        {
            "main": msg.assignment(
                {("b1", "r1", "h1"): 2, ("b1", "r1", "h2"): 2, ("b1", "r2", "h3"): 1}
            )
        }
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
        assignments={"main": msg.assignment({("b", "r", "h"): 2})},
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


def test_gpu_use_by_service_type_per_period_from_samples() -> None:
    record = DemoRecord(total_gpus=64, day_length=400)
    samples = [
        (0.0, {"training": 48, "inference": 8}, {}),
        (50.0, {"training": 56, "inference": 8}, {}),
        (150.0, {"training": 16, "inference": 32}, {"inference": 16}),
        (250.0, {"inference": 40}, {"inference": 8}),
        (350.0, {"training": 60}, {}),
    ]
    for at, running, gated in samples:
        record.sample_usage(UsageSample(at=at, running=running, gated=gated))
    periods = usage_by_period(record)
    assert [(p.start, p.end, p.samples) for p in periods] == [
        (0, 100, 2),
        (100, 200, 1),
        (200, 300, 1),
        (300, 400, 1),
    ]
    assert [p.running["inference"] for p in periods] == [8, 32, 40, 0]
    assert [p.running["training"] for p in periods] == [52, 16, 0, 60]
    assert [p.gated["inference"] for p in periods] == [0, 16, 8, 0]
    series = usage_series(record)
    assert series["hour"] == [0, 3, 9, 15, 21]
    assert series["running"] == {
        "inference": [8, 8, 32, 40, 0],
        "training": [48, 56, 16, 0, 60],
    }
    # The utilization line counts every running GPU, whatever its type.
    assert record.samples == [(0.0, 56), (50.0, 64), (150.0, 48), (250.0, 40), (350.0, 60)]
    text = render_text(record)
    assert "06-12h  inference   32 (+16 gated), training   16" in text


def test_gang_locality_counts_gangs_inside_one_rack_and_one_block() -> None:
    record = record_with("ns/a", "ns/b", "ns/c")
    in_one_rack = {"main": msg.assignment({("b1", "r1", "h1"): 2, ("b1", "r1", "h2"): 2})}
    two_racks = {"main": msg.assignment({("b1", "r1", "h1"): 2, ("b1", "r2", "h3"): 2})}
    single_pod = {"main": msg.assignment({("b2", "r9", "h9"): 1})}
    for key, placed in (("ns/a", in_one_rack), ("ns/b", two_racks), ("ns/c", single_pod)):
        record.decision(
            1.0,
            Admitted(workload=key, uid="u", queue="q", sequence=1, epoch=1, assignments=placed),
        )
    locality = gang_locality(record)
    # The single pod is no gang; of the two gangs, one stayed in a rack, both in a block.
    assert (locality["rack"].gangs, locality["rack"].inside_one) == (2, 1)
    assert locality["block"].share == 1.0
    assert locality["host"].inside_one == 0


def test_domains_are_full_paths() -> None:
    # Two racks named alike in two blocks are two racks.
    placed = {"main": msg.assignment({("b1", "r1", "h1"): 1, ("b2", "r1", "h2"): 1})}
    assert domains_per_level(placed) == {"block": 2, "rack": 2, "host": 2}


def test_waits_per_queue() -> None:
    record = DemoRecord()
    for key, queue, submitted in (("ns/a", "q1", 0.0), ("ns/b", "q1", 10.0), ("ns/c", "q2", 0.0)):
        record.workloads[key] = WorkloadRecord(
            key=key, kind="Job", queue=queue, pods=1, gpus_per_pod=1, submitted_at=submitted
        )
    record.workloads["ns/a"].admitted_at.append(4.0)
    record.workloads["ns/b"].admitted_at.append(30.0)
    record.decision(
        1.0, Pending(workload="ns/c", uid="u", queue="q2", reason="QueueNotFound", message="m")
    )
    waits = waits_per_queue(record)
    assert waits["q1"].waits == [4.0, 20.0]
    assert (waits["q1"].mean, waits["q1"].max, waits["q1"].admitted) == (12.0, 20.0, 2)
    assert (waits["q2"].admitted, waits["q2"].refused, waits["q2"].mean) == (0, 1, None)


def test_gpu_hours_lost_to_preemption() -> None:
    record = record_with("ns/train", "ns/serve")
    record.day_length = 2400  # 36 day-clock seconds per simulated second
    record.decision(
        5.0,
        Admitted(
            workload="ns/train",
            uid="u",
            queue="q",
            sequence=1,
            epoch=1,
            assignments={"main": msg.assignment({("b", "r", "h"): 2})},
        ),
    )
    record.decision(
        105.0,
        Preempted(preemptor="ns/serve", preemptor_uid="s", victims=["ns/train"], mode={}),
    )
    (loss,) = preemption_losses(record)
    assert (loss.victim, loss.gpus, loss.ran_seconds, loss.gpu_seconds) == (
        "ns/train",
        16,
        100.0,
        1600.0,
    )
    assert gpu_hours_lost(record) == 1600 * 36 / 3600
    report = to_json(record)
    assert report["preemption_losses"]["gpu_hours"] == 16.0  # type: ignore[index]
    markdown = render_markdown(record, {"GPU use": "gpu-use.png"})
    assert "![GPU use](gpu-use.png)" in markdown
    assert "| 105 | ns/serve | ns/train | 16 | 100 |" in markdown
    assert "work lost 16.0 day-clock GPU-hours" in markdown


def test_a_quota_reason_is_permanent_only_when_the_request_alone_is_over() -> None:
    alone = "queue scratch: NVIDIA-H200 cards 0 in use + 32 requested > card quota 16"
    behind = "queue pretrain: nvidia.com/gpu 448 in use + 128 requested > quota 512"
    assert permanent("CardQuotaExceeded", alone)
    assert not permanent("ExceedsQuota", behind)
    assert permanent("Invalid", "bad annotation")
    assert not permanent("WaitingForCapacity", "the cluster fits 10")


def test_a_re_placement_is_no_new_admission_nor_gang() -> None:
    record = record_with("ns/serve")
    first = Admitted(
        workload="ns/serve",
        uid="u",
        queue="q",
        sequence=1,
        epoch=1,
        assignments={"main": msg.assignment({("b", "r1", "h"): 2})},
    )
    grown = Admitted(
        workload="ns/serve",
        uid="u",
        queue="q",
        sequence=2,
        epoch=1,
        replaces=1,
        assignments={"main": msg.assignment({("b", "r1", "h"): 2, ("b", "r2", "h2"): 2})},
    )
    record.decision(2.0, first)
    line = record.decision(50.0, grown)
    assert line is not None
    assert "re-placed, replaces #1" in line
    serve = record.workloads["ns/serve"]
    assert serve.admitted_at == [2.0]
    assert [g.at for g in record.gangs] == [2.0]
    assert gang_locality(record)["rack"].inside_one == 1


def test_teams_sharing_a_cohort_show_use_borrowed_lent_and_reclaims() -> None:
    """Two teams of one cohort: the queue tree's report sampled twice (team-b borrowing 8 of
    team-a's idle GPUs, then team-a back within its nominal after a reclaim) gives per team
    its GPUs used, borrowed and lent per period, the GPU-hours, and the reclaims."""
    from tidegate.model import CohortConfig, QueueConfig
    from tidegate.policy.queuetree import NodeReport, QueueTree, report
    from tidegate.policy.quota import QueueUsage

    gpu = "nvidia.com/gpu"
    tree = QueueTree.build(
        [
            QueueConfig(name="team-a", parent="research", nominal={gpu: 16}),
            QueueConfig(name="team-b", parent="research", nominal={gpu: 16}),
            QueueConfig(name="alone"),
        ],
        [CohortConfig(name="research")],
    )

    def at(usage_a: int, usage_b: int) -> list[NodeReport]:
        usage = {
            "team-a": QueueUsage(resources={gpu: usage_a}),
            "team-b": QueueUsage(resources={gpu: usage_b}),
        }
        return list(report(tree, usage))

    record = DemoRecord(total_gpus=64, day_length=100.0)
    record.workloads["ns/a"] = WorkloadRecord(
        key="ns/a", kind="Job", queue="team-a", pods=1, gpus_per_pod=8, submitted_at=0
    )
    record.workloads["ns/b"] = WorkloadRecord(
        key="ns/b", kind="Job", queue="team-b", pods=3, gpus_per_pod=8, submitted_at=0
    )
    record.teams.append(team_sample(0.0, at(0, 24)))
    record.teams.append(team_sample(50.0, at(8, 0)))
    record.teams.append(team_sample(100.0, at(8, 0)))
    assert record.teams[0].queues == {
        "team-a": TeamShare(cohort="research", nominal=16, usage=0, borrowed=0, lent=8),
        "team-b": TeamShare(cohort="research", nominal=16, usage=24, borrowed=8, lent=0),
    }
    assert record.decision(
        50.0,
        Preempted(
            preemptor="ns/a",
            preemptor_uid="u",
            victims=["ns/b"],
            reclaimed={"ns/b": "InCohortReclamation"},
            cohort="research",
        ),
    )
    assert record.reclaims == [
        Reclaim(
            at=50.0, preemptor="ns/a", cohort="research", victims={"ns/b": "InCohortReclamation"}
        )
    ]

    teams = team_summaries(record, periods=2)
    a, b = teams["team-a"], teams["team-b"]
    assert (a.nominal, a.cohort, b.nominal) == (16, "research", 16)
    assert [(p.usage, p.borrowed, p.lent) for p in a.periods] == [(0, 0, 8), (8, 0, 0)]
    assert [(p.usage, p.borrowed, p.lent) for p in b.periods] == [(24, 8, 0), (0, 0, 0)]
    # 8 GPUs for 50 simulated seconds, a day of 100: 8 x 12 day-clock hours.
    assert b.borrowed_gpu_hours == a.lent_gpu_hours == 8 * 12
    assert (a.peak_lent, b.peak_borrowed) == (8, 8)
    assert (a.took_back, a.gave_back, b.took_back, b.gave_back) == (1, 0, 0, 1)

    text = render_text(record)
    assert "teams sharing a cohort (mean GPUs used / borrowed / lent):" in text
    assert (
        "team-b     cohort research, nominal 16: 00-06h 24/8/0, 06-12h 0/0/0, 12-18h 0/0/0" in text
    )
    assert "reclaim at 50s in cohort research: ns/a took back ns/b (InCohortReclamation)" in text
    assert "## Teams sharing a cohort" in render_markdown(record)
    data = to_json(record)
    assert data["teams"]["team-a"]["lent_gpu_hours"] == 96  # type: ignore[index]
    assert data["team_usage"]["queues"]["team-b"]["borrowed"] == [8, 0, 0]  # type: ignore[index]
    assert data["reclaims"] == [
        {
            "at": 50.0,
            "preemptor": "ns/a",
            "cohort": "research",
            "victims": {"ns/b": "InCohortReclamation"},
        }
    ]


def test_a_record_without_cohorts_shows_no_teams() -> None:
    record = record_with("ns/a")
    assert team_summaries(record) == {}
    assert "teams sharing a cohort" not in render_text(record)
    assert to_json(record)["teams"] == {}


def test_reservation_figures_from_free_gpus_per_node_and_waits_after_evictions() -> None:
    record = record_with("ns/big", "ns/small")
    record.reservations = True
    record.levels = ["rack", "host"]
    record.node_gpus = {"n1": 8, "n2": 8, "n3": 8, "n4": 8}
    record.node_paths = {
        n: {"rack": "r1" if n in ("n1", "n2") else "r2", "host": n} for n in record.node_gpus
    }
    big = record.workloads["ns/big"]  # 2 pods of 8 GPUs, submitted at 0
    big.required_level = "rack"
    small = record.workloads["ns/small"]  # submitted at 1
    small.pods, small.gpus_per_pod = 1, 8
    # At 0 both wait; the free GPUs are one node in each rack: the small one fits, the big not.
    record.sample_free(0.0, {"n2": 8, "n4": 8})
    assert record.free[-1].waiting == ("ns/big", "ns/small")
    assert record.free[-1].free == {"n1": 8, "n2": 0, "n3": 8, "n4": 0}
    admitted = Admitted(
        workload="ns/small",
        uid="s",
        queue="q",
        sequence=1,
        epoch=1,
        assignments={"main": msg.assignment({("b", "r1", "n1"): 1})},
    )
    record.decision(2.0, admitted)
    record.sample_free(2.0, {"n1": 8, "n2": 8, "n4": 8})
    assert record.free[-1].waiting == ("ns/big",)  # 8 free on n3 alone: fragmented
    reserved = Reserved(
        workload="ns/big",
        uid="b",
        queue="q",
        sequence=2,
        topology="default",
        level="rack",
        domain=["r1"],
        nodes=["n1", "n2"],
        expected_start=0.0,
        message="rack r1 reserved",
    )
    assert record.decision(2.5, reserved) == f"reserved  {'ns/big':<28} rack r1 reserved"
    dropped = ReservationDropped(workload="ns/big", uid="b", queue="q", reason="Started")
    record.decision(4.0, dropped)
    record.decision(4.0, msg.admitted("ns/big", sequence=3, uid="b"))
    record.sample_free(4.0, dict.fromkeys(record.node_gpus, 8))
    record.decision(
        6.0, Preempted(preemptor="ns/serve", preemptor_uid="x", victims=["ns/big"], mode={})
    )
    record.sample_free(6.0, {})  # evicted: waits again with everything free
    record.decision(9.0, msg.admitted("ns/big", sequence=4, uid="b"))
    record.sample_free(9.0, dict.fromkeys(record.node_gpus, 8))
    record.sample_free(10.0, dict.fromkeys(record.node_gpus, 8))
    assert record.decisions["reserved"] == 1
    assert record.decisions["reservation-dropped"] == 1
    timeline = schedule_timeline(record)
    assert [(g.key, g.submitted_at, g.started_at) for g in timeline.gangs] == [
        ("ns/big", 0.0, 4.0),
        ("ns/big (evicted at 6s)", 6.0, 9.0),
        ("ns/small", 1.0, 2.0),
    ]
    figures = reservation_figures(record)
    assert figures["reservations"] is True
    # Allocated: 16 of 32 for 0..2 s, 24 for 2..4, 32 for 4..6, 0 for 6..9, 32 for 9..10.
    assert figures["utilization"] == (16 * 2 + 24 * 2 + 32 * 2 + 0 * 3 + 32 * 1) / 10 / 32
    # Fragmented: 0 at 0 s (the small one fits), 8 for 2..4 s, 0 after (the big one fits).
    assert figures["fragmented_gpus"] == 8 * 2 / 10
    assert figures["small"] == {"count": 3, "never_started": 0, "p50": 3.0, "p99": 4.0, "max": 4.0}
    text = render_text(record)
    assert "reservations on: big gangs (>= 128 GPUs) and small Jobs" in text
    assert to_json(record)["reservation_figures"] == figures
