"""A real nats-server, the topology-cache service, and a harness that plays the other services.

The harness publishes what the watcher and admission would (nodes, pods, workloads,
Topologies; admitted / released / preempted decisions), remembers the final state of all of it,
and follows the capacity stream the way admission does. :meth:`Harness.recomputed` is a fresh
accounting fed that final state from scratch: what the cache's published view must equal.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tidegate.bus import Received, layout
from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    Message,
    Preempted,
    Released,
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
from tidegate.testing import RunningServices, connected, following
from tidegate.testing.harness import ServiceHarness, subject_of
from tidegate.testing.messages import GPU, Messages
from tidegate.topology_cache.app import setup
from tidegate.topology_cache.config import Settings

__all__ = ["GPU", "LEVELS", "Harness", "msg"]

LEVELS = ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]

msg = Messages(
    namespace="team", levels=LEVELS, node_labels={"nvidia.com/gpu.product": "H200"}, node_pods=110
)
"""The messages this suite publishes."""


@dataclass
class Harness(ServiceHarness):
    """Publishes inputs like the other services would and follows the capacity stream."""

    state: dict[str, Message] = field(default_factory=dict)
    """Last body published per state subject (tombstones included)."""
    decisions: list[Message] = field(default_factory=list)
    """Every decision published, in order."""
    capacity: dict[str, Message] = field(default_factory=dict)
    """Last message per capacity subject, as a follower of the capacity stream sees it."""
    capacity_log: list[str] = field(default_factory=list)
    """Subjects of the capacity messages seen since the harness started, in order."""

    # ------------------------------------------------------------------ inputs

    async def send(self, body: Message, *, event_id: str | None = None) -> str:
        """Publish ``body`` on its subject and remember it: a decision in :attr:`decisions`,
        anything else (tombstones too) as its subject's state."""
        subject = subject_of(self.cluster, body)
        if isinstance(body, Admitted | Released | Preempted):
            self.decisions.append(body)
        else:
            self.state[subject] = body
        await self.publish(subject, body, event_id=event_id)
        return subject

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
        return await self.start("topology-cache", self.settings(**overrides), setup)

    async def stop_cache(self, service: Service[Settings]) -> int:
        """Stop one instance gracefully (as SIGTERM would); returns its exit code."""
        return await self.stop(service)

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

    def describe(self) -> str:
        """The first differences, when waiting for the view to equal a recomputation."""
        problems = self.differences()
        return ": " + "; ".join(problems[:5]) if problems else ""


@pytest.fixture
async def harness(nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """A bus connection with the layout created and a follower of the capacity stream."""
    async with connected(nats_url, cluster_id, name="topology-cache-test") as bus:
        harness = Harness(
            bus=bus,
            cluster=cluster_id,
            nats_url=nats_url,
            services=RunningServices(ready_within=10, stop_within=20),
        )

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
