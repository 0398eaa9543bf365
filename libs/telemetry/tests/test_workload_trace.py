"""The workload's own trace: its root span has the ids its derived traceparent names, and the
spans of decisions, victim searches and releases carry the attributes that explain them."""

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from tidegate.model import (
    Admitted,
    DomainCount,
    Pending,
    PodState,
    TopologyAssignment,
    WorkloadKey,
)
from tidegate.policy.victims import VictimChoice
from tidegate.telemetry import (
    decision_span,
    export_workload_root,
    inject,
    newly_bound,
    note_pod_released,
    pods_bound_span,
    release_span,
    trace_id_of,
    victim_choice_span,
    workload_trace_context,
)
from tidegate.telemetry.workload import reason_numbers
from tidegate.testing.messages import Messages

msg = Messages(
    namespace="ns",
    queue="offline",
    defaults={
        "workload": {
            "uid": "u-1",
            "priority": 10,
            "service_type": "training",
            "created_at": 1_000.0,
            "trace_context": workload_trace_context("u-1"),
        }
    },
)
"""Training workloads in queue offline, their trace derived from their uid (u-1)."""
MAIN = msg.podset("main", 8, requests={"nvidia.com/gpu": 8}, required="tidegate.io/rack")


def test_the_root_span_has_the_ids_the_derived_traceparent_names(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    w = msg.workload("train", MAIN)
    assert export_workload_root(w, now=1_010.0, tracer=tracer)
    (root,) = exporter.get_finished_spans()
    _, trace_id, span_id, _ = w.trace_context["traceparent"].split("-")
    assert root.context is not None
    assert format(root.context.trace_id, "032x") == trace_id == trace_id_of(w.trace_context)
    assert format(root.context.span_id, "016x") == span_id
    assert root.parent is None
    assert root.name == "workload"
    assert root.start_time == 1_000 * 10**9
    assert root.attributes is not None
    assert root.attributes["tidegate.workload.key"] == "ns/train"
    assert root.attributes["tidegate.queue.name"] == "offline"
    assert root.attributes["tidegate.workload.topology_request"] == (
        "main: required=tidegate.io/rack",
    )
    # A traceparent the user set names a span of theirs: no root of ours.
    user = msg.workload(
        "train", MAIN, uid="u-2", trace_context={"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
    )
    assert not export_workload_root(user, tracer=tracer)


def test_a_pending_decision_is_a_child_of_the_root_with_its_reason_and_numbers(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    w = msg.workload("train", MAIN)
    message = "main: needs 8 pods in one rack; the best rack fits 5 (limited by nvidia.com/gpu)"
    body = Pending(
        workload="ns/train",
        uid="u-1",
        queue="offline",
        reason="WaitingForCapacity",
        message=message,
    )
    headers: dict[str, str] = {}
    with decision_span(body, w, tries=3, tracer=tracer):
        inject(headers)
    (span,) = exporter.get_finished_spans()
    assert span.name == "admission decision"
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == w.trace_context["traceparent"].split("-")[2]
    assert headers["traceparent"].split("-")[1] == trace_id_of(w.trace_context)
    attributes = dict(span.attributes or {})
    assert attributes["tidegate.decision.kind"] == "pending"
    assert attributes["tidegate.reason"] == "WaitingForCapacity"
    assert attributes["tidegate.reason.needed"] == 8
    assert attributes["tidegate.reason.best_domain"] == "rack"
    assert attributes["tidegate.reason.best_domain_fits"] == 5
    assert attributes["tidegate.reason.limited_by"] == "nvidia.com/gpu"
    assert attributes["tidegate.admission.tries"] == 3


def test_an_admission_names_its_domains(recorded: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = recorded
    levels = ["tidegate.io/rack", "kubernetes.io/hostname"]
    body = Admitted(
        workload="ns/train",
        uid="u-1",
        queue="offline",
        sequence=7,
        epoch=1,
        assignments={
            "main": TopologyAssignment(
                levels=levels,
                domains=[
                    DomainCount(values=["r1", "n1"], count=4),
                    DomainCount(values=["r1", "n2"], count=4),
                ],
            )
        },
        charged={"nvidia.com/gpu": 64},
    )
    with decision_span(body, msg.workload("train", MAIN), tracer=tracer):
        pass
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["tidegate.reason"] == "Admitted"
    assert attributes["tidegate.placement.summary"] == ("main: tidegate.io/rack=r1 x8",)
    assert attributes["tidegate.placement.domains"] == (
        "main: 4 in kubernetes.io/hostname=r1/n1",
        "main: 4 in kubernetes.io/hostname=r1/n2",
    )
    assert attributes["tidegate.charged"] == "nvidia.com/gpu=64"


def test_a_victim_search_links_each_victims_trace_and_says_why_others_were_not_chosen(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    victim = msg.workload("victim", MAIN, uid="u-v", trace_context=workload_trace_context("u-v"))
    choice = VictimChoice(
        outcome="preempts",
        victims=(WorkloadKey("ns/victim"),),
        ineligible={WorkloadKey("ns/other"): "not preemptable"},
        gpus=64,
    )
    serve = msg.workload("serve", MAIN, uid="u-s", trace_context=workload_trace_context("u-s"))
    victim_choice_span(
        serve, choice, {WorkloadKey("ns/victim"): victim}, start=1_000.0, tracer=tracer
    )
    (span,) = exporter.get_finished_spans()
    assert span.name == "select victims"
    assert [format(link.context.trace_id, "032x") for link in span.links] == [
        trace_id_of(victim.trace_context)
    ]
    attributes = dict(span.attributes or {})
    assert attributes["tidegate.preemption.victims"] == ("ns/victim",)
    assert attributes["tidegate.preemption.not_chosen"] == ("ns/other: not preemptable",)
    assert attributes["tidegate.preemption.freed_gpus"] == 64
    assert attributes["tidegate.preemption.victim_room"] == ("ns/victim: nvidia.com/gpu=64",)


def test_releases_are_summed_up_per_domain_in_release_order(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    w = msg.workload("train", MAIN)
    with release_span("ns/train", w, tracer=tracer):
        for rank, node in ((1, "n2"), (0, "n1")):
            pod = PodState(namespace="ns", name=f"p{rank}", uid=f"p{rank}", rank=rank)
            note_pod_released(pod, {"tidegate.io/rack": "r1", "kubernetes.io/hostname": node})
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["tidegate.release.pods"] == 2
    assert attributes["tidegate.release.domains"] == (
        "tidegate.io/rack=r1: 2 pods in order rank 1, rank 0",
    )
    assert [e.name for e in span.events] == ["pod released", "pod released"]
    assert span.events[0].attributes is not None
    assert span.events[0].attributes["tidegate.pod.rank"] == 1


def test_reason_numbers_of_a_reason_without_numbers_are_empty() -> None:
    assert reason_numbers("queue gpu does not exist") == {}
    assert reason_numbers("main: needs 4 pods; the cluster fits 0 (limited by pods)") == {
        "tidegate.reason.needed": 4,
        "tidegate.reason.best_domain": "cluster",
        "tidegate.reason.best_domain_fits": 0,
        "tidegate.reason.limited_by": "pods",
    }


def test_pods_seen_bound_make_one_span_in_the_workload_trace(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    gated = PodState(namespace="ns", name="p0", uid="p0", workload="ns/train")
    bound = PodState(namespace="ns", name="p0", uid="p0", workload="ns/train", node_name="n1")
    assert newly_bound(bound, gated)
    assert newly_bound(bound, None)
    assert not newly_bound(bound, bound)
    assert not newly_bound(gated, None)
    w = msg.workload("train", MAIN)
    pods_bound_span("ns/train", w, [bound], tracer=tracer)
    (span,) = exporter.get_finished_spans()
    assert span.name == "bind pods"
    assert span.context is not None
    assert format(span.context.trace_id, "032x") == trace_id_of(w.trace_context)
    assert dict(span.attributes or {})["tidegate.bind.nodes"] == ("p0: n1",)
