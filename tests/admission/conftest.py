"""A real nats-server, the admission service, and a harness that plays the other services.

The harness publishes what the watcher and the topology-cache would (queues, topologies,
workloads, capacity per node) and collects every decision the admission service publishes,
in order, from the decision stream. Admission runs either in this process
(:meth:`Harness.start_admission`) or as a separate process (:meth:`Harness.spawn_admission`),
which a test may kill outright to play a crash.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidegate.admission.app import setup
from tidegate.admission.config import Settings
from tidegate.bus import Received, layout
from tidegate.model import Message, QueueConfig, WorkloadState, subjects
from tidegate.runtime import Service
from tidegate.testing import RunningServices, ServiceProcess, connected, following
from tidegate.testing.harness import ServiceHarness
from tidegate.testing.messages import GPU, Messages

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
__all__ = ["GPU", "LEVELS", "Harness", "msg"]


msg = Messages(namespace="ns", levels=LEVELS, node_pods=110)
"""The messages this suite publishes (nodes in block b1, the default topology)."""


@dataclass
class Harness(ServiceHarness):
    """Publishes inputs like the other services would and records admission's decisions."""

    logs: Path = field(kw_only=True)
    """Where admission processes write their standard error."""
    decisions: list[Message] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    processes: list[ServiceProcess] = field(default_factory=list)

    async def queue(self, queue: QueueConfig) -> None:
        """Publish a Queue."""
        await self.send(queue)

    async def topology(self, name: str = "default", levels: list[str] | None = None) -> None:
        """Publish a Topology."""
        await self.send(msg.topology(name, levels))

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
        await self.send(
            msg.capacity_node(name, "b1", rack, gpus=gpus, free_gpus=free_gpus, applied=applied)
        )

    async def workload(self, workload: WorkloadState) -> None:
        """Publish a workload (as the watcher would)."""
        await self.send(workload)

    async def delete_workload(self, namespace: str, name: str) -> None:
        """Publish a workload's tombstone."""
        await self.tombstone("workload", name, namespace)

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

    def describe(self) -> str:
        """Every decision seen, when a wait times out."""
        return f"; decisions: {self.decisions}"

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
        return await self.start("admission", self.settings(**overrides), setup)

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

    async def close(self) -> None:
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
        h = Harness(
            bus=bus,
            cluster=cluster_id,
            nats_url=nats_url,
            namespace="ns",
            within=15.0,
            services=RunningServices(ready_within=15, stop_within=10),
            logs=tmp_path,
        )
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
                await h.close()
