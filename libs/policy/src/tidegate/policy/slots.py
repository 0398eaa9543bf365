"""Which gated pod goes into which slot of a TopologyAssignment, and which slots are lost.

An admission gives each podset a :class:`~tidegate.model.TopologyAssignment`: domains in rank
order, each with a number of pods. Those numbers are *slots*. The ungater releases a gated pod
only into a domain with a free slot, where

    free(domain) = assigned(domain) − released pods holding a slot there − releases in flight

so no more pods are ever released into a domain than it was assigned, whatever order events
arrive in: a released pod is recognised by its nodeSelector (restarts recount from it), a
release in flight by its *expectation* (the caller's record of a patch not yet seen on the
bus). A pod holds its slot while it is active (:func:`tidegate.model.pods.active`: neither
finished nor terminating) and not on a failed node (:func:`members`); so a replacement for a
failed or evicted pod takes the slot its predecessor freed. (Its predecessor's *capacity* is
held until it is gone, :func:`tidegate.model.pods.holds_capacity`: the replacement may wait in
the scheduler, never in a slot another pod took.)

Rank order (seed 003: the TopologyUngater; consecutive indexes close together): the slots
are numbered in the assignment's order (domain 0's slots first). A pod with rank ``r`` goes to
slot ``r mod total`` when that slot's domain has room, else to the domain with room whose slots
are nearest to ``r``; pods without a rank fill the first domains with room. Ranked pods are
placed before unranked ones, lowest rank first.

When admission answers a lost admission with an eviction, :func:`must_evict` names the
released pods to remove.

Pure: no I/O and no clock. The caller says which nodes are ready and keeps the expectations;
:mod:`tidegate.ungater.releaser` does the patching.
"""

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.model import Admitted, DomainCount, PodState, TopologyAssignment
from tidegate.policy.common import active, evictable, gated

Domain = tuple[str, ...]
"""A domain's label values, widest level first (as in :class:`~tidegate.model.DomainCount`)."""


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a podset, as slot assignment needs it."""

    uid: str
    name: str
    rank: int | None = None
    """Its index in the podset (completion index, …), None when it has none."""
    created_at: float = 0.0
    gated: bool = True
    """It still carries tidegate's scheduling gate."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    holds_slot: bool = True
    """Released pods only: it counts against its domain (not finished, not terminating, not
    on a failed node). Ignored for gated pods."""


@dataclass(frozen=True, slots=True)
class Release:
    """Release pod ``uid`` (named ``name``) into ``domain``."""

    uid: str
    name: str
    domain: Domain


@dataclass(frozen=True, slots=True)
class PodSetPlan:
    """What to do with one podset now."""

    releases: list[Release]
    """New releases, in the order they were chosen."""
    occupied: dict[Domain, int]
    """Per assigned domain: slots taken (released pods holding one, plus releases in flight
    and the new ``releases``)."""
    waiting: int
    """Gated pods left without a slot."""


def members(pods: Iterable[PodState], node_ready: Callable[[str | None], bool]) -> list[Member]:
    """``pods`` of one podset as slot assignment sees them: a terminating gated pod is left
    out (it never takes a slot); a released pod holds its slot while it is active and its node
    is ready (``node_ready``; an unbound pod's is)."""
    return [
        Member(
            uid=pod.uid,
            name=pod.name,
            rank=pod.rank,
            created_at=pod.created_at,
            gated=gated(pod),
            node_selector=pod.node_selector,
            holds_slot=active(pod) and node_ready(pod.node_name),
        )
        for pod in pods
        if not (pod.terminating and gated(pod))
    ]


def must_evict(
    pods: Iterable[PodState],
    *,
    sequence: int,
    released_under: Mapping[str, int],
    admitted: Admitted | None,
) -> list[PodState]:
    """The pods of a workload to evict for the eviction decision ``sequence``: the evictable
    ones (:func:`tidegate.policy.common.evictable`), except a pod released under a newer admission (``released_under``: pod uid
    → the admission sequence it was released under, as far as the caller knows) and, when the
    caller does not know (after a restart) and the workload was admitted again (``admitted``,
    newer than ``sequence``), a pod whose nodeSelector puts it in a slot domain of that
    admission (a valid place: it keeps it)."""
    newer = admitted if admitted is not None and admitted.sequence > sequence else None
    slot_domains: dict[str, set[Domain]] = {}
    if newer is not None:
        slot_domains = {name: set(assigned(a)) for name, a in newer.assignments.items()}
    out = []
    for pod in pods:
        if not evictable(pod):
            continue
        under = released_under.get(pod.uid)
        if under is not None and under > sequence:
            continue
        if under is None and newer is not None:
            assignment = newer.assignments.get(pod.podset or "")
            domains = slot_domains.get(pod.podset or "", set())
            if assignment is not None and (
                domain_of(assignment.levels, pod.node_selector, domains) is not None
            ):
                continue
        out.append(pod)
    return out


def selector_for(levels: Sequence[str], domain: Domain) -> dict[str, str]:
    """The nodeSelector that puts a pod into ``domain``: every level label down to its own."""
    return dict(zip(levels, domain, strict=False))


def domain_of(
    levels: Sequence[str], node_selector: Mapping[str, str], domains: Collection[Domain]
) -> Domain | None:
    """The domain among ``domains`` that ``node_selector`` pins a pod to, if any."""
    for domain in domains:
        if all(
            node_selector.get(level) == value for level, value in zip(levels, domain, strict=False)
        ):
            return domain
    return None


def assigned(assignment: TopologyAssignment) -> dict[Domain, int]:
    """Slots per domain, in the assignment's order (a domain listed twice is summed)."""
    out: dict[Domain, int] = {}
    for item in assignment.domains:
        domain = tuple(item.values)
        out[domain] = out.get(domain, 0) + max(item.count, 0)
    return out


def plan_podset(
    assignment: TopologyAssignment,
    members: Sequence[Member],
    *,
    expected: Mapping[str, Domain] | None = None,
    lost: Collection[Domain] = (),
) -> PodSetPlan:
    """Choose a slot for every gated member that can have one (module docstring).

    ``expected`` maps the uid of a pod whose release is in flight to its domain: counted as
    taken while the pod still looks gated; once the pod shows up released its nodeSelector
    counts instead. Slots of ``lost`` domains (their nodes failed) are never handed out.
    """
    expected = expected or {}
    capacity = assigned(assignment)
    levels = assignment.levels
    occupied = dict.fromkeys(capacity, 0)
    candidates: list[Member] = []
    lengths = sorted({len(d) for d in capacity}, reverse=True)
    for member in members:
        if member.gated:
            domain = expected.get(member.uid)
            if domain is None:
                candidates.append(member)
            elif domain in occupied:
                occupied[domain] += 1
            continue
        if member.holds_slot:
            held = _held_domain(levels, lengths, member.node_selector, occupied)
            if held is not None:
                occupied[held] += 1
    free = {d: 0 if d in lost else max(capacity[d] - occupied[d], 0) for d in capacity}
    order = _slot_order(assignment)
    releases: list[Release] = []
    waiting = 0
    for member in sorted(candidates, key=_candidate_order):
        domain = _choose(member.rank, order, free)
        if domain is None:
            waiting += 1
            continue
        free[domain] -= 1
        occupied[domain] += 1
        releases.append(Release(uid=member.uid, name=member.name, domain=domain))
    return PodSetPlan(releases=releases, occupied=occupied, waiting=waiting)


def failed_domains(
    assignment: TopologyAssignment, alive: Callable[[Domain], bool]
) -> list[DomainCount]:
    """The assigned domains that no longer have a usable node (``alive`` says), with their
    slot counts, in the assignment's order."""
    return [
        DomainCount(values=list(domain), count=count)
        for domain, count in assigned(assignment).items()
        if count > 0 and not alive(domain)
    ]


def stuck_since(pod: PodState) -> float | None:
    """When the scheduler marked ``pod`` unschedulable, if it is a released pod (no longer
    gated, neither finished nor terminating) still unbound; None otherwise."""
    if gated(pod) or not active(pod) or pod.node_name is not None:
        return None
    return pod.unschedulable_since


def stuck_slots(
    assignment: TopologyAssignment,
    pods: Iterable[PodState],
    node_ready: Callable[[str | None], bool],
    *,
    before: float,
) -> list[DomainCount]:
    """Slots held by released pods the scheduler has found no room for since ``before`` or
    earlier (:attr:`~tidegate.model.PodState.unschedulable_since`): per assigned domain, in the
    assignment's order, how many of the pods holding its slots are unbound and were marked
    unschedulable then. The view tidegate placed them by was wrong about those domains (pods
    it does not manage took the room first, or a constraint it does not model)."""
    holders, _ = _holders(assignment, pods, node_ready)
    out: list[DomainCount] = []
    for domain, held in holders.items():
        stuck = sum(
            1 for pod in held if (since := stuck_since(pod)) is not None and since <= before
        )
        if stuck:
            out.append(DomainCount(values=list(domain), count=stuck))
    return out


UNSCHEDULABLE_WAIT_MAX_SECONDS = 3600.0
"""The longest :func:`unschedulable_wait` grows to (unless the base wait is longer)."""


def unschedulable_wait(
    base_seconds: float, moves: int, *, longest: float = UNSCHEDULABLE_WAIT_MAX_SECONDS
) -> float:
    """How long released pods of a workload whose slots were moved ``moves`` times already for
    the scheduler finding no room (:attr:`~tidegate.model.Admitted.unschedulable_moves`) may
    stay unschedulable before their slots are moved again: ``base_seconds`` doubled per move,
    at most ``longest`` (or ``base_seconds`` when that is longer); 0 when ``base_seconds`` is
    (never moved)."""
    if base_seconds <= 0:
        return 0.0
    ceiling = max(base_seconds, longest)
    if moves >= 64:
        return ceiling
    return min(base_seconds * (1 << max(moves, 0)), ceiling)


def stranded(
    assignment: TopologyAssignment,
    pods: Iterable[PodState],
    node_ready: Callable[[str | None], bool],
) -> list[PodState]:
    """Released pods the scheduler found no room for that hold no slot of ``assignment``: their
    selector names no assigned domain, or their domain has more released pods than slots
    (bound pods hold them first, then unbound ones not marked unschedulable, then the most
    recently marked). After a replacement moved their slots elsewhere they can only wait for
    ever; evicted, their controller re-creates them gated, to be released into the new slots.
    Longest marked first."""
    _, left_over = _holders(assignment, pods, node_ready)
    out = [pod for pod in left_over if stuck_since(pod)]
    return sorted(out, key=lambda pod: (pod.unschedulable_since or 0.0, pod.name))


def _holders(
    assignment: TopologyAssignment,
    pods: Iterable[PodState],
    node_ready: Callable[[str | None], bool],
) -> tuple[dict[Domain, list[PodState]], list[PodState]]:
    """The released pods holding each assigned domain's slots (in the assignment's order;
    :func:`_holding_order` within a domain), and those left without one."""
    capacity = assigned(assignment)
    lengths = sorted({len(d) for d in capacity}, reverse=True)
    holding: dict[Domain, list[PodState]] = {}
    left_over: list[PodState] = []
    for pod in pods:
        if gated(pod) or not active(pod) or not node_ready(pod.node_name):
            continue
        domain = _held_domain(assignment.levels, lengths, pod.node_selector, capacity)
        if domain is None:
            left_over.append(pod)
        else:
            holding.setdefault(domain, []).append(pod)
    holders: dict[Domain, list[PodState]] = {}
    for domain, count in capacity.items():
        held = sorted(holding.get(domain, []), key=_holding_order)
        holders[domain] = held[:count]
        left_over.extend(held[count:])
    return holders, left_over


def spare_slots(
    assignment: TopologyAssignment,
    occupied: Mapping[Domain, int],
    *,
    surplus: int,
    lost: Collection[Domain] = (),
) -> list[DomainCount]:
    """Up to ``surplus`` slots no pod holds (``occupied``: a plan's slots taken, releases in
    flight and new releases included), from the last domains of the assignment first (the
    newest growth); slots of ``lost`` domains are left to replacement. What a workload that
    shrank gives back (docs/workloads.md, "Elastic workloads")."""
    left = max(surplus, 0)
    out: list[DomainCount] = []
    for domain, count in reversed(list(assigned(assignment).items())):
        if left == 0:
            break
        if domain in lost:
            continue
        free = min(max(count - occupied.get(domain, 0), 0), left)
        if free:
            out.append(DomainCount(values=list(domain), count=free))
            left -= free
    return out


def _held_domain(
    levels: Sequence[str],
    lengths: Sequence[int],
    selector: Mapping[str, str],
    domains: Collection[Domain],
) -> Domain | None:
    """The deepest of ``domains`` (whose depths are ``lengths``, deepest first) that
    ``selector`` names: a dict lookup per depth."""
    for length in lengths:
        if not all(level in selector for level in levels[:length]):
            continue
        key = tuple(selector[level] for level in levels[:length])
        if key in domains:
            return key
    return None


def _holding_order(pod: PodState) -> tuple[bool, bool, float, str]:
    """Bound pods first, then unbound ones not marked unschedulable, then the most recently
    marked (the longest stuck are the first left without a slot)."""
    since = pod.unschedulable_since
    return (pod.node_name is None, since is not None, -(since or 0.0), pod.name)


def _candidate_order(member: Member) -> tuple[bool, int, float, str]:
    return (member.rank is None, member.rank or 0, member.created_at, member.name)


def _slot_order(assignment: TopologyAssignment) -> list[Domain]:
    """Slot index → domain."""
    order: list[Domain] = []
    for item in assignment.domains:
        order.extend([tuple(item.values)] * max(item.count, 0))
    return order


def _choose(rank: int | None, order: Sequence[Domain], free: Mapping[Domain, int]) -> Domain | None:
    if not order:
        return None
    if rank is None:
        return next((d for d in free if free[d] > 0), None)
    target = rank % len(order)
    if free.get(order[target], 0) > 0:
        return order[target]
    for distance in range(1, len(order)):
        for index in (target - distance, target + distance):
            if 0 <= index < len(order) and free.get(order[index], 0) > 0:
                return order[index]
    return None
