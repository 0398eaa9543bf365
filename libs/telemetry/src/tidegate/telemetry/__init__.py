"""OpenTelemetry tracing and JSON logging for tidegate.

Why: one trace must follow a workload through every service, and every log line must say
which trace it belongs to. This package sets up the tracer provider from the standard
``OTEL_*`` variables (:mod:`.tracing`), carries W3C trace context in message headers and names
the messaging spans (:mod:`.messaging`), makes the spans of a workload's own trace
(:mod:`.workload`), and formats logs as JSON lines (:mod:`.logs`).
It does not know about NATS: :mod:`tidegate.bus` calls it with plain header dicts.
"""

from tidegate.telemetry.logs import JsonFormatter, setup_logging
from tidegate.telemetry.messaging import (
    batch_span,
    consumer_span,
    extract,
    inject,
    producer_span,
    traced_subject,
)
from tidegate.telemetry.tracing import (
    TRACE_FILE_ENV,
    JsonLinesSpanExporter,
    build_tracer_provider,
    flush_spans,
    forced_ids,
    setup_tracing,
    shutdown_tracing,
)
from tidegate.telemetry.workload import (
    continuing,
    decision_span,
    export_workload_root,
    newly_bound,
    note_pod_released,
    pods_bound_span,
    release_span,
    trace_id_of,
    victim_choice_span,
    workload_trace,
    workload_trace_context,
)

__all__ = [
    "TRACE_FILE_ENV",
    "JsonFormatter",
    "JsonLinesSpanExporter",
    "batch_span",
    "build_tracer_provider",
    "consumer_span",
    "continuing",
    "decision_span",
    "export_workload_root",
    "extract",
    "flush_spans",
    "forced_ids",
    "inject",
    "newly_bound",
    "note_pod_released",
    "pods_bound_span",
    "producer_span",
    "release_span",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
    "trace_id_of",
    "traced_subject",
    "victim_choice_span",
    "workload_trace",
    "workload_trace_context",
]
