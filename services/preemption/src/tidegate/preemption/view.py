"""The preemption service's picture of the cluster, and the victim search run on it.

Why a module of its own: the service is wiring, but turning bus state into the inputs of
:func:`tidegate.policy.victims.select_victims` has rules of its own, and they are pure, so they
are tested without NATS or Kubernetes:

- **Running gangs** are the workloads with an admission in force (the
  :class:`~tidegate.model.replica.Replica`, the rule every service reads; at takeover also fed
  the admission ledger) with pods bound to a node and not terminating. Their running time (for
  the GPU-time lost) counts from the admission decision, else from their oldest bound pod.
- **Capacity** is the topology-cache's view per Topology (:class:`ClusterCapacity`), with the
  admissions the cache has not applied yet as overlay (their per-node use is known when the
  assignment names single nodes, as it does at the hostname level).
- **Preemptions in flight** (records in the ledger) change that view: their victims' pods are
  counted as gone (they are being evicted), and the room nominated for other preemptors as
  taken. A victim of a record in flight is never a candidate again: no gang is evicted twice.
- **Queue usage** for the preemptor's quota check is the queue's tally in the replica: what
  admission charged for the admissions in force, and pods that bypassed the gate.

Which queue a workload is in and which Topology it is placed on are admission's answers, not
this view's: a victim's queue is the one its ``admitted`` decision was charged to, the
preemptor's queue and Topology the ones its ``preempt-requested`` names (so admission's
default queue applies here too). Only for a request from an older admission without a
Topology is it chosen here, by the same function admission uses
(:mod:`tidegate.policy.common`).

Nothing here talks to NATS or Kubernetes, and nothing here evicts: see :mod:`.evict`.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidegate.model import (
    Admitted,
    CapacityNode,
    DisruptionBudgetState,
    NodeName,
    NodeState,
    PodState,
    Preempted,
    QueueConfig,
    Released,
    Resources,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model import resources as res
from tidegate.model.events import OnPreemption
from tidegate.model.ledger import PodRef, PreemptionRecord, VictimRecord
from tidegate.model.replica import Replica
from tidegate.placement import CapacityView
from tidegate.policy.capacity import ClusterCapacity
from tidegate.policy.common import (
    TopologyProblem,
    choose_topology,
    evictable,
    holds_capacity,
    runs,
)
from tidegate.policy.quota import QueueUsage
from tidegate.policy.victims import (
    RunningGang,
    VictimChoice,
    VictimSettings,
    budget_blocks,
    running_gang,
    select_victims,
)

PodKey = tuple[str, str]
"""A pod's (namespace, name)."""


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
        self._budgets: dict[tuple[str, str], DisruptionBudgetState] = {}
        """PodDisruptionBudgets by (namespace, name)."""
        self._nodes_at: dict[tuple[str, ...], set[NodeName]] = {}
        self._domain_of: dict[tuple[str, NodeName], tuple[str, ...]] = {}

    # ------------------------------------------------------------------ state inputs

    def set_workload(self, workload: WorkloadState) -> None:
        """A workload appeared or changed."""
        self.replica.apply(workload)

    def remove_workload(self, key: WorkloadKey) -> None:
        """A workload was deleted."""
        namespace, _, name = key.partition("/")
        self.replica.apply(Tombstone(object_kind="workload", namespace=namespace, name=name))
        self.replica.forget(key)

    def set_budget(self, budget: DisruptionBudgetState) -> None:
        """A PodDisruptionBudget appeared or changed (the victim search honours it)."""
        self._budgets[(budget.namespace, budget.name)] = budget

    def remove_budget(self, namespace: str, name: str) -> None:
        """A PodDisruptionBudget was deleted."""
        self._budgets.pop((namespace, name), None)

    def set_pod(self, pod: PodState) -> None:
        """A pod appeared or changed."""
        self.replica.apply(pod)

    def remove_pod(self, namespace: str, name: str) -> None:
        """A pod was deleted."""
        self.replica.apply(Tombstone(object_kind="pod", namespace=namespace, name=name))

    def set_queue(self, queue: QueueConfig) -> None:
        """A Queue appeared or changed."""
        self._queues[queue.name] = queue

    def remove_queue(self, name: str) -> None:
        """A Queue was deleted."""
        self._queues.pop(name, None)

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

    def released(self, decision: Released) -> None:
        """A release (it ends the admission it names, by the replica's rule)."""
        self.replica.apply(decision)

    def preempted(self, decision: Preempted) -> None:
        """A preemption: it ends the admissions its victims lose."""
        self.replica.apply(decision)

    # ------------------------------------------------------------------ queries

    def workload(self, key: WorkloadKey) -> WorkloadState | None:
        """The workload known under ``key``."""
        return self.replica.workload(key)

    def is_admitted(self, key: WorkloadKey, uid: str) -> bool:
        """Whether the workload ``key`` with ``uid`` holds an admission in force."""
        return self.admission(key, uid) is not None

    def admission(self, key: WorkloadKey, uid: str) -> Admitted | None:
        """The admission in force of the workload ``key`` with ``uid``, if any."""
        known = self.replica.in_force(key)
        return known if known is not None and known.uid == uid else None

    def pods(self, key: WorkloadKey) -> list[PodState]:
        """The workload's known pods, by name."""
        return self.replica.members(key)

    def evictable_pods(
        self, key: WorkloadKey, *, created_before: float | None = None
    ) -> list[PodRef]:
        """Pods of ``key`` an eviction must remove
        (:func:`~tidegate.policy.common.evictable`). With ``created_before``, pods created
        later (the controller's replacements) are left."""
        out = []
        for pod in self.pods(key):
            if not evictable(pod):
                continue
            if created_before is not None and pod.created_at > created_before:
                continue
            out.append(
                PodRef(namespace=pod.namespace, name=pod.name, uid=pod.uid, node=pod.node_name)
            )
        return out

    def budget_blocked(self, key: WorkloadKey) -> str | None:
        """Why a PodDisruptionBudget does not allow evicting ``key`` whole now, or None
        (:func:`~tidegate.policy.victims.budget_blocks`)."""
        namespace = key.partition("/")[0]
        return budget_blocks(key, self._budgets.values(), namespace=namespace)

    def still_live(self, pods: Iterable[PodRef]) -> list[PodRef]:
        """Those of ``pods`` the view shows with the same uid and not finished or being
        deleted (:func:`~tidegate.policy.common.evictable`)."""
        out = []
        for ref in pods:
            pod = self.replica.pods.get((ref.namespace, ref.name))
            if pod is not None and pod.uid == ref.uid and evictable(pod):
                out.append(ref)
        return out

    def running(self, *, now: float, exclude: Iterable[str] = ()) -> list[RunningGang]:
        """The admitted workloads that hold capacity, as victim candidates (``exclude``: keys
        that may not be candidates, e.g. victims of preemptions in flight)."""
        excluded = set(exclude)
        out = []
        for key in self.replica.recorded():
            verdict = self.replica.verdict(key)
            known, workload = verdict.in_force, verdict.workload
            if key in excluded or known is None or workload is None:
                continue
            pods = self.pods(key)
            bound = [p for p in pods if runs(p)]
            if not bound:
                continue
            started = known.time or min(p.created_at for p in bound)
            gang = running_gang(
                workload,
                bound,
                running_seconds=max(int(now - started), 0),
                admission=known.body.sequence,
                origin=known.body.chain_start(),
                queue=known.body.queue,
                budgets=self._budgets.values(),
            )
            out.append(gang)
        return out

    def queue_usage(self, queue: str) -> QueueUsage:
        """What ``queue`` holds: its tally in the replica of the decisions in force."""
        resources, cards = self.replica.usage(queue)
        return QueueUsage(resources=resources, cards=cards)

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
        view = self.adjusted(base, in_flight, preemptor=own)
        busy = {victim.key for record in in_flight for victim in record.victims}
        running = self.running(now=now, exclude=busy)
        usage = self.queue_usage(queue) if queue else None
        return select_victims(
            preemptor,
            view=view,
            running=running,
            queues=dict(self._queues),
            usage=usage,
            settings=self.victim_settings,
            queue_name=queue,
        )

    def adjusted(
        self, base: CapacityView, in_flight: Sequence[PreemptionRecord], *, preemptor: str
    ) -> CapacityView:
        """A copy of ``base`` with the pods of victims in flight gone and the room nominated
        for preemptors other than ``preemptor`` (still waiting for admission) taken."""
        change: dict[str, Resources] = {}
        for record in in_flight:
            for victim in record.victims:
                for pod in self._live_pods(victim):
                    # Terminating pods count too: their room is not free until they are gone.
                    if pod.node_name and holds_capacity(pod):
                        freed = {**pod.requests, "pods": 1}
                        change[pod.node_name] = res.subtract(change.get(pod.node_name, {}), freed)
            waiting = not self.is_admitted(WorkloadKey(record.preemptor), record.preemptor_uid)
            if record.preemptor != preemptor and waiting:
                for node, amount in record.decision.nominated.items():
                    change[node] = res.add(change.get(node, {}), amount)
        view = base.copy()
        for node, delta in change.items():
            if node not in view:
                continue
            used = res.add(view.used(node), delta)
            view.set_used(node, {name: max(amount, 0) for name, amount in used.items()})
        return view

    def victim_record(self, key: WorkloadKey, *, mode: OnPreemption) -> VictimRecord | None:
        """What to record for victim ``key`` (its owner and the pods to evict), or None when
        the workload is no longer known."""
        workload = self.replica.workload(key)
        if workload is None:
            return None
        return VictimRecord(
            key=key,
            uid=workload.uid,
            mode=mode,
            owner_kind=workload.owner_kind,
            owner_api_version=workload.owner_api_version,
            pods=self.evictable_pods(key),
        )

    # ------------------------------------------------------------------ internals

    def _live_pods(self, victim: VictimRecord) -> list[PodState]:
        """The recorded pods of ``victim`` that still exist (same UID)."""
        out = []
        for ref in victim.pods:
            pod = self.replica.pods.get((ref.namespace, ref.name))
            if pod is not None and pod.uid == ref.uid:
                out.append(pod)
        return out

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
