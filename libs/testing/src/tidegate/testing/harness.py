"""The one base of the per-area test harnesses: publish, run services, wait, create objects.

Every integration test plays the services around the one under test over a real nats-server:
it publishes what they would publish, runs the service under test in this process, waits until
something holds, and (where Kubernetes matters) creates objects on the simulated cluster.
:class:`ServiceHarness` does each of those the same way for every area; an area's harness
subclasses it and adds only what that area observes or plays (a follower's handler, a
settings helper). It uses the real bus, real services and a real API server, never a stub.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidegate.bus import Bus, Received
from tidegate.kube import KubeClient, ResourceType
from tidegate.model import (
    Admitted,
    CapacityNode,
    DisruptionBudgetState,
    Message,
    NodeState,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    ReplaceRequested,
    Tombstone,
    TopologyConfig,
    WorkloadState,
    subjects,
)
from tidegate.runtime import Service, ServiceSettings
from tidegate.testing.bus import envelope
from tidegate.testing.services import RunningServices
from tidegate.testing.waiting import until, until_async

T = TypeVar("T")

StateMessage = (
    NodeState
    | PodState
    | WorkloadState
    | TopologyConfig
    | QueueConfig
    | DisruptionBudgetState
    | CapacityNode
)
Decision = Admitted | Pending | PreemptRequested | Preempted | Released | ReplaceRequested

_DECISION_KINDS: Mapping[type, subjects.DecisionKind] = {
    Admitted: "admitted",
    Pending: "pending",
    PreemptRequested: "preempt-requested",
    Preempted: "preempted",
    Released: "released",
    ReplaceRequested: "replace-requested",
}


def subject_of(cluster: str, body: Message) -> str:
    """The subject the service that owns ``body`` publishes it on in ``cluster``.

    State snapshots go on their object's subject, a tombstone on the subject of what it ends,
    a decision on the subject of its workload (a preemption: of its preemptor); a capacity
    domain record has no single owner here and raises ``ValueError``.
    """
    match body:
        case NodeState():
            return subjects.node(cluster, body.name)
        case PodState():
            return subjects.pod(cluster, body.namespace, body.name)
        case WorkloadState():
            return subjects.workload(cluster, body.namespace, body.name)
        case TopologyConfig():
            return subjects.topology(cluster, body.name)
        case QueueConfig():
            return subjects.queue(cluster, body.name)
        case DisruptionBudgetState():
            return subjects.disruption_budget(cluster, body.namespace, body.name)
        case CapacityNode():
            return subjects.capacity_node(cluster, body.topology, body.node)
        case Tombstone():
            return _tombstone_subject(cluster, body)
        case Preempted():
            namespace, _, name = body.preemptor.partition("/")
            return subjects.decision(cluster, "preempted", namespace, name)
        case Admitted() | Pending() | PreemptRequested() | Released() | ReplaceRequested():
            namespace, _, name = body.workload.partition("/")
            return subjects.decision(cluster, _DECISION_KINDS[type(body)], namespace, name)
    raise ValueError(f"no single subject for {type(body).__name__}")


def received(
    cluster: str,
    body: Message,
    *,
    subject: str | None = None,
    stream_sequence: int = 1,
    event_id: str | None = None,
) -> Received:
    """``body`` as a handler receives it: enveloped for ``cluster``, on ``subject`` (default:
    :func:`subject_of`), at ``stream_sequence``; for feeding a service's handlers without a
    bus."""
    return Received(
        subject=subject or subject_of(cluster, body),
        envelope=envelope(cluster, body, event_id=event_id),
        stream_sequence=stream_sequence,
    )


def _tombstone_subject(cluster: str, body: Tombstone) -> str:
    namespace = str(body.namespace)
    match body.object_kind:
        case "node":
            return subjects.node(cluster, body.name)
        case "pod":
            return subjects.pod(cluster, namespace, body.name)
        case "workload":
            return subjects.workload(cluster, namespace, body.name)
        case "queue":
            return subjects.queue(cluster, body.name)
        case "pdb":
            return subjects.disruption_budget(cluster, namespace, body.name)
        case _:
            return subjects.topology(cluster, body.name)


@dataclass
class ServiceHarness:
    """A test's bus connection, the services it runs in this process, and its kube client.

    ``within`` and ``interval`` are the area's default wait; ``namespace`` is where
    :meth:`create` puts namespaced objects. :meth:`describe` (overridable) adds what the area
    observed to a timeout's message.
    """

    bus: Bus
    cluster: str
    nats_url: str
    kube: KubeClient | None = None
    namespace: str = "team"
    within: float = 10.0
    interval: float = 0.02
    services: RunningServices = field(default_factory=RunningServices)
    """The services this test runs in its own process."""
    by_name: dict[str, Service[Any]] = field(default_factory=dict)
    """Each service :meth:`start` ran, under its name (the last one of a name)."""

    # ------------------------------------------------------------------ publishing

    async def publish(self, subject: str, body: Message, *, event_id: str | None = None) -> None:
        """Publish ``body`` on ``subject`` as the service that owns it would."""
        await self.bus.publish(subject, envelope(self.cluster, body, event_id=event_id))

    async def send(self, body: Message, *, event_id: str | None = None) -> str:
        """Publish ``body`` on its own subject (:func:`subject_of`); that subject."""
        subject = subject_of(self.cluster, body)
        await self.publish(subject, body, event_id=event_id)
        return subject

    async def tombstone(
        self, kind: str, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> str:
        """Publish the tombstone of a node, pod, workload, topology, queue or pdb; its
        subject."""
        body = Tombstone(object_kind=kind, name=name, namespace=namespace, uid=uid)  # type: ignore[arg-type]
        return await self.send(body)

    # ------------------------------------------------------------------ services

    async def start(
        self, name: str, settings: ServiceSettings, setup: Callable[[Any], Awaitable[None]]
    ) -> Service[Any]:
        """Run the service ``name`` (``settings``, ``setup``) in this process until stopped;
        returns once it is ready (a standby counts)."""
        service: Service[Any] = Service(name, settings, setup)
        self.by_name[name] = service
        await self.services.start(service)
        return service

    async def stop(self, service: Service[Any] | str) -> int:
        """Stop ``service`` (or the one :meth:`start` ran under that name) gracefully, as
        SIGTERM would; its exit code."""
        if isinstance(service, str):
            service = self.by_name[service]
        for name, known in list(self.by_name.items()):
            if known is service:
                del self.by_name[name]
        return await self.services.stop(service)

    # ------------------------------------------------------------------ waiting

    def describe(self) -> str:
        """What to add to a timeout's message (nothing by default)."""
        return ""

    def alive(self) -> None:
        """Raise ``AssertionError`` if something the test depends on stopped by itself (by
        default: a service :meth:`start` ran); every wait checks it before each poll."""
        self.services.check()

    async def until(
        self,
        check: Callable[[], T],
        *,
        within: float | None = None,
        what: str = "condition",
    ) -> T:
        """Wait until ``check()`` is truthy (it may raise AssertionError while not yet); fail
        at once if a service stopped by itself. Its first truthy result."""
        return await until(
            check,
            within=self.within if within is None else within,
            what=what,
            interval=self.interval,
            alive=self.alive,
            describe=self.describe,
        )

    async def until_async(
        self,
        check: Callable[[], Awaitable[T]],
        *,
        within: float | None = None,
        what: str = "condition",
        interval: float | None = None,
    ) -> T:
        """Like :meth:`until` for a coroutine function."""
        return await until_async(
            check,
            within=self.within if within is None else within,
            what=what,
            interval=self.interval if interval is None else interval,
            alive=self.alive,
            describe=self.describe,
        )

    # ------------------------------------------------------------------ Kubernetes

    def _kube(self) -> KubeClient:
        if self.kube is None:
            raise AssertionError("this harness has no simulated cluster")
        return self.kube

    async def create(
        self, resource: ResourceType, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create an object in ``namespace`` (default: the harness's; cluster-scoped types
        ignore it); the object as the API server returned it."""
        where = (namespace or self.namespace) if resource.namespaced else None
        return dict(await self._kube().create(resource, dict(body), namespace=where))

    async def delete(self, resource: ResourceType, name: str, namespace: str | None = None) -> None:
        """Delete an object at once (no grace period)."""
        where = (namespace or self.namespace) if resource.namespaced else None
        await self._kube().delete(resource, name, namespace=where, grace_seconds=0)
