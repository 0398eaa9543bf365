"""Workload traces of `tidegate demo`: parsing, errors that name the field, objects built."""

import statistics

import pytest

from tidegate.cli.demo_trace import (
    Autoscale,
    DeclaredRuntimes,
    TraceError,
    cohort_object,
    declared_runtime,
    desired_replicas,
    load_at,
    load_trace,
    parse_trace,
    required_level,
    service_type,
    workload_object,
)


def test_the_built_in_trace_parses_and_covers_each_family() -> None:
    trace = load_trace(None)
    assert {q.name for q in trace.queues} >= {"online", "pretrain", "team-a", "team-b"}
    annotations = " ".join(
        key for w in trace.workloads for key in {**w.annotations, **w.template_annotations}
    )
    for family in ("kueue.x-k8s.io/", "kai.scheduler/", "tidegate.io/", "volcano.sh/"):
        assert family in annotations
    assert any(w.kind == "Deployment" for w in trace.workloads)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workloads: [{name: a, pods: 0}]", r"workloads\[0\]\.pods: must be at least 1"),
        ("workloads: [{name: a, at: -1}]", r"workloads\[0\]\.at: must not be negative"),
        ("workloads: [{name: a}, {name: a}]", r"workloads\[1\]\.name: 'a' appears twice"),
        ("workloads: [{name: a, kind: CronJob}]", r"\$\.workloads\[0\]\.kind"),
        ("workloads: [{name: a, colour: red}]", r"unknown field `colour`"),
        ("queues: [{spec: {}}]", r"missing required field `name`"),
        ("workloads: [", r"not YAML"),
        (
            "workloads: [{name: a, max_runtime: 0}]",
            r"workloads\[0\]\.max_runtime: must be positive",
        ),
        ("declared_runtimes: {factor: 0.5}", r"declared_runtimes: need factor >= 1"),
    ],
)
def test_bad_traces_name_the_field(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace(text)


def test_a_job_is_indexed_gated_by_queue_label_and_carries_annotations() -> None:
    trace = parse_trace(
        """
        workloads:
          - name: train
            queue: offline
            pods: 4
            priority_class: low
            requests: {cpu: "2", nvidia.com/gpu: 8}
            duration: 30
            annotations: {kai.scheduler/topology-required-placement: rack}
            template_annotations: {kueue.x-k8s.io/podset-preferred-topology: host}
        """
    )
    job = workload_object(trace.workloads[0], "ns")
    assert job["kind"] == "Job"
    spec = job["spec"]
    assert isinstance(spec, dict)
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (4, 4, "Indexed")
    # A restarted gang: evictions are not failures; the demo's Jobs also count the Job
    # controller's backoff per index (tests/nodes/test_demo_and_bench_on_real_k8s.py).
    assert spec["podFailurePolicy"] == {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    assert "backoffLimitPerIndex" not in spec
    per_index = workload_object(trace.workloads[0], "ns", per_index_backoff=True)["spec"]
    assert isinstance(per_index, dict)
    assert per_index["backoffLimitPerIndex"] == 100
    template = spec["template"]
    assert isinstance(template, dict)
    assert template["metadata"]["labels"]["tidegate.io/queue"] == "offline"
    assert template["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "host",
        "tidegate.io/sim-duration-seconds": "30",
    }
    container = template["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "2", "nvidia.com/gpu": "8"}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert template["spec"]["priorityClassName"] == "low"
    assert job["metadata"]["annotations"] == {"kai.scheduler/topology-required-placement": "rack"}


def test_a_deployment_has_replicas_and_runs_until_deleted() -> None:
    trace = parse_trace("workloads: [{name: serve, kind: Deployment, pods: 3}]")
    deployment = workload_object(trace.workloads[0], "ns")
    spec = deployment["spec"]
    assert isinstance(spec, dict)
    assert spec["replicas"] == 3
    assert spec["selector"] == {"matchLabels": {"app": "serve"}}
    assert "tidegate.io/sim-duration-seconds" not in spec["template"]["metadata"]["annotations"]


def test_autoscale_is_parsed_and_checked() -> None:
    trace = parse_trace(
        """
        day_length: 2400
        workloads:
          - name: serve
            kind: Deployment
            pods: 2
            autoscale: {target_per_replica: 100, min_replicas: 1, max_replicas: 8,
                        load: [[0, 100], [100, 500]]}
        """
    )
    scale = trace.workloads[0].autoscale
    assert scale is not None
    assert (scale.max_replicas, scale.every) == (8, 30.0)
    assert trace.day_length == 2400


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            "{name: a, autoscale: {target_per_replica: 1, max_replicas: 2, load: [[0, 1]]}}",
            r"workloads\[0\]\.autoscale: only a Deployment scales, not a Job",
        ),
        (
            "{name: a, kind: Deployment, autoscale: {target_per_replica: 1, min_replicas: 3, "
            "max_replicas: 2, load: [[0, 1]]}}",
            r"min_replicas <= max_replicas",
        ),
        (
            "{name: a, kind: Deployment, autoscale: {target_per_replica: 0, max_replicas: 2, "
            "load: [[0, 1]]}}",
            r"target_per_replica: must be positive",
        ),
        (
            "{name: a, kind: Deployment, autoscale: {target_per_replica: 1, max_replicas: 2, "
            "load: [[5, 1], [0, 1]]}}",
            r"autoscale\.load: .* in time order",
        ),
    ],
)
def test_bad_autoscale_names_the_field(workload: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace(f"workloads: [{workload}]")


def test_load_curve_is_linear_between_points_and_flat_beyond() -> None:
    points = [(100.0, 10.0), (200.0, 30.0), (300.0, 30.0)]
    assert load_at(points, 0) == 10.0
    assert load_at(points, 150) == 20.0
    assert load_at(points, 250) == 30.0
    assert load_at(points, 999) == 30.0
    assert load_at([], 5) == 0.0


def test_desired_replicas_follow_the_hpa_rule() -> None:
    scale = Autoscale(target_per_replica=100, min_replicas=2, max_replicas=10, load=[(0, 0)])
    assert desired_replicas(scale, load=450, current=2) == 5  # ceil(450 / 100)
    assert desired_replicas(scale, load=1050, current=10) == 10  # within 10 %: unchanged
    assert desired_replicas(scale, load=5000, current=4) == 10  # bounded by max
    assert desired_replicas(scale, load=10, current=4) == 2  # bounded by min
    assert desired_replicas(scale, load=400, current=0) == 4


def test_service_type_follows_volcano_annotation_then_kind() -> None:
    trace = parse_trace(
        """
        workloads:
          - {name: a, kind: Deployment}
          - {name: b}
          - {name: c, annotations: {volcano.sh/service.type: inference}}
        """
    )
    assert [service_type(w) for w in trace.workloads] == ["inference", "training", "inference"]


KALOS_MEAN_GPUS = 26.77
"""GPUs per GPU job in the Kalos cluster (AcmeTrace data/cluster_summary.csv; docs/demo.md)."""
KALOS_RUN_TIME_MEAN_OVER_MEDIAN = 1259.689 / 124.0


def test_the_built_in_trace_is_a_tidal_day_with_the_published_training_mix() -> None:
    trace = load_trace(None)
    assert trace.day_length is not None
    training = [w for w in trace.workloads if w.name.startswith(("pretrain-", "sft-", "eval-"))]
    assert {w.queue for w in training} == {"pretrain", "team-a", "team-b"}
    sizes = [w.pods * int(w.requests.get("nvidia.com/gpu", 0)) for w in training]
    assert len(sizes) >= 30
    assert statistics.fmean(sizes) == pytest.approx(KALOS_MEAN_GPUS, rel=0.05)
    assert statistics.median(sizes) == 1
    assert max(sizes) <= 512
    durations = [w.duration for w in training if w.duration is not None]
    assert len(durations) == len(training)
    # Long-tailed: the mean far above the median, as in Kalos (truncated here at half a day).
    ratio = statistics.fmean(durations) / statistics.median(durations)
    assert 3 < ratio <= KALOS_RUN_TIME_MEAN_OVER_MEDIAN
    # Inference: Deployments driven by an HPA-like curve, higher by day than by night.
    hour = trace.day_length / 24
    scaled = [w for w in trace.workloads if w.autoscale is not None]
    assert len(scaled) >= 3
    for w in scaled:
        assert w.kind == "Deployment"
        assert w.autoscale is not None
        night = desired_replicas(w.autoscale, load_at(w.autoscale.load, 3 * hour), w.pods)
        noon = desired_replicas(w.autoscale, load_at(w.autoscale.load, 13 * hour), night)
        assert noon > night, w.name
    # Training arrives mostly when inference is low: at night and in the evening.
    off_peak = [w for w in training if w.at < 6 * hour or w.at >= 18 * hour]
    assert len(off_peak) > len(training) / 2


def test_the_built_in_day_has_two_training_teams_sharing_a_cohort() -> None:
    """team-a and team-b share the Cohort research: each a nominal GPU quota, both opted in to
    reclaim among training; a sweep of team-b borrows, then team-a's fine-tune, within its
    nominal, needs what it lent. The Cohort and Queues are the objects the demo creates."""
    trace = load_trace(None)
    (research,) = [c for c in trace.cohorts if c.name == "research"]
    assert cohort_object(research) == {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": "research"},
        "spec": {},
    }
    teams = {q.name: q.spec for q in trace.queues if q.spec.get("cohort") == "research"}
    assert set(teams) == {"team-a", "team-b"}
    nominal = {}
    for name, spec in teams.items():
        assert spec["preemption"] == {"reclaimWithinCohort": "Any"}
        assert spec["reclaimable"] is True
        quota = spec["nominalQuota"]
        assert isinstance(quota, dict)
        nominal[name] = int(quota["nvidia.com/gpu"])
    entries = {w.name: w for w in trace.workloads}
    sweep, finetune = entries["team-b-sweep"], entries["team-a-finetune"]

    def gpus(name: str) -> int:
        return entries[name].pods * int(entries[name].requests["nvidia.com/gpu"])

    assert (sweep.queue, finetune.queue) == ("team-b", "team-a")
    assert gpus("team-b-sweep") > nominal["team-b"]  # it borrows
    assert gpus("team-a-finetune") <= nominal["team-a"]  # within its nominal: it may reclaim
    assert sweep.at < finetune.at < sweep.at + (sweep.duration or 0)


def test_cohorts_in_a_trace_are_parsed_and_named_on_error() -> None:
    trace = parse_trace("cohorts: [{name: c, spec: {parent: root}}]")
    assert [(c.name, c.spec) for c in trace.cohorts] == [("c", {"parent": "root"})]
    with pytest.raises(TraceError, match=r"cohorts\[0\]"):
        parse_trace("cohorts: [{spec: {}}]")


def test_jobs_declare_runtimes_by_the_trace_rule_never_below_their_run() -> None:
    trace = parse_trace(
        """
        declared_runtimes: {factor: 1.5, round_up_to: 25}
        workloads:
          - {name: short, duration: 5}
          - {name: long, duration: 1200}
          - {name: own, duration: 100, max_runtime: 110}
          - {name: serve, kind: Deployment}
        """
    )
    runtimes = {w.name: w.max_runtime for w in trace.workloads}
    assert runtimes == {"short": 25, "long": 1800, "own": 110, "serve": None}
    rule = DeclaredRuntimes(factor=1.5, round_up_to=25)
    for duration in (1, 5, 16.7, 24.9, 25, 45, 117, 633, 1200):
        declared = declared_runtime(duration, rule)
        assert declared >= duration * 1.5
        assert declared % 25 == 0
        assert declared - duration * 1.5 < 25
    # Without the rule nothing is declared.
    assert parse_trace("workloads: [{name: a, duration: 5}]").workloads[0].max_runtime is None


def test_the_declared_runtime_is_written_in_the_services_seconds() -> None:
    (entry,) = parse_trace("workloads: [{name: a, duration: 40, max_runtime: 75}]").workloads
    job = workload_object(entry, "ns", time_scale=0.05)
    meta = job["metadata"]
    assert isinstance(meta, dict)
    assert meta["annotations"] == {"tidegate.io/max-runtime": "3.75"}
    # The simulated duration stays in simulated seconds (the simulator scales it itself).
    spec = job["spec"]
    assert isinstance(spec, dict)
    assert spec["template"]["metadata"]["annotations"] == {"tidegate.io/sim-duration-seconds": "40"}
    # A trace's own annotation wins.
    (own,) = parse_trace(
        "workloads: [{name: a, max_runtime: 75, annotations: {tidegate.io/max-runtime: 9m}}]"
    ).workloads
    own_meta = workload_object(own, "ns", time_scale=0.05)["metadata"]
    assert isinstance(own_meta, dict)
    assert own_meta["annotations"] == {"tidegate.io/max-runtime": "9m"}


def test_required_level_is_read_as_the_watcher_reads_it() -> None:
    trace = parse_trace(
        """
        workloads:
          - {name: kueue, template_annotations: {kueue.x-k8s.io/podset-required-topology: rack}}
          - {name: kai, annotations: {kai.scheduler/topology-required-placement: block}}
          - {name: tg, annotations: {tidegate.io/topology-required: host}}
          - {name: preferred, annotations: {tidegate.io/topology-preferred: rack}}
        """
    )
    levels = {w.name: required_level(w) for w in trace.workloads}
    assert levels == {"kueue": "rack", "kai": "block", "tg": "host", "preferred": None}


def test_every_job_of_the_built_in_trace_declares_at_least_its_run() -> None:
    jobs = [w for w in load_trace(None).workloads if w.kind == "Job" and w.duration is not None]
    assert jobs
    for job in jobs:
        assert job.max_runtime is not None
        assert job.duration is not None
        assert job.max_runtime >= job.duration, job.name
