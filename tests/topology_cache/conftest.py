"""A real nats-server, the topology-cache service, and a harness that plays the other services.

The harness publishes what the watcher and admission would (nodes, pods, workloads,
Topologies; admitted / released / preempted decisions), remembers the final state of all of it,
and follows the capacity stream the way admission does. :meth:`Harness.recomputed` is a fresh
accounting fed that final state from scratch: what the cache's published view must equal.
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from tidegate.bus import Bus, BusSettings, Received, StateFollower, connect, layout
from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    Envelope,
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
    services: list[tuple[Service[Settings], "asyncio.Task[int]"]] = field(default_factory=list)

    # ------------------------------------------------------------------ inputs

    async def publish(self, subject: str, body: Message) -> None:
        """Publish one message as the service that owns it would."""
        envelope = Envelope(
            event_id=uuid.uuid4().hex,
            cluster=self.cluster,
            source="test",
            time=time.time(),
            body=body,
        )
        await self.bus.publish(subject, envelope)

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
        task = asyncio.create_task(service.run(handle_signals=False))
        self.services.append((service, task))
        # Before run() has started, the readiness has no condition yet (and looks ready).
        await self.until(
            lambda: service.started.is_set() and service.readiness.ready,
            what="topology-cache ready",
        )
        return service

    async def stop_cache(self, service: Service[Settings]) -> int:
        """Stop one instance gracefully (as SIGTERM would); returns its exit code."""
        for entry in self.services:
            if entry[0] is service:
                self.services.remove(entry)
                service.request_stop()
                return await asyncio.wait_for(entry[1], 20)
        raise AssertionError("not a running instance")

    async def stop(self) -> None:
        """Stop every instance the test started."""
        for service, _ in list(self.services):
            await self.stop_cache(service)

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
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for _, task in self.services:
                if task.done():
                    raise AssertionError(f"a topology-cache exited with {task.result()}")
            try:
                if check():
                    return
            except AssertionError:
                pass
            await asyncio.sleep(0.02)
        detail = ""
        if what == "view = recomputed":
            detail = ": " + "; ".join(self.differences()[:5])
        raise AssertionError(f"timed out waiting for {what}{detail}")


@pytest.fixture
async def harness(nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """A bus connection with the layout created and a follower of the capacity stream."""
    bus = await connect(BusSettings(servers=(nats_url,), name="topology-cache-test"))
    await bus.ensure_layout(cluster_id)
    harness = Harness(bus=bus, cluster=cluster_id, nats_url=nats_url)

    async def remember(received: Received) -> None:
        harness.capacity[received.subject] = received.envelope.body
        harness.capacity_log.append(received.subject)

    follower = StateFollower(
        bus,
        stream=layout.capacity_stream(cluster_id),
        subjects=[subjects.capacity_wildcard(cluster_id)],
        handler=remember,
    )
    following = asyncio.create_task(follower.run())
    try:
        yield harness
    finally:
        await harness.stop()
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        await bus.drain()
