"""The admission cycle: which pending gangs are admitted, where, and why the others wait.

:class:`Admission` is admission's whole decision state as a pure object: queues, one
:class:`WorkloadRecord` per workload (its state, the admission it holds, why it waits, the
room nominated for it), quota usage (:class:`~tidegate.policy.quota.QuotaLedger`), free
capacity per Topology with the overlay of decisions not yet reflected
(:class:`~tidegate.policy.capacity.ClusterCapacity`), and the decision sequence. How an
admitted workload grows or shrinks is :mod:`tidegate.policy.elastic`. The admission service
feeds it bus messages and calls :meth:`Admission.cycle`; every decision comes back as a
:class:`Decision` whose ``body`` is the message to publish. Nothing here does I/O, so the
whole policy is tested without NATS.

One cycle, in order (docs/queues.md has the user's view):

1. Workloads that are not in a usable queue wait: ``Invalid`` (the workload's own
   ``invalid_reason``, or its queue's), ``QueueNotFound`` (no queue named, or no such queue).
2. Queues by priority (then name); within a queue by workload priority, creation time, key.
   Queues of one queue tree (:func:`~tidegate.policy.queuetree.in_tree`) are tried together,
   at the place of the first of them: their heads compete by
   :func:`~tidegate.policy.queuetree.fair_order` (weighted share, then priority, FIFO, key).
3. For each workload: its Topology (the queue's, else the workload's, else the only one or
   ``default``), its card demand, its quota check, then gang placement of every podset at once
   on the live view. If that fails and the gang has a minimum (``min_members`` or podset
   ``min_count``), the same again with the minimum. Admitted: the capacity is taken from the
   view at once (the next workload of the cycle cannot have it) and the quota charged. In a
   queue tree the quota check is :func:`~tidegate.policy.queuetree.check_admission`, and the
   admission says what it borrows from its cohort.
4. Otherwise why: quota (``ExceedsQuota``, ``CardQuotaExceeded``; in a tree, a workload whose
   queue may reclaim what its cohort lent asks preemption to, ``PreemptRequested`` with
   ``reclaim``); placement that fails even on an empty cluster of the Topology
   (``TopologyPlacementFailed``); else lack of capacity:
   an inference workload asks for preemption (``PreemptRequested``, then
   ``WaitingForPreemption`` while the request or its nomination lasts), anything else
   ``WaitingForCapacity``.
5. StrictFIFO: a workload left waiting (for any reason but ``Invalid``) stops its queue for
   the cycle; BestEffortFIFO lets later ones try.

Pending decisions are produced only when a workload's reason changes. A workload that waits
is not tried again until something may have made room (capacity grew, quota was released, a
queue changed, a nomination arrived or lapsed) or the workload itself changed.

A workload whose state says it ``finished`` (it ran to the end) gives its quota back at once
(a ``released`` decision with reason ``Completed`` or ``Failed``) and is never admitted again
under that uid, whether it was admitted, waiting, or (after a leader takeover) only restored
from the ledger.

A workload suspended by someone else than tidegate, or whose namespace is being deleted
(:func:`stopped`), is never admitted and does not wait: an admission it holds is released with
reason ``Suspended`` (``Deleted`` for the namespace). One suspended for tidegate
(``resume_on_admission``, Kueue's way) is queued and admitted like any other.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, get_args

import msgspec

from tidegate.model import (
    Admitted,
    CohortConfig,
    NodeName,
    Pending,
    PendingReason,
    PodSetSpec,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    ReplaceRequested,
    ReservationDropped,
    ReservationDropReason,
    Reserved,
    Resources,
    Tombstone,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.events import ReleaseReason
from tidegate.model.replica import Replica
from tidegate.placement import PlacementError, PlacementRequest, PlacementResult
from tidegate.policy.aging import order_with_aging
from tidegate.policy.capacity import ClusterCapacity, place_or_message
from tidegate.policy.cards import CardDemand, CardError, card_demand
from tidegate.policy.common import Failure, TopologyProblem, choose_topology, queue_of, stopped
from tidegate.policy.elastic import (
    PodsetGrowth,
    given_back,
    grow_podset,
    growth_preempts,
    holds_room_for,
    may_grow,
    resized,
)
from tidegate.policy.elastic import growth as growth_of
from tidegate.policy.ordering import blocks_queue, key_of, order_queues, order_workloads
from tidegate.policy.queuetree import (
    SERVICE_RECLAIM,
    Dim,
    Holder,
    NodeReport,
    Preemptor,
    QueueTree,
    QuotaFit,
    ReclaimPlan,
    TreeState,
    build_services_tree,
    check_admission,
    cycle_groups,
    dims_of,
    in_tree,
    plan_reclaim,
    report,
    resized_borrowing,
    take_turns,
)
from tidegate.policy.quota import (
    Charge,
    QueueUsage,
    QuotaLedger,
    QuotaReason,
    QuotaRequest,
    gang_resources,
)
from tidegate.policy.replacement import (
    ReplacementError,
    lost_slots_cause,
    merged_assignments,
    replacement_podsets,
)
from tidegate.policy.reservation import (
    NoEstimate,
    Occupant,
    ReservationSettings,
    backfill_note,
    blocking,
    declared_runtime,
    drop_reason,
    keeps_reservation,
    keeps_without_estimate,
    plan_reservation,
    replan_due,
    reservation_allowed,
    reserved_message,
    same_reservation,
    view_without_reserved,
)

__all__ = [
    "Admission",
    "AdmissionSettings",
    "Decision",
    "Nomination",
    "WorkloadRecord",
    "in_tree",
    "minimum_podsets",
    "queue_problem",
    "stopped",
]

DEFAULT_PROFILE: Final = "best-fit"
"""Placement profile when neither the workload nor its queue names one."""

DecisionBody = Admitted | Pending | PreemptRequested | Released | Reserved | ReservationDropped
"""The messages a cycle or an event can produce."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision to publish, with what the service needs beside the message."""

    key: WorkloadKey
    body: DecisionBody
    workload: WorkloadState | None = None
    """The workload decided about (its trace context, namespace and name), if known."""
    node_usage: dict[NodeName, Resources] = field(default_factory=dict)
    """For an admission: what it takes on each node (kept in the ledger for a successor)."""
    tries: int = 0
    """Placement attempts on the workload since the previous decision about it, this one's
    included (cycles that found its reason unchanged publish nothing; the trace counts them)."""


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """Policy knobs of admission (the service fills them from its settings)."""

    default_queue: str | None = None
    """Queue of workloads that name none; None: such workloads wait with QueueNotFound."""
    default_topology: str = "default"
    """Topology used when neither queue nor workload names one and there are several."""
    preemption_timeout_seconds: float = 30.0
    """How long a preemption request is awaited before it is asked again."""
    nomination_timeout_seconds: float = 120.0
    """How long capacity freed by preemption stays reserved for its preemptor."""
    overlay_grace_seconds: float = 30.0
    """How long an overlay entry the cache has applied may wait for its node's report."""
    reservations: ReservationSettings = field(default_factory=ReservationSettings)
    """Cluster-wide reservation settings (docs/reservations.md)."""


@dataclass(frozen=True, slots=True)
class Nomination:
    """Capacity freed by preemption and held for one preemptor."""

    nodes: dict[NodeName, Resources]
    at: float
    quota: tuple[str, QuotaRequest] | None = None
    """For a reclaim of lent quota: the preemptor's queue and its gang's request, held in the
    queue tree while the nomination lasts, so that no other queue borrows back what was
    reclaimed before the preemptor is admitted (no preempt / re-admit ping-pong)."""


@dataclass(slots=True)
class WorkloadRecord:
    """What admission knows of one workload: one row of :class:`Admission`'s table, kept
    while anything in it is set (a record whose fields are all at their defaults is dropped)."""

    workload: WorkloadState | None = None
    """The workload as last seen (None: deleted, or not seen yet)."""
    admitted: Admitted | None = None
    """The admission held: admission's own word, what the ledger keeps."""
    done: bool = False
    """Not to be admitted again until re-created: an aborted victim, or finished."""
    stopped: str | None = None
    """The uid kept out only on a decision's word (an aborted victim, finished as another
    service said; part of ``done``): the service persists it, so that a successor keeps it
    out too (:meth:`Admission.stopped`, :meth:`Admission.restore_stopped`)."""
    nomination: Nomination | None = None
    """Capacity freed by preemption and held for it."""
    awaiting: float | None = None
    """When it asked for preemption (until answered or timed out)."""
    reason: PendingReason | None = None
    """The reason last published for its waiting (or its growth's)."""
    tries: int = 0
    """Placement attempts since the previous decision about it."""
    tried_at: int | None = None
    """The growth counter when it was last tried in vain (not tried again before it moves)."""
    grow_tried_at: int | None = None
    """The same for the growth of an admitted workload that could not be (fully) admitted."""
    quota_tried: tuple[object, ...] | None = None
    """What its quota check depended on when it last waited for quota
    (:meth:`Admission._quota_key`): while that is the same it waits again, whatever else
    (capacity elsewhere, other trees) moved."""
    no_growth: tuple[WorkloadState, Admitted] | None = None
    """The very (frozen) workload and admission found not to grow: while both are the same
    objects the answer is the same, so the cycle does not compare them again."""
    moves: tuple[str, int] | None = None
    """After an eviction for want of room for its moved slots: the uid and the
    :attr:`Admitted.unschedulable_moves` its next admission continues from."""
    admitted_at: float | None = None
    """When the admission held was first made (its declared runtime counts from here)."""
    usage: dict[NodeName, Resources] | None = None
    """What the admission held takes on each node (what a reservation expects back)."""
    reservation: Reserved | None = None
    """The reservation in force for it (docs/reservations.md), as published."""
    reclaimed: bool = False
    """Preemption evicted a gang its reservation waits for: the room went to the preemptor,
    not coming free, so the next plan replaces it even to a later start elsewhere."""

    def empty(self) -> bool:
        """Whether nothing is known any more (the record may be dropped)."""
        return self == _EMPTY


_EMPTY: Final = WorkloadRecord()


class Admission:
    """Admission's decision state and the admission cycle (see the module docstring)."""

    def __init__(
        self,
        settings: AdmissionSettings | None = None,
        *,
        epoch: int = 0,
        sequence: int = 0,
    ) -> None:
        """Start empty; ``epoch`` is the leader's fencing epoch, ``sequence`` the last used."""
        self.settings = settings or AdmissionSettings()
        self.epoch = epoch
        self.sequence = sequence
        self.capacity = ClusterCapacity()
        self.quota = QuotaLedger()
        self._queues: dict[str, QueueConfig] = {}
        self._cohorts: dict[str, CohortConfig] = {}
        self._tree: QueueTree | None = None
        """The queue tree of the queues and cohorts known, built on first use after a change
        (:meth:`tree`)."""
        self._tree_stale = True
        self._config_version = 0
        """Bumped when a Queue or Cohort changes."""
        self._roots: tuple[QueueTree | None, int, dict[object, int], dict[str, object]] | None = (
            None
        )
        """Per tree root, the newest usage change in the tree, on the quota version ``[1]``;
        and each queue's root (for the tree ``[0]``)."""
        self._tree_state: tuple[QueueTree, int, TreeState] | None = None
        """The tree's arithmetic on the usage of quota version ``[1]`` (:meth:`_state`)."""
        self._holding: set[WorkloadKey] = set()
        """Workloads whose nomination may hold reclaimed quota (:attr:`Nomination.quota`;
        pruned when looked at), so a quota check never scans every record."""
        self._holding_version = 0
        """Counts changes of ``_holding``."""
        self._cycle_memo: _CycleMemo | None = None
        """What a cycle learnt and may reuse until it ends (None outside a cycle)."""
        self._out_of_time: Callable[[], bool] | None = None
        self.cut_short = False
        """Whether the last cycle ended before trying every waiting workload (its time was
        up): the caller should run another soon."""
        self.records: dict[WorkloadKey, WorkloadRecord] = {}
        """What admission knows, one record per workload."""
        self.decisions = Replica()
        """The decisions in force as the bus says them, admission's own and the other
        services' (``released``, ``preempted``): whether another service's decision ends an
        admission held is this replica's answer, the rule every service reads."""
        self._growth = 0
        self._heads: dict[str, list[WorkloadKey]] = {}
        """Per queue, the workloads left waiting so far this cycle, in the order tried."""
        self._reserved: dict[str, list[Reserved]] | None = None
        """The reservations in force per topology, built on first use after a change (every
        placement reads them)."""

    def _record(self, key: WorkloadKey) -> WorkloadRecord:
        """The record of ``key``, made if there is none."""
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = WorkloadRecord()
        return record

    def _prune(self, key: WorkloadKey) -> None:
        """Drop the record of ``key`` if nothing in it is set any more."""
        record = self.records.get(key)
        if record is not None and record.empty():
            del self.records[key]

    def _held(self, key: WorkloadKey) -> Admitted | None:
        record = self.records.get(key)
        return record.admitted if record is not None else None

    # ------------------------------------------------------------------ inputs

    def set_queue(self, queue: QueueConfig) -> None:
        """A Queue was created or changed."""
        if self._queues.get(queue.name) != queue:
            self._queues[queue.name] = queue
            self._growth += 1
            self._config_version += 1
            self._tree_stale = True

    def remove_queue(self, name: str) -> None:
        """A Queue was deleted: its waiting workloads become QueueNotFound."""
        if self._queues.pop(name, None) is not None:
            self._growth += 1
            self._config_version += 1
            self._tree_stale = True

    def set_cohort(self, cohort: CohortConfig) -> None:
        """A Cohort was created or changed."""
        if self._cohorts.get(cohort.name) != cohort:
            self._cohorts[cohort.name] = cohort
            self._growth += 1
            self._config_version += 1
            self._tree_stale = True

    def remove_cohort(self, name: str) -> None:
        """A Cohort was deleted (a queue naming it then shares through an implicit cohort)."""
        if self._cohorts.pop(name, None) is not None:
            self._growth += 1
            self._config_version += 1
            self._tree_stale = True

    def tree(self) -> QueueTree | None:
        """The queue tree of the queues known, or None while no queue is :func:`in_tree` (then
        quota is ``capability`` and ``cardQuota`` alone, as before trees existed)."""
        if self._tree_stale:
            self._tree_stale = False
            self._tree = build_services_tree(self._queues.values(), self._cohorts.values())
        return self._tree

    def tree_report(self) -> list[NodeReport]:
        """Every node of :meth:`tree` with its quota, usage, borrowed amounts and share
        (:func:`~tidegate.policy.queuetree.report`) on the usage in force; empty without a
        tree. The admission service's Kueue-named tree metrics read this."""
        tree = self.tree()
        return report(tree, self._tree_usage(tree)) if tree is not None else []

    def set_workload(self, workload: WorkloadState) -> list[Decision]:
        """A workload appeared or changed. A new object under an admitted name (another uid)
        releases the old one's quota first; a finished one releases its own (module doc)."""
        key = key_of(workload)
        out: list[Decision] = []
        self.decisions.apply(workload)
        record = self._record(key)
        before = record.workload
        if record.admitted is not None and record.admitted.uid != workload.uid:
            released = self.release(key, "Deleted", "replaced by a new object of the same name")
            out.extend([released] if released is not None else [])
            record = self._record(key)
        if before is not None and before.uid != workload.uid:
            record.done = False
            record.stopped = None
            record.reason = None
            self._drop_nomination(key)
            record.awaiting = None
        if before != workload:
            record.tried_at = None
            record.quota_tried = None
            record.grow_tried_at = None
        record.workload = workload
        bypass = self._bypass_charge(workload)
        if self.quota.outside(key) != bypass:
            self.quota.charge_outside(key, bypass)
            self._growth += 1  # a queue's usage changed: waiting workloads are tried again
        if workload.finished is not None:
            out.extend(self._finish(key, workload))
        elif stopped(workload):
            out.extend(self._stop(key, workload))
        return out

    def _bypass_charge(self, workload: WorkloadState) -> Charge | None:
        """What the workload's pods that bypassed the gate hold against its queue:
        their requests and cards, while it has not finished; None when there are none."""
        queue = queue_of(workload, self.settings.default_queue)
        if not workload.bypassed_pods or workload.finished is not None or queue is None:
            return None
        return Charge(
            queue=queue,
            resources=dict(workload.bypassed_requests),
            cards=dict(workload.bypassed_cards),
        )

    def remove_workload(self, key: WorkloadKey) -> list[Decision]:
        """A workload was deleted: its quota is released (if admitted) and it is forgotten."""
        released = self.release(key, "Deleted", "the workload was deleted")
        if self.quota.outside(key) is not None:
            self.quota.charge_outside(key, None)
            self._growth += 1
        namespace, _, name = key.partition("/")
        self.decisions.apply(Tombstone(object_kind="workload", namespace=namespace, name=name))
        self.decisions.forget(key)
        self._drop_nomination(key)
        dropped: list[Decision] = []
        if key in self.records and self.records[key].reservation is not None:
            self._drop(dropped, key, "Deleted", "the workload was deleted")
        self.records.pop(key, None)
        return [*([released] if released is not None else []), *dropped]

    def release(
        self, key: WorkloadKey, reason: ReleaseReason, message: str = ""
    ) -> Decision | None:
        """Give an admitted workload's quota back; None if it was not admitted."""
        record = self.records.get(key)
        if record is None:
            return None
        admitted, record.admitted = record.admitted, None
        record.no_growth = None
        record.admitted_at = None
        record.usage = None
        if admitted is None:
            self._prune(key)
            return None
        self.quota.release(key)
        self._growth += 1
        record.grow_tried_at = None
        record.reason = None  # a reason its growth waited for; it waits anew
        body = Released(
            workload=key,
            uid=admitted.uid,
            queue=admitted.queue,
            reason=reason,
            sequence=self._next_sequence(),
            message=message,
        )
        self.decisions.apply(body)
        decision = Decision(key=key, body=body, workload=record.workload)
        self._prune(key)
        return decision

    def release_if(
        self, key: WorkloadKey, *, uid: str, before: int, reason: ReleaseReason, message: str = ""
    ) -> Decision | None:
        """Release ``key`` on someone else's word (a released decision from another service)
        when it ends the admission held, by the replica's rule: only the admission of that
        ``uid``, and only one made before sequence ``before`` (0: one made before it came)."""
        self.decisions.apply(
            Released(workload=key, uid=uid, queue=None, reason=reason, sequence=before)
        )
        admitted = self._held(key)
        if admitted is None or admitted.uid != uid or self._in_force(key, admitted):
            return None
        if reason in ("Completed", "Failed"):
            record = self._record(key)
            record.done = True  # finished: not admitted again unless re-created
            record.stopped = uid
        return self.release(key, reason, message or "released by another service")

    def preempted(self, event: Preempted, *, now: float) -> list[Decision]:
        """Victims were evicted for a preemptor: release their quota (``Evicted``), keep the
        aborted ones from being admitted again, and hold the freed room for the preemptor.

        Only the admission each victim loses is released (:meth:`Preempted.ends`): a repeated
        or stale decision leaves a victim admitted again since (or re-created) alone."""
        out: list[Decision] = []
        self.decisions.apply(event)
        for victim in event.victims:
            key = WorkloadKey(victim)
            admitted = self._held(key)
            if admitted is not None and not self._in_force(key, admitted):
                released = self.release(key, "Evicted", f"preempted for {event.preemptor}")
                out.extend([released] if released is not None else [])
            record = self.records.get(key)
            current = record.workload if record is not None else None
            uid = admitted.uid if admitted is not None else current.uid if current else None
            if uid is not None and event.aborts(victim, uid=uid) and not self.is_admitted(key):
                record = self._record(key)
                record.done = True
                record.stopped = uid
            if record is not None:
                record.tried_at = None
                record.quota_tried = None
        self._reclaimed_from([v for v in event.victims if not self.is_admitted(WorkloadKey(v))])
        preemptor = WorkloadKey(event.preemptor)
        record = self.records.get(preemptor)
        if record is not None:
            record.awaiting = None
        workload = record.workload if record is not None else None
        if (
            record is not None
            and workload is not None
            and workload.uid == event.preemptor_uid
            and holds_room_for(workload, record.admitted)
        ):
            self._drop_nomination(preemptor)
            nodes = {NodeName(n): dict(r) for n, r in event.nominated.items()}
            name = queue_of(workload, self.settings.default_queue)
            held = (name, _gang_request(workload)) if event.reclaimed and name else None
            record.nomination = Nomination(nodes=nodes, at=now, quota=held)
            if held is not None:
                self._holding.add(preemptor)
                self._holding_version += 1
            for node, amount in nodes.items():
                self.capacity.hold(node, amount)
        self._prune(preemptor)
        self._growth += 1
        return out

    def replace(self, request: ReplaceRequested, *, now: float) -> list[Decision]:
        """Slots of an admitted workload were lost (their nodes failed, or the scheduler found
        no room there: ``request.cause``): place them again inside
        the workload's required domain (a new admission that ``replaces`` the old one), or,
        when there is no room, release it with ``evict_pods`` so it restarts whole from its
        queue. A request about an admission that is no longer the current one is ignored
        (:mod:`tidegate.policy.replacement`)."""
        key = WorkloadKey(request.workload)
        admitted = self._held(key)
        if (
            admitted is None
            or admitted.uid != request.uid
            or admitted.sequence != request.admitted_sequence
        ):
            return []
        workload = self.records[key].workload
        if request.give_back:
            return self._give_back(request, admitted, workload, now=now)
        queue = self._queues.get(admitted.queue)
        lost_because = lost_slots_cause(request)
        moves = admitted.unschedulable_moves + (1 if request.cause == "Unschedulable" else 0)
        if workload is None or queue is None:
            return self._evict(key, f"{lost_because}; queue or workload unknown", moves)
        topology = self._topology_for(workload, queue)
        view = self.capacity.view(topology) if isinstance(topology, str) else None
        if view is None or not isinstance(topology, str):
            return self._evict(key, f"{lost_because}; no topology to place on", moves)
        try:
            podsets = replacement_podsets(workload, admitted, request)
            podsets = card_demand(workload).restrict(podsets)
        except (ReplacementError, CardError) as exc:
            return self._evict(key, f"{lost_because}; {exc}", moves)
        if not podsets:
            return []
        view = view.copy()
        for node in request.nodes:
            if node in view:
                view.remove_node(node)
        profile = workload.profile or queue.profile or DEFAULT_PROFILE
        placement = PlacementRequest(podsets=podsets, profile=profile)
        started_at = self.records[key].admitted_at
        blockers = self._blockers(workload, queue, topology, now=now, started_at=started_at)
        result = place_or_message(view_without_reserved(view, blockers), placement)
        if isinstance(result, str) or not result.fits:
            why = result if isinstance(result, str) else result.reason or "no room"
            lost = sum(p.count for p in podsets)
            message = f"no room for {lost} replacement pods ({lost_because}): {why}"
            anywhere = place_or_message(view, placement) if blockers else None
            if isinstance(anywhere, PlacementResult) and anywhere.fits:
                message += self._backfill_note(workload, queue, blockers, now, started_at)
            return self._evict(key, message, moves)
        sequence = self._next_sequence()
        usage = {NodeName(node): taken for node, taken in result.usage().items()}
        body = msgspec.structs.replace(
            admitted,
            sequence=sequence,
            epoch=self.epoch,
            assignments=merged_assignments(admitted, request, result.assignments),
            replaces=admitted.sequence,
            origin=admitted.chain_start(),
            replace_cause=request.cause,
            unschedulable_moves=moves,
        )
        self.capacity.take(sequence, usage, at=now)
        self._hold(key, body)
        record = self.records[key]
        kept = {n: u for n, u in (record.usage or {}).items() if n not in request.nodes}
        record.usage = _merged(kept, usage)
        return [Decision(key=key, body=body, workload=workload, node_usage=usage)]

    def _evict(self, key: WorkloadKey, message: str, moves: int) -> list[Decision]:
        """Release ``key`` with ``evict_pods`` (it restarts whole from its queue); its next
        admission keeps counting from ``moves`` (:attr:`Admitted.unschedulable_moves`)."""
        released = self.release(key, "Evicted", message)
        if released is None:
            return []
        assert isinstance(released.body, Released)
        record = self._record(key)
        if moves:
            record.moves = (released.body.uid, moves)
        body = msgspec.structs.replace(released.body, evict_pods=True)
        record.tried_at = None
        record.quota_tried = None
        self._prune(key)
        return [Decision(key=key, body=body, workload=released.workload)]

    def restore(
        self,
        admitted: Admitted,
        node_usage: Mapping[NodeName, Resources],
        *,
        now: float,
        admitted_at: float | None = None,
    ) -> None:
        """Take over an admission recorded in the ledger by a previous leader (idempotent);
        ``admitted_at``: when it was first made, as recorded (else ``now``)."""
        key = WorkloadKey(admitted.workload)
        self._hold(key, admitted)
        record = self.records[key]
        record.admitted_at = admitted_at if admitted_at is not None else now
        record.usage = dict(node_usage)
        self.quota.charge(
            key,
            Charge(queue=admitted.queue, resources=admitted.charged, cards=admitted.charged_cards),
        )
        self.sequence = max(self.sequence, admitted.sequence)
        self.capacity.take(admitted.sequence, node_usage, at=now)
        self.records[key].reason = None

    def restore_reservation(self, reserved: Reserved) -> None:
        """Take over a reservation a previous leader published and did not drop (read from
        the decision stream at takeover). The next cycle drops it if it no longer stands
        (its gang admitted, gone, or no longer its queue's head) and re-plans it otherwise."""
        key = WorkloadKey(reserved.workload)
        record = self._record(key)
        if record.reservation is None or record.reservation.sequence < reserved.sequence:
            record.reservation = reserved
            self._reserved = None
        self.sequence = max(self.sequence, reserved.sequence)

    def stopped(self) -> dict[WorkloadKey, str]:
        """Workloads kept out only on a decision's word (aborted victims, finished by another
        service's release), with the uid kept out: what the service persists."""
        return {k: r.stopped for k, r in self.records.items() if r.stopped is not None}

    def restore_stopped(self, key: WorkloadKey, uid: str) -> bool:
        """Keep ``key`` out again as a previous leader recorded (takeover). False, and nothing
        kept out, when the workload is gone or was re-created (another uid)."""
        record = self.records.get(key)
        if record is None or record.workload is None or record.workload.uid != uid:
            return False
        record.done = True
        record.stopped = uid
        record.reason = None
        return True

    def release_orphans(self) -> list[Decision]:
        """Release admissions whose workload is gone, was re-created (another uid) or has
        finished: what a successor restored from the ledger for workloads deleted or finished
        while nobody led (or whose release the previous leader did not commit)."""
        out: list[Decision] = []
        for key, admitted in sorted(self.admitted().items()):
            workload = self.records[key].workload
            if workload is None or workload.uid != admitted.uid:
                released = self.release(key, "Deleted", "the workload was deleted")
                out.extend([released] if released is not None else [])
            elif workload.finished is not None:
                out.extend(self._finish(key, workload))
            elif stopped(workload):
                out.extend(self._stop(key, workload))
        return out

    # ------------------------------------------------------------------ queries

    def admitted(self) -> dict[WorkloadKey, Admitted]:
        """The admitted workloads and their admissions."""
        return {k: r.admitted for k, r in self.records.items() if r.admitted is not None}

    def workload(self, key: WorkloadKey) -> WorkloadState | None:
        """The workload known under ``key``, if any."""
        record = self.records.get(key)
        return record.workload if record is not None else None

    def known(self) -> set[WorkloadKey]:
        """Every workload that exists, is admitted or is kept out: those whose decisions
        still matter to someone."""
        return {
            key
            for key, r in self.records.items()
            if r.workload is not None or r.admitted is not None or r.stopped is not None
        }

    def is_admitted(self, key: WorkloadKey) -> bool:
        """Whether ``key`` is admitted."""
        return self._held(key) is not None

    def admitted_at(self, key: WorkloadKey) -> float | None:
        """When the admission ``key`` holds was first made (what the ledger keeps)."""
        record = self.records.get(key)
        return record.admitted_at if record is not None else None

    def reservations(self) -> dict[WorkloadKey, Reserved]:
        """The reservations in force (docs/reservations.md), by the workload they are for."""
        return {k: r.reservation for k, r in self.records.items() if r.reservation is not None}

    def nominations(self) -> dict[WorkloadKey, Nomination]:
        """Capacity currently held for preemptors."""
        return {k: r.nomination for k, r in self.records.items() if r.nomination is not None}

    def last_reason(self, key: WorkloadKey) -> PendingReason | None:
        """The reason last published for a waiting workload."""
        record = self.records.get(key)
        return record.reason if record is not None else None

    def waiting(self) -> dict[WorkloadKey, PendingReason]:
        """Every waiting workload and the reason last published for it (what admission
        reports as pending: admitted, finished and forgotten workloads are not in it; an
        admitted workload whose growth waits is admitted, not pending)."""
        return {
            k: r.reason
            for k, r in self.records.items()
            if r.reason is not None and r.admitted is None
        }

    def queues(self) -> dict[str, QueueConfig]:
        """The queues known, by name."""
        return dict(self._queues)

    # ------------------------------------------------------------------ the cycle

    def cycle(self, *, now: float, out_of_time: Callable[[], bool] | None = None) -> list[Decision]:
        """Run one admission cycle: first the growth of admitted workloads that grew, then
        every waiting workload; return its decisions in order.

        ``out_of_time`` (asked before each workload that must be tried again) ends the cycle
        early when it says so: the workloads not reached keep their state and are tried in
        the next cycle, and :attr:`cut_short` is set, so that the caller runs one soon."""
        self._cycle_memo = _CycleMemo()
        self._out_of_time = out_of_time
        self.cut_short = False
        try:
            return self._cycle(now)
        finally:
            self._cycle_memo = None
            self._out_of_time = None

    def _stop_trying(self) -> bool:
        """Whether the cycle's time is up (then :attr:`cut_short` says so)."""
        if self._out_of_time is not None and self._out_of_time():
            self.cut_short = True
        return self.cut_short

    def _cycle(self, now: float) -> list[Decision]:
        self._expire(now)
        out: list[Decision] = []
        self._drop_reservations(out, heads=None)
        self._replan_on_time(now)
        self._heads = {}
        self._grow_all(out, now)
        tree = self.tree()
        by_queue: dict[str, list[WorkloadState]] = {}
        unusable: dict[str, tuple[PendingReason, str] | None] = {}
        """Why each queue seen cannot admit (None: it can), judged once per cycle."""
        for key in sorted(self.records):
            record = self.records[key]
            workload = record.workload
            if workload is None or record.admitted is not None or record.done:
                continue
            if stopped(workload):
                continue
            name = queue_of(workload, self.settings.default_queue)
            if workload.invalid_reason is not None:
                self._wait(out, workload, name, "Invalid", workload.invalid_reason)
                continue
            if name is None:
                self._wait(out, workload, None, "QueueNotFound", "the workload names no queue")
                continue
            if name not in unusable:
                unusable[name] = self._unusable(tree, name)
            why = unusable[name]
            if why is not None:
                self._wait(out, workload, name, why[0], why[1])
            else:
                by_queue.setdefault(name, []).append(workload)

        growth = self._growth + self.capacity.version
        for group in self._groups(tree, order_queues(self._queues[name] for name in by_queue)):
            if len(group) == 1 or tree is None:
                for queue in group:
                    ordered = order_with_aging(by_queue[queue.name], queue, now=now)
                    self._run_queue(out, queue, ordered, now, growth)
            else:
                self._run_cohort(out, tree, group, by_queue, now, growth)
        # A cycle cut short did not see every queue's heads: keep the reservations it did
        # not get to judge.
        self._drop_reservations(out, heads=None if self.cut_short else self._heads)
        return out

    def _unusable(self, tree: QueueTree | None, name: str) -> tuple[PendingReason, str] | None:
        """Why queue ``name`` admits nothing now (its workloads' reason and message), or None."""
        queue = self._queues.get(name)
        if queue is None:
            return "QueueNotFound", f"queue {name} does not exist"
        if (problem := queue_problem(queue)) is not None:
            return "Invalid", f"queue {name} is invalid: {problem}"
        if (blocked := self._tree_blocked(tree, queue)) is not None:
            return "Invalid", f"queue {name} cannot be used: {blocked}"
        return None

    def _groups(
        self, tree: QueueTree | None, queues: Sequence[QueueConfig]
    ) -> list[list[QueueConfig]]:
        """``queues`` (in queue order) grouped for the cycle
        (:func:`~tidegate.policy.queuetree.cycle_groups`)."""
        return cycle_groups(tree, queues)

    def _run_queue(
        self,
        out: list[Decision],
        queue: QueueConfig,
        workloads: Sequence[WorkloadState],
        now: float,
        growth: int,
    ) -> None:
        """Try ``workloads`` of ``queue`` in order, under its queueing strategy."""
        blocked_by: WorkloadKey | None = None
        for workload in workloads:
            if blocked_by is not None:
                self._strict_wait(out, workload, queue, blocked_by)
                continue
            if not self._will_wait(workload, queue, growth) and self._stop_trying():
                return
            reason = self._consider(out, workload, queue, now, growth)
            if reason is not None and blocks_queue(queue, reason):
                blocked_by = key_of(workload)

    def _run_cohort(
        self,
        out: list[Decision],
        tree: QueueTree,
        group: Sequence[QueueConfig],
        by_queue: Mapping[str, list[WorkloadState]],
        now: float,
        growth: int,
    ) -> None:
        """Try the workloads of queues sharing one tree: the heads of the queues compete, the
        next tried is the first by :func:`~tidegate.policy.queuetree.fair_order` on the usage
        as it is after every admission so far (weighted dominant-resource share, then
        priority, creation time, key); each queue keeps its own order and strategy."""

        def attempt(workload: WorkloadState, queue: QueueConfig) -> PendingReason | None:
            return self._consider(out, workload, queue, now, growth)

        def strict_wait(behind: WorkloadState, queue: QueueConfig, head: WorkloadState) -> None:
            self._strict_wait(out, behind, queue, key_of(head))

        ordered = {q.name: order_with_aging(by_queue[q.name], q, now=now) for q in group}
        take_turns(
            tree,
            group,
            ordered,
            self._request_of,
            lambda: self._state(tree),
            attempt,
            strict_wait,
            lambda workload, queue: self._will_wait(workload, queue, growth),
            self._stop_trying,
        )

    def _strict_wait(
        self, out: list[Decision], workload: WorkloadState, queue: QueueConfig, head: WorkloadKey
    ) -> None:
        """``workload`` waits behind ``head`` of its StrictFIFO queue."""
        message = f"queue {queue.name} is StrictFIFO and waits for {head}"
        self._wait(out, workload, queue.name, "WaitingForCapacity", message)
        record = self.records[key_of(workload)]
        record.tried_at = None
        record.quota_tried = None

    def _consider(
        self,
        out: list[Decision],
        workload: WorkloadState,
        queue: QueueConfig,
        now: float,
        growth: int,
    ) -> PendingReason | None:
        """Try ``workload`` unless it was tried in vain since nothing moved; the reason it
        waits, or None when admitted."""
        record = self.records[key_of(workload)]
        waiting = self._heads.setdefault(queue.name, [])
        memo = self._cycle_memo
        if self._will_wait(workload, queue, growth):
            reason: PendingReason | None = record.reason
        else:
            quota_key = self._quota_key(queue)
            reason = self._try(out, workload, queue, now, head=len(waiting))
            record.quota_tried = quota_key if reason in QUOTA_REASONS else None
            if reason is not None:
                record.tried_at = growth
            if memo is not None and reason is not None and reason in QUOTA_REASONS:
                memo.note_over_quota(queue.name, workload, reason, self._usage_version())
        if reason is not None and reason != "Invalid":
            waiting.append(key_of(workload))
        return reason

    def _will_wait(self, workload: WorkloadState, queue: QueueConfig, growth: int) -> bool:
        """Whether ``workload`` is sure to wait again for the reason it waits: it was tried
        in vain since nothing moved, or a gang of its queue asking no more waits for quota
        now (:class:`_CycleMemo`). A head is asked twice in a row (before its turn and at
        it): the second answer is the first while nothing changed."""
        memo = self._cycle_memo
        if memo is None:
            return self._sure_to_wait(workload, queue, growth)
        stamp = (
            id(workload),
            growth,
            *self._usage_version(),
            self._config_version,
            self._holding_version,
        )
        if memo.will_wait is not None and memo.will_wait[0] == stamp:
            return memo.will_wait[1]
        answer = self._sure_to_wait(workload, queue, growth)
        memo.will_wait = (stamp, answer)
        return answer

    def _sure_to_wait(self, workload: WorkloadState, queue: QueueConfig, growth: int) -> bool:
        record = self.records[key_of(workload)]
        remembered = record.reason
        if remembered is None:
            return False
        if record.tried_at == growth:
            return True
        held = record.nomination is not None and record.nomination.quota is not None
        if (
            record.quota_tried is not None
            and not held
            and remembered in QUOTA_REASONS
            and record.quota_tried == self._quota_key(queue)
        ):
            return True
        memo = self._cycle_memo
        if (
            memo is not None
            and not held  # quota held for it: it may fit where its queue's others do not
            and memo.over_quota(queue.name, workload, self._usage_version()) == remembered
        ):
            # As good as tried on this quota: skipped on it in later cycles too, without
            # the comparison (a long queue's tail is otherwise compared at every cycle).
            record.quota_tried = self._quota_key(queue)
            return True
        return False

    def _tree_version(self, queue: str) -> int:
        """The quota ledger's version when usage last changed anywhere in ``queue``'s tree
        (the queue alone when it is in no tree); 0 when it never did."""
        tree = self.tree()
        version = self.quota.version
        cached = self._roots
        if cached is None or cached[0] is not tree:
            cached = self._roots = (tree, -1, {}, {})
        if cached[1] != version:
            newest: dict[object, int] = {}
            for name, at in self.quota.changed_at.items():
                root = self._root_of(tree, name, cached[3])
                newest[root] = max(newest.get(root, 0), at)
            cached = self._roots = (tree, version, newest, cached[3])
        return cached[2].get(self._root_of(tree, queue, cached[3]), 0)

    @staticmethod
    def _root_of(tree: QueueTree | None, queue: str, known: dict[str, object]) -> object:
        """The root of ``queue``'s tree (the queue itself when in none), kept in ``known``."""
        root = known.get(queue)
        if root is None:
            node = tree.queue(queue) if tree is not None else None
            root = known[queue] = (
                tree.root(node.id) if tree is not None and node is not None else queue
            )
        return root

    def _quota_key(self, queue: QueueConfig) -> tuple[object, ...]:
        """What a quota check of ``queue`` depends on besides the workload itself: its tree's
        usage, the queues and cohorts, whether the queue has a preemption in flight, and the
        quota held for preemptors (within a cycle, computed once per queue until one of them
        changes)."""
        memo = self._cycle_memo
        preempting = self._preempting()
        stamp = (self.quota.version, self._config_version, len(preempting), self._holding_version)
        if memo is not None:
            known = memo.quota_keys.get(queue.name)
            if known is not None and known[0] == stamp:
                return known[1]
        key = (
            self._tree_version(queue.name),
            self._config_version,
            queue.name in preempting,
            tuple(sorted(self._holding)),
        )
        if memo is not None:
            memo.quota_keys[queue.name] = (stamp, key)
        return key

    def _preempting(self) -> set[str]:
        """The queues with a workload that asked preemption for room and waits for its
        answer or holds what it freed (computed once per cycle, kept current within it)."""
        memo = self._cycle_memo
        if memo is not None and memo.preempting is not None:
            return memo.preempting
        queues = set()
        for record in self.records.values():
            if (record.awaiting is not None or record.nomination is not None) and (
                record.workload is not None
            ):
                name = queue_of(record.workload, self.settings.default_queue)
                if name is not None:
                    queues.add(name)
        if memo is not None:
            memo.preempting = queues
        return queues

    def _usage_version(self) -> tuple[int, int]:
        """Changes whenever quota usage or capacity does (what a quota check depends on)."""
        return (self.quota.version, self.capacity.version)

    def _request_of(self, workload: WorkloadState) -> QuotaRequest:
        """:func:`_gang_request`, computed once per workload object within a cycle."""
        memo = self._cycle_memo
        if memo is None:
            return _gang_request(workload)
        known = memo.requests.get(id(workload))
        if known is None or known[0] is not workload:
            known = memo.requests[id(workload)] = (workload, _gang_request(workload))
        return known[1]

    def _tree_blocked(self, tree: QueueTree | None, queue: QueueConfig) -> str | None:
        """Why ``queue``'s tree keeps it from admitting (it or a cohort above it is Invalid)."""
        if tree is None or not in_tree(queue):
            return None
        node = tree.queue(queue.name)
        return tree.blocked(node.id) if node is not None else None

    def _state(self, tree: QueueTree) -> TreeState:
        """The tree's arithmetic on the usage in force, rebuilt only after usage or the tree
        changed (a cycle asks for it at every turn and every quota check)."""
        version = self.quota.version
        cached = self._tree_state
        if cached is None or cached[0] is not tree or cached[1] != version:
            cached = self._tree_state = (tree, version, TreeState(tree, self._tree_usage(tree)))
        return cached[2]

    def _tree_usage(self, tree: QueueTree) -> dict[str, QueueUsage]:
        """What each queue of ``tree`` holds now (admissions and pods that bypassed the gate)."""
        return {
            node_id.name: self.quota.usage(node_id.name)
            for node_id in tree.nodes
            if node_id.kind == "queue"
        }

    def _held_quota(self, tree: QueueTree, but: WorkloadKey | None) -> dict[str, dict[Dim, int]]:
        """The quota reclaimed for waiting preemptors other than ``but``, per queue of
        ``tree`` (:attr:`Nomination.quota`): the quota check of an admission counts it."""
        held: dict[str, dict[Dim, int]] = {}
        for key in sorted(self._holding):
            record = self.records.get(key)
            nomination = record.nomination if record is not None else None
            if nomination is None or nomination.quota is None:
                self._holding.discard(key)
                self._holding_version += 1
                continue
            if key == but:
                continue
            name, request = nomination.quota
            if tree.queue(name) is None:
                continue
            amounts = held.setdefault(name, {})
            for dim, amount in dims_of(request).items():
                amounts[dim] = amounts.get(dim, 0) + amount
        return held

    # ------------------------------------------------------------------ elastic workloads

    def _grow_all(self, out: list[Decision], now: float) -> None:
        """Admit the growth of admitted workloads that want more pods than their slots
        (:mod:`tidegate.policy.elastic`), queues by priority, workloads in queue order."""
        growth = self._growth + self.capacity.version
        by_queue: dict[str, list[WorkloadState]] = {}
        # Every cycle looks at every admitted workload: skip at once those found not to grow
        # against the same objects, unless a reason must be cleared: looking at each again
        # would make this loop half of the cycle's time with a few hundred workloads admitted.
        candidates: list[WorkloadKey] = []
        for key, record in self.records.items():
            if record.admitted is None:
                continue
            checked = record.no_growth
            if (
                checked is None
                or checked[1] is not record.admitted
                or checked[0] is not record.workload
                or record.reason is not None
            ):
                candidates.append(key)
        for key in sorted(candidates):
            record = self.records[key]
            admitted, workload = record.admitted, record.workload
            assert admitted is not None
            if workload is None or not may_grow(workload, admitted) or record.done:
                continue
            if not growth_of(workload, admitted):
                if record.reason is not None:
                    record.reason = None
                    record.grow_tried_at = None
                record.no_growth = (workload, admitted)
                continue
            record.no_growth = None
            if record.grow_tried_at == growth:
                continue
            queue = self._queues.get(admitted.queue)
            if queue is None or queue_problem(queue) is not None:
                continue
            by_queue.setdefault(queue.name, []).append(workload)
        for queue in order_queues(self._queues[name] for name in by_queue):
            for workload in order_workloads(by_queue[queue.name]):
                if not self._grow(out, workload, queue, now):
                    self.records[key_of(workload)].grow_tried_at = growth

    def _grow(
        self, out: list[Decision], workload: WorkloadState, queue: QueueConfig, now: float
    ) -> bool:
        """Admit as many of ``workload``'s extra pods as fit, podset by podset
        (:func:`~tidegate.policy.elastic.grow_podset`), each admitted part a resize that
        replaces the admission in force. When none could be admitted it waits with a reason
        (published when the reason changes). True when something was admitted or nothing
        waits (try again next cycle)."""
        key = key_of(workload)
        record = self.records[key]
        topology = self._topology_for(workload, queue)
        if isinstance(topology, Failure):
            self._wait(out, workload, queue.name, topology.reason, topology.message)
            return False
        failure: Failure | None = None
        admitted_any = False
        nomination = record.nomination
        if nomination is not None:  # room freed by preemption for this growth
            for node, amount in nomination.nodes.items():
                self.capacity.unhold(node, amount)
        profile = workload.profile or queue.profile or DEFAULT_PROFILE
        wanted: list[PodSetSpec] = []
        assert record.admitted is not None
        started_at = record.admitted_at
        blockers = self._blockers(
            workload, queue, topology, now=now, started_at=started_at, nomination=nomination
        )
        for name, extra in sorted(growth_of(workload, record.admitted).items()):
            admitted = record.admitted
            assert admitted is not None
            outcome = grow_podset(
                workload,
                admitted,
                name,
                extra,
                queue=queue,
                usage=self.quota,
                check=self._quota_failure,
                capacity=self.capacity,
                topology=topology,
                profile=profile,
                outside=blockers,
            )
            if isinstance(outcome, Failure):
                if blockers and outcome.request and self._fits(topology, outcome.request):
                    note = self._backfill_note(workload, queue, blockers, now, started_at)
                    outcome = replace(outcome, message=outcome.message + note)
                failure = failure or outcome
                if outcome.request is not None:
                    wanted.extend(outcome.request.podsets)
                continue
            out.append(self._resize(workload, admitted, name, outcome, now))
            admitted_any = True
        if admitted_any:
            if record.nomination is not None:
                record.nomination = None
                self._growth += 1
            record.awaiting = None
            return True
        if nomination is not None:
            for node, amount in nomination.nodes.items():
                self.capacity.hold(node, amount)
        if failure is None:
            return True
        if growth_preempts(workload, failure, wanted):
            if record.nomination is not None or record.awaiting is not None:
                message = f"waiting for preemption to free room: {failure.message}"
                self._wait(out, workload, queue.name, "WaitingForPreemption", message)
                return False
            self._request_preemption(
                out,
                workload,
                queue,
                topology,
                failure,
                now,
                podsets=wanted,
                admitted_sequence=record.admitted.sequence,
            )
            return False
        self._wait(out, workload, queue.name, failure.reason, failure.message)
        return False

    def _resize(
        self,
        workload: WorkloadState,
        admitted: Admitted,
        name: str,
        grown_by: PodsetGrowth,
        now: float,
    ) -> Decision:
        """Commit a growth of podset ``name``: a resize replacing ``admitted``."""
        key = key_of(workload)
        sequence = self._next_sequence()
        usage = {NodeName(node): taken for node, taken in grown_by.result.usage().items()}
        charge = grown_by.charge
        body = self._reborrowed(
            resized(admitted, name, grown_by, sequence=sequence, epoch=self.epoch), admitted
        )
        self.capacity.take(sequence, usage, at=now)
        self.quota.charge(
            key, Charge(queue=admitted.queue, resources=charge.resources, cards=charge.cards)
        )
        self._hold(key, body)
        record = self.records[key]
        record.reason = None
        record.usage = _merged(record.usage or {}, usage)
        return Decision(key=key, body=body, workload=workload, node_usage=usage)

    def _reborrowed(self, body: Admitted, before: Admitted) -> Admitted:
        """``body``, a resize of ``before`` (the admission in force, still charged), with what
        it borrows recomputed (:func:`~tidegate.policy.queuetree.resized_borrowing`) and
        ``cohort`` set only while it borrows."""
        queue = self._queues.get(body.queue)
        tree = self.tree() if queue is not None and in_tree(queue) else None
        if queue is None or tree is None:
            return body
        charge = QuotaRequest(resources=body.charged, cards=body.charged_cards)
        borrowed, cards = resized_borrowing(tree, self._state(tree), before, charge)
        return msgspec.structs.replace(
            body,
            borrowed=borrowed,
            borrowed_cards=cards,
            cohort=queue.parent if borrowed or cards else None,
        )

    def _give_back(
        self,
        request: ReplaceRequested,
        admitted: Admitted,
        workload: WorkloadState | None,
        *,
        now: float,
    ) -> list[Decision]:
        """The workload shrank and the ungater names free slots: a resize that replaces
        ``admitted`` with what :func:`~tidegate.policy.elastic.given_back` leaves."""
        kept = given_back(request, admitted, workload)
        if kept is None:
            return []
        assignments, charge = kept
        key = WorkloadKey(admitted.workload)
        sequence = self._next_sequence()
        body = msgspec.structs.replace(
            admitted,
            sequence=sequence,
            epoch=self.epoch,
            assignments=assignments,
            charged=charge.resources,
            charged_cards=charge.cards,
            nominated_by=None,
            replaces=admitted.sequence,
            origin=admitted.chain_start(),
            resized=True,
        )
        body = self._reborrowed(body, admitted)
        self.capacity.take(sequence, {}, at=now)
        self.quota.charge(
            key, Charge(queue=admitted.queue, resources=charge.resources, cards=charge.cards)
        )
        self._hold(key, body)
        self._growth += 1
        return [Decision(key=key, body=body, workload=workload)]

    # ------------------------------------------------------------------ reservations

    def _reservations_on(self, topology: str) -> list[Reserved]:
        """The reservations in force on ``topology`` (their nodes are its nodes)."""
        if self._reserved is None:
            self._reserved = {}
            for _, held in sorted(self.reservations().items()):
                self._reserved.setdefault(held.topology, []).append(held)
        return self._reserved.get(topology, [])

    def _blockers(
        self,
        workload: WorkloadState,
        queue: QueueConfig,
        topology: str,
        *,
        now: float,
        started_at: float | None = None,
        nomination: Nomination | None = None,
    ) -> list[Reserved]:
        """The reservations ``workload`` is kept off (:func:`~tidegate.policy.reservation.
        blocking`, the one rule): for a new admission, and, with ``started_at`` (when the
        admission it holds was made), for its growth and the replacement of its lost slots.
        The nodes of its ``nomination`` (room preemption freed for it) stay open to it."""
        return blocking(
            self._reservations_on(topology),
            workload=key_of(workload),
            runtime_seconds=declared_runtime(workload, queue),
            now=now,
            started_at=started_at,
            opened=nomination.nodes if nomination is not None else (),
        )

    def _fits(self, topology: str, request: PlacementRequest) -> bool:
        """Whether ``request`` fits ``topology``'s live view, reserved nodes included."""
        anywhere = self.capacity.place(topology, request)
        return isinstance(anywhere, PlacementResult) and anywhere.fits

    @staticmethod
    def _backfill_note(
        workload: WorkloadState,
        queue: QueueConfig,
        blockers: Sequence[Reserved],
        now: float,
        started_at: float | None = None,
    ) -> str:
        """Why ``workload`` may not use the first of ``blockers``, as ``"; <why>"`` to append
        to a message about pods that would fit on their nodes ("" when there are none)."""
        if not blockers:
            return ""
        runtime = declared_runtime(workload, queue)
        note = backfill_note(blockers[0], runtime_seconds=runtime, now=now, started_at=started_at)
        return f"; {note}"

    def _replan_on_time(self, now: float) -> None:
        """Try again, this cycle, the gangs whose reservation time alone made stale
        (:func:`~tidegate.policy.reservation.replan_due`): their plan is made anew and
        republished if it changed, though nothing else moved."""
        running: set[str] | None = None
        for record in self.records.values():
            held = record.reservation
            if held is None:
                continue
            if running is None:
                running = {k for k, r in self.records.items() if r.admitted is not None}
            if replan_due(held, running, now=now):
                record.tried_at = None
                record.quota_tried = None

    def _reclaimed_from(self, victims: Sequence[str]) -> None:
        """Preemption evicted ``victims``: the reservations waiting for any of them are
        planned anew, even to a later start elsewhere (their room went to the preemptor)."""
        gone = set(victims)
        for record in self.records.values():
            held = record.reservation
            if held is not None and any(w.workload in gone for w in held.waits_for):
                record.reclaimed = True
                record.tried_at = None
                record.quota_tried = None

    def _place_outside(
        self, topology: str, request: PlacementRequest, blockers: Sequence[Reserved]
    ) -> PlacementResult | str:
        """Place ``request`` on ``topology``'s live view without the nodes of ``blockers``
        (what :func:`~tidegate.policy.reservation.view_without_reserved` leaves; answered
        from memory while the view is unchanged)."""
        result = self.capacity.place(topology, request, outside=blockers)
        assert result is not None  # the topology is known (checked by the caller)
        return result

    def _occupants(self) -> list[Occupant]:
        """The admissions held, as reservations see them (docs/reservations.md)."""
        occupants = []
        for key, record in sorted(self.records.items()):
            workload = record.workload
            if record.admitted is None or workload is None:
                continue
            queue = self._queues.get(record.admitted.queue)
            occupants.append(
                Occupant(
                    key=key,
                    started_at=record.admitted_at if record.admitted_at is not None else 0.0,
                    runtime_seconds=declared_runtime(workload, queue),
                    usage={str(n): u for n, u in (record.usage or {}).items()},
                )
            )
        return occupants

    def _reserve(
        self,
        out: list[Decision],
        workload: WorkloadState,
        queue: QueueConfig,
        topology: str,
        request: PlacementRequest | None,
        now: float,
    ) -> None:
        """``workload``, a head of ``queue``, waits for capacity: plan its reservation and
        publish it when new or changed (``same_reservation``); a ``NoEstimate`` drops the
        one it holds. Within the queue's and the cluster's limits."""
        key = key_of(workload)
        record = self.records[key]
        held = record.reservation
        view = self.capacity.view(topology)
        if request is None or view is None:
            return
        others = [r for k, r in sorted(self.reservations().items()) if k != key]
        settings = self.settings.reservations
        if held is None and reservation_allowed(queue, others, settings=settings) is not None:
            return
        occupants = self._occupants()
        try:
            plan = plan_reservation(
                view,
                request,
                occupants,
                now=now,
                others=[r for r in others if r.topology == topology],
                settings=settings,
            )
        except PlacementError:
            return
        if isinstance(plan, NoEstimate):
            if held is not None and not keeps_without_estimate(
                held, occupants, now=now, settings=settings
            ):
                self._drop(out, key, "NoEstimate", plan.message)
            return
        body = reserved_message(
            plan, workload=workload, queue=queue.name, topology=topology, sequence=0, now=now
        )
        reclaimed, record.reclaimed = record.reclaimed, False
        if held is not None and (
            same_reservation(held, body)
            or (not reclaimed and keeps_reservation(held, body, occupants))
        ):
            return
        body = msgspec.structs.replace(body, sequence=self._next_sequence())
        record.reservation = body
        self._reserved = None
        if held is not None:
            self._growth += 1  # its nodes or start moved: waiting workloads are tried again
        self.decisions.apply(body)
        out.append(Decision(key=key, body=body, workload=workload))

    def _drop(
        self, out: list[Decision], key: WorkloadKey, reason: ReservationDropReason, message: str
    ) -> None:
        """End the reservation ``key`` holds: a ``reservation-dropped`` decision."""
        record = self.records[key]
        held, record.reservation = record.reservation, None
        record.reclaimed = False
        self._reserved = None
        assert held is not None
        body = ReservationDropped(
            workload=key,
            uid=held.uid,
            queue=held.queue,
            reason=reason,
            sequence=self._next_sequence(),
            reserved_sequence=held.sequence,
            message=message,
        )
        self.decisions.apply(body)
        out.append(Decision(key=key, body=body, workload=record.workload))
        self._growth += 1  # its nodes are open again: waiting workloads are tried again
        self._prune(key)

    def _drop_reservations(
        self, out: list[Decision], *, heads: Mapping[str, Sequence[WorkloadKey]] | None
    ) -> None:
        """Drop the reservations that no longer stand (:func:`~tidegate.policy.reservation.
        drop_reason`). ``heads``: per queue, the workloads left waiting this cycle in order
        (a reservation whose gang is not among the first ``max_reservations`` of its queue
        ends); None before the queues ran (every gang still counts as a head)."""
        for key in sorted(k for k, r in self.records.items() if r.reservation is not None):
            record = self.records[key]
            held = record.reservation
            assert held is not None
            workload = record.workload
            name = queue_of(workload, self.settings.default_queue) if workload else None
            queue = self._queues.get(name) if name is not None else None
            if queue is not None and queue_problem(queue) is not None:
                queue = msgspec.structs.replace(queue, invalid_reason=queue_problem(queue))
            limit = queue.max_reservations if queue is not None else 0
            head = heads is None or key in heads.get(held.queue, [])[:limit]
            reason = drop_reason(
                held,
                workload=workload,
                queue=queue,
                admitted=record.admitted is not None,
                head=head,
            )
            if reason is not None:
                self._drop(out, key, reason, _DROP_MESSAGES[reason])

    # ------------------------------------------------------------------ internals

    def _finish(self, key: WorkloadKey, workload: WorkloadState) -> list[Decision]:
        """``workload`` ran to the end: never admit it again, stop waiting on its behalf, and
        release its admission if it has one (of this uid)."""
        assert workload.finished is not None
        record = self._record(key)
        record.done = True
        record.reason = None
        record.awaiting = None
        self._drop_nomination(key)
        admitted = record.admitted
        if admitted is None or admitted.uid != workload.uid:
            return []
        verb = "completed" if workload.finished == "Completed" else "failed"
        message = f"{workload.owner_kind} {key} {verb}"
        released = self.release(key, workload.finished, message)
        return [released] if released is not None else []

    def _stop(self, key: WorkloadKey, workload: WorkloadState) -> list[Decision]:
        """``workload`` is :func:`stopped`: it stops waiting, holds no nomination, and its
        admission of this uid, if any, is released (``Suspended``, or ``Deleted`` when its
        namespace is being deleted)."""
        record = self._record(key)
        record.reason = None
        record.awaiting = None
        self._drop_nomination(key)
        admitted = record.admitted
        if admitted is None or admitted.uid != workload.uid:
            self._prune(key)
            return []
        if workload.namespace_deleting:
            message = f"the namespace of {workload.owner_kind} {key} is being deleted"
            released = self.release(key, "Deleted", message)
        else:
            message = f"{workload.owner_kind} {key} was suspended; it runs again once resumed"
            released = self.release(key, "Suspended", message)
        return [released] if released is not None else []

    def _try(
        self,
        out: list[Decision],
        workload: WorkloadState,
        queue: QueueConfig,
        now: float,
        *,
        head: int = 0,
    ) -> PendingReason | None:
        """Try to admit one workload; return None if admitted, else the reason it waits.
        ``head``: how many of its queue wait before it this cycle (among the first
        ``max_reservations`` waiting for capacity, it may be reserved room)."""
        topology = self._topology_for(workload, queue)
        if isinstance(topology, Failure):
            return self._wait(out, workload, queue.name, topology.reason, topology.message)
        attempts = _attempts(workload)
        if isinstance(attempts, Failure):
            return self._wait(out, workload, queue.name, attempts.reason, attempts.message)

        key = key_of(workload)
        record = self.records[key]
        record.tries += 1
        nomination = record.nomination
        if nomination is not None:
            for node, amount in nomination.nodes.items():
                self.capacity.unhold(node, amount)
        failure: Failure | None = None
        for podsets in attempts:
            outcome = self._admit(workload, queue, topology, podsets, nominated=nomination, now=now)
            if isinstance(outcome, Decision):
                out.append(replace(outcome, tries=self._take_tries(record)))
                return None
            failure = outcome
            if failure.reason == "Invalid":
                break
        if nomination is not None:
            for node, amount in nomination.nodes.items():
                self.capacity.hold(node, amount)
        assert failure is not None  # at least one attempt ran
        if failure.request is None:
            if failure.reason in ("ExceedsQuota", "CardQuotaExceeded") and in_tree(queue):
                if record.nomination is not None or record.awaiting is not None:
                    message = f"waiting for borrowed quota to be reclaimed: {failure.message}"
                    return self._wait(out, workload, queue.name, "WaitingForPreemption", message)
                if queue.name in self._preempting():
                    # One reclaim in flight per queue, as Kueue keeps the head that preempts
                    # at the head: the others ask when it is answered.
                    return self._wait(out, workload, queue.name, failure.reason, failure.message)
                plan = self.plan_reclaim(workload, queue)
                if plan is not None and plan.outcome == "reclaims":
                    return self._request_preemption(
                        out, workload, queue, topology, failure, now, reclaim=True
                    )
            return self._wait(out, workload, queue.name, failure.reason, failure.message)

        ever = self.capacity.place(topology, failure.request, empty=True)
        assert ever is not None  # the topology is known (checked above)
        if isinstance(ever, str) or not ever.fits:
            why = ever if isinstance(ever, str) else ever.reason
            nodes = self.capacity.nodes(topology)
            message = f"cannot fit in topology {topology} even with all {nodes} nodes empty: {why}"
            return self._wait(out, workload, queue.name, "TopologyPlacementFailed", message)
        if record.nomination is not None or record.awaiting is not None:
            message = f"waiting for preemption to free room: {failure.message}"
            return self._wait(out, workload, queue.name, "WaitingForPreemption", message)
        if workload.service_type == "inference":
            return self._request_preemption(out, workload, queue, topology, failure, now)
        reason = self._wait(out, workload, queue.name, "WaitingForCapacity", failure.message)
        if head < queue.max_reservations:
            self._reserve(out, workload, queue, topology, failure.request, now)
        return reason

    def plan_reclaim(self, workload: WorkloadState, queue: QueueConfig) -> ReclaimPlan | None:
        """Whether preempting whole gangs that borrow from ``queue``'s cohort would let
        ``workload`` fit its quota (:func:`~tidegate.policy.queuetree.plan_reclaim` on the
        admissions held; the preemption service plans again with PodDisruptionBudgets). None
        when the queue is in no tree."""
        tree = self.tree() if in_tree(queue) else None
        if tree is None:
            return None
        preemptor = Preemptor(
            key=key_of(workload),
            queue=queue.name,
            request=self._request_of(workload),
            priority=workload.priority,
            service_type=workload.service_type,
            created_at=workload.created_at,
        )
        memo = self._cycle_memo
        if memo is not None and memo.cannot_reclaim(preemptor, self.quota.version):
            return ReclaimPlan(outcome="cannot", message="as for an earlier gang this cycle")
        plan = plan_reclaim(
            tree, self._state(tree), preemptor, self._holders(tree), SERVICE_RECLAIM
        )
        if memo is not None and plan.outcome == "cannot":
            memo.no_reclaim(preemptor, self.quota.version)
        return plan

    def _holders(self, tree: QueueTree) -> list[Holder]:
        """Every admitted gang of ``tree``'s queues as a reclaim victim candidate (kept for
        the rest of a cycle while usage does not change)."""
        memo = self._cycle_memo
        if memo is not None and memo.holders is not None and memo.holders[0] == self.quota.version:
            return memo.holders[1]
        holders = []
        for key in self.quota.holders():  # the admitted ones, sorted (not every record)
            record = self.records.get(key)
            if record is None:
                continue
            admitted, held = record.admitted, record.workload
            if admitted is None or held is None or tree.queue(admitted.queue) is None:
                continue
            holders.append(
                Holder(
                    key=key,
                    queue=admitted.queue,
                    holds=QuotaRequest(resources=admitted.charged, cards=admitted.charged_cards),
                    priority=held.priority,
                    service_type=held.service_type,
                    admitted_at=float(admitted.chain_start()),
                    created_at=held.created_at,
                    preemptable=held.preemptable,
                )
            )
        if memo is not None:
            memo.holders = (self.quota.version, holders)
        return holders

    @staticmethod
    def _take_tries(record: WorkloadRecord) -> int:
        """The placement attempts counted since the previous decision (reset: one is made)."""
        tries, record.tries = record.tries, 0
        return tries

    def _request_preemption(
        self,
        out: list[Decision],
        workload: WorkloadState,
        queue: QueueConfig,
        topology: str,
        failure: Failure,
        now: float,
        *,
        podsets: Sequence[PodSetSpec] = (),
        admitted_sequence: int | None = None,
        reclaim: bool = False,
    ) -> PendingReason:
        """Ask preemption to free room for an inference workload that does not fit (the
        whole workload, or with ``podsets`` and ``admitted_sequence`` only the extra pods of
        an admitted one that grew), then wait for it: ``WaitingForPreemption``."""
        key = key_of(workload)
        record = self._record(key)
        record.awaiting = now
        if self._cycle_memo is not None and self._cycle_memo.preempting is not None:
            self._cycle_memo.preempting.add(queue.name)
        body = PreemptRequested(
            workload=key,
            uid=workload.uid,
            queue=queue.name,
            sequence=self._next_sequence(),
            message=failure.message,
            topology=topology,
            podsets=list(podsets),
            admitted_sequence=admitted_sequence,
            reclaim=reclaim,
        )
        tries = self._take_tries(record)
        out.append(Decision(key=key, body=body, workload=workload, tries=tries))
        what = "reclaim of borrowed quota requested" if reclaim else "preemption requested"
        message = f"{what}: {failure.message}"
        return self._wait(out, workload, queue.name, "WaitingForPreemption", message)

    def _admit(
        self,
        workload: WorkloadState,
        queue: QueueConfig,
        topology: str,
        podsets: Sequence[PodSetSpec],
        *,
        nominated: Nomination | None,
        now: float,
    ) -> Decision | Failure:
        try:
            demand = card_demand(workload, podsets)
            restricted = demand.restrict(podsets)
        except CardError as exc:
            return Failure("Invalid", str(exc))
        request = QuotaRequest(
            resources=gang_resources(podsets),
            cards={m: n for m, n in demand.cards.items() if n},
            card_resources=demand.card_resources,
        )
        fit = self._check_quota(queue, request, key_of(workload))
        if isinstance(fit, Failure):
            return fit
        profile = workload.profile or queue.profile or DEFAULT_PROFILE
        placement = PlacementRequest(podsets=restricted, profile=profile)
        blockers = self._blockers(workload, queue, topology, now=now, nomination=nominated)
        result = self._place_outside(topology, placement, blockers)
        if isinstance(result, str):
            return Failure("Invalid", result)
        if not result.fits:
            message = result.reason or "no room"
            if blockers and self._fits(topology, placement):
                message += self._backfill_note(workload, queue, blockers, now)
            return Failure("WaitingForCapacity", message, placement)
        return self._commit(
            workload, queue, restricted, result, request, demand, nominated, now, fit=fit
        )

    def _check_quota(
        self, queue: QueueConfig, request: QuotaRequest, key: WorkloadKey | None = None
    ) -> Failure | QuotaFit | None:
        """Whether ``request`` (of workload ``key``) fits ``queue``'s quota now: why not, or
        how (what it borrows) for a queue in a tree, with the quota reclaimed for other
        workloads held for them, or None for a queue in no tree (``capability`` and
        ``cardQuota`` alone)."""
        tree = self.tree() if in_tree(queue) else None
        if tree is not None:
            state = self._state(tree)
            held = self._held_quota(tree, key)
            if held:
                state = state.with_change(held)
            fit = check_admission(tree, state, queue.name, request)
            if not fit.fits:
                return Failure(fit.reason or "ExceedsQuota", fit.message or "over quota")
            return fit
        verdict = self.quota.check(queue, request)
        return Failure(verdict.reason, verdict.message) if verdict is not None else None

    def _quota_failure(self, queue: QueueConfig, request: QuotaRequest) -> Failure | None:
        """:meth:`_check_quota` as a yes or why not (for the growth of admitted workloads)."""
        fit = self._check_quota(queue, request)
        return fit if isinstance(fit, Failure) else None

    def _commit(
        self,
        workload: WorkloadState,
        queue: QueueConfig,
        podsets: Sequence[PodSetSpec],
        result: PlacementResult,
        request: QuotaRequest,
        demand: CardDemand,
        nominated: Nomination | None,
        now: float,
        *,
        fit: QuotaFit | None = None,
    ) -> Decision:
        key = key_of(workload)
        sequence = self._next_sequence()
        usage = {NodeName(node): taken for node, taken in result.usage().items()}
        borrowed = dict(fit.borrowed) if fit is not None else {}
        body = Admitted(
            workload=key,
            uid=workload.uid,
            queue=queue.name,
            sequence=sequence,
            epoch=self.epoch,
            assignments=dict(result.assignments),
            charged=request.resources,
            charged_cards=request.cards,
            card_model=demand.card_model,
            nominated_by=key if nominated is not None else None,
            requests={name: dict(amounts) for name, amounts in result.requests.items()},
            unschedulable_moves=self._carried_moves(key, workload.uid),
            borrowed={d.name: a for d, a in sorted(borrowed.items()) if d.kind == "resource"},
            borrowed_cards={d.name: a for d, a in sorted(borrowed.items()) if d.kind == "card"},
            cohort=queue.parent if borrowed else None,
        )
        self.capacity.take(sequence, usage, at=now)
        self.quota.charge(
            key, Charge(queue=queue.name, resources=request.resources, cards=request.cards)
        )
        self._hold(key, body)
        record = self.records[key]
        record.nomination = None
        record.awaiting = None
        record.reason = None
        record.tried_at = None
        record.quota_tried = None
        record.admitted_at = now
        record.usage = dict(usage)
        return Decision(key=key, body=body, workload=workload, node_usage=usage)

    def _carried_moves(self, key: WorkloadKey, uid: str) -> int:
        """The unschedulable moves a first admission of ``key`` (object ``uid``) continues
        from: those of its eviction for want of room, if that was this object's."""
        record = self.records.get(key)
        carried = record.moves if record is not None else None
        if record is not None:
            record.moves = None
        return carried[1] if carried is not None and carried[0] == uid else 0

    def _topology_for(self, workload: WorkloadState, queue: QueueConfig) -> str | Failure:
        chosen = choose_topology(
            workload,
            queue,
            known=self.capacity.topologies(),
            default=self.settings.default_topology,
        )
        if isinstance(chosen, TopologyProblem):
            return Failure(chosen.reason, chosen.message)
        return chosen

    def _wait(
        self,
        out: list[Decision],
        workload: WorkloadState,
        queue: str | None,
        reason: PendingReason,
        message: str,
    ) -> PendingReason:
        key = key_of(workload)
        record = self._record(key)
        if record.reason != reason:
            record.reason = reason
            body = Pending(
                workload=key,
                uid=workload.uid,
                queue=queue,
                reason=reason,
                message=message,
                sequence=self._next_sequence(),
            )
            tries = self._take_tries(record)
            out.append(Decision(key=key, body=body, workload=workload, tries=tries))
        return reason

    def _expire(self, now: float) -> None:
        timeout = self.settings.preemption_timeout_seconds
        nomination_timeout = self.settings.nomination_timeout_seconds
        for key, record in list(self.records.items()):
            if record.awaiting is not None and now - record.awaiting >= timeout:
                record.awaiting = None
                self._growth += 1
                self._prune(key)
            if record.nomination is not None and now - record.nomination.at >= nomination_timeout:
                self._drop_nomination(key)
                self._prune(key)
        self.capacity.expire_overlay(before=now - self.settings.overlay_grace_seconds)

    def _drop_nomination(self, key: WorkloadKey) -> None:
        record = self.records.get(key)
        nomination = record.nomination if record is not None else None
        if record is not None and nomination is not None:
            record.nomination = None
            for node, amount in nomination.nodes.items():
                self.capacity.unhold(node, amount)
            self._growth += 1

    def _hold(self, key: WorkloadKey, admitted: Admitted) -> None:
        """Hold ``admitted`` (a decision of this admission, or restored from the ledger)."""
        self._record(key).admitted = admitted
        self.decisions.apply(admitted)

    def _in_force(self, key: WorkloadKey, admitted: Admitted) -> bool:
        """Whether the admission held is still the one in force by the decisions known."""
        return self.decisions.in_force(key) == admitted

    def _next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence


_DROP_MESSAGES: Final[dict[ReservationDropReason, str]] = {
    "Started": "the gang was admitted",
    "Deleted": "the gang was deleted, re-created, finished or became invalid",
    "QueueDisallows": "its queue no longer allows the reservation (gone, changed, limit, or "
    "no longer its head)",
    "NoEstimate": "no start can be estimated any more",
}


def _merged(
    a: Mapping[NodeName, Resources], b: Mapping[NodeName, Resources]
) -> dict[NodeName, Resources]:
    """Per node, what ``a`` and ``b`` take together."""
    out = {node: dict(amount) for node, amount in a.items()}
    for node, amount in b.items():
        into = out.setdefault(node, {})
        for resource, value in amount.items():
            into[resource] = into.get(resource, 0) + value
    return out


def queue_problem(queue: QueueConfig) -> str | None:
    """Why ``queue`` cannot be used, or None: its own ``invalid_reason``, or a negative quota
    (a writer that skipped validation must not make every check pass or fail silently)."""
    if queue.invalid_reason is not None:
        return queue.invalid_reason
    for name, amount in sorted((queue.quota or {}).items()):
        if amount < 0:
            return f"quota.{name}: {amount} is negative"
    for model, cards in sorted((queue.card_quota or {}).items()):
        if cards < 0:
            return f"card_quota[{model!r}]: {cards} is negative"
    return None


def _gang_request(workload: WorkloadState) -> QuotaRequest:
    """What ``workload``'s whole gang would charge (empty when its card request is malformed:
    it is then Invalid when tried)."""
    try:
        demand = card_demand(workload, workload.podsets)
    except CardError:
        return QuotaRequest()
    return QuotaRequest(
        resources=gang_resources(workload.podsets),
        cards={m: n for m, n in demand.cards.items() if n},
        card_resources=demand.card_resources,
    )


def minimum_podsets(workload: WorkloadState) -> list[PodSetSpec] | None:
    """The smallest gang that may run: each podset at its ``min_count``, then cut from the last
    podset backwards to ``min_members`` pods in all. None when that is the whole gang.

    Raises ValueError naming the field when the minimum is larger than the gang.
    """
    counts = [p.count if p.min_count is None else p.min_count for p in workload.podsets]
    for podset, count in zip(workload.podsets, counts, strict=True):
        if not 0 <= count <= podset.count:
            raise ValueError(
                f"podsets[{podset.name}].min_count: {count} is not between 0 and its count "
                f"{podset.count}"
            )
    total = sum(p.count for p in workload.podsets)
    if workload.min_members is not None:
        if not 1 <= workload.min_members <= total:
            raise ValueError(
                f"min_members: {workload.min_members} is not between 1 and the workload's "
                f"{total} pods"
            )
        excess = sum(counts) - workload.min_members
        for i in reversed(range(len(counts))):
            cut = min(max(excess, 0), counts[i])
            counts[i] -= cut
            excess -= cut
    if counts == [p.count for p in workload.podsets]:
        return None
    return [
        msgspec.structs.replace(p, count=c, min_count=None)
        for p, c in zip(workload.podsets, counts, strict=True)
        if c > 0
    ]


def _attempts(workload: WorkloadState) -> list[list[PodSetSpec]] | Failure:
    podsets = list(workload.podsets)
    bad = next((p for p in podsets if p.count < 0), None)
    if bad is not None:
        return Failure("Invalid", f"podsets[{bad.name}].count: {bad.count} is negative")
    if sum(p.count for p in podsets) == 0:
        return Failure("Invalid", "the workload has no pods")
    try:
        minimum = minimum_podsets(workload)
    except ValueError as exc:
        return Failure("Invalid", str(exc))
    # The whole gang first, exactly (placement would otherwise settle for a podset's min_count).
    whole = [
        p if p.min_count is None else msgspec.structs.replace(p, min_count=None) for p in podsets
    ]
    return [whole] if minimum is None else [whole, minimum]


QUOTA_REASONS: Final[frozenset[PendingReason | None]] = frozenset(get_args(QuotaReason))
"""The reasons of a workload waiting for quota."""


@dataclass(slots=True)
class _CycleMemo:
    """What one cycle learnt that holds until usage changes (the quota ledger's version).

    A reclaim found impossible for a gang of a queue is impossible for a later gang of the
    same queue, priority and service type that asks at least as much of every resource and is
    no older (it may evict no more than the first could: victims are eligible by priority,
    service type and, for equal priority, being newer than the preemptor)."""

    holders: tuple[int, list[Holder]] | None = None
    preempting: set[str] | None = None
    """Queues with a preemption asked for and not yet answered (:meth:`Admission._preempting`)."""
    requests: dict[int, tuple[WorkloadState, QuotaRequest]] = field(default_factory=dict)
    """Each workload's gang request by object (the object kept, so its id stays its own)."""
    quota_keys: dict[str, tuple[tuple[int, ...], tuple[object, ...]]] = field(default_factory=dict)
    """:meth:`Admission._quota_key` by queue, with what it was computed on."""
    will_wait: tuple[tuple[int, ...], bool] | None = None
    """The last :meth:`Admission._will_wait` answer, with the workload object's id and what
    it was computed on."""
    _over: dict[str, list[tuple[WorkloadState, PendingReason]]] = field(default_factory=dict)
    _over_version: tuple[int, int] = (-1, -1)
    _cannot: dict[tuple[str, int, str], list[tuple[dict[Dim, int], float]]] = field(
        default_factory=dict
    )
    _cannot_version: int = -1

    def note_over_quota(
        self, queue: str, workload: WorkloadState, reason: PendingReason, version: tuple[int, int]
    ) -> None:
        """Remember that ``workload`` (one podset, no minimum) waits for quota on ``version``."""
        podset = workload.podsets[0]
        if podset.min_count is not None or workload.min_members is not None:
            return
        if version != self._over_version:
            self._over, self._over_version = {}, version
        self._over.setdefault(queue, []).append((workload, reason))

    def over_quota(
        self, queue: str, workload: WorkloadState, version: tuple[int, int]
    ) -> PendingReason | None:
        """The quota reason an earlier gang of ``queue`` waits for on this ``version`` when
        ``workload`` asks at least as much in the same way (one podset of the same shape, at
        least as many pods, no minimum): then it cannot fit either. None otherwise."""
        if version != self._over_version or len(workload.podsets) != 1:
            return None
        podset = workload.podsets[0]
        if podset.min_count is not None or workload.min_members is not None:
            return None
        for earlier, reason in self._over.get(queue, ()):
            first = earlier.podsets[0]
            if (
                podset.count >= first.count
                and workload.created_at >= earlier.created_at
                and workload.priority == earlier.priority
                and workload.service_type == earlier.service_type
                and workload.topology == earlier.topology
                and workload.card_request == earlier.card_request
                and msgspec.structs.replace(podset, name=first.name, count=first.count) == first
            ):
                return reason
        return None

    def no_reclaim(self, preemptor: Preemptor, version: int) -> None:
        """Remember that no reclaim lets ``preemptor`` fit on usage ``version``."""
        if version != self._cannot_version:
            self._cannot, self._cannot_version = {}, version
        kind = (preemptor.queue, preemptor.priority, preemptor.service_type)
        self._cannot.setdefault(kind, []).append((dims_of(preemptor.request), preemptor.created_at))

    def cannot_reclaim(self, preemptor: Preemptor, version: int) -> bool:
        """Whether an earlier gang of this cycle shows no reclaim can let ``preemptor`` fit."""
        if version != self._cannot_version:
            return False
        wanted = dims_of(preemptor.request)
        for amounts, created_at in self._cannot.get(
            (preemptor.queue, preemptor.priority, preemptor.service_type), ()
        ):
            if created_at <= preemptor.created_at and all(
                wanted.get(dim, 0) >= amount for dim, amount in amounts.items()
            ):
                return True
        return False
