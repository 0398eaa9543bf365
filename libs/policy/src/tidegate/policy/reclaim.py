"""Reclaim of lent quota for the preemption service: the gangs to preempt so that a workload
waiting on its queue's quota gets back what its cohort lent (pure).

Admission asks with a ``preempt-requested`` whose ``reclaim`` is set when its queue is in a
queue tree and :func:`tidegate.policy.queuetree.plan_reclaim` would free enough quota. The
preemption service answers with :func:`select_reclaim_victims`: the same plan on its own view
(running gangs, their admissions, their PodDisruptionBudgets), so that a gang a budget
protects is skipped and named, never partly evicted. Both plan under
:data:`~tidegate.policy.queuetree.SERVICE_RECLAIM`: a queue gets back its nominal quota and,
by Kueue's fair-share strategies, its fair share. The tidal rules and the queue's
``reclaimWithinCohort`` policy hold as :func:`~tidegate.policy.queuetree.why_not_victim`
says: training never preempts training unless its queue opts in. The room the victims leave is
nominated to the preemptor when it fits there (and admission holds the reclaimed quota for it).
"""

from collections.abc import Mapping, Sequence

import msgspec

from tidegate.model import (
    Admitted,
    CohortConfig,
    LostAdmission,
    QueueConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.placement import CapacityView, PlacementError, PlacementRequest, place
from tidegate.policy.cards import CardError, card_demand
from tidegate.policy.queuetree import (
    SERVICE_RECLAIM,
    Holder,
    Preemptor,
    build_services_tree,
    plan_reclaim,
)
from tidegate.policy.quota import QueueUsage, QuotaRequest, gang_resources
from tidegate.policy.victims import (
    Outcome,
    RunningGang,
    VictimChoice,
    evicted_view,
    nominated_room,
)


def select_reclaim_victims(
    preemptor: WorkloadState,
    *,
    queue_name: str,
    queues: Mapping[str, QueueConfig],
    cohorts: Mapping[str, CohortConfig],
    running: Sequence[RunningGang],
    admissions: Mapping[WorkloadKey, Admitted],
    usage: Mapping[str, QueueUsage],
    view: CapacityView | None,
) -> VictimChoice:
    """Which whole gangs to preempt so that ``preemptor`` fits its queue's quota.

    ``running`` are the victim candidates (their ``budget_blocked`` set from the budgets),
    ``admissions`` the admissions in force (what each gang is charged), ``usage`` what every
    queue holds, ``view`` the capacity of the preemptor's Topology (None: unknown, nothing is
    nominated). Outcomes: ``preempts`` with the victims, ``fits`` (nothing to reclaim),
    ``exceeds-quota`` / ``card-quota-exceeded`` when reclaim cannot help, ``no-victims`` when
    no eligible set frees enough, ``queue-not-found`` / ``invalid``.
    """
    key = workload_key(preemptor.namespace, preemptor.name)
    queue = queues.get(queue_name)
    if queue is None:
        return VictimChoice(outcome="queue-not-found", reason=f"queue {queue_name} does not exist")
    tree = build_services_tree(queues.values(), cohorts.values())
    if tree is None or tree.queue(queue_name) is None:
        return VictimChoice(
            outcome="no-victims", reason=f"queue {queue_name} shares quota with no cohort"
        )
    try:
        demand = card_demand(preemptor)
        podsets = [
            msgspec.structs.replace(podset, min_count=None)
            for podset in demand.restrict(preemptor.podsets)
        ]
    except CardError as exc:
        return VictimChoice(outcome="invalid", reason=f"{key}: {exc}")
    request = QuotaRequest(
        resources=gang_resources(podsets),
        cards={m: n for m, n in demand.cards.items() if n},
        card_resources=demand.card_resources,
    )
    gangs = {gang.key: gang for gang in running if gang.queue is not None}
    holders = []
    for gang_key, gang in sorted(gangs.items()):
        assert gang.queue is not None
        admitted = admissions.get(gang_key)
        holds = (
            QuotaRequest(resources=admitted.charged, cards=admitted.charged_cards)
            if admitted is not None
            else QuotaRequest(resources=gang.resources, cards=dict(gang.cards))
        )
        holders.append(
            Holder(
                key=gang_key,
                queue=gang.queue,
                holds=holds,
                priority=gang.priority,
                service_type=gang.service_type,
                admitted_at=float(gang.origin or gang.admission),
                preemptable=gang.preemptable,
                protected=gang.budget_blocked,
            )
        )
    plan = plan_reclaim(
        tree,
        usage,
        Preemptor(
            key=key,
            queue=queue_name,
            request=request,
            priority=preemptor.priority,
            service_type=preemptor.service_type,
            created_at=preemptor.created_at,
        ),
        holders,
        SERVICE_RECLAIM,
    )
    skipped = {
        gang_key: why
        for gang_key, why in plan.ineligible.items()
        if gangs[gang_key].budget_blocked == why
    }
    ineligible = dict(plan.ineligible)
    if plan.outcome == "fits":
        return VictimChoice(outcome="fits", ineligible=ineligible)
    if plan.outcome == "cannot":
        reason = plan.message or "reclaim frees too little"
        if skipped:
            reason += "; skipped for their PodDisruptionBudget: " + "; ".join(
                f"{gang} ({why})" for gang, why in sorted(skipped.items())
            )
        fit = plan.fit
        if fit is not None and fit.lasting:
            lasting: Outcome = (
                "card-quota-exceeded" if fit.reason == "CardQuotaExceeded" else "exceeds-quota"
            )
            return VictimChoice(outcome=lasting, reason=reason, ineligible=ineligible)
        return VictimChoice(
            outcome="no-victims", reason=reason, ineligible=ineligible, budget_skipped=skipped
        )
    victims = [gangs[v] for v in plan.victims]
    placement = None
    nominated = {}
    if view is not None:
        try:
            result = place(
                evicted_view(view, victims),
                PlacementRequest(podsets=podsets, profile=preemptor.profile),
            )
        except PlacementError:
            result = None
        if result is not None and result.fits:
            placement = result
            nominated = nominated_room(result)
    ordered = sorted(victims, key=lambda g: g.key)
    return VictimChoice(
        outcome="preempts",
        victims=tuple(g.key for g in ordered),
        modes={g.key: g.on_preemption for g in ordered},
        lost={
            g.key: LostAdmission(uid=g.uid, sequence=g.admission, origin=g.origin or None)
            for g in ordered
            if g.uid and g.admission
        },
        placement=placement,
        nominated=nominated,
        top_priority=max((g.priority for g in victims), default=None),
        gpu_seconds=sum(g.gpu_seconds for g in victims),
        gpus=sum(g.gpus for g in victims),
        exact=plan.exact,
        ineligible=ineligible,
        budget_skipped=skipped,
        reclaimed={v: plan.reasons[v] for v in plan.victims if v in plan.reasons},
        cohort=queue.parent,
        summary=(
            f"borrowed quota of cohort {queue.parent} reclaimed for queue {queue_name}: "
            + (plan.message or "")
        ),
    )
