"""End to end over OTLP: every service exports its spans to a real OTLP/HTTP endpoint.

The test serves ``POST /v1/traces`` in its own process (:class:`tidegate.testing.traces.
OtlpReceiver`, which decodes the opentelemetry-proto ``ExportTraceServiceRequest`` messages),
and points every service at it with the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_BSP_SCHEDULE_DELAY``). A tidal run: two training gangs fill a rack each, an inference
Deployment reclaims one of them. Once the services have stopped (and flushed), the spans that
arrived must have the shape docs/operations.md promises: exactly one exported root per admitted
or preempted workload, no span pointing at a parent that never arrived, decision spans naming
queue, reason and placement, and the victim search linking the victim's own trace.
"""

from pathlib import Path

import pytest

from tidegate.model import Admitted, Preempted
from tidegate.testing.traces import OtlpReceiver, admission_trace_problems

from .system import running_system
from .tidal import PRIORITY_CLASSES, QUEUES, inference, training

NAMESPACE = "otlp"
SERVE = inference("serve", pods=2)


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_the_traces_that_arrive_over_otlp_have_the_admission_shape(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    async with receiver.running():
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"}
        async with running_system(
            tmp_path, nodes="1x2x4x8gpu", time_scale=0.02, namespace=NAMESPACE, env=env
        ) as system:
            await system.set_up(priority_classes=PRIORITY_CLASSES, queues=QUEUES)
            await system.submit(
                training("train-a", pods=4, duration=3600),
                training("train-b", pods=4, duration=3600),
            )
            await system.until(
                lambda: system.running("train-a", 4) and system.running("train-b", 4),
                within=60,
                what="both training gangs running",
            )
            await system.submit(SERVE)
            await system.until(lambda: system.of(Preempted), within=60, what="a preemption")
            await system.until(lambda: system.running("serve", 2), within=60, what="serve")
            preempted = system.of(Preempted)
            admitted = sorted({a.workload for a in system.of(Admitted)})
        # The services have stopped, flushing what they buffered.
    spans = receiver.spans
    assert {s.service for s in spans} >= {
        "tidegate-watcher",
        "tidegate-topology-cache",
        "tidegate-admission",
        "tidegate-preemption",
        "tidegate-ungater",
    }
    preemptions = {p.preemptor: p.victims for p in preempted}
    assert set(admitted) >= {f"{NAMESPACE}/serve", f"{NAMESPACE}/train-a"}
    assert admission_trace_problems(spans, admitted=admitted, preemptions=preemptions) == []
    # Pods, nodes and capacity are transport: no spans of theirs by default.
    assert not [s for s in spans if s.name.startswith(("tg.e2e.pod.", "tg.e2e.capacity."))]
    # The ungater's releases name each pod's domain and rank.
    releases = [s for s in spans if s.name == "release pods"]
    assert releases
    assert any(s.attributes.get("tidegate.release.domains") for s in releases)
