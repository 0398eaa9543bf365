"""The preemption service's picture of the cluster: the replica, plus what the search needs.

Workloads, pods and the decisions in force are the replica's
(:class:`~tidegate.model.replica.Replica`, fed by the handlers; at takeover also fed the
admission ledger); what the service reads off it is :mod:`tidegate.policy.candidates` (running
gangs, pods to evict, the view changed by preemptions in flight). This view adds what the
replica does not hold: queues, PodDisruptionBudgets, and **capacity**, the topology-cache's
view per Topology (:class:`ClusterCapacity`) with the admissions the cache has not applied yet
as overlay (their per-node use is known when the assignment names single nodes, as it does at
the hostname level).

Which queue a workload is in and which Topology it is placed on are admission's answers, not
this view's: a victim's queue is the one its ``admitted`` decision was charged to, the
preemptor's queue and Topology the ones its ``preempt-requested`` names. Only for a request
from an older admission without a Topology is it chosen here, by the same function admission
uses (:mod:`tidegate.policy.common`). Queue usage is the queue's tally in the replica.

Nothing here talks to NATS or Kubernetes, and nothing here evicts: see :mod:`.evict`.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidegate.model import (
    Admitted,
    CapacityNode,
    CohortConfig,
    DisruptionBudgetState,
    NodeName,
    NodeState,
    QueueConfig,
    Resources,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model import resources as res
from tidegate.model.ledger import PreemptionRecord
from tidegate.model.replica import Replica
from tidegate.policy.candidates import in_flight_view, in_force_of, running_gangs
from tidegate.policy.capacity import ClusterCapacity
from tidegate.policy.common import TopologyProblem, choose_topology
from tidegate.policy.quota import QueueUsage
from tidegate.policy.reclaim import select_reclaim_victims
from tidegate.policy.victims import (
    RunningGang,
    VictimChoice,
    VictimSettings,
    budget_blocks,
    select_victims,
)


@dataclass(frozen=True, slots=True)
class Unanswerable:
    """The view cannot run a search for this workload (no queue, no topology, …)."""

    reason: str


class PreemptionView:
    """What the preemption service knows, fed by bus messages in stream order."""

    def __init__(
        self,
        *,
        default_topology: str = "default",
        overlay_grace_seconds: float = 30.0,
        victim_settings: VictimSettings | None = None,
    ) -> None:
        """Start empty."""
        self.capacity = ClusterCapacity()
        self.default_topology = default_topology
        self.overlay_grace_seconds = overlay_grace_seconds
        self.victim_settings = victim_settings or VictimSettings()
        self.replica = Replica()
        """Workloads, pods and the decisions in force."""
        self._queues: dict[str, QueueConfig] = {}
        self._cohorts: dict[str, CohortConfig] = {}
        self._budgets: dict[tuple[str, str], DisruptionBudgetState] = {}
        """PodDisruptionBudgets by (namespace, name)."""
        self._nodes_at: dict[tuple[str, ...], set[NodeName]] = {}
        self._domain_of: dict[tuple[str, NodeName], tuple[str, ...]] = {}

    # ------------------------------------------------------------------ state inputs

    def set_budget(self, budget: DisruptionBudgetState) -> None:
        """A PodDisruptionBudget appeared or changed (the victim search honours it)."""
        self._budgets[(budget.namespace, budget.name)] = budget

    def remove_budget(self, namespace: str, name: str) -> None:
        """A PodDisruptionBudget was deleted."""
        self._budgets.pop((namespace, name), None)

    def set_queue(self, queue: QueueConfig) -> None:
        """A Queue appeared or changed."""
        self._queues[queue.name] = queue

    def remove_queue(self, name: str) -> None:
        """A Queue was deleted."""
        self._queues.pop(name, None)

    def set_cohort(self, cohort: CohortConfig) -> None:
        """A Cohort appeared or changed."""
        self._cohorts[cohort.name] = cohort

    def remove_cohort(self, name: str) -> None:
        """A Cohort was deleted."""
        self._cohorts.pop(name, None)

    def set_topology(self, topology: TopologyConfig) -> None:
        """A Topology appeared or changed."""
        self.capacity.set_topology(topology)

    def remove_topology(self, name: str) -> None:
        """A Topology was deleted."""
        self.capacity.remove_topology(name)

    def set_node(self, node: NodeState) -> None:
        """A node's labels or taints (from the watcher)."""
        self.capacity.set_node(node)

    def remove_node(self, name: str) -> None:
        """A node was deleted."""
        self.capacity.remove_node(name)

    def update_capacity(self, report: CapacityNode) -> None:
        """A node's free capacity in one Topology (from the topology-cache)."""
        node = NodeName(report.node)
        old = self._domain_of.get((report.topology, node))
        new = tuple(report.domain)
        if old is not None and old != new:
            self._nodes_at.get(old, set()).discard(node)
        self._domain_of[(report.topology, node)] = new
        self._nodes_at.setdefault(new, set()).add(node)
        self.capacity.update(report)

    def remove_capacity(self, topology: str, node: str) -> None:
        """A node left a Topology's capacity view."""
        old = self._domain_of.pop((topology, NodeName(node)), None)
        if old is not None:
            self._nodes_at.get(old, set()).discard(NodeName(node))
        self.capacity.remove(topology, node)

    # ------------------------------------------------------------------ decision inputs

    def admitted(self, decision: Admitted, *, at: float | None) -> None:
        """An admission decision (followed from the decision stream, or read from admission's
        ledger at takeover, ``at`` unknown); while it is in force and newer than the capacity
        view, its use is counted as overlay."""
        key = WorkloadKey(decision.workload)
        self.replica.apply(decision, time=at or 0.0)
        if self.replica.in_force(key) != decision:
            return  # older than one known, or ended already
        if decision.sequence > self.capacity.watermark():
            usage = self._usage_of(decision)
            if usage:
                self.capacity.take(decision.sequence, usage, at=at or 0.0)

    # ------------------------------------------------------------------ queries

    def running(self, *, now: float, exclude: Iterable[str] = ()) -> list[RunningGang]:
        """The victim candidates (:func:`~tidegate.policy.candidates.running_gangs`) under
        the budgets known."""
        return running_gangs(self.replica, now=now, budgets=self._budgets.values(), exclude=exclude)

    def is_admitted(self, key: WorkloadKey, uid: str) -> bool:
        """Whether the workload ``key`` with ``uid`` holds an admission in force."""
        return self.admission(key, uid) is not None

    def admission(self, key: WorkloadKey, uid: str) -> Admitted | None:
        """The admission in force of the workload ``key`` with ``uid``, if any."""
        return in_force_of(self.replica, key, uid)

    def budget_blocked(self, key: WorkloadKey) -> str | None:
        """Why a PodDisruptionBudget does not allow evicting ``key`` whole now, or None
        (:func:`~tidegate.policy.victims.budget_blocks`)."""
        namespace = key.partition("/")[0]
        return budget_blocks(key, self._budgets.values(), namespace=namespace)

    def topology_for(
        self, workload: WorkloadState, *, queue: str | None = None
    ) -> str | Unanswerable:
        """The Topology ``workload`` is placed on, by admission's rule
        (:func:`~tidegate.policy.common.choose_topology`), ``queue`` being the queue admission
        put it in (default: the one it names)."""
        name = queue or workload.queue
        config = self._queues.get(name) if name else None
        chosen = choose_topology(
            workload,
            config,
            known=self.capacity.topologies(),
            default=self.default_topology,
            exists=lambda topology: self.capacity.levels(topology) is not None,
        )
        if isinstance(chosen, TopologyProblem):
            return Unanswerable(chosen.message)
        return chosen

    def choose(
        self,
        preemptor: WorkloadState,
        *,
        in_flight: Sequence[PreemptionRecord],
        now: float,
        queue: str | None = None,
        topology: str | None = None,
    ) -> VictimChoice | Unanswerable:
        """Run the victim search for ``preemptor`` on the current view (see the module
        docstring for how preemptions ``in_flight`` change it). ``queue`` and ``topology`` are
        what admission decided for it (its ``preempt-requested``); when not given they are
        chosen by admission's rules from the workload alone."""
        queue = queue or preemptor.queue
        if topology is None or self.capacity.levels(topology) is None:
            chosen = self.topology_for(preemptor, queue=queue)
            if isinstance(chosen, Unanswerable):
                return chosen
            topology = chosen
        self.capacity.expire_overlay(before=now - self.overlay_grace_seconds)
        base = self.capacity.view(topology)
        assert base is not None  # topology_for checked that it is known
        own = workload_key(preemptor.namespace, preemptor.name)
        view = in_flight_view(base, in_flight, self.replica, preemptor=own)
        busy = {victim.key for record in in_flight for victim in record.victims}
        running = self.running(now=now, exclude=busy)
        usage = None
        if queue:
            resources, cards = self.replica.usage(queue)
            usage = QueueUsage(resources=resources, cards=cards)
        return select_victims(
            preemptor,
            view=view,
            running=running,
            queues=dict(self._queues),
            usage=usage,
            settings=self.victim_settings,
            queue_name=queue,
        )

    def reclaim(
        self,
        preemptor: WorkloadState,
        *,
        in_flight: Sequence[PreemptionRecord],
        now: float,
        queue: str,
        topology: str | None = None,
    ) -> VictimChoice | Unanswerable:
        """Which gangs that borrow from ``queue``'s cohort to preempt so ``preemptor`` fits
        its queue's quota (:func:`~tidegate.policy.reclaim.select_reclaim_victims`); victims
        of preemptions ``in_flight`` are not candidates again."""
        if topology is None or self.capacity.levels(topology) is None:
            chosen = self.topology_for(preemptor, queue=queue)
            view = None if isinstance(chosen, Unanswerable) else self.capacity.view(chosen)
        else:
            self.capacity.expire_overlay(before=now - self.overlay_grace_seconds)
            own = workload_key(preemptor.namespace, preemptor.name)
            base = self.capacity.view(topology)
            assert base is not None  # its levels are known
            view = in_flight_view(base, in_flight, self.replica, preemptor=own)
        busy = {victim.key for record in in_flight for victim in record.victims}
        usage = {}
        for name in self._queues:
            resources, cards = self.replica.usage(name)
            usage[name] = QueueUsage(resources=resources, cards=cards)
        return select_reclaim_victims(
            preemptor,
            queue_name=queue,
            queues=dict(self._queues),
            cohorts=dict(self._cohorts),
            running=self.running(now=now, exclude=busy),
            admissions=self.replica.admissions(),
            usage=usage,
            view=view,
        )

    # ------------------------------------------------------------------ internals

    def _usage_of(self, decision: Admitted) -> dict[NodeName, Resources]:
        """Per-node use of an admission whose domains are single nodes (else unknown: {})."""
        usage: dict[NodeName, Resources] = {}
        for podset, assignment in decision.assignments.items():
            per_pod = decision.requests.get(podset)
            if per_pod is None:
                continue
            per_pod = {"pods": 1, **per_pod}
            for domain in assignment.domains:
                nodes = self._nodes_at.get(tuple(domain.values), set())
                if len(nodes) != 1:
                    continue
                (node,) = nodes
                usage[node] = res.add(usage.get(node, {}), res.scale(per_pod, domain.count))
        return usage
