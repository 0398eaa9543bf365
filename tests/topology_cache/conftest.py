"""A real nats-server, the topology-cache service, and a harness that plays the other services.

The harness publishes what the watcher and admission would (nodes, pods, workloads,
Topologies; admitted / released / preempted decisions), remembers the final state of all of it,
and follows the capacity stream the way admission does. :meth:`Harness.recomputed` is a fresh
accounting fed that final state from scratch: what the cache's published view must equal.
"""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from tidegate.bus import Bus, Received, layout
from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    Message,
    NodeState,
    PodState,
    Preempted,
    Released,
    Tombstone,
    TopologyConfig,
    WorkloadState,
    subjects,
)
from tidegate.placement.accounting import (
    CapacityAccounting,
    CapacityKey,
    CapacityRecord,
    key_of,
    same_content,
)
from tidegate.runtime import Service
from tidegate.testing import RunningServices, connected, envelope, following, until
from tidegate.topology_cache.app import setup
from tidegate.topology_cache.config import Settings

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
GPU = "nvidia.com/gpu"


@dataclass
class Harness:
    """Publishes inputs like the other services would and follows the capacity stream."""

    bus: Bus
    cluster: str
    nats_url: str
    state: dict[str, Message] = field(default_factory=dict)
    """Last body published per state subject (tombstones included)."""
    decisions: list[Message] = field(default_factory=list)
    """Every decision published, in order."""
    capacity: dict[str, Message] = field(default_factory=dict)
    """Last message per capacity subject, as a follower of the capacity stream sees it."""
    capacity_log: list[str] = field(default_factory=list)
    """Subjects of the capacity messages seen since the harness started, in order."""
    services: RunningServices = field(
        default_factory=lambda: RunningServices(ready_within=10, stop_within=20)
    )
    """Topology-cache instances running in this process."""

    # ------------------------------------------------------------------ inputs

    async def publish(self, subject: str, body: Message) -> None:
        """Publish one message as the service that owns it would."""
        await self.bus.publish(subject, envelope(self.cluster, body))

    async def put(self, body: NodeState | PodState | WorkloadState | TopologyConfig) -> None:
        """Publish a state snapshot on its subject."""
        match body:
            case NodeState():
                subject = subjects.node(self.cluster, body.name)
            case PodState():
                subject = subjects.pod(self.cluster, body.namespace, body.name)
            case WorkloadState():
                subject = subjects.workload(self.cluster, body.namespace, body.name)
            case TopologyConfig():
                subject = subjects.topology(self.cluster, body.name)
        self.state[subject] = body
        await self.publish(subject, body)

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Publish a tombstone for a node, pod, workload or topology."""
        match kind:
            case "node":
                subject = subjects.node(self.cluster, name)
            case "pod":
                subject = subjects.pod(self.cluster, str(namespace), name)
            case "workload":
                subject = subjects.workload(self.cluster, str(namespace), name)
            case _:
                subject = subjects.topology(self.cluster, name)
        body = Tombstone(object_kind=kind, name=name, namespace=namespace)  # type: ignore[arg-type]
        self.state[subject] = body
        await self.publish(subject, body)

    async def decide(self, body: Admitted | Released | Preempted) -> None:
        """Publish a decision on its subject."""
        if isinstance(body, Preempted):
            namespace, _, name = body.preemptor.partition("/")
            subject = subjects.decision(self.cluster, "preempted", namespace, name)
        else:
            namespace, _, name = body.workload.partition("/")
            kind = "admitted" if isinstance(body, Admitted) else "released"
            subject = subjects.decision(self.cluster, kind, namespace, name)
        self.decisions.append(body)
        await self.publish(subject, body)

    # ------------------------------------------------------------------ the cache

    def settings(self, **overrides: object) -> Settings:
        """Settings of a cache instance for this harness's cluster."""
        values: dict[str, object] = {
            "cluster": self.cluster,
            "nats_url": self.nats_url,
            "http_port": 0,
            "coalesce_seconds": 0.002,
            "publish_retry_seconds": 0.2,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    async def start_cache(self, **overrides: object) -> Service[Settings]:
        """Run a topology-cache in this process; returns once it reports ready."""
        service = Service("topology-cache", self.settings(**overrides), setup)
        await self.services.start(service)
        return service

    async def stop_cache(self, service: Service[Settings]) -> int:
        """Stop one instance gracefully (as SIGTERM would); returns its exit code."""
        return await self.services.stop(service)

    # ------------------------------------------------------------------ what to compare

    def view(self) -> dict[CapacityKey, CapacityRecord]:
        """The capacity view a follower of the capacity stream holds (empty domains dropped)."""
        out: dict[CapacityKey, CapacityRecord] = {}
        for body in self.capacity.values():
            if isinstance(body, CapacityNode) or (
                isinstance(body, CapacityDomain) and body.nodes > 0
            ):
                out[key_of(body)] = body
        return out

    def recomputed(self) -> CapacityAccounting:
        """A fresh accounting fed, from scratch, the final state and every decision."""
        accounting = CapacityAccounting()
        for body in self.state.values():
            accounting.apply(body)
        for decision in self.decisions:
            accounting.apply(decision)
        return accounting

    def differences(self, accounting: CapacityAccounting | None = None) -> list[str]:
        """Where the published view differs from ``accounting`` (default: recomputed)."""
        want = {
            key_of(r): r
            for r in (accounting or self.recomputed()).records()
            if not (isinstance(r, CapacityDomain) and r.nodes == 0)
        }
        got = self.view()
        problems = [f"missing {key}" for key in want.keys() - got.keys()]
        problems += [f"extra {key}" for key in got.keys() - want.keys()]
        problems += [
            f"{key}: published {got[key]} but recomputed {want[key]}"
            for key in want.keys() & got.keys()
            if not same_content(got[key], want[key])
        ]
        return sorted(problems)

    async def until_consistent(self, *, within: float = 10.0) -> None:
        """Wait until the published view equals a recomputation from scratch."""
        await self.until(lambda: not self.differences(), within=within, what="view = recomputed")

    def node_record(self, name: str, topology: str = "default") -> CapacityNode:
        """The published record of one node."""
        body = self.capacity.get(subjects.capacity_node(self.cluster, topology, name))
        assert isinstance(body, CapacityNode), f"{name}: {body!r}"
        return body

    async def until(
        self, check: Callable[[], object], *, within: float = 10.0, what: str = "condition"
    ) -> None:
        """Wait until ``check()`` is truthy (it may raise AssertionError while not yet); fail
        if an instance stopped on its own."""

        def describe() -> str:
            if what == "view = recomputed":
                return ": " + "; ".join(self.differences()[:5])
            return ""

        await until(check, within=within, what=what, alive=self.services.check, describe=describe)


@pytest.fixture
async def harness(nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """A bus connection with the layout created and a follower of the capacity stream."""
    async with connected(nats_url, cluster_id, name="topology-cache-test") as bus:
        harness = Harness(bus=bus, cluster=cluster_id, nats_url=nats_url)

        async def remember(received: Received) -> None:
            harness.capacity[received.subject] = received.envelope.body
            harness.capacity_log.append(received.subject)

        async with following(
            bus,
            stream=layout.capacity_stream(cluster_id),
            subjects=[subjects.capacity_wildcard(cluster_id)],
            handler=remember,
        ):
            try:
                yield harness
            finally:
                await harness.services.stop_all()
