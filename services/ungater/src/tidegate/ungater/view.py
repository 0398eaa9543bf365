"""The ungater's picture of the cluster and of admission's decisions, rebuilt from the bus.

Two followers feed it (both replay, then follow):

- the state stream: pods, nodes and workloads as the watcher publishes them, tombstones
  included;
- the decision stream's ``admitted``, ``released``, ``pending`` and ``preempted`` subjects,
  newest per workload (per preemptor for ``preempted``): what admission currently says about
  each workload, and which workloads preemption evicted.

From these it answers the one question releasing depends on, :meth:`View.admission`: which
admission is in force for a workload. The newest ``admitted`` (by epoch, then sequence) is in
force unless a ``released`` of the same object with a later sequence followed it, a
``preempted`` ends it (its gang is being evicted: the pods its controller re-creates must wait
for a new admission, even while admission has not yet answered with its ``released``; only the
admission the decision names ends, :meth:`~tidegate.model.Preempted.ends`, so a repeated
``preempted`` leaves a later admission alone), or the workload is gone or was re-created under
another uid. Older or repeated messages never
replace newer ones, so duplicates and reordering are harmless; likewise a pod snapshot that
still shows tidegate's gate is ignored once the same pod was seen released (gates are never
added back).

Every change marks the workloads it may affect as *dirty* through ``on_change``; the
:class:`~tidegate.ungater.releaser.Releaser` reconciles dirty workloads. The view decides
nothing and does no I/O.
"""

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tidegate.bus import Received
from tidegate.model import (
    Admitted,
    NodeState,
    Pending,
    PodState,
    Preempted,
    Released,
    Tombstone,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.names import ADMISSION_GATE

log = logging.getLogger(__name__)

GATE = ADMISSION_GATE

DEPARTED_KEPT = 4096

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What admission currently says about a workload."""

    admitted: Admitted | None
    """The admission in force, if any."""
    released: Released | None
    """The newest release of the workload's current object, if any."""
    pending: Pending | None
    """The newest pending decision about the current object, if any (possibly older than the
    admission in force: compare sequences)."""
    released_at: float = 0.0
    """When that release was decided (its envelope's time, Unix seconds)."""
    latest: Admitted | None = None
    """The newest admission of the current object, in force or not (a pending decision older
    than it is no longer current)."""


class View:
    """Pods, nodes, workloads and admission's newest decisions (module docstring)."""

    def __init__(self, on_change: Callable[[Iterable[WorkloadKey]], None] | None = None) -> None:
        """Start empty; ``on_change`` receives the keys of workloads a message may affect."""
        self._on_change = on_change or (lambda keys: None)
        self.pods: dict[PodKey, PodState] = {}
        self.nodes: dict[str, NodeState] = {}
        self.workloads: dict[WorkloadKey, WorkloadState] = {}
        self.departed: dict[str, NodeState] = {}
        """The last state of nodes deleted since start (the newest :data:`DEPARTED_KEPT`), to
        name them when their slots are lost."""
        self._members: dict[WorkloadKey, set[PodKey]] = {}
        self._admitted: dict[WorkloadKey, Admitted] = {}
        self._domains: dict[tuple[str, ...], dict[tuple[str, ...], list[NodeState]]] = {}
        self._released: dict[WorkloadKey, Released] = {}
        self._released_at: dict[WorkloadKey, float] = {}
        self._pending: dict[WorkloadKey, Pending] = {}
        self._admitted_at: dict[WorkloadKey, int] = {}
        """Decision-stream sequence of the admission on record, per workload."""
        self._preempted_at: dict[WorkloadKey, int] = {}
        """Decision-stream sequence of the newest preemption naming the workload a victim
        without naming the admission it loses (a writer older than ``Preempted.lost``)."""
        self._preempted: dict[WorkloadKey, dict[str, Preempted]] = {}
        """Per victim and uid, the preemption naming the newest admission it loses."""

    # ------------------------------------------------------------------ queries

    def members(self, key: WorkloadKey) -> list[PodState]:
        """The workload's pods, by name."""
        return [self.pods[p] for p in sorted(self._members.get(key, ()))]

    def admission(self, key: WorkloadKey) -> Admitted | None:
        """The admission in force for ``key`` (module docstring)."""
        return self.verdict(key).admitted

    def verdict(self, key: WorkloadKey) -> Verdict:
        """Admission's current word on ``key``."""
        workload = self.workloads.get(key)
        if workload is None:
            return Verdict(admitted=None, released=None, pending=None)
        uid = workload.uid
        admitted = self._admitted.get(key)
        if admitted is not None and admitted.uid != uid:
            admitted = None
        released = self._released.get(key)
        if released is not None and released.uid != uid:
            released = None
        pending = self._pending.get(key)
        if pending is not None and pending.uid != uid:
            pending = None
        in_force = admitted
        if admitted is not None and released is not None and released.sequence > admitted.sequence:
            in_force = None
        if admitted is not None and self._preempted_at.get(key, 0) > self._admitted_at.get(key, 0):
            in_force = None
        preempted = self._preempted.get(key, {}).get(uid)
        if (
            admitted is not None
            and preempted is not None
            and preempted.ends(
                key,
                uid=admitted.uid,
                sequence=admitted.sequence,
                replaces=admitted.replaces,
                origin=admitted.origin,
            )
        ):
            in_force = None
        released_at = self._released_at.get(key, 0.0) if released is not None else 0.0
        return Verdict(
            admitted=in_force,
            released=released,
            pending=pending,
            released_at=released_at,
            latest=admitted,
        )

    def admitted_keys(self) -> list[WorkloadKey]:
        """Workloads with an admission on record (in force or not)."""
        return sorted(self._admitted)

    def node_ready(self, name: str | None) -> bool:
        """Whether a pod on node ``name`` is on a usable node (unbound pods are)."""
        if name is None:
            return True
        node = self.nodes.get(name)
        return node is not None and node.ready

    def nodes_matching(
        self, levels: Sequence[str], values: Sequence[str], *, departed: bool = False
    ) -> list[NodeState]:
        """Nodes whose labels put them in the domain ``values`` of ``levels`` (with
        ``departed``, deleted ones too). Indexed per list of levels, so a call costs no scan
        of the cluster's nodes (rebuilt after a node changes)."""
        key = tuple(levels)
        index = self._domains.get(key)
        if index is None:
            index = self._domains[key] = _domain_index(key, self.nodes.values())
        found = list(index.get(tuple(values), ()))
        if departed:
            found.extend(_domain_index(key, self.departed.values()).get(tuple(values), ()))
        return found

    # ------------------------------------------------------------------ inputs

    async def on_state(self, received: Received) -> None:
        """A pod, node or workload snapshot, or a tombstone (the state follower's handler)."""
        body = received.envelope.body
        match body:
            case PodState():
                self._set_pod(body)
            case NodeState():
                self.departed.pop(body.name, None)
                before = self.nodes.get(body.name)
                self.nodes[body.name] = body
                if before is None or before.ready != body.ready or before.labels != body.labels:
                    self._node_changed()
            case WorkloadState():
                key = workload_key(body.namespace, body.name)
                self.workloads[key] = body
                self._on_change([key])
            case Tombstone(object_kind="pod", namespace=str(namespace), name=name):
                self._drop_pod((namespace, name))
            case Tombstone(object_kind="node", name=name):
                gone = self.nodes.pop(name, None)
                if gone is not None:
                    self.departed[name] = gone
                    while len(self.departed) > DEPARTED_KEPT:
                        del self.departed[next(iter(self.departed))]
                    self._node_changed()
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name):
                key = workload_key(namespace, name)
                self.workloads.pop(key, None)
                self._preempted.pop(key, None)
                self._on_change([key])
            case _:
                return

    async def on_decision(self, received: Received) -> None:
        """An admitted, released, pending or preempted decision (the decision follower's
        handler)."""
        body = received.envelope.body
        match body:
            case Admitted():
                key = WorkloadKey(body.workload)
                known = self._admitted.get(key)
                if known is None or (body.epoch, body.sequence) > (known.epoch, known.sequence):
                    self._admitted[key] = body
                    self._admitted_at[key] = received.stream_sequence
            case Released():
                key = WorkloadKey(body.workload)
                known_release = self._released.get(key)
                if known_release is None or body.sequence >= known_release.sequence:
                    self._released[key] = body
                    self._released_at[key] = received.envelope.time
            case Pending():
                key = WorkloadKey(body.workload)
                known_pending = self._pending.get(key)
                if known_pending is None or body.sequence >= known_pending.sequence:
                    self._pending[key] = body
            case Preempted():
                victims = [WorkloadKey(victim) for victim in body.victims]
                for victim in victims:
                    named = body.lost.get(victim)
                    if named is None:
                        self._preempted_at[victim] = received.stream_sequence
                        continue
                    by_uid = self._preempted.setdefault(victim, {})
                    seen = by_uid.get(named.uid)
                    if seen is None or named.sequence > seen.lost[victim].sequence:
                        by_uid[named.uid] = body
                self._on_change(victims)
                return
            case _:
                return
        self._on_change([key])

    # ------------------------------------------------------------------ internals

    def _set_pod(self, pod: PodState) -> None:
        key = (pod.namespace, pod.name)
        before = self.pods.get(key)
        if (
            before is not None
            and before.uid == pod.uid
            and GATE not in before.scheduling_gates
            and GATE in pod.scheduling_gates
        ):
            # Kubernetes never adds a gate back: a gated snapshot of a pod already seen
            # released is older than what we hold (a repeat or a reordering), so it is dropped.
            return
        if before is not None and before.workload != pod.workload:
            self._unlink(key, before)
        self.pods[key] = pod
        if pod.workload is not None:
            workload = WorkloadKey(pod.workload)
            self._members.setdefault(workload, set()).add(key)
            self._on_change([workload])

    def _drop_pod(self, key: PodKey) -> None:
        before = self.pods.pop(key, None)
        if before is not None:
            self._unlink(key, before)

    def _unlink(self, key: PodKey, pod: PodState) -> None:
        if pod.workload is None:
            return
        workload = WorkloadKey(pod.workload)
        members = self._members.get(workload)
        if members is not None:
            members.discard(key)
            if not members:
                del self._members[workload]
        self._on_change([workload])

    def _node_changed(self) -> None:
        self._domains.clear()
        # Any admitted workload may have a slot on the node (its domain may have died or
        # come back): let each reconcile; a reconcile with nothing to do is cheap.
        self._on_change(list(self._admitted))


def _domain_index(
    levels: tuple[str, ...], nodes: Iterable[NodeState]
) -> dict[tuple[str, ...], list[NodeState]]:
    """Domain (values of the first k levels, for every k) → its nodes."""
    index: dict[tuple[str, ...], list[NodeState]] = {}
    for node in nodes:
        path: list[str] = []
        for level in levels:
            value = node.labels.get(level)
            if value is None:
                break
            path.append(value)
            index.setdefault(tuple(path), []).append(node)
    return index
