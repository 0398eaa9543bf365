"""The process's tracer provider, configured from environment variables only.

Standard OpenTelemetry variables decide where spans go, so operators configure tidegate like
any other instrumented program:

* ``OTEL_SDK_DISABLED=true`` turns tracing off.
* ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set: spans go to an
  OTLP/HTTP collector (the exporter reads its own ``OTEL_EXPORTER_OTLP_*`` options).
* ``TIDEGATE_TRACE_FILE=/path``: spans are appended to that file as JSON lines (one span per
  line, the SDK's own JSON form). Handy for the demo and for tests that follow a trace across
  processes.
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` override the service name we pass in.
* ``TIDEGATE_TRACE_TRANSPORT=true`` also records the messaging spans of pods, nodes, capacity
  and configuration (off by default: see :mod:`.messaging`).

The provider's id generator can be told the ids of the next span (:func:`forced_ids`): that is
how the root span of a workload's trace gets the ids its derived ``traceparent`` already named
(:mod:`.workload`).

With none of these set no provider is installed: no spans are made, but the trace context a
process receives is passed on to what it publishes (see :mod:`.messaging`), so an untraced
service does not cut a trace in two. This module does not create spans.
"""

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util import ns_to_iso_str
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id
from opentelemetry.util.types import Attributes

TRACE_FILE_ENV: Final = "TIDEGATE_TRACE_FILE"
"""Environment variable naming a JSON-lines file that receives every finished span."""

_OTLP_ENDPOINT_ENVS: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_installed: TracerProvider | None = None

_forced: ContextVar[tuple[int, int] | None] = ContextVar("tidegate_forced_ids", default=None)


class ForcedIdGenerator(RandomIdGenerator):
    """Random ids, except inside :func:`forced_ids`, where the next root span gets the ids
    given there (a trace id and a span id named in advance by a derived ``traceparent``)."""

    def generate_trace_id(self) -> int:
        """The forced trace id if one is set, else a random one."""
        forced = _forced.get()
        return forced[0] if forced is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        """The forced span id if one is set, else a random one."""
        forced = _forced.get()
        return forced[1] if forced is not None else super().generate_span_id()


@contextmanager
def forced_ids(trace_id: int, span_id: int) -> Iterator[None]:
    """Inside the block, the span started (with no parent) gets exactly these ids.

    Start exactly one span in the block: every span started there would get the same ids.
    Only providers built by :func:`build_tracer_provider` honour it.
    """
    token = _forced.set((trace_id, span_id))
    try:
        yield
    finally:
        _forced.reset(token)


class JsonLinesSpanExporter(SpanExporter):
    """Appends each span as one JSON object per line, in the SDK's own JSON form
    (:func:`span_json`).

    Several processes may share a file: each batch is written with one ``write`` call on a file
    opened for appending. The file is closed on shutdown.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._file: IO[bytes] | None = path.open("ab")
        self._resources: dict[int, tuple[Resource, msgspec.Raw]] = {}

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write the spans; FAILURE once shut down."""
        if self._file is None:
            return SpanExportResult.FAILURE
        self._file.write(b"".join(span_json(span, self._resource_json(span)) for span in spans))
        self._file.flush()
        return SpanExportResult.SUCCESS

    def _resource_json(self, span: ReadableSpan) -> msgspec.Raw:
        # Every span of a provider carries the same Resource object: encode it once.
        cached = self._resources.get(id(span.resource))
        if cached is None or cached[0] is not span.resource:
            cached = (span.resource, msgspec.Raw(span.resource.to_json(indent=None).encode()))
            self._resources[id(span.resource)] = cached
        return cached[1]

    def shutdown(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Every export already flushed the file."""
        return True


_JSON: Final = msgspec.json.Encoder()


def span_json(span: ReadableSpan, resource: msgspec.Raw) -> bytes:
    """``span`` as one line of JSON, newline included: the object ``ReadableSpan.to_json``
    builds, with the resource's JSON given (it is the same for every span of a process).

    The SDK's own method re-encodes the resource and formats each timestamp with ``strftime``
    for every span, about four times the cost of this (docs/benchmarks.md).
    """
    status: dict[str, str] = {"status_code": span.status.status_code.name}
    if span.status.description:
        status["description"] = span.status.description
    line = _JSON.encode(
        {
            "name": span.name,
            "context": _context_json(span.context) if span.context else None,
            "kind": str(span.kind),
            "parent_id": None
            if span.parent is None
            else f"0x{format_span_id(span.parent.span_id)}",
            "start_time": _iso_time(span.start_time) if span.start_time else None,
            "end_time": _iso_time(span.end_time) if span.end_time else None,
            "status": status,
            "attributes": _attributes_json(span.attributes),
            "events": [
                {
                    "name": event.name,
                    "timestamp": _iso_time(event.timestamp),
                    "attributes": _attributes_json(event.attributes),
                }
                for event in span.events
            ],
            "links": [
                {
                    "context": _context_json(link.context),
                    "attributes": _attributes_json(link.attributes),
                }
                for link in span.links
            ],
            "resource": resource,
        }
    )
    return line + b"\n"


def _context_json(context: SpanContext) -> dict[str, str]:
    return {
        "trace_id": f"0x{format_trace_id(context.trace_id)}",
        "span_id": f"0x{format_span_id(context.span_id)}",
        "trace_state": repr(context.trace_state),
    }


def _attributes_json(attributes: Attributes) -> Mapping[str, object] | None:
    return None if attributes is None else dict(attributes)


def _iso_time(nanoseconds: int) -> datetime | str:
    # The SDK's own conversion; msgspec writes the same text but for a whole second, where it
    # leaves out the fraction that strftime's "%f" writes as ".000000".
    moment = datetime.fromtimestamp(nanoseconds / 1e9, tz=UTC)
    return moment if moment.microsecond else ns_to_iso_str(nanoseconds)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def build_tracer_provider(
    service_name: str, *, env: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """A tracer provider configured from ``env`` (default: ``os.environ``), not installed.

    Returns None when ``OTEL_SDK_DISABLED`` is true or no destination is configured.
    Exporters are added for every destination that is (an OTLP endpoint and a trace file may
    both be set).
    """
    environ = os.environ if env is None else env
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return None
    otlp = any(environ.get(name) for name in _OTLP_ENDPOINT_ENVS)
    trace_file = environ.get(TRACE_FILE_ENV)
    if not otlp and not trace_file:
        return None
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME from os.environ.
    resource = Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource, id_generator=ForcedIdGenerator())
    if otlp:
        # Imported here: the OTLP exporter pulls in requests/protobuf, which a process that
        # only writes a trace file (or nothing) should not pay for at start-up.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        if endpoint is None:
            base = environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/")
            endpoint = f"{base}/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    if trace_file:
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(Path(trace_file))))
    return provider


def setup_tracing(service_name: str, *, env: Mapping[str, str] | None = None) -> None:
    """Build the provider from the environment and install it as the global one.

    Call once per process, at start. A second call is ignored (OpenTelemetry allows one global
    provider per process).
    """
    global _installed
    if _installed is not None:
        return
    provider = build_tracer_provider(service_name, env=env)
    if provider is None:
        return
    trace.set_tracer_provider(provider)
    _installed = provider


def flush_spans(timeout_millis: int = 5000) -> bool:
    """Export what is buffered now (blocking; run it in a thread from async code). True when
    everything was exported in time, or when nothing is installed."""
    return _installed.force_flush(timeout_millis) if _installed is not None else True


def shutdown_tracing() -> None:
    """Export what is buffered and stop the exporters; call before the process exits."""
    global _installed
    if _installed is not None:
        _installed.force_flush()
        _installed.shutdown()
        _installed = None
