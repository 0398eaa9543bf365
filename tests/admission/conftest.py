"""A real nats-server, the admission service, and a harness that plays the other services.

The harness publishes what the watcher and the topology-cache would (queues, topologies,
workloads, capacity per node) and collects every decision the admission service publishes,
in order, from the decision stream. Admission runs either in this process
(:meth:`Harness.start_admission`) or as a separate process (:meth:`Harness.spawn_admission`),
which a test may kill outright to play a crash.
"""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidegate.admission.app import setup
from tidegate.admission.config import Settings
from tidegate.bus import Bus, Received, layout
from tidegate.model import (
    CapacityNode,
    Message,
    QueueConfig,
    Tombstone,
    TopologyConfig,
    WorkloadState,
    subjects,
)
from tidegate.runtime import Service
from tidegate.testing import (
    RunningServices,
    ServiceProcess,
    connected,
    envelope,
    following,
    until,
)

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
GPU = "nvidia.com/gpu"


@dataclass
class Harness:
    """Publishes inputs like the other services would and records admission's decisions."""

    bus: Bus
    cluster: str
    nats_url: str
    logs: Path
    """Where admission processes write their standard error."""
    decisions: list[Message] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    services: RunningServices = field(
        default_factory=lambda: RunningServices(ready_within=15, stop_within=10)
    )
    """Admission instances running in this process."""
    processes: list[ServiceProcess] = field(default_factory=list)

    async def publish(self, subject: str, body: Message, *, event_id: str | None = None) -> None:
        """Publish one message as the service that owns it would."""
        await self.bus.publish(subject, envelope(self.cluster, body, event_id=event_id))

    async def queue(self, queue: QueueConfig) -> None:
        """Publish a Queue."""
        await self.publish(subjects.queue(self.cluster, queue.name), queue)

    async def topology(self, name: str = "default", levels: list[str] | None = None) -> None:
        """Publish a Topology."""
        config = TopologyConfig(name=name, levels=levels or LEVELS)
        await self.publish(subjects.topology(self.cluster, name), config)

    async def node(
        self,
        name: str,
        rack: str,
        *,
        gpus: int = 8,
        free_gpus: int | None = None,
        applied: int = 0,
    ) -> None:
        """Publish a node's capacity on the default topology (as the topology-cache would)."""
        allocatable = {"cpu": 64_000, GPU: gpus, "pods": 110}
        free = {**allocatable, GPU: gpus if free_gpus is None else free_gpus}
        report = CapacityNode(
            topology="default",
            node=name,
            domain=["b1", rack, name],
            allocatable=allocatable,
            free=free,
            applied_sequence=applied,
        )
        await self.publish(subjects.capacity_node(self.cluster, "default", name), report)

    async def workload(self, workload: WorkloadState) -> None:
        """Publish a workload (as the watcher would)."""
        subject = subjects.workload(self.cluster, workload.namespace, workload.name)
        await self.publish(subject, workload)

    async def delete_workload(self, namespace: str, name: str) -> None:
        """Publish a workload's tombstone."""
        subject = subjects.workload(self.cluster, namespace, name)
        body = Tombstone(object_kind="workload", name=name, namespace=namespace)
        await self.publish(subject, body)

    async def collect(self, received: Received) -> None:
        """Record one decision (the follower's handler)."""
        self.decisions.append(received.envelope.body)
        self.headers.append(dict(received.headers))

    def of(self, kind: type, workload: str | None = None) -> list[Message]:
        """Decisions of one kind (about one workload key, if given)."""
        return [
            d
            for d in self.decisions
            if isinstance(d, kind)
            and (workload is None or getattr(d, "workload", None) == workload)
        ]

    async def until(
        self, check: Callable[[], object], *, within: float = 15.0, what: str = "condition"
    ) -> None:
        """Wait until ``check()`` is truthy; fail if an in-process admission crashed."""
        await until(
            check,
            within=within,
            what=what,
            alive=self.services.check,
            describe=lambda: f"; decisions: {self.decisions}",
        )

    def settings(self, **overrides: object) -> Settings:
        """Admission settings for this test's cluster."""
        values: dict[str, object] = {
            "cluster": self.cluster,
            "nats_url": self.nats_url,
            "http_port": 0,
            "lease_ttl_seconds": 2.0,
            "cycle_tick_seconds": 0.2,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    async def start_admission(self, **overrides: object) -> Service[Settings]:
        """Run an admission instance in this process; returns once it is ready."""
        service = Service("admission", self.settings(**overrides), setup)
        await self.services.start(service)
        return service

    async def spawn_admission(self, holder: str) -> ServiceProcess:
        """Run an admission instance as its own process (``python -m tidegate.admission``)."""
        logs = self.logs / holder
        logs.mkdir()
        settings = {
            "TIDEGATE_CLUSTER": self.cluster,
            "TIDEGATE_NATS_URL": self.nats_url,
            "TIDEGATE_LEASE_TTL_SECONDS": "2",
            "TIDEGATE_LEASE_HOLDER": holder,
            "TIDEGATE_CYCLE_TICK_SECONDS": "0.2",
            "TIDEGATE_LOG_LEVEL": "WARNING",
        }
        process = await ServiceProcess.start("admission", settings, logs=logs)
        self.processes.append(process)
        return process

    async def stop(self) -> None:
        """Stop every admission instance the test started."""
        try:
            await self.services.stop_all()
        finally:
            for process in self.processes:
                await process.close(within=10)


@pytest.fixture
async def harness(nats_url: str, cluster_id: str, tmp_path: Path) -> AsyncIterator[Harness]:
    """A harness on a fresh cluster id, collecting decisions from the start."""
    async with connected(nats_url, cluster_id, wait_for_server_seconds=5) as bus:
        h = Harness(bus=bus, cluster=cluster_id, nats_url=nats_url, logs=tmp_path)
        async with following(
            bus,
            stream=layout.decisions_stream(cluster_id),
            subjects=[subjects.decision_wildcard(cluster_id)],
            handler=h.collect,
            name="test-decisions",
            replayed_within=5,
        ):
            try:
                yield h
            finally:
                await h.stop()
