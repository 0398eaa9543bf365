"""Elastic workloads: a running workload that grows or shrinks (Kueue KEP-77, workload slices).

A workload is admitted whole (or at its minimum) once. Afterwards its size may change: a
Deployment or ReplicaSet scaled, a Deployment rolling out (its surge pods are a temporary
growth, its old pods leaving a shrink), a Job's parallelism changed, a PodGroup gaining or
losing members. Admission follows the size with a **resize**: a new
:class:`~tidegate.model.Admitted` that ``replaces`` the one in force, with ``resized`` set, the
whole new assignment and the whole new charge (KEP-77's new workload slice that supersedes the
old one). Everything that makes an admission exactly-once (the ledger record, the outbox, the
fences, consumers keeping the newest sequence) applies to it unchanged.

**Growth** (desired pods > assigned slots) is admitted per pod, as a *delta*:

- the quota check covers only what the new charge adds to the old one;
- the delta is placed next to the pods the workload already has: first inside the narrowest
  domain holding all its slots, then anywhere inside its *required* domain (the domain of its
  assignment at the podset's required level; for ``auto`` the narrowest domain holding its
  slots), never outside it: a workload required in one rack grows inside that rack or its
  delta waits with reason ``RequiredDomainFull``;
- when not every extra pod fits, as many as fit are admitted now (the largest count that
  passes quota and placement) and the rest waits with a reason;
- slices and podset groups shape the first placement only; the delta is placed by the
  required domain (as replacements after node failures are).

**Shrink** (desired pods < assigned slots) follows the pods: the ungater, which knows which
slots no live pod holds, names them in a :class:`~tidegate.model.ReplaceRequested` with
``give_back`` set; admission drops at most ``assigned − desired`` of them and charges the rest.
Only owners sized by their spec shrink (:data:`SPEC_SIZED_KINDS`).

**What a growth costs and where it goes** is :func:`grow_podset` (one podset, the largest
count that passes quota and placement), committed as :func:`resized`; a growth that cannot be
placed at all asks for preemption when :func:`growth_preempts`. **A shrink** is
:func:`given_back`.

Pure: :class:`tidegate.policy.admission.Admission` calls these with its state (its quota
ledger and capacity are read, never changed here: it commits what they return).
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from tidegate.model import (
    Admitted,
    DomainCount,
    PodSetSpec,
    PreemptRequested,
    QueueConfig,
    ReplaceRequested,
    Reserved,
    Resources,
    TopologyAssignment,
    TopologyRequest,
    WorkloadState,
)
from tidegate.placement import PlacementRequest, PlacementResult
from tidegate.policy.capacity import ClusterCapacity
from tidegate.policy.cards import CardError, card_demand
from tidegate.policy.common import Failure, stopped
from tidegate.policy.quota import QuotaLedger, QuotaRequest, gang_resources
from tidegate.policy.replacement import ReplacementError, required_prefix, shared_prefix


def assigned_counts(admitted: Admitted) -> dict[str, int]:
    """Podset name → slots the admission gives it."""
    return {
        name: sum(max(d.count, 0) for d in assignment.domains)
        for name, assignment in admitted.assignments.items()
    }


def growth(workload: WorkloadState, admitted: Admitted) -> dict[str, int]:
    """Podset name → pods the workload wants beyond its slots (only podsets that grow)."""
    counts = assigned_counts(admitted)
    return {
        podset.name: podset.count - counts.get(podset.name, 0)
        for podset in workload.podsets
        if podset.count > counts.get(podset.name, 0)
    }


def surplus(workload: WorkloadState, admitted: Admitted) -> dict[str, int]:
    """Podset name → slots beyond what the workload wants now (only podsets that shrank; a
    podset the workload no longer has wants none)."""
    wanted = {podset.name: max(podset.count, 0) for podset in workload.podsets}
    return {
        name: count - wanted.get(name, 0)
        for name, count in assigned_counts(admitted).items()
        if count > wanted.get(name, 0)
    }


SPEC_SIZED_KINDS: Final = frozenset({"Deployment", "ReplicaSet", "Job", "JobSet"})
"""Owner kinds whose size is their spec (replicas, parallelism): when it drops, the slots their
pods leave are given back. Workloads sized by the pods seen (PodGroups, bare Pods, other
owners) keep their slots when a member goes, so the member its controller re-creates takes
its slot back; their room comes back when they are released."""


def gives_back(workload: WorkloadState) -> bool:
    """Whether ``workload`` gives back the slots its pods leave when it shrinks."""
    return workload.owner_kind in SPEC_SIZED_KINDS


def common_prefix(assignment: TopologyAssignment) -> list[str]:
    """The values (widest first) of the narrowest domain holding every slot of ``assignment``."""
    return shared_prefix([d.values for d in assignment.domains if d.count > 0])


def pinned(spec: PodSetSpec, levels: Sequence[str], prefix: Sequence[str]) -> PodSetSpec:
    """``spec`` reduced to what a delta needs, pinned inside the domain ``prefix`` of
    ``levels`` (nothing pinned for an empty prefix): no slices, groups or minimum."""
    selector = {**spec.node_selector, **dict(zip(levels, prefix, strict=False))}
    preferred = spec.topology.preferred
    if (
        prefix
        and preferred not in (None, "auto")
        and (preferred not in levels or levels.index(preferred) < len(prefix) - 1)
    ):
        preferred = None  # wider than the domain the pods are pinned to
    topology = (
        TopologyRequest(required=levels[len(prefix) - 1], preferred=preferred)
        if prefix
        else TopologyRequest(
            required=spec.topology.required,
            preferred=preferred,
            unconstrained=spec.topology.unconstrained,
        )
    )
    return msgspec.structs.replace(
        spec,
        min_count=None,
        node_selector=selector,
        topology=topology,
        group=None,
        pods_per_index_group=None,
    )


def delta_shapes(spec: PodSetSpec, assignment: TopologyAssignment | None) -> list[PodSetSpec]:
    """The podsets to try for a delta of ``spec``, in order (counts to be set by the caller):
    next to its slots, then anywhere inside its required domain. Without slots yet (a podset
    left out of an admission at its minimum), its own request.

    Raises :class:`~tidegate.policy.replacement.ReplacementError` when the required level is
    not a level of the assignment.
    """
    if assignment is None or not any(d.count > 0 for d in assignment.domains):
        return [pinned(spec, [], [])]
    levels = assignment.levels
    required = required_prefix(spec, assignment)
    near = common_prefix(assignment)
    shapes = []
    if len(near) > len(required):
        shapes.append(pinned(spec, levels, near))
    shapes.append(pinned(spec, levels, required))
    return shapes


def grown(assignment: TopologyAssignment | None, placed: TopologyAssignment) -> TopologyAssignment:
    """``assignment`` with the slots of ``placed`` added (a domain already there grows)."""
    if assignment is None:
        return TopologyAssignment(levels=list(placed.levels), domains=list(placed.domains))
    domains = [DomainCount(values=list(d.values), count=d.count) for d in assignment.domains]
    for extra in placed.domains:
        for index, domain in enumerate(domains):
            if domain.values == extra.values:
                domains[index] = DomainCount(values=domain.values, count=domain.count + extra.count)
                break
        else:
            domains.append(DomainCount(values=list(extra.values), count=extra.count))
    return TopologyAssignment(levels=list(assignment.levels), domains=domains)


def shrunk(
    assignment: TopologyAssignment, freed: Iterable[DomainCount], at_most: int
) -> tuple[TopologyAssignment, int]:
    """``assignment`` without up to ``at_most`` of the ``freed`` slots (named by domain; the
    assignment's own counts bound them); returns it and how many slots were taken out."""
    left = max(at_most, 0)
    take: dict[tuple[str, ...], int] = {}
    for domain in freed:
        key = tuple(domain.values)
        take[key] = take.get(key, 0) + max(domain.count, 0)
    removed = 0
    out: list[DomainCount] = []
    for domain in assignment.domains:
        key = tuple(domain.values)
        cut = min(take.get(key, 0), domain.count, left)
        take[key] = take.get(key, 0) - cut
        left -= cut
        removed += cut
        if domain.count - cut > 0:
            out.append(DomainCount(values=list(domain.values), count=domain.count - cut))
    return TopologyAssignment(levels=list(assignment.levels), domains=out), removed


def sized_podsets(workload: WorkloadState, counts: Mapping[str, int]) -> list[PodSetSpec]:
    """The workload's podsets at ``counts`` (podsets not named are left out): what a resized
    admission charges, at the workload's current per-pod requests."""
    return [
        msgspec.structs.replace(p, count=counts[p.name], min_count=None)
        for p in workload.podsets
        if counts.get(p.name, 0) > 0
    ]


def growth_still_wanted(
    request: PreemptRequested, workload: WorkloadState, admitted: Admitted
) -> list[PodSetSpec] | None:
    """What of a growth preempt ``request`` (``podsets`` set) still needs room, given the
    admission in force ``admitted`` (the request's uid) and the workload now: its podsets
    capped at the workload's growth. Empty when the request is stale: a later admission
    replaced the one it grows (the growth was admitted, or a resize or move happened) or
    the workload shrank back. None when ``admitted`` is older than the one the request grows
    (the caller has not seen that admission yet). A request without ``admitted_sequence``
    (an older writer) is checked by the growth alone."""
    grows = request.admitted_sequence
    if grows is not None and admitted.sequence < grows:
        return None
    if grows is not None and admitted.sequence > grows:
        return []
    wanted = growth(workload, admitted)
    out = []
    for spec in request.podsets:
        extra = min(spec.count, wanted.get(spec.name, 0))
        if extra > 0:
            out.append(msgspec.structs.replace(spec, count=extra))
    return out


def may_grow(workload: WorkloadState | None, admitted: Admitted) -> bool:
    """Whether the admission ``admitted`` may be grown for ``workload`` at all: the same
    object, not finished, valid and not suspended by someone else (admission also leaves out
    the workloads it keeps out)."""
    return (
        workload is not None
        and workload.uid == admitted.uid
        and workload.finished is None
        and workload.invalid_reason is None
        and not stopped(workload)
    )


def holds_room_for(workload: WorkloadState, held: Admitted | None) -> bool:
    """Whether room freed by preemption may be nominated for ``workload`` holding ``held``:
    it holds no admission, or one of this object whose growth still waits."""
    return held is None or (held.uid == workload.uid and bool(growth(workload, held)))


def charge_for(workload: WorkloadState, counts: Mapping[str, int]) -> QuotaRequest | Failure:
    """What ``workload`` holds with its podsets at ``counts``, at its current requests."""
    podsets = sized_podsets(workload, counts)
    try:
        demand = card_demand(workload, podsets)
    except CardError as exc:
        return Failure("Invalid", str(exc))
    return QuotaRequest(
        resources=gang_resources(podsets),
        cards={m: n for m, n in demand.cards.items() if n},
        card_resources=demand.card_resources,
    )


def more(new: Mapping[str, int], old: Mapping[str, int]) -> Resources:
    """What ``new`` holds beyond ``old``, per name (only the increases)."""
    return {
        name: amount - old.get(name, 0) for name, amount in new.items() if amount > old.get(name, 0)
    }


@dataclass(frozen=True, slots=True)
class PodsetGrowth:
    """Extra pods of one podset that fit (all of them or as many as fit; the rest waits for
    a later cycle): where (``result``), and the whole new charge."""

    result: PlacementResult
    charge: QuotaRequest


def grow_podset(
    workload: WorkloadState,
    admitted: Admitted,
    name: str,
    extra: int,
    *,
    queue: QueueConfig,
    usage: QuotaLedger,
    capacity: ClusterCapacity,
    topology: str,
    profile: str,
    check: Callable[[QueueConfig, QuotaRequest], Failure | None] | None = None,
    outside: Sequence[Reserved] = (),
) -> PodsetGrowth | Failure:
    """Grow podset ``name`` of ``admitted`` by up to ``extra`` pods: the largest count that
    passes ``queue``'s quota (by ``usage``) and placement on ``capacity`` in the first shape
    that takes any (next to its slots, then inside its required domain). Returns that growth,
    or why none could be admitted (with the whole delta as ``request`` when room lacks: what
    preemption would have to free). ``check``, when given, is the quota check instead of
    ``usage``'s (admission's, which knows queue trees). ``outside``: reservations the growth
    is kept off (:func:`~tidegate.policy.reservation.blocking`, as for a new admission)."""
    spec = next(p for p in workload.podsets if p.name == name)
    try:
        shapes = delta_shapes(spec, admitted.assignments.get(name))
        shapes = card_demand(workload).restrict(shapes)
    except (ReplacementError, CardError) as exc:
        return Failure("Invalid", f"podset {name} cannot grow: {exc}")
    counts = assigned_counts(admitted)

    def attempt(shape: PodSetSpec, count: int) -> tuple[PlacementResult, QuotaRequest] | Failure:
        charge = charge_for(workload, {**counts, name: counts.get(name, 0) + count})
        if isinstance(charge, Failure):
            return charge
        added = QuotaRequest(
            resources=more(charge.resources, admitted.charged),
            cards=more(charge.cards, admitted.charged_cards),
            card_resources=charge.card_resources,
        )
        verdict = usage.check(queue, added) if check is None else check(queue, added)
        if verdict is not None:
            return Failure(verdict.reason, f"{count} more pods of {name}: {verdict.message}")
        delta = msgspec.structs.replace(shape, count=count)
        request = PlacementRequest(podsets=[delta], profile=profile)
        result = capacity.place(topology, request, outside=outside)
        assert result is not None  # the topology is known (chosen among the known ones)
        if isinstance(result, str):
            return Failure("Invalid", result)
        if not result.fits:
            return Failure("WaitingForCapacity", result.reason or "no room", None)
        return result, charge

    def largest(
        shape: PodSetSpec,
    ) -> tuple[tuple[PlacementResult, QuotaRequest] | None, Failure | None]:
        """The attempt that admits the most extra pods (up to ``extra``) of ``shape`` that
        fit, and why not all of them fit."""
        whole = attempt(shape, extra)
        if not isinstance(whole, Failure):
            return whole, None
        low, high = 0, extra - 1
        found: tuple[PlacementResult, QuotaRequest] | None = None
        while low < high:
            middle = (low + high + 1) // 2
            tried = attempt(shape, middle)
            if isinstance(tried, Failure):
                high = middle - 1
            else:
                low, found = middle, tried
        return found, whole

    failure: Failure | None = None
    for shape in shapes:
        found, why = largest(shape)
        if found is not None:
            return PodsetGrowth(result=found[0], charge=found[1])
        failure = why  # the last shape's: the required domain's
    assert failure is not None
    # What preemption would have to make room for: the whole delta, in its required domain.
    room = PlacementRequest(
        podsets=[msgspec.structs.replace(shapes[-1], count=extra)], profile=profile
    )
    if failure.reason == "WaitingForCapacity" and spec.topology.required is not None:
        return Failure(
            "RequiredDomainFull",
            f"{extra} more pods of {name} must stay inside the domain at "
            f"{spec.topology.required} its pods hold: {failure.message}",
            room,
        )
    if failure.reason == "WaitingForCapacity":
        return Failure(
            "WaitingForCapacity", f"{extra} more pods of {name}: {failure.message}", room
        )
    return failure


def growth_preempts(
    workload: WorkloadState, failure: Failure, wanted: Sequence[PodSetSpec]
) -> bool:
    """Whether a growth none of which could be admitted asks preemption to free room for the
    ``wanted`` pods: an inference workload's, waiting for room."""
    return (
        workload.service_type == "inference"
        and failure.reason in ("WaitingForCapacity", "RequiredDomainFull")
        and bool(wanted)
    )


def resized(
    admitted: Admitted,
    name: str,
    grown_by: PodsetGrowth,
    *,
    sequence: int,
    epoch: int,
) -> Admitted:
    """The resize that commits ``grown_by`` (podset ``name``): it replaces ``admitted``."""
    result, charge = grown_by.result, grown_by.charge
    assignments = dict(admitted.assignments)
    assignments[name] = grown(admitted.assignments.get(name), result.assignments[name])
    requests = {**admitted.requests, name: dict(result.requests.get(name, {}))}
    return msgspec.structs.replace(
        admitted,
        sequence=sequence,
        epoch=epoch,
        assignments=assignments,
        charged=charge.resources,
        charged_cards=charge.cards,
        requests=requests,
        nominated_by=None,
        replaces=admitted.sequence,
        origin=admitted.chain_start(),
        resized=True,
    )


def given_back(
    request: ReplaceRequested, admitted: Admitted, workload: WorkloadState | None
) -> tuple[dict[str, TopologyAssignment], QuotaRequest] | None:
    """The workload shrank and the ungater names free slots (``request.give_back``): the
    assignments of ``admitted`` without at most the surplus of each podset, and what is left
    to charge. None when nothing is given back."""
    if workload is None or workload.uid != admitted.uid:
        return None
    extra = surplus(workload, admitted)
    assignments = dict(admitted.assignments)
    removed = 0
    for name, freed in sorted(request.lost.items()):
        assignment = assignments.get(name)
        if assignment is None or extra.get(name, 0) <= 0:
            continue
        assignments[name], taken = shrunk(assignment, freed, extra[name])
        removed += taken
    if removed == 0:
        return None
    counts = {
        name: sum(d.count for d in assignment.domains) for name, assignment in assignments.items()
    }
    charge = charge_for(workload, counts)
    if isinstance(charge, Failure):
        charge = QuotaRequest(resources={}, cards={})
    return assignments, charge
