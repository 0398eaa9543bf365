"""Free capacity per node and per topology domain, kept from cluster state and decisions.

Why: admission places gangs on the free capacity the topology-cache publishes. This module is
the cache's arithmetic, pure and typed, so it is tested without NATS or Kubernetes::

    free(node) = allocatable − usage − reserved

- *allocatable* is the node's ``status.allocatable`` (``pods`` defaults to the kubelet's 110);
- *usage* is what the pods that hold capacity on the node request
  (:func:`tidegate.model.pods.holds_capacity`: bound and not Succeeded or Failed), whether
  tidegate manages them or not (DaemonSets count); each takes one ``pods``;
- *reserved* is room admission promised to admitted gangs whose pods are not bound yet.

**Reservations.** An admitted decision says, per podset, how many pods go to each domain (the
domain's values at the assignment's levels). For each (workload, podset, domain) the cache
reserves ``max(0, count − bound)`` pods × the per-pod requests, where ``bound`` counts the
workload's non-terminal pods of that podset bound to nodes of the domain. A pod that binds
moves its share from *reserved* to *usage* (never both, never neither); a pod that finishes or
is deleted gives its place back to the reservation, for the replacement its controller makes,
while its admission is in force. Which admission is in force is
:class:`tidegate.model.replica.Replica`'s answer, the one every service reads
(docs/architecture.md, "The decisions in force"): released, preempted, finished, deleted or
re-created under the name, it reserves nothing.

**Domains above the hostname.** A domain with one node reserves on that node. A domain with
several nodes (an assignment at rack level, say) is *spread*: reservations are taken in
decision-sequence order (then podset, then domain); each fills the domain's schedulable nodes
in natural name order (``n2`` before ``n10``), each node up to as many pods as fit in what is
left of it, and pods that fit nowhere are dealt round-robin over the same nodes (so an
overcommitted domain shows negative free capacity instead of hiding it). When anything in a
spread domain changes, the spreads that share nodes with it, directly or through one another,
are recomputed together in that order (the others cannot have changed); while no reservation
spans several nodes, which is the usual case, nothing is recomputed beyond the node that changed.

**Order independence.** The view is a function of the current inputs only: the same nodes,
pods, workloads, topologies and live admissions give the same view whatever order they came in.
That is what lets a restarted cache rebuild, from last-value streams, exactly the view the
running one had.

**Topologies** only name nodes' domains: a node's free capacity is the same in every topology.
Per topology there is one record per node (its path and whether it is schedulable) and one per
domain (free capacity summed over its schedulable nodes), kept by deltas: a change to one node
costs O(levels × resources). A node that is NotReady, cordoned, carries a node-condition taint
(:data:`UNSCHEDULABLE_TAINTS`) or lacks a level label is not schedulable; its free capacity
still shows, but it adds nothing to its domains.

This module neither reads nor publishes; :mod:`tidegate.topology_cache` does that.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    Message,
    NodeState,
    PodState,
    Preempted,
    Released,
    Resources,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.pods import holds_capacity
from tidegate.model.replica import Replica
from tidegate.placement.capacity import DEFAULT_MAX_PODS, HARD_TAINT_EFFECTS, PODS
from tidegate.placement.ordering import natural_key

UNSCHEDULABLE_TAINTS: Final = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/out-of-service",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
    }
)
"""Taints Kubernetes' node lifecycle sets for a node condition; with a NoSchedule or NoExecute
effect they make the node unschedulable here at once (other taints are for placement to check
against tolerations, which it reads from the node's state)."""


@dataclass(frozen=True, slots=True, order=True)
class NodeKey:
    """Names the capacity record of one node in one topology."""

    topology: str
    node: str


@dataclass(frozen=True, slots=True, order=True)
class DomainKey:
    """Names the capacity record of one domain: level index and path (values widest first)."""

    topology: str
    level: int
    path: tuple[str, ...]


CapacityKey = NodeKey | DomainKey
"""The key of one capacity record."""

CapacityRecord = CapacityNode | CapacityDomain
"""One capacity record, as published."""


@dataclass(frozen=True, slots=True)
class Changes:
    """What may have changed since the last :meth:`CapacityAccounting.take_changes`."""

    keys: frozenset[CapacityKey]
    """Records to look at again: each is now :meth:`CapacityAccounting.record` (None: gone)."""
    touched: frozenset[NodeKey]
    """Node records an applied decision concerned: report them even if their content did not
    change, so admission learns the decision is reflected there (subset of ``keys``)."""


def key_of(record: CapacityRecord) -> CapacityKey:
    """The key of a capacity record."""
    if isinstance(record, CapacityNode):
        return NodeKey(record.topology, record.node)
    return DomainKey(record.topology, len(record.domain) - 1, tuple(record.domain))


def same_content(a: CapacityRecord | None, b: CapacityRecord | None) -> bool:
    """Whether two records say the same thing, whatever decision sequence they carry.

    A domain record with no node is the same as no record.
    """
    if a is None or b is None:
        return _absent(a) and _absent(b)
    return msgspec.structs.replace(a, applied_sequence=0) == msgspec.structs.replace(
        b, applied_sequence=0
    )


def _absent(record: CapacityRecord | None) -> bool:
    return record is None or (isinstance(record, CapacityDomain) and record.nodes == 0)


def per_pod(requests: Mapping[str, int]) -> Resources:
    """What one pod takes: its positive requests and one ``pods`` slot (unless it says more)."""
    amounts = {resource: amount for resource, amount in requests.items() if amount > 0}
    amounts.setdefault(PODS, 1)
    return amounts


# --------------------------------------------------------------------------- internals

_Owner = tuple[str, str]
"""(workload key, podset name); the podset is "" for a pod that names none."""

_Domain = tuple[tuple[str, ...], tuple[str, ...]]
"""(levels, values): the nodes whose labels at ``levels`` are ``values``."""

_NO_NODES: Final[frozenset[str]] = frozenset()

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class _Node:
    state: NodeState
    allocatable: Resources
    schedulable: bool
    """Ready, not cordoned, no node-condition taint (level labels are checked per topology)."""


@dataclass(frozen=True, slots=True)
class _Pod:
    node: str | None
    """Where it holds capacity: bound and not terminal; None otherwise."""
    amount: Resources
    owner: _Owner | None


@dataclass(eq=False, slots=True)
class _Entry:
    """One (workload, podset, domain) reservation."""

    workload: str
    podset: str
    aliases: tuple[str, ...]
    """Podset names whose pods count as this podset's ("" too when the decision has one)."""
    sequence: int
    domain: _Domain
    count: int
    decided: Resources | None
    """Per-pod amount from the decision; None: take it from the workload's state."""
    amount: Resources = field(default_factory=dict)
    remaining: int = 0
    spread: bool = False
    spread_over: frozenset[str] = frozenset()
    """The nodes it was last spread over (while ``spread``)."""
    share: dict[str, int] = field(default_factory=dict)
    """Node → pods reserved there."""
    applied: dict[str, Resources] = field(default_factory=dict)
    """Node → what this entry currently adds to the node's reserved capacity."""

    def order(self) -> tuple[int, str, tuple[str, ...]]:
        return self.sequence, self.podset, self.domain[1]


@dataclass(slots=True)
class _Admission:
    uid: str
    sequence: int
    entries: list[_Entry]


class _LevelIndex:
    """Which nodes sit in which domain, for one list of levels."""

    def __init__(self, levels: tuple[str, ...]) -> None:
        self.levels = levels
        self.values_of: dict[str, tuple[str, ...]] = {}
        self.members: dict[tuple[str, ...], set[str]] = {}

    def values(self, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        found = []
        for level in self.levels:
            value = labels.get(level)
            if value is None:
                return None
            found.append(value)
        return tuple(found)

    def move(
        self, node: str, labels: Mapping[str, str] | None
    ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
        """Put ``node`` where ``labels`` say (None: remove it); return (old, new) values."""
        old = self.values_of.pop(node, None)
        if old is not None:
            members = self.members[old]
            members.discard(node)
            if not members:
                del self.members[old]
        new = None if labels is None else self.values(labels)
        if new is not None:
            self.values_of[node] = new
            self.members.setdefault(new, set()).add(node)
        return old, new


@dataclass(frozen=True, slots=True)
class _Contribution:
    path: tuple[str, ...]
    schedulable: bool
    free: Resources


@dataclass(slots=True)
class _DomainSum:
    members: int = 0
    nodes: int = 0
    free: dict[str, int] = field(default_factory=dict)


class _TopologyView:
    """One topology's per-node contributions and per-domain sums."""

    def __init__(self, levels: tuple[str, ...]) -> None:
        self.levels = levels
        self.contributions: dict[str, _Contribution] = {}
        self.domains: dict[tuple[int, tuple[str, ...]], _DomainSum] = {}

    def path(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's values at the levels, widest first, up to the first missing one."""
        values: list[str] = []
        for level in self.levels:
            value = labels.get(level)
            if value is None:
                break
            values.append(value)
        return tuple(values)

    def update(self, node: str, new: _Contribution | None) -> list[tuple[int, tuple[str, ...]]]:
        """Replace the node's contribution; return the domains whose sums changed."""
        old = self.contributions.get(node)
        if old == new:
            return []
        changed: list[tuple[int, tuple[str, ...]]] = []
        if old is not None:
            del self.contributions[node]
            changed.extend(self._add(old, -1))
        if new is not None:
            self.contributions[node] = new
            changed.extend(self._add(new, +1))
        return changed

    def _add(self, contribution: _Contribution, sign: int) -> list[tuple[int, tuple[str, ...]]]:
        path = contribution.path
        keys = [(m, path[: m + 1]) for m in range(len(path))]
        for key in keys:
            domain = self.domains.get(key)
            if domain is None:
                domain = self.domains[key] = _DomainSum()
            domain.members += sign
            if contribution.schedulable:
                domain.nodes += sign
                _add_into(domain.free, contribution.free, sign)
            if domain.members == 0:
                del self.domains[key]
        return keys


def _add_into(target: dict[str, int], amount: Mapping[str, int], factor: int) -> None:
    for resource, value in amount.items():
        total = target.get(resource, 0) + factor * value
        if total:
            target[resource] = total
        else:
            target.pop(resource, None)


def _fits(room: Mapping[str, int], amount: Mapping[str, int]) -> int:
    """How many times ``amount`` fits in ``room`` (``amount`` always takes a ``pods`` slot)."""
    return max(0, min(room.get(resource, 0) // value for resource, value in amount.items()))


def _sorted(amounts: Mapping[str, int]) -> Resources:
    return {resource: amounts[resource] for resource in sorted(amounts)}


# --------------------------------------------------------------------------- the accounting


class CapacityAccounting:
    """Free capacity of every node, per-topology records, and reservations (module docstring).

    Feed it state (``set_*`` / ``remove_*``) and decisions (:meth:`admit`, :meth:`release`,
    :meth:`preempt`) in any order; read :meth:`take_changes` and :meth:`record` to publish.
    Every input method is idempotent.
    """

    def __init__(self) -> None:
        """Start with no node, pod, topology or admission."""
        self.applied_sequence = 0
        """The highest admitted or released decision sequence applied so far."""
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._usage: dict[str, dict[str, int]] = {}
        self._reserved: dict[str, dict[str, int]] = {}
        self._bound: dict[_Owner, dict[str, int]] = {}
        self._workload_requests: dict[str, dict[str, Resources]] = {}
        self._admissions: dict[str, _Admission] = {}
        """The admission reserved per workload: the one in force in :attr:`decisions`."""
        self.decisions = Replica()
        """The decisions in force (fed workload states, tombstones and decisions)."""
        self._entries_of: dict[_Owner, dict[tuple[str, ...], dict[tuple[str, ...], list[_Entry]]]]
        self._entries_of = {}
        """A podset's entries by their domain's levels, then values: a pod's move looks up the
        ones holding its node (a gang on a thousand hosts has a thousand)."""
        self._entries_at: dict[_Domain, list[_Entry]] = {}
        self._indexes: dict[tuple[str, ...], _LevelIndex] = {}
        self._views: dict[str, _TopologyView] = {}
        self._spread_on: dict[str, set[_Entry]] = {}
        """Node → the spread reservations whose domain holds it."""
        # Pending work, settled lazily (see _settle).
        self._dirty_entries: set[_Entry] = set()
        self._spread_seeds: set[str] = set()
        self._dirty_nodes: set[str] = set()
        self._rebuild: set[str] = set()
        self._changed: set[CapacityKey] = set()
        self._touched: set[str] = set()

    # ------------------------------------------------------------------ inputs

    def apply(self, body: Message, *, time: float = 0.0) -> list[str]:
        """Apply one bus message body (``time``: its envelope's): node, pod, workload and
        topology states, their tombstones, and the admitted / released / preempted decisions;
        other kinds are ignored. Returns problems with the input (each naming the field) for
        the caller to log."""
        match body:
            case NodeState():
                self.set_node(body)
            case PodState():
                self.set_pod(body)
            case WorkloadState():
                return self.set_workload(body)
            case TopologyConfig():
                return self.set_topology(body)
            case Tombstone(object_kind="node", name=name):
                self.remove_node(name)
            case Tombstone(object_kind="pod", namespace=str(namespace), name=name):
                self.remove_pod(namespace, name)
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name, uid=uid):
                return self.remove_workload(namespace, name, uid=uid)
            case Tombstone(object_kind="topology", name=name):
                self.remove_topology(name)
            case Tombstone(object_kind="pod" | "workload", namespace=None):
                return [f"{body.object_kind} tombstone {body.name}: namespace: missing"]
            case Admitted():
                return self.admit(body, time=time)
            case Released():
                self.release(body)
            case Preempted():
                self.preempt(body)
            case _:
                pass
        return []

    def set_topology(self, config: TopologyConfig) -> list[str]:
        """Add a Topology or change its levels. Returns problems (a Topology with no level or a
        repeated one is treated as absent, each problem naming the field)."""
        levels = tuple(config.levels)
        problems: list[str] = []
        if not levels:
            problems.append(f"topology {config.name}: levels: a topology needs at least one level")
        elif len(set(levels)) != len(levels):
            problems.append(f"topology {config.name}: levels: {list(levels)} repeats a level")
        elif any(not level for level in levels):
            problems.append(f"topology {config.name}: levels: a level must not be empty")
        view = self._views.get(config.name)
        if view is not None and view.levels == levels and not problems:
            return problems
        self.remove_topology(config.name)
        if not problems:
            self._views[config.name] = _TopologyView(levels)
            self._rebuild.add(config.name)
        return problems

    def remove_topology(self, name: str) -> None:
        """Forget a Topology: its records are gone."""
        view = self._views.pop(name, None)
        self._rebuild.discard(name)
        if view is None:
            return
        self._changed.update(NodeKey(name, node) for node in view.contributions)
        self._changed.update(DomainKey(name, m, path) for m, path in view.domains)

    def set_node(self, node: NodeState) -> None:
        """Add or replace a node (labels, allocatable, readiness, cordon, taints)."""
        before = self._nodes.get(node.name)
        if before is not None and before.state == node:
            return
        allocatable = dict(node.allocatable)
        allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
        tainted = any(
            taint.key in UNSCHEDULABLE_TAINTS and taint.effect in HARD_TAINT_EFFECTS
            for taint in node.taints
        )
        schedulable = node.ready and not node.unschedulable and not tainted
        self._nodes[node.name] = _Node(node, allocatable, schedulable)
        self._reindex(node.name, node.labels)
        self._dirty_nodes.add(node.name)

    def remove_node(self, name: str) -> None:
        """Forget a deleted node (pods still naming it keep their usage until they go)."""
        if self._nodes.pop(name, None) is None:
            return
        self._reindex(name, None)
        self._dirty_nodes.add(name)

    def set_pod(self, pod: PodState) -> None:
        """Add or replace a pod: bound and not terminal, it uses capacity on its node."""
        bound = pod.node_name if holds_capacity(pod) else None
        owner = (pod.workload, pod.podset or "") if pod.workload else None
        self._replace_pod((pod.namespace, pod.name), _Pod(bound, per_pod(pod.requests), owner))

    def remove_pod(self, namespace: str, name: str) -> None:
        """Forget a deleted pod."""
        self._replace_pod((namespace, name), None)

    def set_workload(self, workload: WorkloadState) -> list[str]:
        """Remember a workload's per-pod requests (used when a decision does not carry them);
        a finished or re-created one ends its object's reservations."""
        key = workload_key(workload.namespace, workload.name)
        requests = {podset.name: dict(podset.requests) for podset in workload.podsets}
        if self._workload_requests.get(key) != requests:
            self._workload_requests[key] = requests
            self._refresh_undecided(key)
        self.decisions.apply(workload)
        return self._follow(key)[0]

    def remove_workload(self, namespace: str, name: str, *, uid: str | None = None) -> list[str]:
        """Forget a deleted workload's requests; its admission (of object ``uid``, default: the
        one known) reserves nothing from now on, and its record goes once it holds nothing."""
        key = workload_key(namespace, name)
        if self._workload_requests.pop(key, None) is not None:
            self._refresh_undecided(key)
        self.decisions.apply(
            Tombstone(object_kind="workload", name=name, namespace=namespace, uid=uid)
        )
        problems = self._follow(key)[0]
        self.decisions.forget(key)
        return problems

    # ------------------------------------------------------------------ decision inputs

    def admit(self, admitted: Admitted, *, time: float = 0.0) -> list[str]:
        """Record an admitted decision (``time``: its envelope's) and reserve the admission in
        force, which it is unless it is older than one known or ended already.

        Returns problems with parts of the assignment that were skipped, each naming the field.
        """
        self.applied_sequence = max(self.applied_sequence, admitted.sequence)
        self.decisions.apply(admitted, time=time)
        return self._follow(admitted.workload)[0]

    def _follow(self, key: str) -> tuple[list[str], bool]:
        """Make the reservations of ``key`` those of its admission in force; return problems
        with its assignment and whether a reservation was dropped."""
        in_force = self.decisions.in_force(WorkloadKey(key))
        current = self._admissions.get(key)
        held = (current.uid, current.sequence) if current is not None else None
        if in_force is not None and held == (in_force.uid, in_force.sequence):
            return [], False
        dropped = current is not None
        if current is not None:
            self._drop(key)
        if in_force is None:
            return [], dropped
        return self._reserve(in_force), dropped

    def _reserve(self, admitted: Admitted) -> list[str]:
        key = admitted.workload
        problems: list[str] = []
        single = len(admitted.assignments) == 1
        entries: list[_Entry] = []
        for podset, assignment in sorted(admitted.assignments.items()):
            levels = tuple(assignment.levels)
            counts: dict[tuple[str, ...], int] = {}
            for i, domain in enumerate(assignment.domains):
                where = f"{key}: assignments.{podset}.domains[{i}]"
                values = tuple(domain.values)
                if domain.count < 0:
                    problems.append(f"{where}.count: {domain.count} is negative")
                elif not values or len(values) > len(levels):
                    problems.append(
                        f"{where}.values: {len(values)} values for levels {list(levels)}"
                    )
                else:
                    counts[values] = counts.get(values, 0) + domain.count
            requests = admitted.requests.get(podset)
            for values, count in sorted(counts.items()):
                if count == 0:
                    continue
                entries.append(
                    _Entry(
                        workload=key,
                        podset=podset,
                        aliases=(podset, "") if single else (podset,),
                        sequence=admitted.sequence,
                        domain=(levels[: len(values)], values),
                        count=count,
                        decided=None if requests is None else per_pod(requests),
                    )
                )
        self._admissions[key] = _Admission(admitted.uid, admitted.sequence, entries)
        for entry in entries:
            self._index(entry.domain[0])
            for alias in entry.aliases:
                levels, values = entry.domain
                by_levels = self._entries_of.setdefault((key, alias), {})
                by_levels.setdefault(levels, {}).setdefault(values, []).append(entry)
            self._entries_at.setdefault(entry.domain, []).append(entry)
            self._dirty_entries.add(entry)
            self._touched.update(self._members(entry.domain))
        return problems

    def release(self, released: Released) -> bool:
        """Record a release; return whether it ended the admission reserved (the replica's
        rule: only an admission of that object made before it)."""
        self.applied_sequence = max(self.applied_sequence, released.sequence)
        self.decisions.apply(released)
        return self._follow(released.workload)[1]

    def preempt(self, preempted: Preempted) -> bool:
        """Record a preemption (earlier than the victims' releases); return whether it ended an
        admission reserved (only the one each victim loses, :meth:`Preempted.ends`)."""
        self.decisions.apply(preempted)
        dropped = False
        for victim in preempted.victims:
            dropped |= self._follow(victim)[1]
        return dropped

    # ------------------------------------------------------------------ outputs

    def take_changes(self) -> Changes:
        """Keys of the records that may have changed since the last call, and forget them."""
        self._settle()
        touched = frozenset(NodeKey(t, n) for n in self._touched for t in self._views)
        keys = frozenset(self._changed | touched)
        self._changed.clear()
        self._touched.clear()
        return Changes(keys=keys, touched=touched)

    def record(self, key: CapacityKey) -> CapacityRecord | None:
        """The current record for ``key``; None when there is none (node or domain gone)."""
        self._settle()
        view = self._views.get(key.topology)
        if view is None:
            return None
        if isinstance(key, NodeKey):
            contribution = view.contributions.get(key.node)
            node = self._nodes.get(key.node)
            if contribution is None or node is None:
                return None
            return CapacityNode(
                topology=key.topology,
                node=key.node,
                domain=list(contribution.path),
                allocatable=_sorted(node.allocatable),
                free=dict(contribution.free),
                schedulable=contribution.schedulable,
                applied_sequence=self.applied_sequence,
            )
        domain = view.domains.get((key.level, key.path))
        if domain is None or key.level >= len(view.levels):
            return None
        return CapacityDomain(
            topology=key.topology,
            level=view.levels[key.level],
            domain=list(key.path),
            free=_sorted(domain.free),
            nodes=domain.nodes,
            applied_sequence=self.applied_sequence,
        )

    def keys(self) -> list[CapacityKey]:
        """Keys of every record there is now, sorted."""
        self._settle()
        node_keys: list[CapacityKey] = []
        domain_keys: list[CapacityKey] = []
        for topology, view in sorted(self._views.items()):
            node_keys.extend(NodeKey(topology, node) for node in sorted(view.contributions))
            domain_keys.extend(DomainKey(topology, m, path) for m, path in sorted(view.domains))
        return node_keys + domain_keys

    def records(self) -> Iterator[CapacityRecord]:
        """Every current record (nodes, then domains)."""
        for key in self.keys():
            record = self.record(key)
            if record is not None:
                yield record

    # ------------------------------------------------------------------ queries

    def topologies(self) -> list[str]:
        """Names of the known (valid) Topologies, sorted."""
        return sorted(self._views)

    def node_names(self) -> list[str]:
        """Names of the known nodes, sorted."""
        return sorted(self._nodes)

    def allocatable(self, node: str) -> Resources:
        """A known node's allocatable (``pods`` filled in); KeyError for an unknown node."""
        return _sorted(self._nodes[node].allocatable)

    def used(self, node: str) -> Resources:
        """What bound, non-terminal pods request on ``node`` (``pods`` = their number)."""
        return _sorted(self._usage.get(node, {}))

    def reserved(self, node: str) -> Resources:
        """What admitted, not yet bound pods hold on ``node``."""
        self._settle()
        return _sorted(self._reserved.get(node, {}))

    def free(self, node: str) -> Resources:
        """Allocatable − used − reserved of a known node: every allocatable resource, and any
        other resource that is in use (negative)."""
        self._settle()
        return self._free(node)

    def admitted(self) -> list[str]:
        """Keys of the workloads whose admission holds reservations, sorted."""
        return sorted(self._admissions)

    def reservation(self, workload: str, podset: str | None = None) -> dict[str, int]:
        """Node → pods reserved there for ``workload`` (only its ``podset`` if given)."""
        self._settle()
        admission = self._admissions.get(workload)
        out: dict[str, int] = {}
        for entry in admission.entries if admission else ():
            if podset is not None and entry.podset != podset:
                continue
            for node, pods in entry.share.items():
                out[node] = out.get(node, 0) + pods
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------ internals: inputs

    def _replace_pod(self, key: tuple[str, str], new: _Pod | None) -> None:
        old = self._pods.get(key)
        if old == new:
            return
        if old is not None:
            self._account(old, -1)
        if new is None:
            self._pods.pop(key, None)
        else:
            self._pods[key] = new
            self._account(new, +1)

    def _account(self, pod: _Pod, sign: int) -> None:
        node = pod.node
        if node is None:
            return
        usage = self._usage.setdefault(node, {})
        _add_into(usage, pod.amount, sign)
        if not usage:
            del self._usage[node]
        self._dirty_nodes.add(node)
        if pod.owner is None:
            return
        counts = self._bound.setdefault(pod.owner, {})
        count = counts.get(node, 0) + sign
        if count:
            counts[node] = count
        else:
            counts.pop(node, None)
            if not counts:
                del self._bound[pod.owner]
        for levels, by_values in self._entries_of.get(pod.owner, {}).items():
            values = self._indexes[levels].values_of.get(node)
            if values is not None:
                self._dirty_entries.update(by_values.get(values, ()))

    def _reindex(self, node: str, labels: Mapping[str, str] | None) -> None:
        for levels, index in self._indexes.items():
            old, new = index.move(node, labels)
            for values in {old, new}:
                if values is not None:
                    self._dirty_entries.update(self._entries_at.get((levels, values), ()))

    def _refresh_undecided(self, workload: str) -> None:
        admission = self._admissions.get(workload)
        for entry in admission.entries if admission else ():
            if entry.decided is None:
                self._dirty_entries.add(entry)

    def _drop(self, workload: str) -> None:
        admission = self._admissions.pop(workload)
        for entry in admission.entries:
            self._touched.update(self._members(entry.domain))
            if entry.spread:
                self._spread_seeds.update(entry.spread_over)
                self._unspread(entry)
            self._apply_share(entry, {})
            self._dirty_entries.discard(entry)
            for alias in entry.aliases:
                by_levels = self._entries_of.get((workload, alias), {})
                by_values = by_levels.get(entry.domain[0])
                if by_values is not None:
                    _remove(by_values, entry.domain[1], entry)
                    if not by_values:
                        del by_levels[entry.domain[0]]
                    if not by_levels:
                        del self._entries_of[(workload, alias)]
            _remove(self._entries_at, entry.domain, entry)

    def _index(self, levels: tuple[str, ...]) -> _LevelIndex:
        index = self._indexes.get(levels)
        if index is None:
            index = self._indexes[levels] = _LevelIndex(levels)
            for name, node in self._nodes.items():
                index.move(name, node.state.labels)
        return index

    def _members(self, domain: _Domain) -> set[str] | frozenset[str]:
        levels, values = domain
        return self._indexes[levels].members.get(values, _NO_NODES)

    # ------------------------------------------------------------------ internals: settling

    def _settle(self) -> None:
        """Bring reservations, records and domain sums up to date with the inputs."""
        self._resolve_reservations()
        for topology in self._rebuild:
            self._dirty_nodes.update(self._nodes)
            self._dirty_nodes.update(self._views[topology].contributions)
        self._rebuild.clear()
        if not self._dirty_nodes:
            return
        for topology, view in self._views.items():
            for name in self._dirty_nodes:
                self._changed.add(NodeKey(topology, name))
                for m, path in view.update(name, self._contribution(view, name)):
                    self._changed.add(DomainKey(topology, m, path))
        self._dirty_nodes.clear()

    def _contribution(self, view: _TopologyView, name: str) -> _Contribution | None:
        node = self._nodes.get(name)
        if node is None:
            return None
        path = view.path(node.state.labels)
        schedulable = node.schedulable and len(path) == len(view.levels)
        return _Contribution(path=path, schedulable=schedulable, free=self._free(name))

    def _free(self, name: str) -> Resources:
        allocatable = self._nodes[name].allocatable
        usage = self._usage.get(name, {})
        reserved = self._reserved.get(name, {})
        out: Resources = {}
        for resource in sorted({*allocatable, *usage, *reserved}):
            amount = (
                allocatable.get(resource, 0) - usage.get(resource, 0) - reserved.get(resource, 0)
            )
            if amount or resource in allocatable:
                out[resource] = amount
        return out

    def _resolve_reservations(self) -> None:
        seeds = self._spread_seeds
        self._spread_seeds = set()
        spreading: list[_Entry] = []
        for entry in self._dirty_entries:
            entry.amount = self._amount(entry)
            members = self._members(entry.domain)
            entry.remaining = max(0, entry.count - self._bound_in(entry, members))
            if entry.spread:
                seeds.update(entry.spread_over)
                self._unspread(entry)
            entry.spread = len(members) > 1 and entry.remaining > 0
            if entry.spread:
                spreading.append(entry)
            else:
                only = next(iter(members), None)
                share = {only: entry.remaining} if only is not None and entry.remaining else {}
                self._apply_share(entry, share)
        self._dirty_entries.clear()
        seeds.update(node for node in self._dirty_nodes if node in self._spread_on)
        if seeds or spreading:
            self._spread(seeds, spreading)

    def _amount(self, entry: _Entry) -> Resources:
        if entry.decided is not None:
            return entry.decided
        podsets = self._workload_requests.get(entry.workload, {})
        return per_pod(podsets.get(entry.podset, {}))

    def _bound_in(self, entry: _Entry, members: set[str] | frozenset[str]) -> int:
        total = 0
        for alias in entry.aliases:
            nodes = self._bound.get((entry.workload, alias))
            if not nodes:
                continue
            if len(nodes) <= len(members):
                total += sum(count for node, count in nodes.items() if node in members)
            else:
                total += sum(nodes.get(node, 0) for node in members)
        return total

    def _spread(self, seeds: Iterable[str], spreading: Iterable[_Entry]) -> None:
        """Recompute the spread reservations that share nodes, directly or through each other,
        with ``seeds`` or ``spreading``: the same as recomputing every spread in the canonical
        order, since the others depend on nothing that changed."""
        group: set[_Entry] = set(spreading)
        frontier = [*seeds, *(n for e in group for n in self._members(e.domain))]
        visited: set[str] = set()
        while frontier:
            name = frontier.pop()
            if name in visited:
                continue
            visited.add(name)
            for entry in self._spread_on.get(name, ()):
                if entry not in group:
                    group.add(entry)
                    frontier.extend(self._members(entry.domain))
        entries = sorted(group, key=_Entry.order)
        # Room on a node before any spread reservation: free plus what spreads hold there now
        # (every spread holding any of these nodes is in the group).
        held: dict[str, dict[str, int]] = {}
        for entry in entries:
            for name, amount in entry.applied.items():
                _add_into(held.setdefault(name, {}), amount, +1)
        room: dict[str, dict[str, int]] = {}

        def room_on(name: str) -> dict[str, int]:
            space = room.get(name)
            if space is None:
                space = room[name] = self._free(name)
                _add_into(space, held.get(name, {}), +1)
            return space

        shares: list[dict[str, int]] = []
        for entry in entries:
            members = sorted(self._members(entry.domain), key=natural_key)
            candidates = [n for n in members if self._nodes[n].schedulable] or members
            share: dict[str, int] = {}
            left = entry.remaining
            for name in candidates:
                if not left:
                    break
                take = min(_fits(room_on(name), entry.amount), left)
                if take:
                    share[name] = take
                    _add_into(room_on(name), entry.amount, -take)
                    left -= take
            if left:
                # Overcommitted: deal the rest round-robin, so it shows rather than hides.
                each, extra = divmod(left, len(candidates))
                for i, name in enumerate(candidates):
                    more = each + (1 if i < extra else 0)
                    if more:
                        share[name] = share.get(name, 0) + more
                        _add_into(room_on(name), entry.amount, -more)
            shares.append(share)
        for entry, share in zip(entries, shares, strict=True):
            self._apply_share(entry, share)
            self._unspread(entry)
            entry.spread_over = frozenset(self._members(entry.domain))
            for name in entry.spread_over:
                self._spread_on.setdefault(name, set()).add(entry)

    def _unspread(self, entry: _Entry) -> None:
        for name in entry.spread_over:
            entries = self._spread_on.get(name)
            if entries is not None:
                entries.discard(entry)
                if not entries:
                    del self._spread_on[name]
        entry.spread_over = frozenset()

    def _apply_share(self, entry: _Entry, share: dict[str, int]) -> None:
        applied = {
            node: {r: v * pods for r, v in entry.amount.items()} for node, pods in share.items()
        }
        if applied == entry.applied:
            entry.share = share
            return
        for node in {*entry.applied, *applied}:
            before = entry.applied.get(node, {})
            after = applied.get(node, {})
            if before == after:
                continue
            reserved = self._reserved.setdefault(node, {})
            _add_into(reserved, before, -1)
            _add_into(reserved, after, +1)
            if not reserved:
                del self._reserved[node]
            self._dirty_nodes.add(node)
        entry.share = share
        entry.applied = applied


GPU: Final = "nvidia.com/gpu"
GPU_STATES: Final = ("allocatable", "used", "reserved", "free")


def domain_gpus(accounting: CapacityAccounting) -> dict[tuple[str, str, str, str], int]:
    """GPUs (``nvidia.com/gpu``) per (topology, level, domain, state) for every domain above
    the node level: ``allocatable`` of its nodes, ``used`` by bound pods, ``reserved`` for
    admitted pods not bound yet, and ``free`` on its schedulable nodes (what the capacity
    stream's domain record says). ``domain`` is the domain's values joined with ``/``."""
    out: dict[tuple[str, str, str, str], int] = {}
    records = list(accounting.records())
    level_at = {
        (r.topology, len(r.domain)): r.level for r in records if isinstance(r, CapacityDomain)
    }
    for record in records:
        if not isinstance(record, CapacityNode):
            continue
        amounts = {
            "allocatable": record.allocatable.get(GPU, 0),
            "used": accounting.used(record.node).get(GPU, 0),
            "reserved": accounting.reserved(record.node).get(GPU, 0),
            "free": record.free.get(GPU, 0) if record.schedulable else 0,
        }
        for depth in range(1, len(record.domain)):
            level = level_at.get((record.topology, depth))
            if level is None:
                continue
            key = (record.topology, level, "/".join(record.domain[:depth]))
            for state, amount in amounts.items():
                out[(*key, state)] = out.get((*key, state), 0) + amount
    return out


def _remove(table: dict[K, list[_Entry]], key: K, entry: _Entry) -> None:
    entries = table.get(key)
    if entries is None:
        return
    entries.remove(entry)
    if not entries:
        del table[key]
