"""The ``recorded`` fixture of the telemetry tests: a tracer and the spans it finished."""

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from tidegate.telemetry.tracing import ForcedIdGenerator


@pytest.fixture
def recorded() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    """A tracer (random ids, but those :func:`tidegate.telemetry.tracing.forced_ids` names)
    recording in memory, and its exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=ForcedIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()
