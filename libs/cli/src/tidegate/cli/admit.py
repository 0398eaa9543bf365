"""``tidegate admit SCENARIO``: over a queue tree and a cluster, who is admitted and where,
who borrows how much, whose quota is reclaimed, who is reserved room, and why the others wait.

Reads a scenario (JSON or YAML, a file or standard input: cohorts, queues with nominal quota
and borrowing / lending limits, optionally a Topology and nodes, running and pending workloads,
``now``; WHAT-IF.md, section ``tidegate admit``) and answers one admission cycle.

With ``nodes``, the answer is the admission service's own cycle
(:meth:`tidegate.policy.admission.Admission.cycle`: quota, placement, reservations and
backfill, aging), with the preemption service's victim choice for what it asks
(:mod:`tidegate.cli.admit_cluster`). Each admitted entry's ``placement`` is as in
``tidegate place``; ``reserved`` lists the reservations in force.

Without ``nodes``, placement is not checked (quota only), with the functions the admission
and preemption services decide quota with (:mod:`tidegate.policy.queuetree`): the queues of
one tree take turns by :func:`~tidegate.policy.queuetree.fair_order`, each queue in its own
order (:func:`~tidegate.policy.ordering.order_workloads`), a StrictFIFO queue stopping at its
first waiting workload; a workload fits by
:func:`~tidegate.policy.queuetree.check_admission`; one that does not, where waiting could
cure it, is given back lent quota by :func:`~tidegate.policy.queuetree.plan_reclaim` under the
services' settings (:data:`~tidegate.policy.queuetree.SERVICE_RECLAIM`): the victims are
reported and leave, and it is admitted. A queue outside any tree is bounded by its
``capability`` alone (:func:`~tidegate.policy.quota.check_quota`).

``until_stable`` repeats cycles until nothing more changes. Exit status 0 with one JSON
document, 2 with one line naming the field when the input is malformed.
"""

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tidegate.cli.whatif import add_document_argument, answer, malformed

if TYPE_CHECKING:
    from tidegate.cli.admit_scenario import AdmitScenario
    from tidegate.policy.queuetree import Dim, NodeReport

HELP: Final = (
    "What-if: over a queue tree and a cluster, who is admitted where, who borrows how much, "
    "whose lent quota is reclaimed, and who is reserved room?"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``SCENARIO`` (a file, or ``-`` / nothing for standard input)."""
    add_document_argument(
        parser, "scenario", what="scenario (cohorts, queues, nodes, running, pending, now)"
    )


def run(args: argparse.Namespace) -> int:
    """Answer the what-if question; see the module docstring for the output and exit codes."""
    from tidegate.cli.admit_scenario import parse_admit_scenario
    from tidegate.cli.snapshot import SnapshotError, read_document

    try:
        scenario = parse_admit_scenario(read_document(args.scenario))
    except SnapshotError as exc:
        return malformed(str(exc))
    return answer(decide(scenario))


def amounts_json(amounts: "Mapping[Dim, int]") -> dict[str, str]:
    """Amounts per dimension as Kubernetes quantities (cards as "<model> cards": "n")."""
    return {str(dim): dim.show(amount) for dim, amount in sorted(amounts.items()) if amount}


def decide(scenario: "AdmitScenario") -> dict[str, Any]:
    """The answer of the module docstring, as a JSON-ready dict: on the cluster when the
    scenario gives ``nodes`` (:mod:`tidegate.cli.admit_cluster`), else on quota alone."""
    if scenario.nodes:
        from tidegate.cli.admit_cluster import decide_on_cluster

        return decide_on_cluster(scenario)
    return decide_on_quota(scenario)


def decide_on_quota(scenario: "AdmitScenario") -> dict[str, Any]:
    """The quota-only answer (no ``nodes``): one cycle (or until stable) on quota alone."""
    from tidegate.model import PendingReason, QueueConfig, WorkloadState
    from tidegate.policy.ordering import key_of, order_queues, order_workloads
    from tidegate.policy.queuetree import (
        SERVICE_RECLAIM,
        Holder,
        Preemptor,
        TreeState,
        build_services_tree,
        check_admission,
        cycle_groups,
        dims_of,
        in_tree,
        plan_reclaim,
        report,
        take_turns,
    )
    from tidegate.policy.quota import QueueUsage, QuotaRequest, check_quota

    queues = scenario.queues
    tree = build_services_tree(queues.values(), scenario.cohorts)
    holders: list[Holder] = list(scenario.running)
    leaf: dict[str, dict[Dim, int]] = {}
    for holder in holders:
        amounts = leaf.setdefault(holder.queue, {})
        for dim, amount in dims_of(holder.holds).items():
            amounts[dim] = amounts.get(dim, 0) + amount
    admitted: list[dict[str, Any]] = []
    preempted: list[dict[str, Any]] = []
    waiting: dict[str, dict[str, Any]] = {}
    todo: list[tuple[WorkloadState, QuotaRequest]] = list(scenario.pending)

    def usage_of(name: str) -> QueueUsage:
        return TreeState(tree, leaf).queue_usage(name) if tree else _plain(leaf.get(name, {}))

    def _plain(amounts: "dict[Dim, int]") -> QueueUsage:
        return QueueUsage(
            resources={d.name: a for d, a in amounts.items() if d.kind == "resource"},
            cards={d.name: a for d, a in amounts.items() if d.kind == "card"},
        )

    def take(name: str, request: QuotaRequest, sign: int = 1) -> None:
        amounts = leaf.setdefault(name, {})
        for dim, amount in dims_of(request).items():
            amounts[dim] = amounts.get(dim, 0) + sign * amount

    def strict_wait(behind: WorkloadState, queue: QueueConfig, head: WorkloadState) -> None:
        waiting[key_of(behind)] = {
            "reason": "WaitingForCapacity",
            "message": f"queue {queue.name} is StrictFIFO and waits for {key_of(head)}",
        }

    def attempt(
        workload: WorkloadState, request: QuotaRequest, queue: QueueConfig
    ) -> PendingReason | None:
        """Admit ``workload`` (maybe after reclaim); the reason it waits, or None."""
        key = key_of(workload)
        if tree is None or not in_tree(queue):
            exceeded = check_quota(queue, usage_of(queue.name), request)
            if exceeded is not None:
                waiting[key] = {"reason": exceeded.reason, "message": exceeded.message}
                return exceeded.reason
            take(queue.name, request)
            admitted.append(
                {"workload": key, "queue": queue.name, "borrowed": {}, "placement": None}
            )
            return None
        state = TreeState(tree, leaf)
        fit = check_admission(tree, state, queue.name, request)
        victims: list[str] = []
        if not fit.fits and not fit.lasting:
            plan = plan_reclaim(
                tree,
                state,
                Preemptor(
                    key=key,
                    queue=queue.name,
                    request=request,
                    priority=workload.priority,
                    service_type=workload.service_type,
                    created_at=workload.created_at,
                ),
                holders,
                SERVICE_RECLAIM,
            )
            if plan.outcome == "reclaims" and plan.fit is not None:
                for victim in plan.victims:
                    gone = next(h for h in holders if h.key == victim)
                    holders.remove(gone)
                    take(gone.queue, gone.holds, -1)
                    preempted.append(
                        {
                            "workload": victim,
                            "queue": gone.queue,
                            "by": key,
                            "reason": plan.reasons.get(victim, "InCohortReclamation"),
                            "message": plan.message,
                        }
                    )
                    victims.append(victim)
                fit = plan.fit
            elif plan.outcome == "cannot" and plan.message:
                fit = type(fit)(
                    fits=False,
                    reason=fit.reason,
                    message=plan.message,
                    lasting=fit.lasting,
                    borrowed=fit.borrowed,
                    short=fit.short,
                )
        if not fit.fits:
            assert fit.reason is not None
            waiting[key] = {"reason": fit.reason, "message": fit.message}
            return fit.reason
        take(queue.name, request)
        node = tree.queue(queue.name)
        cohort = node.parent.name if node is not None and node.parent is not None else None
        entry: dict[str, Any] = {
            "workload": key,
            "queue": queue.name,
            "borrowed": amounts_json(fit.borrowed),
            "placement": None,
        }
        if fit.borrowing and cohort is not None:
            entry["cohort"] = cohort
        if victims:
            entry["after_preempting"] = victims
        admitted.append(entry)
        return None

    requests: dict[str, QuotaRequest] = {}
    cycles = 0
    while True:
        cycles += 1
        before = len(admitted)
        waiting.clear()
        by_queue: dict[str, list[WorkloadState]] = {}
        requests.clear()
        for workload, request in todo:
            key = key_of(workload)
            if workload.queue is None:
                waiting[key] = {"reason": "QueueNotFound", "message": "it names no queue"}
                continue
            by_queue.setdefault(workload.queue, []).append(workload)
            requests[key] = request
        ordered = order_queues(queues[name] for name in by_queue)
        for group in cycle_groups(tree, ordered):
            in_order = {q.name: order_workloads(by_queue[q.name]) for q in group}
            take_turns(
                tree,
                group,
                in_order,
                lambda w: requests[key_of(w)],
                lambda: TreeState(tree, leaf) if tree is not None else {},
                lambda w, q: attempt(w, requests[key_of(w)], q),
                strict_wait,
            )
        done = {entry["workload"] for entry in admitted}
        todo = [(w, r) for w, r in todo if key_of(w) not in done]
        if not scenario.until_stable or len(admitted) == before or not todo:
            break

    return {
        "admitted": admitted,
        "preempted": preempted,
        "pending": [{"workload": key, **why} for key, why in sorted(waiting.items())],
        "reserved": [],
        "queues": queue_rows(report(tree, TreeState(tree, leaf)) if tree is not None else []),
        "cycles": cycles,
        "placement_checked": False,
    }


def queue_rows(nodes: "list[NodeReport]") -> dict[str, Any]:
    """Each queue of a tree report (:func:`~tidegate.policy.queuetree.report`): its cohort,
    usage, nominal, borrowed, lendable and lent amounts and its share."""
    rows: dict[str, Any] = {}
    for node in nodes:
        if node.id.kind != "queue":
            continue
        siblings = [n for n in nodes if n.parent == node.parent and n.id != node.id]
        others = {dim: sum(n.borrowed.get(dim, 0) for n in siblings) for dim in node.lendable}
        rows[node.id.name] = {
            "cohort": node.parent.name if node.parent else None,
            "usage": amounts_json(node.usage),
            "nominal": amounts_json(node.nominal),
            "borrowed": amounts_json(node.borrowed),
            "lendable": amounts_json(node.lendable),
            "lent": amounts_json(
                {dim: min(amount, others[dim]) for dim, amount in node.lendable.items()}
            ),
            "share": node.share / 1000,
        }
    return rows
