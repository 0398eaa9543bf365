"""Tidal victim selection: which training gangs an inference gang may evict, and which it does.

The rules (Volcano's tidal design, seed 002; docs/preemption.md has them for users):

- Only inference reclaims, and only from training (:func:`~tidegate.policy.service_type.may_reclaim`).
- A victim is a whole training gang that is preemptable, runs in a queue that exists and is
  reclaimable, and has a priority strictly lower than the preemptor's. Never part of a gang.
- The preemptor's queue must have room for it, by the admission quota check
  (:func:`tidegate.policy.quota.check_quota`: capability per resource, card quota per card
  model); otherwise no victims are taken and the reason names the limit (Volcano's
  ``PreemptiveFn``).
- PodDisruptionBudgets: a gang whose whole eviction a budget does not allow now (the budget
  selects more of its pods than its ``disruptions_allowed``; :func:`budget_blocks`) is not a
  victim: the search goes on without it, and the decision (or the reason to wait) names the
  gangs skipped for their budget. Evicting such a gang would leave it partly evicted, its
  other pods refused with 429, for as long as the budget says.
- The victims are the set whose eviction lets the *whole* gang be placed (per-node fit, card
  model, topology request: a required rack means room inside one rack) that minimises, in
  order, the highest victim priority, the number of victims, the GPU-seconds lost and the GPUs
  evicted. Free room is used first: a gang that fits without evictions takes no victim, and the
  set is minimal (dropping any victim leaves the gang unplaceable).

*GPU-seconds lost* of a victim = the GPUs (whole cards plus MIG slices) its pods request × the
seconds it has been running. A restarted gang resumes from its last checkpoint at best and an
aborted one loses everything, so the work done since it started is what eviction puts at risk;
its remaining time is unknown to tidegate, so it is not used.

:func:`select_victims` is what the preemption service and ``tidegate preempt`` both call. It
does no I/O and changes nothing: evicting, nominating and publishing are the service's job.
The search itself is :mod:`tidegate.policy.preempt_search`.
"""

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
import numpy as np

from tidegate.model import (
    DisruptionBudgetState,
    LostAdmission,
    NodeName,
    PodSetSpec,
    PodState,
    Preempted,
    QueueConfig,
    Resources,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model import resources as res
from tidegate.model.events import OnPreemption, ServiceType, VictimSearchOutcome
from tidegate.placement import (
    CapacityView,
    PlacementError,
    PlacementRequest,
    PlacementResult,
    place,
)
from tidegate.placement.request import normalize
from tidegate.policy.cards import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, CardError, card_demand
from tidegate.policy.common import runs
from tidegate.policy.preempt_search import (
    DEFAULT_ORACLE_BUDGET,
    DEFAULT_STEP_BUDGET,
    Candidate,
    PodFitProblem,
    SearchOutcome,
    search_pod_fit,
    search_with_oracle,
)
from tidegate.policy.quota import QueueUsage, QuotaRequest, check_quota, gang_resources
from tidegate.policy.service_type import may_reclaim

ON_PREEMPTION_ANNOTATION: Final = "tidegate.io/on-preemption"
"""Annotation choosing what happens to a preempted gang: ``restart`` (default) or ``abort``."""

Outcome = VictimSearchOutcome
"""How :func:`select_victims` ended (:data:`tidegate.model.events.VictimSearchOutcome`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningPod:
    """A bound pod of a running gang: where it runs and what it holds there."""

    node: NodeName
    requests: Resources
    """Its requests (init containers and overhead included), without the ``pods`` slot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningGang:
    """A running workload, as victim selection sees it."""

    key: WorkloadKey
    queue: str | None
    service_type: ServiceType
    priority: int
    preemptable: bool = True
    on_preemption: OnPreemption = "restart"
    pods: tuple[RunningPod, ...] = ()
    cards: Mapping[str, int] = field(default_factory=dict)
    """Cards per card model it is charged for (its queue's card-quota usage)."""
    running_seconds: int = 0
    """Seconds since it started running (for the GPU-seconds lost)."""
    uid: str = ""
    """Its workload's uid ("" if unknown)."""
    admission: int = 0
    """The sequence of the admitted decision it runs under (0 if unknown): what it loses."""
    origin: int = 0
    """That admission's :meth:`~tidegate.model.Admitted.chain_start` (0 if unknown)."""
    budget_blocked: str | None = None
    """Why a PodDisruptionBudget does not allow evicting it whole now (:func:`budget_blocks`);
    None when the budgets allow it (or none covers it)."""

    @property
    def gpus(self) -> int:
        """GPUs its pods hold: whole cards plus MIG slices."""
        return sum(gpus_of(pod.requests) for pod in self.pods)

    @property
    def gpu_seconds(self) -> int:
        """GPU-seconds lost if it is evicted now (see the module docstring)."""
        return self.gpus * max(self.running_seconds, 0)

    @property
    def resources(self) -> Resources:
        """Total requests of its pods (its queue's resource usage)."""
        return res.non_zero(res.total(pod.requests for pod in self.pods))


@dataclass(frozen=True, slots=True)
class VictimSettings:
    """Limits of the search (the defaults suit clusters of thousands of nodes)."""

    step_budget: int = DEFAULT_STEP_BUDGET
    """Branch-and-bound steps before settling for the best set found (still minimal)."""
    oracle_budget: int = DEFAULT_ORACLE_BUDGET
    """Placement calls for gangs the fast search does not cover (several podsets, slices)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VictimChoice:
    """The answer of :func:`select_victims`."""

    outcome: Outcome
    victims: tuple[WorkloadKey, ...] = ()
    """Whole workloads to evict, sorted; empty unless ``outcome`` is "preempts"."""
    modes: dict[WorkloadKey, OnPreemption] = field(default_factory=dict)
    """Victim → restart (re-queued) or abort (suspended)."""
    lost: dict[WorkloadKey, LostAdmission] = field(default_factory=dict)
    """Victim → the admission it loses (uid and admitted sequence), for victims known by both."""
    placement: PlacementResult | None = None
    """Where the gang goes once the victims are gone (None when not admitted)."""
    nominated: dict[NodeName, Resources] = field(default_factory=dict)
    """Node → capacity the gang takes there after eviction: what to hold for the preemptor."""
    reason: str | None = None
    """Why the gang cannot be admitted; None when it can."""
    top_priority: int | None = None
    """Highest priority among the victims."""
    gpu_seconds: int = 0
    """GPU-seconds lost by evicting the victims."""
    gpus: int = 0
    """GPUs the victims hold."""
    exact: bool = True
    """False when the search hit its budget: the set is minimal but not proven optimal."""
    ineligible: dict[WorkloadKey, str] = field(default_factory=dict)
    """Running workloads that may not be victims of this preemptor, with why."""
    budget_skipped: dict[WorkloadKey, str] = field(default_factory=dict)
    """Gangs that would have been eligible but whose whole eviction a PodDisruptionBudget does
    not allow now, with the budget's words (also in ``ineligible``)."""
    summary: str | None = None
    """What the preempted decision says instead of the tidal sentence (reclaim of lent quota,
    :mod:`tidegate.policy.reclaim`); None: the tidal sentence."""
    reclaimed: dict[WorkloadKey, str] = field(default_factory=dict)
    """Victim → Kueue's reason its quota is reclaimed (:mod:`tidegate.policy.reclaim`)."""
    cohort: str | None = None
    """The cohort whose lent quota is reclaimed (set with ``reclaimed``)."""

    @property
    def admitted(self) -> bool:
        """Whether the gang fits, into free room or after evicting the victims."""
        return self.outcome in ("fits", "preempts")


def preempted_decision(
    preemptor: WorkloadState, choice: VictimChoice, *, request_sequence: int | None = None
) -> Preempted:
    """The ``preempted`` decision body that names the preemptor, its victims, their modes and
    the nominated capacity, answering the request of ``request_sequence``. Raises ValueError
    unless ``choice`` evicts someone."""
    if choice.outcome != "preempts" or not choice.victims:
        raise ValueError(f"no preemption to announce: outcome {choice.outcome}")
    key = workload_key(preemptor.namespace, preemptor.name)
    count = len(choice.victims)
    skipped = ""
    if choice.budget_skipped:
        skipped = "; skipped for their PodDisruptionBudget: " + "; ".join(
            f"{gang} ({why})" for gang, why in sorted(choice.budget_skipped.items())
        )
    return Preempted(
        preemptor=key,
        preemptor_uid=preemptor.uid,
        victims=list(choice.victims),
        mode={str(victim): mode for victim, mode in choice.modes.items()},
        lost={str(victim): lost for victim, lost in choice.lost.items()},
        nominated={node: dict(amount) for node, amount in choice.nominated.items()},
        message=(
            f"{choice.summary}{skipped}"
            if choice.summary is not None
            else f"{count} training workload{'s' if count > 1 else ''} preempted for {key}: "
            f"{', '.join(choice.victims)} (top priority {choice.top_priority}, "
            f"{choice.gpus} GPUs, {choice.gpu_seconds} GPU-seconds lost){skipped}"
        ),
        request_sequence=request_sequence,
        reclaimed={str(victim): why for victim, why in sorted(choice.reclaimed.items())},
        cohort=choice.cohort,
    )


def budget_blocks(
    gang: WorkloadKey, budgets: Iterable[DisruptionBudgetState], *, namespace: str
) -> str | None:
    """Why the budgets of ``namespace`` do not allow evicting ``gang`` whole now, or None:
    a budget that selects more of its pods than it allows disruptions."""
    for budget in sorted(budgets, key=lambda b: (b.namespace, b.name)):
        if budget.namespace != namespace:
            continue
        covered = budget.workloads.get(gang, 0)
        if covered > budget.disruptions_allowed:
            return (
                f"PodDisruptionBudget {budget.namespace}/{budget.name} allows "
                f"{budget.disruptions_allowed} disruption"
                f"{'' if budget.disruptions_allowed == 1 else 's'} now and selects {covered} of "
                f"its pods"
            )
    return None


def gpus_of(requests: Mapping[str, int]) -> int:
    """GPUs in a resource list: ``nvidia.com/gpu`` plus every ``nvidia.com/mig-*`` slice."""
    return sum(
        amount
        for name, amount in requests.items()
        if name == WHOLE_GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)
    )


def running_gang(
    workload: WorkloadState,
    pods: Iterable[PodState],
    *,
    running_seconds: int = 0,
    admission: int = 0,
    origin: int = 0,
    queue: str | None = None,
    budgets: Iterable[DisruptionBudgetState] = (),
) -> RunningGang:
    """A running workload as victim selection sees it, from its bus state (``admission``: the
    sequence of the admitted decision it runs under, ``origin`` its chain start; ``queue``: the queue admission charged
    it to, default the one it names; ``budgets``: the PodDisruptionBudgets known, see
    :func:`budget_blocks`).

    Only ``pods`` that run (:func:`tidegate.policy.common.runs`) count. Its cards
    are what admission charged (:func:`tidegate.policy.cards.card_demand`); a card request
    that cannot be understood counts no cards rather than hiding the gang from preemption.
    """
    try:
        cards = dict(card_demand(workload).cards)
    except CardError:
        cards = {}
    return RunningGang(
        key=workload_key(workload.namespace, workload.name),
        queue=queue if queue is not None else workload.queue,
        service_type=workload.service_type,
        priority=workload.priority,
        preemptable=workload.preemptable,
        on_preemption=workload.on_preemption,
        pods=tuple(
            RunningPod(node=NodeName(pod.node_name), requests=dict(pod.requests))
            for pod in pods
            if pod.node_name and runs(pod)
        ),
        cards=cards,
        running_seconds=running_seconds,
        uid=workload.uid,
        admission=admission,
        origin=origin,
        budget_blocked=budget_blocks(
            workload_key(workload.namespace, workload.name), budgets, namespace=workload.namespace
        ),
    )


def why_not_victim(
    gang: RunningGang,
    *,
    reclaimer: ServiceType,
    priority: int,
    queues: Mapping[str, QueueConfig],
) -> str | None:
    """Why ``gang`` may not be evicted for a ``reclaimer`` of ``priority``; None if it may."""
    if not may_reclaim(reclaimer, gang.service_type):
        if reclaimer != "inference":
            return f"{_a(reclaimer)} workload never preempts"
        return f"{gang.service_type} workloads are never preempted"
    if not gang.preemptable:
        return "not preemptable"
    queue = queues.get(gang.queue) if gang.queue is not None else None
    if queue is None:
        return f"queue {gang.queue} does not exist"
    if not queue.reclaimable:
        return f"queue {queue.name} is not reclaimable"
    if gang.priority >= priority:
        return f"priority {gang.priority} is not below the preemptor's {priority}"
    return None


def queue_usage(running: Iterable[RunningGang], queue: str) -> QueueUsage:
    """What the running gangs of ``queue`` hold, per resource and per card model."""
    members = [gang for gang in running if gang.queue == queue]
    return QueueUsage(
        resources=res.non_zero(res.total(gang.resources for gang in members)),
        cards=res.non_zero(res.total(gang.cards for gang in members)),
    )


def select_victims(
    preemptor: WorkloadState,
    *,
    view: CapacityView,
    running: Sequence[RunningGang],
    queues: Mapping[str, QueueConfig],
    usage: QueueUsage | None = None,
    settings: VictimSettings | None = None,
    queue_name: str | None = None,
) -> VictimChoice:
    """Decide whether ``preemptor`` fits, and which gangs to evict if it only fits that way.

    ``view`` is the capacity of the topology the gang is placed on, with every running pod
    counted as used (the victims' included). ``usage`` is what the preemptor's queue holds;
    when omitted it is summed from ``running``. ``queue_name`` is the queue the preemptor is
    in as admission decided it (:func:`tidegate.policy.common.queue_of`); default: the one it
    names. Nothing is changed: the view is copied for the simulations.
    """
    settings = settings or VictimSettings()
    key = workload_key(preemptor.namespace, preemptor.name)
    if preemptor.invalid_reason:
        return VictimChoice(outcome="invalid", reason=f"{key}: {preemptor.invalid_reason}")
    queue_name = queue_name or preemptor.queue
    if queue_name is None:
        return VictimChoice(outcome="queue-not-found", reason=f"{key} names no queue")
    queue = queues.get(queue_name)
    if queue is None:
        return VictimChoice(outcome="queue-not-found", reason=f"queue {queue_name} does not exist")
    try:
        demand = card_demand(preemptor)
        podsets = [
            msgspec.structs.replace(podset, min_count=None)  # room for the whole gang
            for podset in demand.restrict(preemptor.podsets)
        ]
    except CardError as exc:
        return VictimChoice(outcome="invalid", reason=f"{key}: {exc}")
    quota_request = QuotaRequest(
        resources=gang_resources(podsets),
        cards=demand.cards,
        card_resources=demand.card_resources,
    )
    held = usage if usage is not None else queue_usage(running, queue.name)
    exceeded = check_quota(queue, held, quota_request)
    if exceeded is not None:
        outcome: Outcome = (
            "card-quota-exceeded" if exceeded.reason == "CardQuotaExceeded" else "exceeds-quota"
        )
        return VictimChoice(outcome=outcome, reason=exceeded.message)

    request = PlacementRequest(podsets=podsets, profile=preemptor.profile)
    try:
        as_is = place(view, request)
    except PlacementError as exc:
        return VictimChoice(outcome="invalid", reason=f"{key}: {exc}")
    if as_is.fits:
        return VictimChoice(outcome="fits", placement=as_is, nominated=nominated_room(as_is))

    ineligible: dict[WorkloadKey, str] = {}
    skipped: dict[WorkloadKey, str] = {}
    eligible: list[RunningGang] = []
    for gang in sorted(running, key=lambda g: g.key):
        if gang.key == key:
            continue
        why = why_not_victim(
            gang, reclaimer=preemptor.service_type, priority=preemptor.priority, queues=queues
        )
        if why is None and gang.budget_blocked is not None:
            why = skipped[gang.key] = gang.budget_blocked
        if why is None:
            eligible.append(gang)
        else:
            ineligible[gang.key] = why
    if preemptor.service_type != "inference":
        return VictimChoice(
            outcome="not-a-reclaimer",
            reason=(
                f"{as_is.reason}; {key} is {_a(preemptor.service_type)} workload, "
                "which never preempts"
            ),
            ineligible=ineligible,
        )

    fast = _pod_fit_problem(view, request, eligible)
    if fast is not None:
        problem, scope = fast
        found = search_pod_fit(problem, step_budget=settings.step_budget)
    else:
        scope = None
        found = _oracle_search(view, request, eligible, settings.oracle_budget)
    choice = _admit(view, request, eligible, found)
    if choice is None and fast is not None and found.victims is not None:
        # The fast model found victims but the placement engine disagrees (a case the model
        # does not cover): trust the engine.
        found = _oracle_search(view, request, eligible, settings.oracle_budget)
        choice = _admit(view, request, eligible, found)
        scope = None
    if choice is None:
        reason = _no_victims_reason(demand.card_model, podsets, scope, found, len(eligible))
        if skipped:
            reason += (
                f"; {len(skipped)} gang{'s' if len(skipped) > 1 else ''} skipped for their "
                "PodDisruptionBudget: "
                + "; ".join(f"{gang} ({why})" for gang, why in sorted(skipped.items()))
            )
        return VictimChoice(
            outcome="no-victims", reason=reason, ineligible=ineligible, budget_skipped=skipped
        )
    return dataclasses.replace(choice, ineligible=ineligible, budget_skipped=skipped)


# --------------------------------------------------------------------------- internals


def _a(word: str) -> str:
    """``word`` with its indefinite article ("a training", "an inference")."""
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


@dataclass(frozen=True, slots=True)
class _Scope:
    """What the fast search looked at, for the reason when nothing works."""

    podset: str
    count: int
    level: str | None


def nominated_room(result: PlacementResult) -> dict[NodeName, Resources]:
    """Per node, what ``result`` takes there: the room to hold for the preemptor."""
    return {NodeName(node): dict(amount) for node, amount in sorted(result.usage().items())}


def evicted_view(view: CapacityView, gangs: Iterable[RunningGang]) -> CapacityView:
    """A copy of ``view`` with every pod of ``gangs`` gone."""
    copy = view.copy()
    freed: dict[str, Resources] = {}
    for gang in gangs:
        for pod in gang.pods:
            if pod.node in copy:
                freed[pod.node] = res.add(freed.get(pod.node, {}), {**pod.requests, "pods": 1})
    for node, amount in freed.items():
        used = res.subtract(copy.used(node), amount)
        copy.set_used(node, {name: max(value, 0) for name, value in used.items()})
    return copy


def _admit(
    view: CapacityView,
    request: PlacementRequest,
    eligible: Sequence[RunningGang],
    found: SearchOutcome,
) -> VictimChoice | None:
    """Place the gang for real once ``found``'s victims are gone; None if it does not fit."""
    if found.victims is None:
        return None
    gangs = [eligible[i] for i in found.victims]
    result = place(evicted_view(view, gangs), request)
    if not result.fits:
        return None
    return VictimChoice(
        outcome="preempts" if gangs else "fits",
        victims=tuple(sorted(g.key for g in gangs)),
        modes={g.key: g.on_preemption for g in sorted(gangs, key=lambda g: g.key)},
        lost={
            g.key: LostAdmission(uid=g.uid, sequence=g.admission, origin=g.origin or None)
            for g in sorted(gangs, key=lambda g: g.key)
            if g.uid and g.admission
        },
        placement=result,
        nominated=nominated_room(result),
        top_priority=max((g.priority for g in gangs), default=None),
        gpu_seconds=sum(g.gpu_seconds for g in gangs),
        gpus=sum(g.gpus for g in gangs),
        exact=found.exact,
    )


def _candidate(
    gang: RunningGang, position: Mapping[str, int], resources: Sequence[str]
) -> Candidate:
    """``gang`` as a search candidate: what it frees on each node the gang may use."""
    slot = resources.index("pods") if "pods" in resources else -1
    freed: dict[int, list[int]] = {}
    gpus = 0
    for pod in gang.pods:
        requests = pod.requests
        gpus += gpus_of(requests)
        at = position.get(pod.node)
        if at is None:
            continue
        vector = freed.get(at)
        if vector is None:
            vector = freed[at] = [0] * len(resources)
        for j, name in enumerate(resources):
            vector[j] += requests.get(name, 0)
        if slot >= 0:
            vector[slot] += 1
    return Candidate(
        priority=gang.priority,
        cost=gpus * max(gang.running_seconds, 0),
        gpus=gpus,
        freed={n: tuple(v) for n, v in freed.items() if any(v)},
    )


def _pod_fit_problem(
    view: CapacityView, request: PlacementRequest, eligible: Sequence[RunningGang]
) -> tuple[PodFitProblem, _Scope] | None:
    """The fast model of the gang, when it is one podset without slices; else None."""
    units = normalize(view.levels, request)
    if len(units) != 1 or len(units[0].members) != 1:
        return None
    plan = units[0].members[0]
    if plan.slice_level >= 0:
        return None
    structure = view.structure()
    rows = structure.row_of_pos
    usable = view.ready_mask()[rows] & view.tolerated_rows(plan.tolerations)[rows]
    if plan.selector_conflicts:
        usable &= False
    for label, value in plan.node_selector.items():
        usable &= view.selector_mask(label, value)[rows]
    positions = np.flatnonzero(usable)
    names = sorted(plan.requests)
    matrix = view.free_matrix()
    free = np.zeros((positions.size, len(names)), dtype=np.int64)
    for j, name in enumerate(names):
        index = view.resource_index(name)
        if index is not None:
            free[:, j] = matrix[index, rows[positions]]
    level = plan.required
    if level is None:
        domain_of = np.zeros(positions.size, dtype=np.int64)
        domains = 1
    else:
        spans = structure.node_end[level] - structure.node_start[level]
        domain_at = np.repeat(np.arange(spans.size, dtype=np.int64), spans)
        domain_of = domain_at[positions]
        domains = int(spans.size)
    position = {structure.node_names[int(p)]: i for i, p in enumerate(positions)}
    problem = PodFitProblem(
        free=free,
        request=tuple(plan.requests[name] for name in names),
        count=plan.count,
        domain_of=domain_of,
        domains=domains,
        candidates=[_candidate(gang, position, names) for gang in eligible],
    )
    scope = _Scope(
        podset=plan.name,
        count=plan.count,
        level=None if level is None else view.levels[level],
    )
    return problem, scope


def _oracle_search(
    view: CapacityView,
    request: PlacementRequest,
    eligible: Sequence[RunningGang],
    budget: int,
) -> SearchOutcome:
    """The general search: the placement engine on a copied view answers every question."""
    nodes = set(view.node_names())
    candidates = [
        Candidate(
            priority=gang.priority,
            cost=gang.gpu_seconds,
            gpus=gang.gpus,
            # Only which gangs touch the view matters here, and their GPUs and pods to order them.
            freed={
                i: (gpus_of(pod.requests), 1)
                for i, pod in enumerate(gang.pods)
                if pod.node in nodes
            },
        )
        for gang in eligible
    ]

    def fits(victims: frozenset[int]) -> bool:
        chosen = [eligible[i] for i in sorted(victims)]
        return place(evicted_view(view, chosen), request).fits

    return search_with_oracle(candidates, fits, call_budget=budget)


def _no_victims_reason(
    card: str | None,
    podsets: Sequence[PodSetSpec],
    scope: _Scope | None,
    found: SearchOutcome,
    candidates: int,
) -> str:
    room = f"enough {card} cards" if card else "enough room"
    counted = f"{candidates} candidate" + ("" if candidates == 1 else "s")
    head = f"no reclaimable training workload frees {room}"
    if scope is None:
        pods = sum(p.count for p in podsets)
        return f"{head} for all {pods} pods ({counted})"
    where = f"in one {scope.level}" if scope.level else "in the cluster"
    return (
        f"{head}: at best {found.best_pods} of {scope.count} pods of {scope.podset} fit "
        f"{where} after evicting every eligible workload ({counted})"
    )
