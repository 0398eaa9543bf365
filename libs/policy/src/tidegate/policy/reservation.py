"""Reservations and backfill: where a gang that fits nowhere now will run, and what may run
there meanwhile (docs/reservations.md).

When the head of a queue cannot be placed, :func:`plan_reservation` works out the topology
domain that will have room for it soonest. It replays the running gangs' expected ends in
order on a copy of the capacity view and, after each, asks the placement engine
(:func:`tidegate.placement.place`, the one placement rule: required and preferred levels,
card model, slices, taints) whether the gang fits; the first time it does gives the expected
start, the domain (the narrowest one holding every pod of that placement) and the gangs whose
ends it waits for. Nothing here decides by itself what admission publishes; it says:

- :func:`plan_reservation`: the reservation a head gang would get, or why none can be
  estimated (:class:`NoEstimate`);
- :func:`expected_end`: when a running gang is expected to end, and whether it has outlived
  its declaration (its estimate then moves: ``now + overrun_seconds``);
- :func:`may_backfill` / :func:`blocking`: whether a workload may be admitted onto a
  reservation's nodes (only when its declared end is before the expected start);
- :func:`view_without_reserved`: the capacity view a workload may be placed on;
- :func:`reservation_allowed`: the per-queue and per-cluster limits;
- :func:`drop_reason`: when a reservation ends; :func:`replan_due`: when time alone makes
  its estimate stale;
- :func:`reserved_message`: the :class:`~tidegate.model.Reserved` decision for a plan.

Pure: no I/O, no clock (``now`` is always passed in).
"""

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import msgspec

from tidegate.model import (
    QueueConfig,
    ReservationDropReason,
    Reserved,
    Resources,
    WaitedGang,
    WorkloadState,
)
from tidegate.model.duration import format_duration
from tidegate.placement import CapacityView, PlacementRequest, PlacementResult, place
from tidegate.placement.reasons import short_name

DEFAULT_OVERRUN_SECONDS: Final = 300.0
"""At most how far past ``now`` the end of a gang that outlived its declared runtime is
expected (its estimate moves in steps of this length: :func:`expected_end`)."""

DEFAULT_MAX_RESERVATIONS_PER_CLUSTER: Final = 4
"""Most reservations in force in a cluster at once, whatever the queues allow."""


@dataclass(frozen=True, slots=True)
class ReservationSettings:
    """Cluster-wide reservation settings (to become part of admission's settings)."""

    overrun_seconds: float = DEFAULT_OVERRUN_SECONDS
    """An overdue gang is expected to end at most this long after ``now``; its estimate moves
    in steps of this length (:func:`expected_end`)."""
    max_per_cluster: int = DEFAULT_MAX_RESERVATIONS_PER_CLUSTER
    """Most reservations in force at once in the cluster; 0 turns reservations off."""

    def __post_init__(self) -> None:
        if self.overrun_seconds <= 0:
            raise ValueError(f"overrun_seconds: {self.overrun_seconds} is not positive")
        if self.max_per_cluster < 0:
            raise ValueError(f"max_per_cluster: {self.max_per_cluster} is negative")


@dataclass(frozen=True, slots=True)
class Occupant:
    """A running gang as reservations see it: what it holds and when it started."""

    key: str
    started_at: float
    """When it was admitted (Unix seconds): its declared runtime counts from here."""
    runtime_seconds: float | None
    """Its declared runtime (:func:`declared_runtime`); None: no expected end."""
    usage: Mapping[str, Resources] = field(default_factory=dict)
    """Node name → what it holds there (an admission's ``node_usage``)."""

    @property
    def declared_end(self) -> float | None:
        """Admission time plus declared runtime; None without a declared runtime."""
        if self.runtime_seconds is None:
            return None
        return self.started_at + self.runtime_seconds


def declared_runtime(workload: WorkloadState, queue: QueueConfig | None) -> float | None:
    """The runtime ``workload`` is expected to take once started: its own declaration
    (``max_runtime_seconds``), else its queue's ``default_max_runtime_seconds``, else None."""
    if workload.max_runtime_seconds is not None:
        return workload.max_runtime_seconds
    return queue.default_max_runtime_seconds if queue is not None else None


def expected_end(
    occupant: Occupant, *, now: float, overrun_seconds: float = DEFAULT_OVERRUN_SECONDS
) -> tuple[float, bool] | None:
    """When ``occupant`` is expected to end and whether it is overdue; None: no declaration.

    A gang still within its declared runtime ends at its declared end. One that outlived it is
    not stopped (tidegate never kills for this); it is expected to end at its declared end plus
    as many ``overrun_seconds`` as it takes to be after ``now`` (at most ``overrun_seconds``
    away). The estimate moves forward in those steps, once every ``overrun_seconds``, so that
    recomputing it in between gives the same answer (a plan republished only when it
    changed is not republished at every cycle)."""
    end = occupant.declared_end
    if end is None:
        return None
    if end > now:
        return end, False
    steps = math.floor((now - end) / overrun_seconds) + 1
    return end + steps * overrun_seconds, True


@dataclass(frozen=True, slots=True)
class Waited:
    """A running gang whose end a reservation waits for."""

    key: str
    expected_end: float
    overdue: bool


@dataclass(frozen=True, slots=True)
class ReservationPlan:
    """Where and when a gang that fits nowhere now is expected to run."""

    level: str | None
    """The level of the reserved domain; None when no single domain holds the placement."""
    domain: tuple[str, ...]
    """Its values, widest first (empty with ``level`` None)."""
    nodes: frozenset[str]
    """The nodes reserved: every node of the domain (with ``level`` None: those placed on)."""
    expected_start: float
    waits_for: tuple[Waited, ...]
    """Gangs in the domain whose ends make the room, soonest first."""
    placement: PlacementResult
    """The placement found at ``expected_start`` (for explain and tests; not a promise)."""


@dataclass(frozen=True, slots=True)
class NoEstimate:
    """No reservation can be planned: even once every gang with a declared end has ended the
    gang does not fit (``message`` says why)."""

    message: str


def _give_back(view: CapacityView, node: str, amount: Mapping[str, int]) -> None:
    """Free ``amount`` on ``node`` of a copy: from its reservations first (pods not bound
    yet), the rest from its usage (bound pods)."""
    if node not in view:
        return
    reserved = view.reserved(node)
    from_reserved = {r: min(v, reserved.get(r, 0)) for r, v in amount.items()}
    if any(from_reserved.values()):
        view.unreserve(node, {r: v for r, v in from_reserved.items() if v})
    rest = {r: v - from_reserved[r] for r, v in amount.items() if v > from_reserved[r]}
    if rest:
        used = view.used(node)
        view.set_used(node, {r: max(used.get(r, 0) - rest.get(r, 0), 0) for r in used})


def _common_prefix(paths: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    prefix: tuple[str, ...] | None = None
    for path in paths:
        if prefix is None:
            prefix = path
            continue
        n = 0
        while n < min(len(prefix), len(path)) and prefix[n] == path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix or ()


def _nodes_of(view: CapacityView, domain: tuple[str, ...]) -> frozenset[str]:
    return frozenset(
        name
        for name in view.node_names()
        if view.schedulable(name) and (view.node_domain(name) or ())[: len(domain)] == domain
    )


def _plan_from(
    view: CapacityView,
    result: PlacementResult,
    start: float,
    released: Sequence[tuple[Occupant, float, bool]],
) -> ReservationPlan:
    placed = {node for nodes in result.node_counts.values() for node in nodes}
    paths = [view.node_domain(node) or () for node in sorted(placed)]
    domain = _common_prefix(paths)
    level = view.levels[len(domain) - 1] if domain else None
    nodes = _nodes_of(view, domain) if domain else frozenset(placed)
    waits = [
        Waited(occupant.key, end, overdue)
        for occupant, end, overdue in released
        if any(node in nodes for node, amount in occupant.usage.items() if any(amount.values()))
    ]
    waits.sort(key=lambda w: (w.expected_end, w.key))
    return ReservationPlan(
        level=level,
        domain=domain,
        nodes=nodes,
        expected_start=start,
        waits_for=tuple(waits),
        placement=result,
    )


def plan_reservation(
    view: CapacityView,
    request: PlacementRequest,
    occupants: Sequence[Occupant],
    *,
    now: float,
    others: Sequence[Reserved] = (),
    settings: ReservationSettings = ReservationSettings(),
) -> ReservationPlan | NoEstimate:
    """The domain that will have room for ``request`` soonest, and when.

    ``view`` is the free capacity now; ``request`` the gang as admission tried to place it
    (podsets already restricted to its card model, :meth:`~tidegate.policy.cards.CardDemand.
    restrict`); ``occupants`` the running gangs with their admission times and declared
    runtimes; ``others`` the reservations of other gangs in force, whose nodes this one may
    not use. The running gangs' expected ends (:func:`expected_end`) are replayed in order on
    a copy of ``view``; the first end after which the placement engine fits the gang gives the
    expected start. Gangs without a declared end never give their room back here. Raises
    :class:`~tidegate.placement.PlacementError` for an invalid request, like ``place``."""
    work = view.copy()
    for other in others:
        for node in other.nodes:
            work.remove_node(node)
    result = place(work, request)
    if result.fits:
        return _plan_from(work, result, now, ())
    timeline: list[tuple[Occupant, float, bool]] = []
    for occupant in occupants:
        estimate = expected_end(occupant, now=now, overrun_seconds=settings.overrun_seconds)
        if estimate is not None:
            timeline.append((occupant, *estimate))
    timeline.sort(key=lambda item: (item[1], item[0].key))
    released: list[tuple[Occupant, float, bool]] = []
    i = 0
    while i < len(timeline):
        at = timeline[i][1]
        while i < len(timeline) and timeline[i][1] == at:
            occupant = timeline[i][0]
            for node, amount in occupant.usage.items():
                _give_back(work, node, amount)
            released.append(timeline[i])
            i += 1
        result = place(work, request)
        if result.fits:
            return _plan_from(work, result, at, released)
    without = len(occupants) - len(timeline)
    return NoEstimate(
        f"no start can be estimated: even after the {len(timeline)} running gangs with a "
        f"declared runtime end it does not fit ({result.reason or 'no room'}); {without} "
        "running gangs declare no runtime"
    )


# --------------------------------------------------------------------------- backfill


def may_backfill(
    reservation: Reserved,
    *,
    runtime_seconds: float | None,
    now: float,
    started_at: float | None = None,
) -> bool:
    """Whether a workload declaring ``runtime_seconds``, admitted ``now``, may run on the
    nodes of ``reservation``: only when its declared end is before the expected start (it
    cannot delay the reserved gang). A workload declaring no runtime never may.

    ``started_at``: for a workload already running (its growth, the replacements of its lost
    slots), when it was admitted: its new pods end with it, so its declared end counts from
    there; one that has outlived its declared runtime (overdue) never may, since its end is
    no longer known."""
    if runtime_seconds is None:
        return False
    end = (now if started_at is None else started_at) + runtime_seconds
    if started_at is not None and end <= now:
        return False
    return end < reservation.expected_start


def blocking(
    reservations: Iterable[Reserved],
    *,
    workload: str,
    runtime_seconds: float | None,
    now: float,
    started_at: float | None = None,
    opened: Collection[str] = (),
) -> list[Reserved]:
    """The reservations (of other gangs) whose nodes ``workload`` may not be placed on: the
    one rule for a new admission, the growth of an admitted workload and the replacement of
    its lost slots (``started_at``: :func:`may_backfill`).

    ``opened``: nodes preemption freed for this very workload (its nomination). Inference may
    reclaim from a reserved domain, so the room it was given is not kept from it: those nodes
    are left out of the reservations returned (and the reservation is recomputed)."""
    out = []
    for r in reservations:
        if r.workload == workload or may_backfill(
            r, runtime_seconds=runtime_seconds, now=now, started_at=started_at
        ):
            continue
        if opened and any(node in opened for node in r.nodes):
            kept = [node for node in r.nodes if node not in opened]
            if not kept:
                continue
            r = msgspec.structs.replace(r, nodes=kept)
        out.append(r)
    return out


def view_without_reserved(view: CapacityView, reservations: Iterable[Reserved]) -> CapacityView:
    """A copy of ``view`` without the nodes of ``reservations`` (those of :func:`blocking`):
    what a workload that may not backfill into them is placed on. ``view`` itself when
    there are none."""
    nodes = {node for r in reservations for node in r.nodes}
    if not nodes:
        return view
    work = view.copy()
    for node in nodes:
        work.remove_node(node)
    return work


def backfill_note(
    reservation: Reserved,
    *,
    runtime_seconds: float | None,
    now: float,
    started_at: float | None = None,
) -> str:
    """Why a workload may not use ``reservation``'s nodes, for its pending message
    (``started_at``: as for :func:`may_backfill`)."""
    where = describe_domain(reservation.level, reservation.domain)
    until = _clock(reservation.expected_start)
    if runtime_seconds is None:
        return (
            f"{where} is reserved for {reservation.workload} (expected start {until}); this "
            "workload declares no runtime (tidegate.io/max-runtime), so it cannot backfill"
        )
    end = (now if started_at is None else started_at) + runtime_seconds
    if started_at is not None and end <= now:
        return (
            f"{where} is reserved for {reservation.workload} (expected start {until}); this "
            f"workload outlived its declared runtime ({format_duration(runtime_seconds)}), "
            "so it cannot backfill"
        )
    return (
        f"{where} is reserved for {reservation.workload} (expected start {until}); this "
        f"workload would end at {_clock(end)} "
        f"(max runtime {format_duration(runtime_seconds)}), not before"
    )


# --------------------------------------------------------------------------- limits, drops


def reservation_allowed(
    queue: QueueConfig,
    reservations: Iterable[Reserved],
    *,
    settings: ReservationSettings = ReservationSettings(),
) -> str | None:
    """Why ``queue``'s head may not take a new reservation now, or None when it may.

    ``reservations`` are those in force in the cluster. At most ``queue.max_reservations`` per
    queue and ``settings.max_per_cluster`` in all, so reservations cannot starve the cluster."""
    held = list(reservations)
    mine = sum(1 for r in held if r.queue == queue.name)
    if queue.max_reservations <= mine:
        return (
            f"queue {queue.name} holds {mine} reservations, its maxReservations is "
            f"{queue.max_reservations}"
        )
    if settings.max_per_cluster <= len(held):
        return (
            f"the cluster holds {len(held)} reservations, at most {settings.max_per_cluster} "
            "are allowed"
        )
    return None


def drop_reason(
    reservation: Reserved,
    *,
    workload: WorkloadState | None,
    queue: QueueConfig | None,
    admitted: bool,
    head: bool,
) -> ReservationDropReason | None:
    """Why ``reservation`` ends now, or None while it stands.

    ``workload`` is the reserved gang's current state (None: deleted); ``queue`` its queue
    (None: gone); ``admitted``: it holds an admission now; ``head``: it is still the first of
    its queue that may reserve. Order: started, then gone, then the queue's say."""
    if admitted:
        return "Started"
    if (
        workload is None
        or workload.uid != reservation.uid
        or workload.finished is not None
        or workload.invalid_reason is not None
        or workload.namespace_deleting
    ):
        return "Deleted"
    if (
        queue is None
        or queue.invalid_reason is not None
        or queue.name != reservation.queue
        or queue.max_reservations < 1
        or not head
    ):
        return "QueueDisallows"
    return None


# --------------------------------------------------------------------------- messages


def describe_domain(level: str | None, domain: Sequence[str]) -> str:
    """E.g. "rack r3" (the narrowest value of the domain), or "the chosen nodes"."""
    if level is None or not domain:
        return "the chosen nodes"
    return f"{short_name(level)} {domain[-1]}"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M UTC")


def plan_message(plan: ReservationPlan, *, now: float) -> str:
    """E.g. "rack r3 reserved; expected start 14:05 UTC (in 35m) when research/sft-12 ends"."""
    where = describe_domain(plan.level, plan.domain)
    text = f"{where} reserved; expected start {_clock(plan.expected_start)}"
    if plan.expected_start > now:
        text += f" (in {format_duration(plan.expected_start - now)})"
    if plan.waits_for:
        names = [w.key for w in plan.waits_for]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        text += f" when {shown} {'ends' if len(names) == 1 else 'end'}"
    overdue = [w.key for w in plan.waits_for if w.overdue]
    if overdue:
        text += (
            f"; {', '.join(overdue[:3])} outlived {'its' if len(overdue) == 1 else 'their'} "
            "declared runtime, so the estimate moves"
        )
    return text


def reserved_for_you(reservation: Reserved) -> str:
    """What ``tidegate explain`` says of a reservation in force, e.g. "rack r3 reserved for
    you; expected start 14:05 UTC when research/sft-12 ends" (no "in …": it is read later)."""
    where = describe_domain(reservation.level, reservation.domain)
    text = f"{where} reserved for you; expected start {_clock(reservation.expected_start)}"
    names = [w.workload for w in reservation.waits_for]
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        text += f" when {shown} {'ends' if len(names) == 1 else 'end'}"
    overdue = [w.workload for w in reservation.waits_for if w.overdue]
    if overdue:
        text += (
            f"; {', '.join(overdue[:3])} outlived {'its' if len(overdue) == 1 else 'their'} "
            "declared runtime, so the estimate moves"
        )
    return text


def reserved_message(
    plan: ReservationPlan,
    *,
    workload: WorkloadState,
    queue: str,
    topology: str,
    sequence: int,
    now: float,
) -> Reserved:
    """The ``reserved`` decision for ``plan`` (admission gives it its ``sequence``)."""
    return Reserved(
        workload=f"{workload.namespace}/{workload.name}",
        uid=workload.uid,
        queue=queue,
        sequence=sequence,
        topology=topology,
        level=plan.level,
        domain=list(plan.domain),
        nodes=sorted(plan.nodes),
        expected_start=plan.expected_start,
        waits_for=[
            WaitedGang(workload=w.key, expected_end=w.expected_end, overdue=w.overdue)
            for w in plan.waits_for
        ],
        message=plan_message(plan, now=now),
    )


def keeps_reservation(held: Reserved, planned: Reserved, occupants: Sequence[Occupant]) -> bool:
    """Whether ``held`` stays though the new plan says ``planned``: the plan moves it to a
    later start elsewhere, while every gang ``held`` waited for has already ended. Its room is
    then coming free and the capacity view has not caught up with those ends yet (the
    topology-cache reports a node free after the pods are gone); moving would hand the room
    to others and start the gang later."""
    if planned.domain == held.domain or planned.expected_start <= held.expected_start:
        return False
    running = {o.key for o in occupants}
    return any(w.workload not in running for w in held.waits_for)


def keeps_without_estimate(
    held: Reserved,
    occupants: Sequence[Occupant],
    *,
    now: float,
    settings: ReservationSettings = ReservationSettings(),
) -> bool:
    """Whether ``held`` stays though a recomputation finds no estimate at all: a gang it
    waited for has ended, so its room is coming free while the capacity view lags that end
    (the topology-cache reports a node after its pods are gone, as in
    :func:`keeps_reservation`): counting neither that gang nor its room, the plan can find the
    gangs still running too few. Only until ``overrun_seconds`` past its expected start: a
    room that never shows up free does not keep the nodes closed for good."""
    if now > held.expected_start + settings.overrun_seconds:
        return False
    running = {o.key for o in occupants}
    return any(w.workload not in running for w in held.waits_for)


def replan_due(reservation: Reserved, running: Collection[str], *, now: float) -> bool:
    """Whether time alone has made ``reservation``'s estimate stale, so that admission plans
    it again though nothing else moved: a gang it waits for is still ``running`` (workload
    keys of the admissions in force) at or past the end it was expected at. That gang has
    outlived its declared runtime, or the moved estimate of one that had
    (:func:`expected_end`); either way the expected start has become wrong (or has passed).
    Until then the plan is the same and nothing is republished; an overdue gang makes it due
    again every ``overrun_seconds``, not at every tick."""
    return any(w.workload in running and w.expected_end <= now for w in reservation.waits_for)


def same_reservation(a: Reserved, b: Reserved) -> bool:
    """Whether ``b`` says what ``a`` says (same domain, nodes and estimate): admission
    republishes a reservation only when this is False."""
    return (
        a.uid == b.uid
        and a.topology == b.topology
        and a.level == b.level
        and a.domain == b.domain
        and a.nodes == b.nodes
        and a.expected_start == b.expected_start
        and a.waits_for == b.waits_for
    )
