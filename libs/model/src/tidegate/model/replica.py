"""One replica of the decisions in force, fed with bus messages, read by every service.

Why: admission, preemption, the ungater, the topology-cache's accounting and the CLI all ask
"which admission of this workload is in force, what does it hold, who ends it?". Each used to
answer with its own copy of the rule, and every seam defect sat where two copies disagreed.
:class:`Replica` is the one answer; the rule is written out once in docs/architecture.md
("The decisions in force"). It lives in the model, not in policy, because placement's
accounting (a layer below policy) reads it too.

Feed it every message a consumer follows (:meth:`Replica.apply`: the body, its stream
sequence and its envelope time) in stream order per stream; ask it per workload for its
:class:`Verdict` and its pods, and per queue for its :class:`QueueTally`. It decides nothing
and does no I/O.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, TypeVar

from tidegate.model import resources as res
from tidegate.model.events import (
    Admitted,
    Message,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    Released,
    ReservationDropped,
    Reserved,
    Tombstone,
    WorkloadState,
)
from tidegate.model.ids import WorkloadKey, workload_key
from tidegate.model.pods import gated
from tidegate.model.resources import Resources

PodKey = tuple[str, str]
"""A pod's (namespace, name)."""

GONE_KEPT: Final = 4096
"""Deleted objects remembered after their workload's record was dropped (bounded memory): a
decision about one of them that arrives later (a redelivery, a replay) is ignored."""

PREEMPTIONS_KEPT: Final = 8
"""Preemptions kept per victim: the newest by the admission they end (older ones end nothing
the newer ones do not, but for a chain of replacements, kept a while)."""

WorkloadPhase = Literal[
    "Submitted", "Admitted", "Pending", "Preempted", "Released", "Finished", "Deleted"
]
"""Where a workload stands by the decisions in force (what ``tidegate explain`` shows)."""

B = TypeVar("B", Admitted, Pending, PreemptRequested, Released, Preempted, Reserved)


@dataclass(frozen=True, slots=True)
class Seen(Generic[B]):
    """One decision as the stream holds it: its body, stream sequence and envelope time."""

    body: B
    stream_sequence: int = 0
    time: float = 0.0
    arrival: int = 0
    """The order in which the replica received it: stream order for a consumer that follows
    the stream (what "later in the stream" means for the rules of older writers)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the decisions say about a workload's current object (docs/architecture.md)."""

    workload: WorkloadState | None
    """The workload's state, if known (None: never seen, or deleted)."""
    uid: str | None
    """The object the verdict is about (None: nothing known)."""
    state: WorkloadPhase
    in_force: Seen[Admitted] | None
    """The admission in force, if any."""
    latest: Seen[Admitted] | None
    """The newest admission of the object, in force or not."""
    released: Seen[Released] | None
    """The newest release of the object."""
    pending: Seen[Pending] | None
    """The newest pending decision about the object (possibly older than ``latest``)."""
    requested: Seen[PreemptRequested] | None
    """The newest preempt request of the object."""
    ended_by: Seen[Preempted] | None
    """The preemption that ends ``latest``, if one does."""

    @property
    def admitted(self) -> Admitted | None:
        """The admission in force, if any."""
        return self.in_force.body if self.in_force is not None else None

    @property
    def waiting(self) -> Pending | PreemptRequested | None:
        """Why the object waits: its newest pending or preempt request newer than ``latest``
        (None while an admission is in force, or once it finished or was deleted)."""
        if self.in_force is not None or self.state in ("Finished", "Deleted"):
            return None
        newest: Pending | PreemptRequested | None = None
        floor = self.latest.body.sequence if self.latest is not None else -1
        for seen in (self.pending, self.requested):
            if seen is None or seen.body.sequence <= floor:
                continue
            if newest is None or seen.body.sequence >= newest.sequence:
                newest = seen.body
        return newest


@dataclass(frozen=True, slots=True)
class Share:
    """What one workload adds to its queue: admitted (holding ``resources`` and ``cards``), or
    pending for ``reason`` ("" when it does not wait) with ``bypassed`` pods that started
    without passing the gate holding ``resources`` and ``cards``."""

    queue: str
    admitted: bool
    reason: str = ""
    resources: Resources = field(default_factory=dict)
    cards: dict[str, int] = field(default_factory=dict)
    bypassed: int = 0


@dataclass(frozen=True, slots=True)
class QueueTally:
    """A queue's totals: what its admissions in force hold, how many, and who waits why."""

    admitted: int = 0
    pending: dict[str, int] = field(default_factory=dict)
    """Reason token → workloads waiting for it."""
    usage: Resources = field(default_factory=dict)
    """What its admissions in force charged, and what pods that bypassed the gate request."""
    cards: dict[str, int] = field(default_factory=dict)
    """The same per GPU card model."""
    bypassed: int = 0
    """Pods of workloads without an admission that started without passing the gate."""

    @property
    def pending_count(self) -> int:
        """How many workloads wait in the queue."""
        return sum(self.pending.values())


@dataclass(slots=True)
class _Record:
    """Everything known about one workload key."""

    workload: WorkloadState | None = None
    gone: set[str] = field(default_factory=set)
    """Objects known to have been deleted or replaced by a new object under the name."""
    finished: set[str] = field(default_factory=set)
    admitted: dict[str, Seen[Admitted]] = field(default_factory=dict)
    """Per object (uid), its newest admission by sequence."""
    released: dict[str, Seen[Released]] = field(default_factory=dict)
    """Per object, its release with the highest sequence."""
    unsequenced: dict[str, int] = field(default_factory=dict)
    """Per object, the arrival of its newest release without a sequence (older writers)."""
    pending: dict[str, Seen[Pending]] = field(default_factory=dict)
    requested: dict[str, Seen[PreemptRequested]] = field(default_factory=dict)
    preemptions: list[Seen[Preempted]] = field(default_factory=list)
    """Preemptions naming this workload a victim (bounded by :data:`PREEMPTIONS_KEPT`)."""
    reserved: dict[str, Seen[Reserved]] = field(default_factory=dict)
    """Per object, its newest reservation by sequence."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Per object, the highest ``reserved_sequence`` a ``reservation-dropped`` ended."""
    members: set[PodKey] = field(default_factory=set)


class Replica:
    """The decisions in force and the objects they are about (module docstring)."""

    def __init__(self) -> None:
        """Start empty."""
        self.pods: dict[PodKey, PodState] = {}
        """Every pod, managed or not, by (namespace, name)."""
        self._records: dict[WorkloadKey, _Record] = {}
        self._departed: dict[tuple[WorkloadKey, str], None] = {}
        """Deleted objects whose record was dropped (insertion order, :data:`GONE_KEPT`)."""
        self._shares: dict[WorkloadKey, Share] = {}
        self._in_force: dict[WorkloadKey, Admitted] = {}
        """The admission in force of every key that has one, kept with the shares."""
        self._tallies: dict[str, QueueTally] = {}
        self._arrivals = 0

    # ------------------------------------------------------------------ input

    def apply(
        self, body: Message, *, stream_sequence: int = 0, time: float = 0.0
    ) -> set[WorkloadKey]:
        """Apply one message (stream sequence and envelope time as received); return the
        workloads whose verdict, share or pods it may change. Kinds the replica does not keep
        are ignored; every input is idempotent."""
        touched: set[WorkloadKey] = set()
        self._arrivals += 1
        n = self._arrivals
        match body:
            case WorkloadState():
                key = workload_key(body.namespace, body.name)
                record = self._record(key)
                before = record.workload
                if before is not None and before.uid != body.uid:
                    record.gone.add(before.uid)
                record.gone.discard(body.uid)
                if body.finished is not None:
                    record.finished.add(body.uid)
                record.workload = body
                touched.add(key)
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name, uid=uid):
                key = workload_key(namespace, name)
                record = self._record(key)
                gone = uid or (record.workload.uid if record.workload is not None else None)
                if gone is not None:
                    record.gone.add(gone)
                if record.workload is not None and record.workload.uid == gone:
                    record.workload = None
                touched.add(key)
            case PodState():
                touched.update(self._set_pod(body))
            case Tombstone(object_kind="pod", namespace=str(namespace), name=name):
                touched.update(self._drop_pod((namespace, name)))
            case Admitted():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    _newest(
                        self._record(key).admitted, body.uid, Seen(body, stream_sequence, time, n)
                    )
                    touched.add(key)
            case Released():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    record = self._record(key)
                    if body.sequence == 0:
                        record.unsequenced[body.uid] = n
                    _newest(record.released, body.uid, Seen(body, stream_sequence, time, n))
                    touched.add(key)
            case Pending():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    _newest(
                        self._record(key).pending, body.uid, Seen(body, stream_sequence, time, n)
                    )
                    touched.add(key)
            case PreemptRequested():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    seen_request = Seen(body, stream_sequence, time, n)
                    _newest(self._record(key).requested, body.uid, seen_request)
                    touched.add(key)
            case Reserved():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    _newest(
                        self._record(key).reserved, body.uid, Seen(body, stream_sequence, time, n)
                    )
                    touched.add(key)
            case ReservationDropped():
                key = WorkloadKey(body.workload)
                if not self._departed_object(key, body.uid):
                    dropped = self._record(key).dropped
                    dropped[body.uid] = max(dropped.get(body.uid, 0), body.reserved_sequence)
                    touched.add(key)
            case Preempted():
                for victim in body.victims:
                    key = WorkloadKey(victim)
                    record = self._record(key)
                    seen = Seen(body, stream_sequence, time, n)
                    if victim in body.lost and any(p.body == body for p in record.preemptions):
                        continue  # a repeat: it ends what it ended (one without lost, from an
                        # older writer, ends what came before it, each time it comes)
                    record.preemptions.append(seen)
                    record.preemptions.sort(key=_preemption_order)
                    del record.preemptions[:-PREEMPTIONS_KEPT]
                    touched.add(key)
            case _:
                return touched
        for key in touched:
            self._reshare(key)
        return touched

    def apply_all(self, bodies: Iterable[Message]) -> set[WorkloadKey]:
        """Apply ``bodies`` in order, numbering them as a stream would (tests, replays)."""
        touched: set[WorkloadKey] = set()
        for number, body in enumerate(bodies, start=1):
            touched |= self.apply(body, stream_sequence=number)
        return touched

    def forget(self, key: WorkloadKey) -> bool:
        """Drop the record of a deleted workload that holds nothing (a tombstone seen, no state,
        no pods, no admission in force), remembering its deleted objects (:data:`GONE_KEPT`):
        a decision about one of them that comes later is ignored, one about a new object
        starts a new record. Returns whether it was dropped: what keeps memory bounded by the
        workloads that exist."""
        record = self._records.get(key)
        if record is None or record.workload is not None or record.members or not record.gone:
            return False
        if self.verdict(key).in_force is not None:
            return False
        for uid in record.gone:
            self._departed[(key, uid)] = None
        while len(self._departed) > GONE_KEPT:
            del self._departed[next(iter(self._departed))]
        del self._records[key]
        self._reshare(key)
        return True

    # ------------------------------------------------------------------ queries

    def verdict(self, key: WorkloadKey) -> Verdict:
        """What the decisions say about ``key``'s current object (docs/architecture.md)."""
        record = self._records.get(key)
        if record is None:
            return _NOTHING
        uid = _object(record)
        if uid is None:
            return _NOTHING
        workload = record.workload if record.workload and record.workload.uid == uid else None
        latest = record.admitted.get(uid)
        released = record.released.get(uid)
        pending = record.pending.get(uid)
        requested = record.requested.get(uid)
        ended_by = _preempted(record, latest) if latest is not None else None
        gone = uid in record.gone
        finished = uid in record.finished
        in_force = latest
        if latest is not None and (
            gone or finished or ended_by is not None or _released(record, latest)
        ):
            in_force = None
        state: WorkloadPhase
        if finished:
            state = "Finished"
        elif gone:
            state = "Deleted"
        elif in_force is not None:
            state = "Admitted"
        else:
            state = _last_word(latest, released, pending, requested, ended_by)
        return Verdict(
            workload=workload,
            uid=uid,
            state=state,
            in_force=in_force,
            latest=latest,
            released=released,
            pending=pending,
            requested=requested,
            ended_by=ended_by,
        )

    def in_force(self, key: WorkloadKey) -> Admitted | None:
        """The admission in force for ``key``, if any."""
        return self.verdict(key).admitted

    def reservation(self, key: WorkloadKey) -> Reserved | None:
        """The reservation in force for ``key`` (docs/reservations.md): its current object's
        newest ``reserved`` that no ``reservation-dropped`` ended (one naming its sequence or
        a later one), while the object waits (not admitted, finished or deleted)."""
        record = self._records.get(key)
        verdict = self.verdict(key)
        if record is None or verdict.uid is None or verdict.state not in ("Pending", "Submitted"):
            return None
        seen = record.reserved.get(verdict.uid)
        if seen is None or record.dropped.get(verdict.uid, 0) >= seen.body.sequence:
            return None
        return seen.body

    def admissions(self) -> dict[WorkloadKey, Admitted]:
        """Every admission in force, by workload (sorted)."""
        return {key: self._in_force[key] for key in sorted(self._in_force)}

    def admitted_keys(self) -> list[WorkloadKey]:
        """The workloads with an admission in force, sorted: what victim searches look at,
        without a verdict for every workload ever recorded."""
        return sorted(self._in_force)

    def workload(self, key: WorkloadKey) -> WorkloadState | None:
        """The workload known under ``key`` (its current object), if any."""
        record = self._records.get(key)
        return record.workload if record is not None else None

    def workloads(self) -> Iterator[tuple[WorkloadKey, WorkloadState]]:
        """Every workload known, by key."""
        for key in sorted(self._records):
            workload = self._records[key].workload
            if workload is not None:
                yield key, workload

    def __contains__(self, key: object) -> bool:
        """Whether the workload ``key`` has a record (its state or a decision about it)."""
        return key in self._records

    def recorded(self) -> list[WorkloadKey]:
        """Every workload with a record (state or decisions), sorted."""
        return sorted(self._records)

    def members(self, key: WorkloadKey) -> list[PodState]:
        """The workload's pods, by name."""
        record = self._records.get(key)
        return [self.pods[p] for p in sorted(record.members)] if record is not None else []

    def member_count(self, key: WorkloadKey) -> int:
        """How many pods the workload has."""
        record = self._records.get(key)
        return len(record.members) if record is not None else 0

    def preemptions_of(self, key: WorkloadKey) -> list[Seen[Preempted]]:
        """The preemptions that named ``key`` a victim (any object), oldest first."""
        record = self._records.get(key)
        found = list(record.preemptions) if record is not None else []
        return sorted(found, key=lambda p: p.arrival)

    def share(self, key: WorkloadKey) -> Share | None:
        """What ``key`` adds to its queue (None: nothing)."""
        return self._shares.get(key)

    def tally(self, queue: str) -> QueueTally:
        """The totals of ``queue`` (zeros for a queue nobody is in)."""
        return self._tallies.get(queue, _EMPTY)

    def usage(self, queue: str) -> tuple[Resources, dict[str, int]]:
        """What the admissions in force charged to ``queue``: resources and cards."""
        tally = self.tally(queue)
        return dict(tally.usage), dict(tally.cards)

    def queues(self) -> list[str]:
        """Queues some workload is admitted or waits in, sorted."""
        return sorted(self._tallies)

    # ------------------------------------------------------------------ internals

    def _record(self, key: WorkloadKey) -> _Record:
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = _Record()
        return record

    def _departed_object(self, key: WorkloadKey, uid: str) -> bool:
        return key not in self._records and (key, uid) in self._departed

    def _set_pod(self, pod: PodState) -> set[WorkloadKey]:
        key = (pod.namespace, pod.name)
        before = self.pods.get(key)
        if before is not None and before.uid == pod.uid and not gated(before) and gated(pod):
            # Kubernetes never adds a gate back: a gated snapshot of a pod already seen
            # released is older than what we hold (a repeat or a reordering).
            return set()
        touched = self._unlink(key, before) if before is not None else set()
        self.pods[key] = pod
        if pod.workload is not None:
            workload = WorkloadKey(pod.workload)
            self._record(workload).members.add(key)
            touched.add(workload)
        return touched

    def _drop_pod(self, key: PodKey) -> set[WorkloadKey]:
        before = self.pods.pop(key, None)
        return self._unlink(key, before) if before is not None else set()

    def _unlink(self, key: PodKey, pod: PodState) -> set[WorkloadKey]:
        if pod.workload is None:
            return set()
        workload = WorkloadKey(pod.workload)
        record = self._records.get(workload)
        if record is not None:
            record.members.discard(key)
        return {workload}

    def _reshare(self, key: WorkloadKey) -> None:
        verdict = self.verdict(key)
        admitted = verdict.in_force
        if admitted is None:
            self._in_force.pop(key, None)
        else:
            self._in_force[key] = admitted.body
        new = _share_of(verdict)
        old = self._shares.get(key)
        if old == new:
            return
        if old is not None:
            del self._shares[key]
            self._add(old, -1)
        if new is not None:
            self._shares[key] = new
            self._add(new, +1)

    def _add(self, share: Share, sign: int) -> None:
        tally = self._tallies.get(share.queue, _EMPTY)
        pending = dict(tally.pending)
        if share.reason:
            pending[share.reason] = pending.get(share.reason, 0) + sign
        tally = QueueTally(
            admitted=tally.admitted + (sign if share.admitted else 0),
            pending={r: n for r, n in pending.items() if n},
            usage=res.non_zero(res.add(tally.usage, res.scale(share.resources, sign))),
            cards=res.non_zero(res.add(tally.cards, res.scale(share.cards, sign))),
            bypassed=tally.bypassed + sign * share.bypassed,
        )
        if tally.admitted or tally.pending or tally.bypassed or tally.usage:
            self._tallies[share.queue] = tally
        else:
            self._tallies.pop(share.queue, None)


_NOTHING: Final = Verdict(
    workload=None,
    uid=None,
    state="Submitted",
    in_force=None,
    latest=None,
    released=None,
    pending=None,
    requested=None,
    ended_by=None,
)

_EMPTY: Final = QueueTally()

S = TypeVar("S", Admitted, Pending, PreemptRequested, Released, Reserved)


def _newest(table: dict[str, Seen[S]], uid: str, seen: Seen[S]) -> None:
    """Keep ``seen`` if it is newer than what ``table`` holds for ``uid``: by decision
    sequence, a later copy in the stream winning a tie (a repeat changes nothing)."""
    known = table.get(uid)
    if known is None or (seen.body.sequence, seen.arrival) > (known.body.sequence, known.arrival):
        table[uid] = seen


def _preemption_order(seen: Seen[Preempted]) -> int:
    return seen.arrival


def _object(record: _Record) -> str | None:
    """The object (uid) a verdict is about: the workload's current one, unless an admission
    of an object never seen in state was decided after the current one was created (the
    state of a re-created workload not read yet); with no state, the newest admitted one."""
    workload = record.workload
    if workload is None:
        candidates = [s for u, s in record.admitted.items() if u not in record.gone]
        if candidates:
            return max(candidates, key=lambda s: s.body.sequence).body.uid
        others: list[Seen[Admitted] | Seen[Released] | Seen[Pending] | Seen[PreemptRequested]] = [
            *record.admitted.values(),
            *record.released.values(),
            *record.pending.values(),
            *record.requested.values(),
        ]
        if others:
            return max(others, key=lambda s: s.body.sequence).body.uid
        return None
    ahead = [
        s
        for u, s in record.admitted.items()
        if u != workload.uid and u not in record.gone and s.time > workload.created_at
    ]
    current = record.admitted.get(workload.uid)
    if ahead:
        best = max(ahead, key=lambda s: s.body.sequence)
        if current is None or best.body.sequence > current.body.sequence:
            return best.body.uid
    return workload.uid


def _released(record: _Record, admission: Seen[Admitted]) -> bool:
    """Whether a release ends ``admission``: one of its object with a later sequence, or,
    from a writer without sequences, one later in the stream."""
    uid = admission.body.uid
    release = record.released.get(uid)
    if release is not None and release.body.sequence > admission.body.sequence:
        return True
    return record.unsequenced.get(uid, 0) > admission.arrival


def _preempted(record: _Record, admission: Seen[Admitted]) -> Seen[Preempted] | None:
    """The newest preemption that ends ``admission`` (:meth:`Preempted.ends`; one that names
    no admission, from an older writer, ends those before it in the stream)."""
    body = admission.body
    found = None
    for seen in record.preemptions:
        named = seen.body.lost.get(body.workload)
        if named is None:
            ends = seen.arrival > admission.arrival
        else:
            ends = seen.body.ends(
                body.workload,
                uid=body.uid,
                sequence=body.sequence,
                replaces=body.replaces,
                origin=body.origin,
            )
        if ends:
            found = seen
    return found


def _last_word(
    latest: Seen[Admitted] | None,
    released: Seen[Released] | None,
    pending: Seen[Pending] | None,
    requested: Seen[PreemptRequested] | None,
    ended_by: Seen[Preempted] | None,
) -> WorkloadPhase:
    """The state of an object without an admission in force: its newest decision's."""
    words: list[tuple[tuple[int, int], WorkloadPhase]] = []
    if latest is not None and ended_by is not None:
        words.append(((latest.body.sequence, ended_by.arrival), "Preempted"))
    if released is not None:
        words.append(((released.body.sequence, released.arrival), "Released"))
    words.extend(
        ((seen.body.sequence, seen.arrival), "Pending")
        for seen in (pending, requested)
        if seen is not None
    )
    if not words:
        return "Submitted"
    return max(words)[1]


def _share_of(verdict: Verdict) -> Share | None:
    """What a workload adds to its queue: its admission in force; else, while it exists, the
    reason it waits for in the queue admission put it in, and what its pods that bypassed the
    gate request (in that queue, else the one it names)."""
    admitted = verdict.admitted
    if admitted is not None:
        return Share(
            queue=admitted.queue,
            admitted=True,
            resources=res.non_zero(admitted.charged),
            cards=res.non_zero(admitted.charged_cards),
        )
    workload = verdict.workload
    if workload is None:
        return None
    waiting = verdict.waiting
    reason = ""
    if waiting is not None and waiting.queue is not None:
        reason = waiting.reason if isinstance(waiting, Pending) else "WaitingForPreemption"
    queue = waiting.queue if waiting is not None and waiting.queue else workload.queue
    bypassed = workload.bypassed_pods if workload.finished is None else 0
    if queue is None or not (reason or bypassed):
        return None
    return Share(
        queue=queue,
        admitted=False,
        reason=reason,
        resources=res.non_zero(workload.bypassed_requests) if bypassed else {},
        cards=res.non_zero(workload.bypassed_cards) if bypassed else {},
        bypassed=bypassed,
    )
