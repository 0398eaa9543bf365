"""Workload traces of `tidegate demo`: parsing, errors that name the field, objects built."""

import pytest

from tidegate.cli.demo_trace import TraceError, load_trace, parse_trace, workload_object


def test_the_built_in_trace_parses_and_covers_each_family() -> None:
    trace = load_trace(None)
    assert {q.name for q in trace.queues} >= {"online", "offline"}
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
