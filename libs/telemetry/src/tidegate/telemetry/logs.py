"""JSON logs, one object per line, each carrying the current trace id.

Why: logs are read by machines (Loki, Elasticsearch, ``jq``) and joined to traces by
``trace_id``. Each line has ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``,
``trace_id`` and ``span_id`` (hex, only while a span is recording), ``exception`` when one is
logged, and every ``extra={...}`` field the caller passed. This module does not decide what
to log; services do.
"""

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Final

from opentelemetry import trace

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record``; values JSON cannot hold are written with ``str()``."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = trace.format_trace_id(span_context.trace_id)
            entry["span_id"] = trace.format_span_id(span_context.span_id)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup_logging(level: str = "INFO", *, stream: IO[str] | None = None) -> None:
    """Send every log record of the process to ``stream`` (stderr) as JSON lines.

    Replaces the root logger's handlers, so calling it twice does not duplicate lines.
    ``level`` is a standard level name (DEBUG, INFO, WARNING, ERROR); ValueError otherwise.
    """
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
