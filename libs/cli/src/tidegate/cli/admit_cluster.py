"""``tidegate admit`` on a cluster: the admission service's own cycle, placement, reservations
and backfill included.

When the scenario gives ``nodes``, the answer is what the services would decide: this module
feeds a :class:`~tidegate.policy.admission.Admission` what the admission service feeds it
(queues, cohorts, the Topology, node labels and capacity reports, the running workloads'
admissions as a successor restores them from the ledger, the pending workloads) and calls
:meth:`~tidegate.policy.admission.Admission.cycle`. It stands in for the two other parties of
a cycle and decides nothing itself:

- the topology-cache: before every cycle each node's free capacity is reported, the pods of
  the running and admitted workloads counted as used and every decision so far applied;
- the preemption service: a ``preempt-requested`` is answered by the functions that service
  calls (:func:`~tidegate.policy.reclaim.select_reclaim_victims` for lent quota,
  :func:`~tidegate.policy.victims.select_victims` for room), announced by
  :func:`~tidegate.policy.victims.preempted_decision` and handed back to
  :meth:`~tidegate.policy.admission.Admission.preempted` (the freed room is nominated to the
  preemptor); the victims leave the cluster.

One cycle answers; when it asked for preemptions that were answered, the next cycle (where the
preemptors take their nominated room) belongs to the same answer, and what that cycle asks
is left waiting (``WaitingForPreemption``). ``until_stable`` repeats
cycles until one admits and preempts nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tidegate.cli.admit import amounts_json, queue_rows
from tidegate.cli.admit_scenario import AdmitScenario, distinct_requests, podset_name
from tidegate.cli.whatif import assignments_json
from tidegate.model import (
    Admitted,
    CapacityNode,
    DomainCount,
    NodeName,
    NodeState,
    Pending,
    PreemptRequested,
    Reserved,
    Resources,
    TopologyAssignment,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model import resources as res
from tidegate.placement import NodeCapacity
from tidegate.policy.admission import Admission, AdmissionSettings
from tidegate.policy.queuetree import dims_of
from tidegate.policy.quota import QuotaRequest
from tidegate.policy.reclaim import select_reclaim_victims
from tidegate.policy.victims import RunningGang, RunningPod, preempted_decision, select_victims

MAX_CYCLES: Final = 10_000
"""A bound on ``until_stable`` (each cycle that goes on admitted or evicted someone)."""


def rfc3339(at: float) -> str:
    """Unix seconds as an RFC 3339 time in UTC (``2026-11-29T10:00:00Z``)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class _Placed:
    """A workload holding room on the cluster: running, or admitted by a cycle."""

    workload: WorkloadState
    admitted: Admitted
    pods: list[RunningPod]
    started: float


class _Cluster:
    """The nodes and what runs on them: what the topology-cache would report."""

    def __init__(self, scenario: AdmitScenario) -> None:
        self.levels = list(scenario.topology.levels)
        self.topology = scenario.topology.name
        self.nodes: dict[str, NodeCapacity] = {node.name: node for node in scenario.nodes}
        self.path: dict[str, list[str]] = {
            node.name: [node.labels[level] for level in self.levels]
            for node in scenario.nodes
            if all(level in node.labels for level in self.levels)
        }
        """Each node of the Topology (one with a label of every level) by its domain values."""
        self.at: dict[tuple[str, ...], str] = {tuple(p): n for n, p in self.path.items()}
        self.placed: dict[WorkloadKey, _Placed] = {}

    def used(self) -> dict[str, Resources]:
        """What the pods on each node take (a pod also takes one of the node's ``pods``)."""
        used: dict[str, Resources] = {}
        for held in self.placed.values():
            for pod in held.pods:
                used[pod.node] = res.add(used.get(pod.node, {}), {**pod.requests, "pods": 1})
        return used

    def report(self, admission: Admission) -> None:
        """Every node's free capacity, every decision so far applied (the topology-cache)."""
        used = self.used()
        for name, path in sorted(self.path.items()):
            node = self.nodes[name]
            taken = res.add(node.used, used.get(name, {}))
            admission.capacity.update(
                CapacityNode(
                    topology=self.topology,
                    node=name,
                    domain=path,
                    allocatable=dict(node.allocatable),
                    free={r: max(a - taken.get(r, 0), 0) for r, a in node.allocatable.items()},
                    applied_sequence=admission.sequence,
                )
            )

    def pods_of(self, admitted: Admitted) -> list[RunningPod]:
        """The pods an admission puts on nodes (its domains at the host level)."""
        pods: list[RunningPod] = []
        for podset, assignment in admitted.assignments.items():
            requests = admitted.requests.get(podset, {})
            for domain in assignment.domains:
                node = self.at.get(tuple(domain.values))
                if node is not None:
                    pods.extend(
                        RunningPod(node=NodeName(node), requests=requests)
                        for _ in range(domain.count)
                    )
        return pods

    def gangs(self, *, now: float) -> list[RunningGang]:
        """The victim candidates, as the preemption service sees running gangs."""
        return [
            RunningGang(
                key=key,
                queue=held.admitted.queue,
                service_type=held.workload.service_type,
                priority=held.workload.priority,
                preemptable=held.workload.preemptable,
                on_preemption=held.workload.on_preemption,
                pods=tuple(held.pods),
                cards=dict(held.admitted.charged_cards),
                running_seconds=max(int(now - held.started), 0),
                uid=held.workload.uid,
                admission=held.admitted.sequence,
                origin=held.admitted.chain_start(),
            )
            for key, held in sorted(self.placed.items())
        ]


def _restore_running(admission: Admission, cluster: _Cluster, scenario: AdmitScenario) -> None:
    """Hand admission the running workloads as a successor restores them from the ledger,
    oldest first (admission order decides who is youngest when reclaiming)."""
    holders = {holder.key: holder for holder in scenario.running}
    ordered = sorted(scenario.workloads.items(), key=lambda item: (item[1].started, item[0]))
    for key, running in ordered:
        workload = running.workload
        admission.set_workload(workload)
        distinct = distinct_requests(running.pods)
        per_node: dict[str, dict[str, int]] = {}
        pods: list[RunningPod] = []
        usage: dict[NodeName, Resources] = {}
        for node, requests in running.pods:
            assert node is not None  # the scenario requires it with nodes
            name = podset_name(requests, distinct)
            counts = per_node.setdefault(name, {})
            counts[node] = counts.get(node, 0) + 1
            pods.append(RunningPod(node=NodeName(node), requests=requests))
            usage[NodeName(node)] = res.add(usage.get(NodeName(node), {}), {**requests, "pods": 1})
        holds = holders[key].holds
        admitted = Admitted(
            workload=key,
            uid=workload.uid,
            queue=holders[key].queue,
            sequence=admission.sequence + 1,
            epoch=0,
            assignments={
                name: TopologyAssignment(
                    levels=cluster.levels,
                    domains=[
                        DomainCount(values=cluster.path[node], count=count)
                        for node, count in sorted(counts.items())
                        if node in cluster.path
                    ],
                )
                for name, counts in per_node.items()
            },
            charged=dict(holds.resources),
            charged_cards=dict(holds.cards),
            requests={podset_name(r, distinct): dict(r) for r in distinct},
        )
        admission.restore(admitted, usage, now=scenario.now, admitted_at=running.started)
        cluster.placed[key] = _Placed(workload, admitted, pods, running.started)


def decide_on_cluster(scenario: AdmitScenario) -> dict[str, Any]:
    """The answer of ``tidegate admit`` for a scenario with ``nodes`` (module docstring)."""
    now = scenario.now
    admission = Admission(AdmissionSettings(default_topology=scenario.topology.name))
    admission.capacity.set_topology(scenario.topology)
    for node in scenario.nodes:
        admission.capacity.set_node(
            NodeState(
                name=node.name,
                labels=dict(node.labels),
                allocatable=dict(node.allocatable),
                taints=list(node.taints),
                ready=node.ready,
                unschedulable=node.unschedulable,
            )
        )
    for cohort in scenario.cohorts:
        admission.set_cohort(cohort)
    for queue in scenario.queues.values():
        admission.set_queue(queue)
    cluster = _Cluster(scenario)
    _restore_running(admission, cluster, scenario)
    for workload, _ in scenario.pending:
        admission.set_workload(workload)

    admitted: list[dict[str, Any]] = []
    preempted: list[dict[str, Any]] = []
    messages: dict[WorkloadKey, str] = {}
    cycles = 0
    follow_up = False
    while cycles < MAX_CYCLES:
        cluster.report(admission)
        cycles += 1
        requests: list[PreemptRequested] = []
        moved = False
        for decision in admission.cycle(now=now):
            body = decision.body
            if isinstance(body, Admitted) and decision.workload is not None:
                key = WorkloadKey(body.workload)
                pods = cluster.pods_of(body)
                cluster.placed[key] = _Placed(decision.workload, body, pods, now)
                admitted.append(_admitted_entry(body, preempted))
                moved = True
            elif isinstance(body, Pending):
                messages[WorkloadKey(body.workload)] = body.message
            elif isinstance(body, PreemptRequested):
                requests.append(body)
        answered = False
        if follow_up and not scenario.until_stable:
            requests = []  # asked in the follow-up cycle: answered in a later one, not this
        for request in requests:
            outcome = _preempt(admission, cluster, scenario, request, now)
            if isinstance(outcome, str):
                key = WorkloadKey(request.workload)
                messages[key] = f"{messages.get(key, request.message)}; {outcome}"
                continue
            preempted.extend(outcome)
            answered = moved = True
        if answered and not follow_up and not scenario.until_stable:
            follow_up = True  # the preemptors take the room nominated for them
            continue
        if not scenario.until_stable or not moved:
            break

    waiting = admission.waiting()
    return {
        "admitted": admitted,
        "preempted": preempted,
        "pending": [
            {"workload": key, "reason": reason, "message": messages.get(key, "")}
            for key, reason in sorted(waiting.items())
        ],
        "reserved": [_reserved_entry(r) for _, r in sorted(admission.reservations().items())],
        "queues": queue_rows(admission.tree_report()),
        "cycles": cycles,
        "placement_checked": True,
        "now": rfc3339(now),
    }


def _admitted_entry(body: Admitted, preempted: list[dict[str, Any]]) -> dict[str, Any]:
    borrowed = dims_of(QuotaRequest(resources=body.borrowed, cards=body.borrowed_cards))
    entry: dict[str, Any] = {
        "workload": body.workload,
        "queue": body.queue,
        "borrowed": amounts_json(borrowed),
        "placement": assignments_json(body.assignments),
    }
    if body.cohort is not None:
        entry["cohort"] = body.cohort
    victims = [p["workload"] for p in preempted if p["by"] == body.workload]
    if victims:
        entry["after_preempting"] = victims
    return entry


def _reserved_entry(reserved: Reserved) -> dict[str, Any]:
    return {
        "workload": reserved.workload,
        "domain": {"level": reserved.level, "values": list(reserved.domain)},
        "expected_start": rfc3339(reserved.expected_start),
        "nodes": list(reserved.nodes),
        "waits_for": [
            {"workload": w.workload, "expected_end": rfc3339(w.expected_end), "overdue": w.overdue}
            for w in reserved.waits_for
        ],
        "message": reserved.message,
    }


def _preempt(
    admission: Admission,
    cluster: _Cluster,
    scenario: AdmitScenario,
    request: PreemptRequested,
    now: float,
) -> list[dict[str, Any]] | str:
    """Answer ``request`` as the preemption service would: the victims evicted (they leave)
    and reported, or why none are."""
    key = WorkloadKey(request.workload)
    workload = admission.workload(key)
    if workload is None:
        return "the workload is gone"
    view = admission.capacity.view(request.topology) if request.topology else None
    running = cluster.gangs(now=now)
    if request.reclaim:
        choice = select_reclaim_victims(
            workload,
            queue_name=request.queue,
            queues=scenario.queues,
            cohorts={cohort.name: cohort for cohort in scenario.cohorts},
            running=running,
            admissions=admission.admitted(),
            usage={name: admission.quota.usage(name) for name in scenario.queues},
            view=view,
        )
    elif view is None:
        return "no topology to place it on"
    else:
        choice = select_victims(
            workload,
            view=view,
            running=running,
            queues=scenario.queues,
            usage=admission.quota.usage(request.queue),
            queue_name=request.queue,
        )
    if choice.outcome != "preempts":
        return f"no preemption ({choice.outcome}): {choice.reason or 'nothing to evict'}"
    event = preempted_decision(workload, choice, request_sequence=request.sequence)
    admission.preempted(event, now=now)
    gone: list[dict[str, Any]] = []
    queues: Mapping[WorkloadKey, str | None] = {gang.key: gang.queue for gang in running}
    for victim in choice.victims:
        cluster.placed.pop(victim, None)
        admission.remove_workload(victim)
        gone.append(
            {
                "workload": victim,
                "queue": queues.get(victim),
                "by": key,
                "reason": choice.reclaimed.get(victim, "Tidal"),
                "message": event.message,
            }
        )
    return gone
