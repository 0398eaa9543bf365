"""The preemption service against a real nats-server, the real watcher and a simulated cluster
with its whole control plane: whole-gang eviction, restart and abort modes, a crash between
the publication of the decision and the evictions, and no ping-pong."""

import socket
import time
from pathlib import Path
from typing import Any

import yaml

from tidegate.kube import DEPLOYMENTS, JOBS, PODS
from tidegate.kube.ungate import has_gate
from tidegate.model import Admitted, PodState, Preempted, PreemptRequested, subjects
from tidegate.model.ledger import PreemptionRecord
from tidegate.preemption.config import Settings
from tidegate.runtime import Service

from .conftest import (
    GATE,
    GPU,
    NAMESPACE,
    Harness,
    inference_deployment,
    training_job,
)


def gated(pod: dict[str, Any]) -> bool:
    return has_gate(pod, GATE)


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods not being deleted."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def running_training_job(h: Harness, *, abort: bool = False) -> set[str]:
    """A 4-pod training Job filling all four nodes, admitted and running; its pods' UIDs."""
    await h.create(JOBS, training_job("train", pods=4, abort=abort))
    await h.until(lambda: h.workload("train") is not None, what="the Job on the bus")

    async def four_gated() -> bool:
        return len([p for p in await h.pods("train-") if gated(p)]) == 4

    await h.until_async(four_gated, what="four gated Job pods")
    await h.admit("train")
    await h.ungate("train-", [n.name for n in h.sim.layout.nodes])

    def all_running() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/train"
        ]
        return len(pods) == 4 and all(p.phase == "Running" and p.node_name for p in pods)

    await h.until(all_running, what="the Job's pods running")
    return {p["metadata"]["uid"] for p in await h.pods("train-")}


async def inference_arrives(h: Harness, name: str = "serve", *, replicas: int = 2) -> None:
    """An inference Deployment is created and admission asks preemption to make room."""
    await h.create(DEPLOYMENTS, inference_deployment(name, replicas=replicas))
    await h.until(lambda: h.workload(name) is not None, what=f"{name} on the bus")
    await h.request_preemption(name)


async def gone(h: Harness, uids: set[str]) -> bool:
    return not uids & {p["metadata"]["uid"] for p in await h.pods("train-")}


async def evicted_record(h: Harness, preemptor: str = "serve") -> PreemptionRecord | None:
    """The record of ``team/<preemptor>`` once it says its victims were evicted whole."""
    record = await h.record(preemptor)
    return record if record is not None and record.evicted else None


async def test_an_inference_deployment_evicts_a_lower_priority_training_job_whole(
    harness: Harness,
) -> None:
    h = harness
    original = await running_training_job(h)
    await h.start_preemption()
    await inference_arrives(h)

    await h.until(lambda: h.of(Preempted), what="a preempted decision")
    (decision,) = h.of(Preempted)
    assert decision.preemptor == f"{NAMESPACE}/serve"
    assert decision.preemptor_uid == h.workload("serve").uid  # type: ignore[union-attr]
    assert decision.victims == [f"{NAMESPACE}/train"]
    assert decision.mode == {f"{NAMESPACE}/train": "restart"}
    # The inference gang needs two nodes; they are nominated for it.
    assert len(decision.nominated) == 2
    assert all(amount[GPU] == 8 and amount["pods"] == 1 for amount in decision.nominated.values())

    # The whole gang is evicted (all four pods, though two nodes were enough) ...
    await h.until_async(lambda: gone(h, original), what="every original pod gone")

    # ... by suspending the Job for tidegate (re-queued): its controller deleted the pods and
    # counted no failure; it gets no pods until it is admitted again (the ungater resumes it).
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    assert job["spec"]["suspend"] is True
    assert (
        job["metadata"]["annotations"]["tidegate.io/requeued"] == f"preempted by {NAMESPACE}/serve"
    )
    assert live(await h.pods("train-")) == []
    assert not job.get("status", {}).get("failed")
    await h.until(
        lambda: (w := h.workload("train")) is not None and w.suspended and w.resume_on_admission,
        what="the Job queued for tidegate",
    )

    # The decision continues the trace of the request (the workload's trace).
    assert h.trace_id(Preempted) == h.trace_id(PreemptRequested)
    serve = h.workload("serve")
    assert serve is not None
    assert h.trace_id(Preempted) == serve.trace_context["traceparent"].split("-")[1]

    record = await h.until_async(lambda: evicted_record(h), what="the record marked evicted")
    assert record.published
    assert record.published_at is not None
    assert record.evicted_at is not None
    assert record.published_at <= record.evicted_at
    assert {pod.uid for victim in record.victims for pod in victim.pods} == original


async def test_abort_mode_suspends_and_marks_the_job(harness: Harness) -> None:
    h = harness
    original = await running_training_job(h, abort=True)
    await h.start_preemption()
    await inference_arrives(h)

    await h.until(lambda: h.of(Preempted), what="a preempted decision")
    (decision,) = h.of(Preempted)
    assert decision.mode == {f"{NAMESPACE}/train": "abort"}
    await h.until_async(lambda: gone(h, original), what="every original pod gone")
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"]["tidegate.io/preempted-by"] == f"{NAMESPACE}/serve"
    # A suspended Job gets no new pods.
    assert live(await h.pods("train-")) == []


def dead_kubeconfig(path: Path) -> Path:
    """A kubeconfig naming an API server that refuses every connection."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dead", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "dead", "user": {"token": "x"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "dead"}}],
        "current-context": "dead",
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def published_not_evicted(
    h: Harness, tmp_path: Path
) -> tuple[set[str], Service[Settings], PreemptionRecord]:
    """A training Job runs and an inference workload arrives; the preemption leader started
    here records the preemption and publishes its decision (before any eviction) but cannot
    reach the API server to evict. The training Job's original pods, that leader, its record."""
    original = await running_training_job(h)
    first = await h.start_preemption(
        kubeconfig=dead_kubeconfig(tmp_path / "dead"),
        kube_max_attempts=1,
        eviction_retry_seconds=0.1,
    )
    await inference_arrives(h)

    async def published_record() -> PreemptionRecord | None:
        record = await h.record("serve")
        return record if record is not None and record.published else None

    recorded = await h.until_async(published_record, what="the published preemption record")
    return original, first, recorded


async def test_a_preemption_published_but_not_evicted_is_finished_once_after_a_restart(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    # The first instance cannot evict, then stops.
    original, first, recorded = await published_not_evicted(h, tmp_path)
    assert not recorded.evicted
    assert [v.key for v in recorded.victims] == [f"{NAMESPACE}/train"]

    def failed_evictions() -> float:
        value = first.metrics.registry.get_sample_value(
            "tidegate_preemption_pod_evictions_total", {"result": "failed"}
        )
        return value or 0.0

    await h.until(lambda: failed_evictions() >= 4, what="the evictions tried and failed")
    assert await h.stop(first) == 0
    await h.until(lambda: h.of(Preempted), what="the preempted decision")
    (decision,) = h.of(Preempted)
    assert decision.victims == [f"{NAMESPACE}/train"]
    assert decision.nominated == recorded.decision.nominated
    assert h.trace_id(Preempted) == h.trace_id(PreemptRequested)
    assert len(live(await h.pods("train-"))) == 4  # nothing was evicted
    unfinished = await h.record("serve")
    assert unfinished is not None
    assert not unfinished.evicted

    # A new instance takes over and finishes exactly those evictions, without a new search
    # and without publishing again.
    await h.start_preemption()
    await h.until_async(lambda: gone(h, original), what="every original pod gone")
    finished = await h.until_async(lambda: evicted_record(h), what="the record marked evicted")
    assert finished.published_at == recorded.published_at
    assert finished.victims == recorded.victims

    # The Job was re-queued by suspending it; the ungater would unsuspend it on its next
    # admission (played here by hand), after which nothing of this preemption touches it.
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    assert job["spec"]["suspend"] is True
    await h.kube.patch(JOBS, "train", {"spec": {"suspend": False}}, namespace=NAMESPACE)

    async def recreated() -> list[dict[str, Any]]:
        pods = live(await h.pods("train-"))
        return pods if len(pods) == 4 else []

    replacements = {p["metadata"]["uid"] for p in await h.until_async(recreated)}

    # The same request again (a redelivery) and the reconcile loop change nothing: the
    # Job is not suspended again, its new pods stay, and nothing is published twice.
    (request,) = [d for d, _ in h.decisions if isinstance(d, PreemptRequested)]
    await h.publish(subjects.decision(h.cluster, "preempt-requested", NAMESPACE, "serve"), request)
    await h.until(lambda: len(h.of(PreemptRequested)) == 2, what="the repeated request")
    service = h.services.running[-1][0]

    def handled(outcome: str) -> float:
        value = service.metrics.registry.get_sample_value(
            "tidegate_preemption_requests_total", {"outcome": outcome}
        )
        return value or 0.0

    await h.until(lambda: handled("duplicate") == 1, what="the repeat handled")
    assert len(h.of(Preempted)) == 1
    assert handled("resumed") == 0  # finished at takeover, not by the repeated request
    still = live(await h.pods("train-"))
    assert {p["metadata"]["uid"] for p in still} == replacements
    job = await h.kube.get(JOBS, "train", namespace=NAMESPACE)
    assert not job["spec"].get("suspend")


async def test_no_ping_pong(harness: Harness) -> None:
    h = harness
    started = time.time()
    await running_training_job(h)
    service = await h.start_preemption()
    await inference_arrives(h)
    await h.until(lambda: h.of(Preempted), what="a preempted decision")
    (decision,) = h.of(Preempted)

    # Admission releases the victim and admits the inference gang on the nominated nodes;
    # the ungater releases its pods.
    await h.release("train")
    await h.admit("serve")
    await h.ungate("serve-", sorted(decision.nominated))

    def serve_running() -> list[PodState]:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState)
            and m.workload == f"{NAMESPACE}/serve"
            and m.phase == "Running"
            and not m.terminating
        ]
        return pods if len(pods) == 2 else []

    await h.until(serve_running, what="the inference pods running")
    serving = {p.uid for p in serve_running()}

    # The victim's GPUs times the time it held them are counted as lost, by its queue.
    train = h.workload("train")
    assert train is not None
    (admitted,) = [d for d in h.of(Admitted) if d.workload == f"{NAMESPACE}/train"]
    gpus = admitted.charged["nvidia.com/gpu"]

    def lost() -> float:
        value = service.metrics.registry.get_sample_value(
            "tidegate_preemption_gpu_hours_lost_total", {"queue": train.queue or ""}
        )
        return value or 0.0

    await h.until(lambda: lost() > 0, what="the GPU-hours lost counted")
    assert lost() <= gpus * (time.time() - started) / 3600

    def handled(outcome: str) -> float:
        value = service.metrics.registry.get_sample_value(
            "tidegate_preemption_requests_total", {"outcome": outcome}
        )
        return value or 0.0

    # The re-queued training Job never preempts (not even if asked) ...
    await h.request_preemption("train")
    await h.until(lambda: handled("not-a-reclaimer") == 1, what="the training request refused")
    # ... and the inference gang is never a victim, even of a higher-priority inference gang.
    await h.create(DEPLOYMENTS, inference_deployment("urgent", replicas=3, priority_class="urgent"))
    await h.until(lambda: h.workload("urgent") is not None, what="urgent on the bus")
    await h.request_preemption("urgent")
    await h.until(lambda: handled("no-victims") == 1, what="the urgent request answered")

    assert len(h.of(Preempted)) == 1
    assert {p.uid for p in serve_running()} == serving
    pods = await h.kube.list_objects(PODS, namespace=NAMESPACE)
    serve_pods = [p for p in pods.items if str(p["metadata"]["name"]).startswith("serve-")]
    assert all(not p["metadata"].get("deletionTimestamp") for p in serve_pods)
