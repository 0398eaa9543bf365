"""Spans as a test sees them: read from a trace file or received over OTLP, and checked.

Two sources, one shape (:class:`SpanRecord`): the JSON lines a service writes to
``TIDEGATE_TRACE_FILE`` (:func:`spans_from_json_lines`), and the OTLP/HTTP requests an
exporter sends, received by a real HTTP endpoint in the test's process (:class:`OtlpReceiver`,
decoded with the ``opentelemetry-proto`` messages). :func:`admission_trace_problems` checks
the shape docs/operations.md promises: one trace per workload whose root is exported, no span
pointing at a parent that is not there, the decision spans naming queue, reason and placement,
a span of each named service, and the victim search linking every victim's trace. It returns problems (empty: all good), so a
test can show each check fires on a hand-made violation.
"""

import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

ROOT = "workload"
DECISION = "admission decision"
VICTIMS = "select victims"
RELEASE = "release pods"
BIND = "bind pods"


@dataclass(frozen=True)
class SpanRecord:
    """One finished span: ids in lowercase hex, attributes as plain Python values."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    service: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    """(trace id, span id) of each link."""
    events: tuple[str, ...] = ()


def _hex(value: str | None) -> str | None:
    return value.removeprefix("0x") if value else None


def span_from_json(span: Mapping[str, Any]) -> SpanRecord:
    """A span in the SDK's JSON form (one line of a ``TIDEGATE_TRACE_FILE``)."""
    context = span["context"]
    return SpanRecord(
        trace_id=_hex(context["trace_id"]) or "",
        span_id=_hex(context["span_id"]) or "",
        parent_id=_hex(span.get("parent_id")),
        name=span["name"],
        service=span.get("resource", {}).get("attributes", {}).get("service.name", ""),
        attributes=dict(span.get("attributes") or {}),
        links=tuple(
            (_hex(link["context"]["trace_id"]) or "", _hex(link["context"]["span_id"]) or "")
            for link in span.get("links") or []
        ),
        events=tuple(event["name"] for event in span.get("events") or []),
    )


def spans_from_json_lines(path: Path) -> list[SpanRecord]:
    """Every span of a trace file."""
    return [span_from_json(json.loads(line)) for line in path.read_text().splitlines() if line]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind is None:
        return None
    return getattr(value, kind)


def spans_from_otlp(request: ExportTraceServiceRequest) -> list[SpanRecord]:
    """Every span of one OTLP export request."""
    out: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        out.extend(
            SpanRecord(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex() or None,
                name=span.name,
                service=service,
                attributes={a.key: _value(a.value) for a in span.attributes},
                links=tuple((lk.trace_id.hex(), lk.span_id.hex()) for lk in span.links),
                events=tuple(e.name for e in span.events),
            )
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        )
    return out


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf) on a free local port."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        """Every span received so far, in arrival order."""
        self.requests = 0
        """Export requests received."""
        self.endpoint = ""
        """The base URL to give as ``OTEL_EXPORTER_OTLP_ENDPOINT`` (set once running)."""

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.requests += 1
        self.spans.extend(spans_from_otlp(message))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator["OtlpReceiver"]:
        """Serve while the block runs."""
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.endpoint = f"http://{host}:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


def _key(span: SpanRecord) -> str | None:
    value = span.attributes.get("tidegate.workload.key")
    return value if isinstance(value, str) else None


def admission_trace_problems(
    spans: Sequence[SpanRecord],
    *,
    admitted: Iterable[str],
    preemptions: Mapping[str, Sequence[str]] | None = None,
    services: Iterable[str] = (),
    complete: bool = True,
) -> list[str]:
    """What is wrong with the traces of ``admitted`` workloads (keys) and of the preemptions
    (preemptor key → victim keys) in ``spans``; empty when nothing is.

    Checked: no span anywhere has a parent id that no span has; each workload has exactly one
    exported ``workload`` root and every span naming it is in that root's trace; its trace has
    an ``admission decision`` of kind ``admitted`` naming the queue and the placement, every
    decision names a reason, a ``bind pods`` span shows its pods bound, and each of
    ``services`` (``service.name``, e.g. ``tidegate-topology-cache``) made a span in it; each
    preemptor's trace has a ``select victims`` span naming exactly its victims and linking
    each victim's trace.

    ``complete=False`` is for a run that SIGKILLed a service, which loses the spans it had not
    exported yet (docs/operations.md): dangling parents and what each admitted workload's
    trace holds (decisions, bind, services) are then not checked; one exported root per
    workload, no span of it in another trace, and the victim searches still are.
    """
    required = sorted(set(services))
    ids = {span.span_id for span in spans}
    problems = [
        f"span {span.name!r} ({span.service}) points at parent {span.parent_id},"
        " which was not exported"
        for span in spans
        if complete and span.parent_id is not None and span.parent_id not in ids
    ]
    roots: dict[str, list[SpanRecord]] = {}
    for span in spans:
        key = _key(span)
        if span.name == ROOT and span.parent_id is None and key is not None:
            roots.setdefault(key, []).append(span)
    preemptions = preemptions or {}
    keys = set(admitted) | set(preemptions) | {v for vs in preemptions.values() for v in vs}
    trace_of: dict[str, str] = {}
    for key in sorted(keys):
        found = roots.get(key, [])
        if len(found) != 1:
            problems.append(f"{key}: {len(found)} exported root spans, expected exactly one")
            continue
        trace_of[key] = found[0].trace_id
        elsewhere = {s.trace_id for s in spans if _key(s) == key} - {found[0].trace_id}
        if elsewhere:
            problems.append(f"{key}: spans in {len(elsewhere)} other traces than its own")
    for key in sorted(set(admitted) & set(trace_of) if complete else ()):
        own = [s for s in spans if s.trace_id == trace_of[key]]
        decisions = [s for s in own if s.name == DECISION]
        admissions = [
            s for s in decisions if s.attributes.get("tidegate.decision.kind") == "admitted"
        ]
        if not admissions:
            problems.append(f"{key}: no admission decision span in its trace")
        for span in admissions:
            if not span.attributes.get("tidegate.queue.name"):
                problems.append(f"{key}: an admission span names no queue")
            if not span.attributes.get("tidegate.placement.domains"):
                problems.append(f"{key}: an admission span names no placement")
        if not any(s.name == BIND for s in own):
            problems.append(f"{key}: no bind pods span: its trace does not reach its pods bound")
        present = {s.service for s in own}
        problems.extend(
            f"{key}: no span of {service} in its trace"
            for service in required
            if service not in present
        )
        problems.extend(
            f"{key}: a decision span names no reason"
            for span in decisions
            if not span.attributes.get("tidegate.reason")
        )
    for preemptor, victims in sorted(preemptions.items()):
        if preemptor not in trace_of:
            continue
        searches = [
            s
            for s in spans
            if s.trace_id == trace_of[preemptor]
            and s.name == VICTIMS
            and tuple(s.attributes.get("tidegate.preemption.victims") or ()) == tuple(victims)
        ]
        if not searches:
            problems.append(f"{preemptor}: no select victims span naming {list(victims)}")
            continue
        linked = {trace_id for trace_id, _ in searches[0].links}
        problems.extend(
            f"{preemptor}: the victim search does not link {victim}'s trace"
            for victim in victims
            if victim in trace_of and trace_of[victim] not in linked
        )
    return problems
