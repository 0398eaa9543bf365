"""bench/kueue_scenario.py's reading of Kueue's generator format and its figures, on hand-made
inputs. The benchmark itself is never run in the test command (it takes minutes)."""

from types import SimpleNamespace

import pytest

from tidegate.testing.bench import load_script

kb = load_script("kueue_scenario.py", "kueue_scenario_bench")

TAS = """
topology:
  name: "default-topology"
  levels:
    - {name: block, count: 1, nodeLabel: "cloud.provider.com/topology-block"}
    - {name: rack, count: 10, nodeLabel: "cloud.provider.com/topology-rack"}
    - name: node
      count: 64
      nodeLabel: "kubernetes.io/hostname"
      capacity: {cpu: "96", memory: "256Gi"}
resourceFlavor: {name: "tas-flavor", nodeLabel: "tas-node-group", topologyName: "default-topology"}
cohorts:
  - className: cohort
    count: 2
    queuesSets:
    - className: cq
      count: 3
      nominalQuota: "20"
      borrowingLimit: "100"
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 4
        creationIntervalMs: 100
        workloads:
        - className: small-balanced-rack
          runtimeMs: 200
          priority: 50
          request: "500m"
          podCount: 2
          tasConstraint: "balanced"
          tasLevel: "cloud.provider.com/topology-rack"
          sliceSize: 1
      - count: 2
        creationIntervalMs: 1200
        workloads:
        - className: large-required-rack
          runtimeMs: 1000
          priority: 200
          request: "2500m"
          podCount: 8
          tasConstraint: "required"
          tasLevel: "cloud.provider.com/topology-rack"
"""

BASELINE = """
cohorts:
  - className: cohort
    count: 5
    queuesSets:
    - className: cq
      count: 6
      nominalQuota: 20
      borrowingLimit: 100
      workloadsSets:
      - count: 350
        creationIntervalMs: 100
        workloads: [{className: small, runtimeMs: 200, priority: 50, request: 1}]
      - count: 100
        creationIntervalMs: 500
        workloads: [{className: medium, runtimeMs: 500, priority: 100, request: 5}]
      - count: 50
        creationIntervalMs: 1200
        workloads: [{className: large, runtimeMs: 1000, priority: 200, request: 20}]
"""


def test_the_generator_format_is_read_with_quantities_in_tidegate_units() -> None:
    scenario = kb.parse_scenario(TAS)
    assert scenario.topology.nodes == 640
    assert [level.name for level in scenario.topology.levels] == ["block", "rack", "node"]
    assert scenario.topology.capacity == {"cpu": "96", "memory": "256Gi"}
    (qset,) = scenario.cohorts[0].queues_sets
    assert (qset.nominal_m, qset.borrowing_limit_m) == (20_000, 100_000)
    assert (qset.reclaim_within_cohort, qset.within_cluster_queue) == ("Any", "LowerPriority")
    small = qset.workloads_sets[0].classes[0]
    assert (small.request_m, small.pods, small.runtime_ms, small.priority) == (500, 2, 200, 50)
    assert (small.tas_constraint, small.slice_size) == ("balanced", 1)
    assert scenario.flavor_label == "tas-node-group"


def test_the_plan_follows_kueues_schedule_and_names() -> None:
    plan = kb.plan(kb.parse_scenario(TAS))
    assert len(plan.queues) == 2 * 3
    assert len(plan.jobs) == 6 * (4 + 2)
    queue = "cq-0-1-cohort-1"
    assert queue in {q.name for q in plan.queues}
    smalls = sorted(
        (j for j in plan.jobs if j.queue == queue and j.klass.name == "small-balanced-rack"),
        key=lambda j: j.at,
    )
    # Kueue waits one interval before each create.
    assert [j.at for j in smalls] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert smalls[0].name == f"{queue}-small-balanced-rack-0-0-0"
    assert smalls[0].cpu_m == 1000


def test_scale_keeps_every_class_and_the_quota_bound_is_the_work_over_the_nominal() -> None:
    scenario = kb.parse_scenario(BASELINE)
    full = kb.plan(scenario)
    assert len(full.jobs) == 30 * 500
    # 30 queues × (350 × 1 × 0.2 + 100 × 5 × 0.5 + 50 × 20 × 1) CPU-s over 30 × 20 CPUs.
    assert kb.quota_bound_s(full) == 66.0
    tiny = kb.plan(scenario, scale=0.01)
    assert sorted({j.klass.name for j in tiny.jobs}) == ["large", "medium", "small"]
    assert len(tiny.jobs) == 30 * (4 + 1 + 1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (('tasConstraint: "required"', 'tasConstraint: "sideways"'), "tasConstraint"),
        (
            (
                'tasLevel: "cloud.provider.com/topology-rack"\n          sliceSize',
                'tasLevel: "zone"\n          sliceSize',
            ),
            "tasLevel",
        ),
        (('nominalQuota: "20"', 'nominalQuota: "lots"'), "nominalQuota"),
        (("podCount: 8", "podCount: 0"), "podCount"),
    ],
)
def test_a_bad_field_is_named(change: tuple[str, str], field: str) -> None:
    text = TAS.replace(*change)
    assert text != TAS
    with pytest.raises(kb.ScenarioError, match=field):
        kb.parse_scenario(text, origin="gen.yaml")


def test_a_file_without_cohorts_is_refused() -> None:
    with pytest.raises(kb.ScenarioError, match="cohorts"):
        kb.parse_scenario("resourceFlavor: {name: rf}\n")


def test_topology_requests_map_to_kueues_annotations() -> None:
    classes = {
        c.name: c
        for wset in kb.parse_scenario(TAS).cohorts[0].queues_sets[0].workloads_sets
        for c in wset.classes
    }
    rack = "cloud.provider.com/topology-rack"
    assert kb.tas_annotations(classes["large-required-rack"]) == {kb.REQUIRED: rack}
    assert kb.tas_annotations(classes["small-balanced-rack"]) == {
        kb.SLICE_REQUIRED: rack,
        kb.SLICE_SIZE: "1",
    }
    baseline = kb.parse_scenario(BASELINE).cohorts[0].queues_sets[0].workloads_sets[0].classes[0]
    assert kb.tas_annotations(baseline) == {}


def test_a_queue_carries_its_cohort_quota_limits_and_a_ceiling_of_both() -> None:
    queue = kb.plan(kb.parse_scenario(TAS)).queues[0]
    spec = queue.spec("default-topology")
    assert spec["cohort"] == "cohort-0"
    assert spec["nominalQuota"] == {"cpu": "20"}
    assert spec["borrowingLimit"] == {"cpu": "100"}
    assert spec["capability"] == {"cpu": "120"}
    assert spec["topology"] == "default-topology"
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
    }


def test_the_nodes_carry_one_domain_per_level() -> None:
    document, topology = kb.nodes_document(kb.parse_scenario(TAS), baseline_nodes=4)
    assert topology == "default-topology"
    nodes = document["nodes"]
    assert len(nodes) == 640
    assert len({n["name"] for n in nodes}) == 640
    racks = {n["labels"]["cloud.provider.com/topology-rack"] for n in nodes}
    assert len(racks) == 10
    assert document["levels"][-1] == "kubernetes.io/hostname"
    assert document["defaults"]["allocatable"]["cpu"] == "96"
    flat, none = kb.nodes_document(kb.parse_scenario(BASELINE), baseline_nodes=4)
    assert none is None
    assert len(flat["nodes"]) == 4


def outcome(
    klass: str,
    queue: str,
    admitted: float | None,
    held: tuple[float, float] | None,
    *,
    cpu: int = 10_000,
    cohort: str = "c",
) -> object:
    return kb.Outcome(
        name=f"{klass}-{admitted}",
        klass=klass,
        queue=queue,
        cohort=cohort,
        cpu_m=cpu,
        to_admitted_s=admitted,
        to_running_s=None if admitted is None else admitted + 1,
        held=held,
    )


def test_class_figures_count_mean_and_percentiles() -> None:
    rows = [outcome("small", "q", float(s), None) for s in range(1, 101)]
    rows.append(outcome("small", "q", None, None))
    figures = kb.class_figures(rows)["small"]
    assert (figures["jobs"], figures["admitted"], figures["running"]) == (101, 100, 100)
    assert figures["to_admission"] == {"count": 100, "mean_s": 50.5, "p50_s": 50.0, "p99_s": 99.0}
    assert figures["to_running"]["mean_s"] == 51.5


def test_usage_is_held_cpu_over_time_as_a_share_of_nominal() -> None:
    rows = [
        outcome("a", "q1", 0.0, (100.0, 105.0)),  # 10 CPUs for half the window
        outcome("a", "q1", 0.0, (95.0, 100.0)),  # before the window: not counted
        outcome("a", "q2", 0.0, (100.0, 110.0), cpu=40_000),  # 40 CPUs all the time
    ]
    usage = kb.queue_usage(rows, {"q1": 20_000, "q2": 20_000, "q3": 20_000}, start=100.0, end=110.0)
    assert usage == {"q1": 25.0, "q2": 200.0, "q3": 0.0}


def test_the_quota_hold_is_split_where_jobs_went_through_every_stage() -> None:
    whole = [
        kb.Outcome("a", "small", "q", "c", 1000, 1.0, 2.0, (0.0, 3.0), stages=(0.5, 2.0, 0.5)),
        kb.Outcome("b", "small", "q", "c", 1000, 1.0, 2.0, (0.0, 5.0), stages=(1.5, 2.0, 1.5)),
    ]
    unreleased = kb.Outcome("c", "small", "q", "c", 1000, 1.0, 2.0, None, stages=(9.0, 9.0, None))
    hold = kb.hold_figures([*whole, unreleased])
    assert hold["to_running"]["count"] == 2
    assert hold["to_running"]["mean_s"] == 1.0
    assert hold["running"]["mean_s"] == 2.0
    assert hold["to_release"]["mean_s"] == 1.0


def test_a_cohort_holding_more_than_its_pool_shows_above_100() -> None:
    handover = [
        outcome("a", "q1", 0.0, (0.0, 5.0), cpu=20_000),
        outcome("a", "q2", 0.0, (5.0, 9.0), cpu=20_000),  # starts as the first ends
    ]
    overlap = [
        outcome("a", "q1", 0.0, (0.0, 5.0), cpu=20_000, cohort="d"),
        outcome("a", "q2", 0.0, (4.0, 9.0), cpu=20_000, cohort="d"),
    ]
    peaks = kb.peak_share(handover + overlap, {"c": 20_000, "d": 20_000})
    assert peaks == {"c": 100.0, "d": 200.0}


def test_beside_kueue_judges_the_target_only_at_full_scale() -> None:
    figures = {
        "wall_s": 200.0,
        "classes": {
            "large-required-rack": {"to_admission": {"mean_s": 70.0}},
            "small-required-rack": {"to_admission": {"mean_s": 100.0}},
        },
        "usage_pct_of_nominal": {"mean": 80.0},
    }
    thresholds = {
        "max_wall_ms": 482_000,
        "max_mean_to_admission_ms": {"large-required-rack": 48_000},
    }
    rows = kb.beside_kueue(figures, "tas", thresholds)
    assert rows["wall_s"]["met"] is True  # half of 565 s
    assert rows["wall_s"]["kueue_ci_threshold"] == 482.0
    assert rows["large-required-rack.mean_to_admission_s"]["met"] is False  # half of 118 s
    assert rows["large-required-rack.mean_to_admission_s"]["kueue_ci_threshold"] == 48.0
    assert rows["small-required-rack.mean_to_admission_s"]["met"] is True
    tiny = kb.beside_kueue(figures, "tas", thresholds, comparable=False)
    assert all(row.get("met") is None for row in tiny.values())


def test_a_job_is_done_once_every_pod_finished() -> None:
    observer = kb.Following()
    job = kb.plan(kb.parse_scenario(TAS)).jobs[0]
    observer.jobs[job.name] = kb.JobTimes(job, created=1.0, created_wall=1.0)

    def pod(name: str, phase: str) -> SimpleNamespace:
        return SimpleNamespace(
            type="MODIFIED",
            obj={
                "metadata": {"namespace": kb.NAMESPACE, "name": name, "labels": {"app": job.name}},
                "spec": {},
                "status": {"phase": phase},
            },
        )

    observer.on_pod(pod("p0", "Succeeded"))
    assert observer.done(job) is None
    observer.on_pod(pod("p1", "Running"))
    assert observer.done(job) is None
    observer.on_pod(pod("p1", "Succeeded"))
    assert observer.done(job) is not None
