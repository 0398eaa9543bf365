"""Trace context through headers, span names and kinds, exporters from env, JSON log lines."""

import io
import json
import logging
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, Tracer, TraceState

from tidegate.telemetry import (
    JsonFormatter,
    batch_span,
    build_tracer_provider,
    consumer_span,
    extract,
    producer_span,
    setup_logging,
)
from tidegate.telemetry.messaging import TRANSPORT_ENV, traced_subject
from tidegate.telemetry.tracing import JsonLinesSpanExporter


def test_the_consumer_span_is_a_child_of_the_producer_span_through_headers(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    headers: dict[str, str] = {}
    with producer_span("tg.c.decision.admitted.ns.w", headers, message_id="e1", tracer=tracer):
        pass
    assert headers["traceparent"].startswith("00-")
    with consumer_span("tg.c.decision.admitted.ns.w", headers, message_id="e1", tracer=tracer):
        pass
    producer, consumer = exporter.get_finished_spans()
    assert producer.name == "tg.c.decision.admitted.ns.w publish"
    assert producer.kind is SpanKind.PRODUCER
    assert consumer.name == "tg.c.decision.admitted.ns.w process"
    assert consumer.kind is SpanKind.CONSUMER
    assert consumer.parent is not None
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.message.id"] == "e1"
    assert consumer.attributes["messaging.system"] == "nats"


def test_a_batch_span_links_every_producer_and_has_no_parent(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    carriers: list[dict[str, str]] = [{}, {}]
    for headers in carriers:
        with producer_span("tg.c.workload.ns.w", headers, tracer=tracer):
            pass
    with batch_span("capacity", [*carriers, None], tracer=tracer):
        pass
    *producers, batch = exporter.get_finished_spans()
    assert batch.name == "capacity process"
    assert batch.parent is None
    assert [link.context.span_id for link in batch.links] == [
        p.context.span_id for p in producers if p.context is not None
    ]


def test_headers_without_trace_context_give_an_empty_context() -> None:
    assert extract({"Nats-Msg-Id": "x"}) == extract(None)


def test_trace_file_exporter_writes_json_lines(tmp_path: Path) -> None:
    trace_file = tmp_path / "spans.jsonl"
    provider = build_tracer_provider("tidegate-test", env={"TIDEGATE_TRACE_FILE": str(trace_file)})
    assert provider is not None
    with producer_span("tg.c.workload.ns.w", {}, tracer=provider.get_tracer("t")):
        pass
    provider.shutdown()
    (line,) = trace_file.read_text().splitlines()
    span = json.loads(line)
    assert span["name"] == "tg.c.workload.ns.w publish"
    assert span["kind"] == "SpanKind.PRODUCER"
    assert span["resource"]["attributes"]["service.name"] == "tidegate-test"


def test_trace_file_lines_are_the_sdks_own_json_form(tmp_path: Path) -> None:
    """Every field the SDK's ``to_json`` writes, for spans with a parent, events, links, an
    error status, a trace state, sequence attributes and whole-second times, from two
    processes' resources sharing one exporter."""
    trace_file = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(trace_file)
    memory = InMemorySpanExporter()
    providers = [
        TracerProvider(resource=Resource.create({SERVICE_NAME: name})) for name in ("a", "b")
    ]
    for provider in providers:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.add_span_processor(SimpleSpanProcessor(memory))
    linked = SpanContext(
        trace_id=7, span_id=9, is_remote=True, trace_state=TraceState([("tg", "x")])
    )
    for provider in providers:
        tracer = provider.get_tracer("t")
        with (
            tracer.start_as_current_span("parent", start_time=1_700_000_000_000_000_000),
            tracer.start_as_current_span(
                "child",
                kind=SpanKind.CONSUMER,
                links=[Link(linked, {"why": "victim"})],
                attributes={"n": 3, "f": 0.5, "ok": True, "names": ["p1", "p2"]},
            ) as child,
        ):
            child.add_event("ungated", {"pod": "p1"}, timestamp=1_700_000_001_000_001_000)
            child.add_event("plain")
            child.set_status(Status(StatusCode.ERROR, "no room"))
    exporter.shutdown()
    written = [json.loads(line) for line in trace_file.read_text().splitlines()]
    assert written == [
        json.loads(span.to_json(indent=None)) for span in memory.get_finished_spans()
    ]
    assert [span["resource"]["attributes"]["service.name"] for span in written] == [
        "a",
        "a",
        "b",
        "b",
    ]


def test_no_provider_when_disabled_or_nowhere_to_send_spans(tmp_path: Path) -> None:
    trace_file = str(tmp_path / "spans.jsonl")
    env = {"OTEL_SDK_DISABLED": "true", "TIDEGATE_TRACE_FILE": trace_file}
    assert build_tracer_provider("x", env=env) is None
    assert build_tracer_provider("x", env={}) is None


def test_otlp_http_exporter_posts_to_the_configured_endpoint() -> None:
    received: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        provider = build_tracer_provider(
            "tidegate-test", env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        )
        assert provider is not None
        with producer_span("tg.c.decision.pending.ns.otlp", {}, tracer=provider.get_tracer("t")):
            pass
        provider.force_flush()
        provider.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    (path, body), *_ = received
    assert path == "/v1/traces"
    assert b"tg.c.decision.pending.ns.otlp publish" in body


def test_log_lines_are_json_with_trace_id_and_extra_fields(
    recorded: tuple[Tracer, InMemorySpanExporter],
) -> None:
    tracer, _ = recorded
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    setup_logging("DEBUG", stream=stream)
    logger = logging.getLogger("tidegate.test")
    try:
        with tracer.start_as_current_span("work") as span:
            logger.info("admitted %s", "ns/w", extra={"workload": "ns/w", "pods": 4})
        try:
            raise ValueError("bad")
        except ValueError:
            logger.exception("failed")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "admitted ns/w"
    assert first["level"] == "INFO"
    assert first["logger"] == "tidegate.test"
    assert first["workload"] == "ns/w"
    assert first["pods"] == 4
    assert first["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert first["span_id"] == format(span.get_span_context().span_id, "016x")
    assert first["time"].endswith("+00:00")
    assert "trace_id" not in second
    assert "ValueError: bad" in second["exception"]


def test_an_unknown_log_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        setup_logging("LOUD")


def test_the_formatter_survives_values_json_cannot_hold() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "m", None, None)
    record.path = Path("/tmp")
    assert json.loads(JsonFormatter().format(record))["path"] == "/tmp"


def test_without_a_tracer_provider_the_received_context_is_passed_on() -> None:
    # Run in a fresh interpreter: the global tracer provider can be set only once per process.
    script = """
from tidegate.telemetry import consumer_span, producer_span
received = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
with consumer_span("in", received):
    sent = {}
    with producer_span("out", sent):
        pass
assert sent["traceparent"] == received["traceparent"], sent
"""
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr


def test_transport_messages_get_no_spans_by_default_but_pass_their_context_on(
    recorded: tuple[Tracer, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer, exporter = recorded
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    with tracer.start_as_current_span("work") as work:
        headers: dict[str, str] = {}
        with producer_span("tg.c.pod.ns.p", headers, tracer=tracer):
            pass
    assert [s.name for s in exporter.get_finished_spans()] == ["work"]
    assert extract(headers)
    assert headers["traceparent"].split("-")[2] == format(work.get_span_context().span_id, "016x")
    with consumer_span("tg.c.capacity.t.node.n", headers, tracer=tracer):
        pass
    assert traced_subject("tg.c.workload.ns.w")
    assert traced_subject("tg.c.decision.x.ns.w")
    assert not traced_subject("tg.c.node.n")
    monkeypatch.setenv(TRANSPORT_ENV, "true")
    with producer_span("tg.c.pod.ns.p", {}, tracer=tracer):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["work", "tg.c.pod.ns.p publish"]
