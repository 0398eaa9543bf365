"""W3C trace context in message headers, and the spans around publish and process.

Naming follows the OpenTelemetry messaging conventions (as FastStream does): a PRODUCER span
``"<subject> publish"`` whose context is injected into the message headers, and a CONSUMER span
``"<subject> process"`` whose parent is the context extracted from them. A span that handles
many messages at once (a batch) cannot have many parents, so it gets one *link* per message
instead and starts a trace of its own.

Only messages about workloads are traced by default: the subjects ``tg.<c>.workload.…`` (the
workload's state) and ``tg.<c>.decision.…`` (decisions about it), which carry the workload's
own trace (:mod:`.workload`). Messages about pods, nodes, capacity and configuration are
transport: thousands of them, each its own trace, explaining nothing about one workload. Their
spans are not made unless ``TIDEGATE_TRACE_TRANSPORT=true``; their trace context still flows.

Headers are plain ``dict[str, str]``; this module does not know about NATS. The propagator is
OpenTelemetry's global one (W3C ``traceparent``/``tracestate`` plus baggage unless
``OTEL_PROPAGATORS`` says otherwise). Every function takes an optional tracer so tests can use
a provider of their own; by default the global provider's tracer is used.
"""

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Tracer

_TRACER_NAME: Final = "tidegate"
_SYSTEM: Final = "nats"

TRANSPORT_ENV: Final = "TIDEGATE_TRACE_TRANSPORT"
"""Environment variable: ``true`` records the spans of transport messages too."""

_TRACED_KINDS: Final = frozenset({"workload", "decision"})


def traced_subject(subject: str) -> bool:
    """Whether messages on ``subject`` get spans: workload and decision subjects always,
    others only when ``TIDEGATE_TRACE_TRANSPORT`` is true."""
    parts = subject.split(".", 3)
    if len(parts) >= 3 and parts[0] == "tg" and parts[2] in _TRACED_KINDS:
        return True
    return os.environ.get(TRANSPORT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


_cached: tuple[trace.TracerProvider, Tracer] | None = None


def tidegate_tracer(tracer: Tracer | None = None) -> Tracer:
    """``tracer``, or tidegate's tracer from the global provider (made once per provider:
    ``get_tracer`` builds a new tracer on every call, a cost on every message)."""
    global _cached
    if tracer is not None:
        return tracer
    provider = trace.get_tracer_provider()
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_TRACER_NAME))
    return _cached[1]


def tracing_off(tracer: Tracer | None) -> bool:
    """True when no SDK provider is installed: spans would be no-ops, so skip making them.

    Trace context still flows (see the callers): a process without tracing passes on the
    context it received, so the trace is not cut in two.
    """
    if tracer is not None:
        return False
    return isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def inject(headers: dict[str, str], context: otel_context.Context | None = None) -> None:
    """Write the trace context (the current one unless ``context`` is given) into ``headers``."""
    propagate.inject(headers, context=context)


def extract(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by ``headers`` (an empty context when they carry none)."""
    return propagate.extract(dict(headers or {}))


def _attributes(subject: str, operation: str, message_id: str | None) -> dict[str, str]:
    attributes = {
        "messaging.system": _SYSTEM,
        "messaging.destination.name": subject,
        "messaging.operation.type": operation,
    }
    if message_id is not None:
        attributes["messaging.message.id"] = message_id
    return attributes


@contextmanager
def producer_span(
    subject: str,
    headers: dict[str, str],
    *,
    message_id: str | None = None,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A PRODUCER span ``"<subject> publish"``, a child of the current span.

    Its context is injected into ``headers`` before the body runs, so publish the message
    inside the ``with`` block.
    """
    if tracing_off(tracer) or not traced_subject(subject):
        inject(headers)
        yield trace.INVALID_SPAN
        return
    with tidegate_tracer(tracer).start_as_current_span(
        f"{subject} publish",
        kind=SpanKind.PRODUCER,
        attributes=_attributes(subject, "publish", message_id),
    ) as span:
        inject(headers)
        yield span


@contextmanager
def consumer_span(
    subject: str,
    headers: Mapping[str, str] | None,
    *,
    message_id: str | None = None,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A CONSUMER span ``"<subject> process"`` whose parent is the producer's context.

    The span is current inside the block, so logs and further publishes join the same trace.
    """
    if tracing_off(tracer) or not traced_subject(subject):
        token = otel_context.attach(extract(headers))
        try:
            yield trace.INVALID_SPAN
        finally:
            otel_context.detach(token)
        return
    with tidegate_tracer(tracer).start_as_current_span(
        f"{subject} process",
        context=extract(headers),
        kind=SpanKind.CONSUMER,
        attributes=_attributes(subject, "process", message_id),
    ) as span:
        yield span


@contextmanager
def batch_span(
    name: str,
    headers: Sequence[Mapping[str, str] | None],
    *,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A CONSUMER span ``"<name> process"`` linked to the producer of every message in a batch.

    Messages without trace context contribute no link.
    """
    links = []
    for message_headers in headers:
        span_context = trace.get_current_span(extract(message_headers)).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    with tidegate_tracer(tracer).start_as_current_span(
        f"{name} process",
        context=otel_context.Context(),
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": _SYSTEM,
            "messaging.operation.type": "process",
            "messaging.batch.message_count": len(headers),
        },
    ) as span:
        yield span
