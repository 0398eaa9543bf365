"""A simulated cluster, a real nats-server, the real watcher and preemption services, and a
harness that plays the services preemption depends on but that a test must control.

The simulated cluster runs its whole control plane (scheduler, kubelets, Job / ReplicaSet /
Deployment controllers, the admission gate on managed pods), so evicted Job pods come back
gated as they would in a real cluster. The watcher (a real :class:`~tidegate.runtime.Service`
in this process) mirrors it onto the state stream. The harness plays:

- the **topology-cache**: it follows the state stream and publishes every node's free capacity
  (allocatable minus the requests of the non-finished pods bound to it);
- **admission**: it publishes ``admitted`` and ``preempt-requested`` decisions when the test
  says so;
- the **ungater**: it removes the gate of a workload's pods with a hostname nodeSelector
  (a test that needs the ungater's own judgement runs the real one instead).

Everything it publishes goes through the same bus subjects the real services use, so the
preemption service cannot tell the difference.
"""

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context

from tidegate.bus import Bus, Ledger, Received, layout
from tidegate.kube import (
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    KubeClient,
    ResourceType,
)
from tidegate.kube.ungate import has_gate
from tidegate.model import (
    Admitted,
    CapacityNode,
    Message,
    NodeState,
    PodState,
    PreemptRequested,
    Released,
    Resources,
    Tombstone,
    TopologyAssignment,
    WorkloadState,
    subjects,
)
from tidegate.model import resources as res
from tidegate.model.events import ReleaseReason
from tidegate.model.ledger import PreemptionRecord, decode_preemption, preemption_key
from tidegate.preemption.app import setup as preemption_setup
from tidegate.preemption.config import Settings
from tidegate.runtime import Service
from tidegate.sim import SimCluster, SimSettings
from tidegate.telemetry import extract
from tidegate.testing import (
    RunningServices,
    envelope,
    following,
    simulated,
    until,
    until_async,
)
from tidegate.ungater.app import setup as ungater_setup
from tidegate.ungater.config import UngaterSettings
from tidegate.watcher.app import setup as watcher_setup
from tidegate.watcher.config import WatcherSettings

NAMESPACE = "team"
GATE = "tidegate.io/admission"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Harness:
    """The cluster, the bus, the services under test, and what the test observes."""

    sim: SimCluster
    kube: KubeClient
    bus: Bus
    cluster: str
    nats_url: str
    kubeconfig: Path
    state: dict[str, Message] = field(default_factory=dict)
    """Last message per state subject."""
    decisions: list[tuple[Message, dict[str, str]]] = field(default_factory=list)
    """Every decision on the stream, in order, with its headers."""
    decided_at: list[float] = field(default_factory=list)
    """When each of :attr:`decisions` arrived (``time.monotonic()``)."""
    seen_at: dict[str, float] = field(default_factory=dict)
    """Pod UID → when the state stream first showed the pod (monotonic)."""
    leaving_at: dict[str, float] = field(default_factory=dict)
    """Pod UID → when the state stream first showed the pod terminating or deleted
    (monotonic)."""
    released_uids: set[str] = field(default_factory=set)
    """UIDs of every pod the state stream ever showed without tidegate's gate."""
    services: RunningServices = field(
        default_factory=lambda: RunningServices(ready_within=20, stop_within=15)
    )
    """The services under test, running in this process."""
    sequence: int = 0
    plays_topology_cache: bool = True
    """Publish capacity from the state stream (off when the real topology-cache runs)."""
    _published_free: dict[str, Resources] = field(default_factory=dict)
    watcher: Service[Any] | None = None
    """The watcher the ``harness`` fixture started."""

    # ------------------------------------------------------------------ services

    def preemption_settings(self, **overrides: object) -> Settings:
        """Preemption settings for this test's cluster and simulated API server."""
        values: dict[str, object] = {
            "cluster": self.cluster,
            "nats_url": self.nats_url,
            "http_port": 0,
            "kubeconfig": self.kubeconfig,
            "lease_ttl_seconds": 2.0,
            "reconcile_interval_seconds": 0.2,
            "shutdown_grace_seconds": 2.0,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    async def start(self, service: Service[Any]) -> Service[Any]:
        """Run ``service`` in this process until the test ends; return once it is ready."""
        await self.services.start(service)
        return service

    async def start_watcher(self) -> Service[Any]:
        """The real watcher on the simulated cluster (returned, so a test can stop it)."""
        settings = WatcherSettings(
            cluster=self.cluster,
            nats_url=self.nats_url,
            http_port=0,
            kubeconfig=self.kubeconfig,
            kueue_topology_version="v1alpha1",
            absent_retry_seconds=0.5,
        )
        return await self.start(Service("watcher", settings, watcher_setup))

    async def start_preemption(self, **overrides: object) -> Service[Settings]:
        """A preemption instance; returns once it is ready (standby counts as ready)."""
        service = Service("preemption", self.preemption_settings(**overrides), preemption_setup)
        await self.start(service)
        return service

    async def start_ungater(self) -> None:
        """The real ungater (fast rounds, no webhook)."""
        settings = UngaterSettings(
            cluster=self.cluster,
            nats_url=self.nats_url,
            http_port=0,
            kubeconfig=self.kubeconfig,
            batch_window_seconds=0.05,
            webhook="off",
        )
        await self.start(Service("ungater", settings, ungater_setup))

    async def stop(self, service: Service[Any]) -> int:
        """Stop one service as SIGTERM would; its exit code."""
        return await self.services.stop(service)

    # ------------------------------------------------------------------ waiting

    async def until(
        self, check: Callable[[], object], *, within: float = 20.0, what: str = "condition"
    ) -> None:
        """Wait until ``check()`` is truthy; fail at once if a service stopped by itself."""
        await until(check, within=within, what=what, interval=0.05, alive=self.services.check)

    async def until_async(
        self, check: Callable[[], Any], *, within: float = 20.0, what: str = "condition"
    ) -> Any:
        """Like :meth:`until` for a coroutine function; returns its truthy result."""
        return await until_async(check, within=within, what=what, interval=0.05)

    # ------------------------------------------------------------------ observing

    def workload(self, name: str) -> WorkloadState | None:
        """The workload ``team/<name>`` as last published by the watcher."""
        found = self.state.get(subjects.workload(self.cluster, NAMESPACE, name))
        return found if isinstance(found, WorkloadState) else None

    def of(self, kind: type) -> list[Any]:
        """Decisions of one kind, in order."""
        return [d for d, _ in self.decisions if isinstance(d, kind)]

    def trace_id(self, kind: type, index: int = 0) -> str:
        """The trace id in the ``traceparent`` header of the ``index``-th decision of ``kind``."""
        headers = [h for d, h in self.decisions if isinstance(d, kind)][index]
        return headers["traceparent"].split("-")[1]

    async def pods(self, prefix: str) -> list[dict[str, Any]]:
        """Pods in the namespace whose name starts with ``prefix``, from the API server."""
        listed = await self.kube.list_objects(PODS, namespace=NAMESPACE)
        return [p for p in listed.items if str(p["metadata"]["name"]).startswith(prefix)]

    async def record(self, preemptor: str) -> PreemptionRecord | None:
        """The preemption record of ``team/<preemptor>`` in the ledger."""
        entry = await (await Ledger.open(self.bus, self.cluster)).get(
            preemption_key(f"{NAMESPACE}/{preemptor}")
        )
        return None if entry is None else decode_preemption(entry.value)

    # ------------------------------------------------------------------ playing other services

    async def publish(
        self, subject: str, body: Message, *, trace: Mapping[str, str] | None = None
    ) -> None:
        """Publish one message as the service that owns it would (continuing ``trace``)."""
        token = otel_context.attach(extract(trace))
        try:
            await self.bus.publish(subject, envelope(self.cluster, body))
        finally:
            otel_context.detach(token)

    async def admit(
        self, name: str, *, assignments: Mapping[str, TopologyAssignment] | None = None
    ) -> None:
        """Publish an ``admitted`` decision for ``team/<name>`` (as admission would); without
        ``assignments`` it names no slots (the real ungater then releases nothing)."""
        workload = self.workload(name)
        assert workload is not None, f"workload {name} not on the bus"
        self.sequence += 1
        body = Admitted(
            workload=f"{NAMESPACE}/{name}",
            uid=workload.uid,
            queue=workload.queue or "",
            sequence=self.sequence,
            epoch=1,
            assignments=dict(assignments or {}),
            charged=res.total(
                res.scale(podset.requests, podset.count) for podset in workload.podsets
            ),
        )
        await self.publish(subjects.decision(self.cluster, "admitted", NAMESPACE, name), body)

    async def release(self, name: str, reason: ReleaseReason = "Evicted") -> None:
        """Publish a ``released`` decision for ``team/<name>`` (admission's answer to a
        ``preempted`` decision naming it)."""
        workload = self.workload(name)
        assert workload is not None, f"workload {name} not on the bus"
        self.sequence += 1
        body = Released(
            workload=f"{NAMESPACE}/{name}",
            uid=workload.uid,
            queue=workload.queue,
            reason=reason,
            sequence=self.sequence,
        )
        await self.publish(subjects.decision(self.cluster, "released", NAMESPACE, name), body)

    async def request_preemption(self, name: str) -> None:
        """Publish a ``preempt-requested`` decision for ``team/<name>`` (as admission would)."""
        workload = self.workload(name)
        assert workload is not None, f"workload {name} not on the bus"
        self.sequence += 1
        body = PreemptRequested(
            workload=f"{NAMESPACE}/{name}",
            uid=workload.uid,
            queue=workload.queue or "",
            sequence=self.sequence,
            message="no room",
        )
        subject = subjects.decision(self.cluster, "preempt-requested", NAMESPACE, name)
        await self.publish(subject, body, trace=workload.trace_context)

    async def ungate(self, prefix: str, nodes: list[str]) -> None:
        """Release the gated pods named ``prefix…``, one per node of ``nodes`` (the ungater)."""
        gated = [p for p in await self.pods(prefix) if has_gate(p, GATE)]
        gated.sort(key=lambda p: str(p["metadata"]["name"]))
        assert len(gated) >= len(nodes), f"only {len(gated)} gated pods named {prefix}"
        for pod, node in zip(gated, nodes, strict=False):
            await self.kube.ungate_pod(
                NAMESPACE, pod["metadata"]["name"], gate=GATE, node_selector={HOSTNAME: node}
            )

    async def on_state(self, received: Received) -> None:
        """Remember the state and republish node capacity that changed (the topology-cache)."""
        body = received.envelope.body
        before = self.state.get(received.subject)
        self.state[received.subject] = body
        now = time.monotonic()
        if isinstance(body, PodState):
            self.seen_at.setdefault(body.uid, now)
            if body.terminating:
                self.leaving_at.setdefault(body.uid, now)
            if GATE not in body.scheduling_gates:
                self.released_uids.add(body.uid)
        elif isinstance(body, Tombstone) and isinstance(before, PodState):
            self.leaving_at.setdefault(before.uid, now)
        if self.plays_topology_cache and isinstance(body, (NodeState, PodState, Tombstone)):
            await self._publish_capacity()

    async def _publish_capacity(self) -> None:
        nodes = [m for m in self.state.values() if isinstance(m, NodeState)]
        pods = [m for m in self.state.values() if isinstance(m, PodState)]
        for node in nodes:
            used = res.total(
                {**p.requests, "pods": 1}
                for p in pods
                if p.node_name == node.name and p.phase not in TERMINAL
            )
            free = res.subtract(node.allocatable, used)
            if self._published_free.get(node.name) == free:
                continue
            self._published_free[node.name] = free
            levels = self.sim.levels
            report = CapacityNode(
                topology="default",
                node=node.name,
                domain=[node.labels.get(level, "") for level in levels],
                allocatable=dict(node.allocatable),
                free=free,
                applied_sequence=self.sequence,
            )
            await self.publish(subjects.capacity_node(self.cluster, "default", node.name), report)

    async def on_decision(self, received: Received) -> None:
        """Record one decision."""
        self.decisions.append((received.envelope.body, dict(received.headers)))
        self.decided_at.append(time.monotonic())

    # ------------------------------------------------------------------ writing objects

    async def create(
        self, resource: ResourceType, body: dict[str, Any], namespace: str | None = NAMESPACE
    ) -> dict[str, Any]:
        """Create an object (namespace None for cluster-scoped ones)."""
        return dict(
            await self.kube.create(
                resource, body, namespace=namespace if resource.namespaced else None
            )
        )

    async def setup_queues(self) -> None:
        """Queues ``offline`` (training, reclaimable) and ``online`` (inference), and the
        priority classes ``low`` (100) and ``high`` (1000)."""
        for name, value in (("low", 100), ("high", 1000), ("urgent", 5000)):
            await self.create(
                PRIORITY_CLASSES,
                {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value},
                namespace=None,
            )
        for name, priority in (("offline", 10), ("online", 100)):
            await self.create(
                QUEUES,
                {
                    "apiVersion": "tidegate.io/v1alpha1",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {"priority": priority, "reclaimable": True},
                },
                namespace=None,
            )


def pod_template(
    *, queue: str, priority_class: str, gpus: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod template of managed pods asking for ``gpus`` GPUs (a short termination grace)."""
    return {
        "metadata": {
            "labels": {"tidegate.io/queue": queue, **(labels or {})},
        },
        "spec": {
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {
                        "requests": {"cpu": "1", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
            "restartPolicy": "Never",
        },
    }


def training_job(
    name: str, *, pods: int, gpus: int = 8, priority_class: str = "low", abort: bool = False
) -> dict[str, Any]:
    """An indexed training Job of ``pods`` pods in queue ``offline``."""
    annotations = {"tidegate.io/queue": "offline"}
    if abort:
        annotations["tidegate.io/on-preemption"] = "abort"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 100,
            "template": pod_template(queue="offline", priority_class=priority_class, gpus=gpus),
        },
    }


def inference_deployment(
    name: str, *, replicas: int, gpus: int = 8, priority_class: str = "high"
) -> dict[str, Any]:
    """An inference Deployment of ``replicas`` pods in queue ``online``."""
    template = pod_template(
        queue="online", priority_class=priority_class, gpus=gpus, labels={"app": name}
    )
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"tidegate.io/queue": "online"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def training_deployment(name: str, *, pods: int) -> dict[str, Any]:
    """A training Deployment of ``pods`` pods in queue ``offline`` (``volcano.sh/service.type:
    training``): a victim whose pods are evicted one by one (a Job's owner is suspended)."""
    body = inference_deployment(name, replicas=pods, priority_class="low")
    body["metadata"]["annotations"] = {
        "tidegate.io/queue": "offline",
        "volcano.sh/service.type": "training",
    }
    body["spec"]["template"]["metadata"]["labels"]["tidegate.io/queue"] = "offline"
    return body


@contextlib.asynccontextmanager
async def environment(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """A running simulated cluster (1 block × 2 racks × 2 nodes × 8 GPUs, grace periods at a
    tenth of real time) with queues and priority classes, the bus, and followers of the state
    and the decisions; no service yet."""
    settings = SimSettings(nodes="1x2x2x8gpu", time_scale=0.1)
    async with simulated(
        settings, workdir=tmp_path, nats_url=nats_url, cluster=cluster_id, name="preemption-test"
    ) as cluster:
        h = Harness(
            sim=cluster.sim,
            kube=cluster.kube,
            bus=cluster.bus,
            cluster=cluster_id,
            nats_url=nats_url,
            kubeconfig=cluster.kubeconfig,
        )
        await h.create(NAMESPACES, {"metadata": {"name": NAMESPACE}}, namespace=None)
        async with (
            following(
                cluster.bus,
                stream=layout.state_stream(cluster_id),
                subjects=subjects.state_wildcards(cluster_id),
                handler=h.on_state,
            ),
            following(
                cluster.bus,
                stream=layout.decisions_stream(cluster_id),
                subjects=[subjects.decision_wildcard(cluster_id)],
                handler=h.on_decision,
            ),
        ):
            try:
                await h.setup_queues()
                yield h
            finally:
                await h.services.stop_all()


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """The environment with the real watcher running; the harness publishes capacity."""
    async with environment(tmp_path, nats_url, cluster_id) as h:
        h.watcher = await h.start_watcher()
        yield h
