"""An abort the API server refuses for good (403 on the victim Job's patch, from a fault proxy
in front of the simulated API server) never leaves the victim running with its quota released:
its pods are evicted all the same, the failure is visible (PreemptionAbortFailed Warning
Events on the victim and the preemptor, ``tidegate_preemption_abort_failures_total``) and the
abort is retried until the API server allows it; then the preemption is finished."""

from pathlib import Path
from typing import Any

from tidegate.kube import EVENTS, JOBS
from tidegate.model import Preempted
from tidegate.model.names import PREEMPTED_BY_ANNOTATION
from tidegate.testing.faultproxy import Refuse, kube_fault_proxy

from .conftest import NAMESPACE, Harness
from .test_preemption_service import (
    evicted_record,
    gone,
    inference_arrives,
    running_training_job,
)


async def abort_failed_events(h: Harness) -> dict[str, dict[str, Any]] | None:
    """The PreemptionAbortFailed Events on ``train`` and ``serve``, once both exist."""
    listed = await h.kube.list_objects(EVENTS, namespace=NAMESPACE)
    events = {
        str(e["involvedObject"]["name"]): dict(e)
        for e in listed.items
        if e.get("reason") == "PreemptionAbortFailed"
    }
    return events if {"train", "serve"} <= set(events) else None


async def test_a_refused_abort_still_evicts_the_victim_and_is_retried_visibly(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    original = await running_training_job(h, abort=True)
    async with kube_fault_proxy(h.sim.url) as proxy:
        proxy.arm("PATCH", f"/namespaces/{NAMESPACE}/jobs/train", Refuse(403), times=100_000)
        service = await h.start_preemption(
            kubeconfig=proxy.write_kubeconfig(tmp_path / "proxied"), kube_max_attempts=1
        )

        def abort_failures() -> float:
            value = service.metrics.registry.get_sample_value(
                "tidegate_preemption_abort_failures_total"
            )
            return value or 0.0

        await inference_arrives(h)
        await h.until(lambda: h.of(Preempted), what="the preempted decision")
        # The victim's quota is released from here on: its pods go although its Job cannot
        # be suspended.
        await h.until_async(lambda: gone(h, original), what="every original pod gone")
        events = await h.until_async(
            lambda: abort_failed_events(h), what="PreemptionAbortFailed Events"
        )
        assert events["train"]["type"] == "Warning"
        assert (
            "cannot suspend or mark the Job of team/train for team/serve"
            in (events["serve"]["message"])
        )
        assert "its pods are evicted all the same" in events["train"]["message"]
        await h.until(lambda: abort_failures() >= 3, what="the abort retried")
        assert proxy.count("PATCH", f"/namespaces/{NAMESPACE}/jobs/train") >= 3
        record = await h.record("serve")
        assert record is not None
        assert not record.evicted  # unfinished while the abort is not done
        job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
        assert not job["spec"].get("suspend")

        proxy.disarm()
        await h.until_async(lambda: evicted_record(h), what="the preemption finished")
        job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["annotations"][PREEMPTED_BY_ANNOTATION] == f"{NAMESPACE}/serve"
        assert len(h.of(Preempted)) == 1
