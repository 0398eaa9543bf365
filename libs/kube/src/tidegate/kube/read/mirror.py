"""The mirror: what the state stream holds versus what it should hold, as publications.

:class:`Mirror` pairs the :class:`~tidegate.kube.read.index.ClusterIndex` (what Kubernetes says
now) with the last message of every state subject (what the bus says: replayed from the state
stream at start, then whatever this watcher stored). :meth:`Mirror.plan` turns state keys into
the publications that bring the bus up to date: a snapshot when the normalized message differs
from the last one, a tombstone when the object is gone but the subject still holds a snapshot,
nothing otherwise. So republishing is harmless, a relist after 410 or a restart publishes
tombstones for objects that vanished meanwhile, and an unchanged object costs no message.

Event ids are deterministic: ``<kind>/<uid>/<resourceVersion>/<digest of the message>`` for a
snapshot (the newest resourceVersion of any event that touched it), and
``<kind>/<uid>/<resourceVersion>/deleted`` for a tombstone, so a retried publish is dropped by
JetStream's duplicate window and two different messages never share an id.

Pure code: the clock is passed in; publishing is the caller's (:mod:`tidegate.watcher.app`).
"""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from tidegate.kube.read.index import ClusterIndex, StateKey
from tidegate.model import subjects
from tidegate.model.events import (
    CohortConfig,
    DisruptionBudgetState,
    Envelope,
    Message,
    NodeState,
    PodState,
    QueueConfig,
    Tombstone,
    TopologyConfig,
    WorkloadState,
)

SOURCE = "watcher"
"""The ``source`` of every envelope the watcher publishes."""

_encoder = msgspec.json.Encoder(order="deterministic")


@dataclass(frozen=True)
class Publication:
    """One message to publish, and the problems worth logging about it."""

    key: StateKey
    subject: str
    envelope: Envelope
    problems: tuple[str, ...] = ()


@dataclass
class Plan:
    """What :meth:`Mirror.plan` decided: messages to publish, and problems with objects that
    produce no message (a malformed Topology is not published, but the reason is logged)."""

    publications: list[Publication] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Stored:
    message: Message
    resource_version: str | None


def subject_for(cluster: str, key: StateKey) -> str:
    """The state subject of ``key``."""
    if key.kind == "node":
        return subjects.node(cluster, key.name)
    if key.kind == "pod":
        return subjects.pod(cluster, key.namespace or "", key.name)
    if key.kind == "workload":
        return subjects.workload(cluster, key.namespace or "", key.name)
    if key.kind == "topology":
        return subjects.topology(cluster, key.name)
    if key.kind == "pdb":
        return subjects.disruption_budget(cluster, key.namespace or "", key.name)
    if key.kind == "cohort":
        return subjects.cohort(cluster, key.name)
    return subjects.queue(cluster, key.name)


def key_of(message: Message) -> StateKey | None:
    """The state key a state message is about; None for messages that are not state."""
    if isinstance(message, NodeState):
        return StateKey("node", None, message.name)
    if isinstance(message, PodState):
        return StateKey("pod", message.namespace, message.name)
    if isinstance(message, WorkloadState):
        return StateKey("workload", message.namespace, message.name)
    if isinstance(message, TopologyConfig):
        return StateKey("topology", None, message.name)
    if isinstance(message, QueueConfig):
        return StateKey("queue", None, message.name)
    if isinstance(message, CohortConfig):
        return StateKey("cohort", None, message.name)
    if isinstance(message, DisruptionBudgetState):
        return StateKey("pdb", message.namespace, message.name)
    if isinstance(message, Tombstone):
        return StateKey(message.object_kind, message.namespace, message.name)
    return None


def _uid_of(message: Message) -> str | None:
    uid = getattr(message, "uid", None)
    return uid if isinstance(uid, str) and uid else None


class Mirror:
    """Plans the publications that make the state stream match the index (see module doc)."""

    def __init__(self, cluster: str, index: ClusterIndex) -> None:
        """Mirror ``index`` onto the state subjects of ``cluster``."""
        self.cluster = subjects.validate_cluster(cluster)
        self.index = index
        self._stored: dict[StateKey, _Stored] = {}
        self._bypassed: dict[StateKey, int] = {}
        """Pods that bypassed the gate, per published workload that has any."""

    def seed(self, envelope: Envelope) -> None:
        """Record a message replayed from the state stream (the bus's view before we start).

        Workloads found there count as managed, so they stay published (or get a tombstone)
        even if none of their pods is gated any more; one found finished stays finished.
        """
        key = key_of(envelope.body)
        if key is None:
            return
        if isinstance(envelope.body, Tombstone):
            # A subject ending in a tombstone holds nothing: same as a subject never written.
            self._stored.pop(key, None)
            self._bypassed.pop(key, None)
            return
        self._stored[key] = _Stored(envelope.body, envelope.resource_version)
        self._count_bypassed(key, envelope.body)
        if key.kind == "workload":
            workload = (key.namespace or "", key.name)
            self.index.seed_managed([workload])
            body = envelope.body
            if isinstance(body, WorkloadState) and body.finished is not None:
                self.index.seed_finished(workload, uid=body.uid, finished=body.finished)

    def stored_keys(self) -> set[StateKey]:
        """Keys whose subject holds a snapshot (subjects ending in a tombstone are not kept)."""
        return set(self._stored)

    def all_keys(self) -> set[StateKey]:
        """Every key either side knows: what a full reconciliation looks at."""
        return self.index.state_keys() | self.stored_keys()

    def plan(self, keys: Iterable[StateKey], *, now: float) -> Plan:
        """The publications that bring ``keys`` up to date (in a deterministic order)."""
        plan = Plan()
        for key in sorted(keys, key=lambda k: (k.kind, k.namespace or "", k.name)):
            self._plan_one(key, now, plan)
        return plan

    def _plan_one(self, key: StateKey, now: float, plan: Plan) -> None:
        desired = self.index.desired(key)
        stored = self._stored.get(key)
        version = self.index.version(key)
        if desired.message is None:
            if stored is None:
                plan.problems.extend(desired.problems)
                # Never published (or tombstoned already): nothing to keep about it.
                self.index.forget(key)
                return
            uid = _uid_of(stored.message)
            version = version or stored.resource_version or "0"
            body: Message = Tombstone(
                object_kind=key.kind, name=key.name, namespace=key.namespace, uid=uid
            )
            event_id = f"{key.kind}/{uid or key.name}/{version}/deleted"
        else:
            if stored is not None and stored.message == desired.message:
                return
            body = desired.message
            uid = desired.uid
            digest = hashlib.sha256(_encoder.encode(body)).hexdigest()[:16]
            event_id = f"{key.kind}/{uid or key.name}/{version or '0'}/{digest}"
        envelope = Envelope(
            event_id=event_id,
            cluster=self.cluster,
            source=SOURCE,
            time=now,
            body=body,
            source_uid=uid,
            resource_version=version,
        )
        plan.publications.append(
            Publication(key, subject_for(self.cluster, key), envelope, desired.problems)
        )

    def stored(self, publication: Publication) -> None:
        """Record that ``publication`` is on the bus (call once JetStream acknowledged it)."""
        envelope = publication.envelope
        if isinstance(envelope.body, Tombstone):
            # Keep nothing for deleted objects, so memory does not grow with churn.
            self._stored.pop(publication.key, None)
            self._bypassed.pop(publication.key, None)
            self.index.forget(publication.key)
        else:
            self._stored[publication.key] = _Stored(envelope.body, envelope.resource_version)
            self._count_bypassed(publication.key, envelope.body)

    def bypassed_pods(self) -> int:
        """Pods of the published workloads that bypassed the gate, summed."""
        return sum(self._bypassed.values())

    def _count_bypassed(self, key: StateKey, body: Message) -> None:
        if isinstance(body, WorkloadState) and body.bypassed_pods:
            self._bypassed[key] = body.bypassed_pods
        else:
            self._bypassed.pop(key, None)

    def last(self, key: StateKey) -> Message | None:
        """The last message on ``key``'s subject as far as the mirror knows."""
        stored = self._stored.get(key)
        return stored.message if stored is not None else None
