"""The trace-shape check names each violation, and the OTLP receiver decodes what an exporter
really sends."""

import asyncio
from dataclasses import replace

from tidegate.telemetry import build_tracer_provider
from tidegate.testing.traces import OtlpReceiver, SpanRecord, admission_trace_problems

T_SERVE, T_VICTIM = "a" * 32, "b" * 32


def good() -> list[SpanRecord]:
    """serve (its own trace) preempted victim (its own trace); both admitted."""
    serve_root = SpanRecord(
        T_SERVE,
        "1" * 16,
        None,
        "workload",
        "tidegate-watcher",
        {"tidegate.workload.key": "n/serve"},
    )
    victim_root = SpanRecord(
        T_VICTIM, "2" * 16, None, "workload", "tidegate-watcher", {"tidegate.workload.key": "n/v"}
    )

    def admitted(trace: str, span: str, parent: str, key: str) -> SpanRecord:
        attributes = {
            "tidegate.workload.key": key,
            "tidegate.decision.kind": "admitted",
            "tidegate.reason": "Admitted",
            "tidegate.queue.name": "q",
            "tidegate.placement.domains": ("main: 8 in rack=r1",),
        }
        return SpanRecord(trace, span, parent, "admission decision", "adm", attributes)

    search = SpanRecord(
        T_SERVE,
        "5" * 16,
        "1" * 16,
        "select victims",
        "tidegate-preemption",
        {"tidegate.workload.key": "n/serve", "tidegate.preemption.victims": ("n/v",)},
        links=((T_VICTIM, "2" * 16),),
    )
    return [
        serve_root,
        victim_root,
        admitted(T_SERVE, "3" * 16, "1" * 16, "n/serve"),
        admitted(T_VICTIM, "4" * 16, "2" * 16, "n/v"),
        search,
        SpanRecord(T_SERVE, "8" * 16, "1" * 16, "bind pods", "tidegate-watcher"),
        SpanRecord(T_VICTIM, "9" * 16, "2" * 16, "bind pods", "tidegate-watcher"),
    ]


def check(spans: list[SpanRecord]) -> list[str]:
    return admission_trace_problems(
        spans, admitted=["n/serve", "n/v"], preemptions={"n/serve": ["n/v"]}
    )


def test_a_good_set_of_traces_has_no_problem() -> None:
    assert check(good()) == []


def test_a_missing_root_and_the_parent_it_leaves_dangling_are_named() -> None:
    spans = [s for s in good() if not (s.name == "workload" and s.trace_id == T_VICTIM)]
    problems = check(spans)
    assert "n/v: 0 exported root spans, expected exactly one" in problems
    assert any("points at parent 2222222222222222" in p for p in problems)


def test_a_second_root_and_a_span_in_another_trace_are_named() -> None:
    spans = good()
    spans.append(replace(spans[0], trace_id="c" * 32, span_id="6" * 16))
    assert "n/serve: 2 exported root spans, expected exactly one" in check(spans)
    stray = replace(spans[2], trace_id="d" * 32, span_id="7" * 16, parent_id=None)
    assert "n/v: spans in 1 other traces than its own" in check(
        [*good(), replace(stray, attributes={**stray.attributes, "tidegate.workload.key": "n/v"})]
    )


def test_an_admission_without_placement_or_reason_is_named() -> None:
    spans = good()
    spans[2] = replace(
        spans[2],
        attributes={"tidegate.workload.key": "n/serve", "tidegate.decision.kind": "admitted"},
    )
    problems = check(spans)
    assert "n/serve: an admission span names no queue" in problems
    assert "n/serve: an admission span names no placement" in problems
    assert "n/serve: a decision span names no reason" in problems


def test_a_victim_search_without_the_victims_link_is_named() -> None:
    spans = good()
    spans[4] = replace(spans[4], links=())
    assert check(spans) == ["n/serve: the victim search does not link n/v's trace"]
    spans[4] = replace(spans[4], attributes={"tidegate.preemption.victims": ("n/x",)})
    assert check(spans) == ["n/serve: no select victims span naming ['n/v']"]


async def test_the_receiver_decodes_what_the_otlp_exporter_sends() -> None:
    async with OtlpReceiver().running() as receiver:
        provider = build_tracer_provider(
            "tidegate-test", env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        )
        assert provider is not None
        tracer = provider.get_tracer("t")
        with (
            tracer.start_as_current_span("outer", attributes={"tidegate.reason": "X"}),
            tracer.start_as_current_span("inner", attributes={"tidegate.list": ["a", "b"]}),
        ):
            pass
        # The exporter posts from its own thread with a blocking client: let it, off the loop.
        await asyncio.to_thread(provider.force_flush)
        await asyncio.to_thread(provider.shutdown)
    inner, outer = receiver.spans
    assert receiver.requests >= 1
    assert outer.name == "outer"
    assert outer.parent_id is None
    assert inner.parent_id == outer.span_id
    assert inner.trace_id == outer.trace_id
    assert len(outer.trace_id) == 32
    assert outer.service == "tidegate-test"
    assert outer.attributes == {"tidegate.reason": "X"}
    assert inner.attributes == {"tidegate.list": ("a", "b")}


def test_a_trace_that_stops_before_the_pods_are_bound_is_named() -> None:
    spans = [s for s in good() if not (s.name == "bind pods" and s.trace_id == T_VICTIM)]
    assert check(spans) == ["n/v: no bind pods span: its trace does not reach its pods bound"]


def test_a_service_missing_from_an_admitted_workloads_trace_is_named() -> None:
    cache = "tidegate-topology-cache"
    spans = good()
    assert admission_trace_problems(spans, admitted=["n/serve"], services=[cache]) == [
        f"n/serve: no span of {cache} in its trace"
    ]
    process = SpanRecord(
        T_SERVE, "a" * 16, "3" * 16, "tg.c.decision.admitted.n.serve process", cache
    )
    spans.append(process)
    assert admission_trace_problems(spans, admitted=["n/serve"], services=[cache]) == []
    assert admission_trace_problems(spans, admitted=["n/v"], services=[cache]) == [
        f"n/v: no span of {cache} in its trace"
    ]


def test_an_incomplete_run_is_held_only_to_one_trace_per_workload_and_the_victim_links() -> None:
    def incomplete(spans: list[SpanRecord]) -> list[str]:
        return admission_trace_problems(
            spans, admitted=["n/serve", "n/v"], preemptions={"n/serve": ["n/v"]}, complete=False
        )

    lost = {"4" * 16, "8" * 16}  # n/v's admission decision and serve's bind pods
    spans = [s for s in good() if s.span_id not in lost]
    spans.append(SpanRecord(T_VICTIM, "6" * 16, "4" * 16, "process", "tidegate-ungater"))
    assert len(check(spans)) == 3
    assert incomplete(spans) == []
    assert incomplete([*spans, replace(spans[1], span_id="7" * 16)]) == [
        "n/v: 2 exported root spans, expected exactly one"
    ]
    unlinked = [replace(s, links=()) if s.name == "select victims" else s for s in spans]
    assert incomplete(unlinked) == ["n/serve: the victim search does not link n/v's trace"]
