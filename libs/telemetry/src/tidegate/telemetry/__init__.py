"""OpenTelemetry tracing and JSON logging for tidegate.

Why: one trace must follow a workload through every service, and every log line must say
which trace it belongs to. This package sets up the tracer provider from the standard
``OTEL_*`` variables (:mod:`.tracing`), carries W3C trace context in message headers and names
the messaging spans (:mod:`.messaging`), and formats logs as JSON lines (:mod:`.logs`).
It does not know about NATS: :mod:`tidegate.bus` calls it with plain header dicts.
"""

from tidegate.telemetry.logs import JsonFormatter, setup_logging
from tidegate.telemetry.messaging import (
    batch_span,
    consumer_span,
    extract,
    inject,
    producer_span,
)
from tidegate.telemetry.tracing import (
    TRACE_FILE_ENV,
    JsonLinesSpanExporter,
    build_tracer_provider,
    setup_tracing,
    shutdown_tracing,
)

__all__ = [
    "TRACE_FILE_ENV",
    "JsonFormatter",
    "JsonLinesSpanExporter",
    "batch_span",
    "build_tracer_provider",
    "consumer_span",
    "extract",
    "inject",
    "producer_span",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
]
