"""Queue trees: sharing idle quota between queues, fair sharing, and reclaim (pure).

Why: a queue's ``capability`` alone is a hard ceiling, so a team's idle GPUs stay idle while
another team's gangs wait. Queues (:class:`~tidegate.model.QueueConfig`) and cohorts
(:class:`~tidegate.model.CohortConfig`, nested to any depth) form trees; each node carries, per
resource and per GPU card model (a :class:`Dim`), a *nominal* (guaranteed) amount, an optional
*borrowing limit* and an optional *lending limit*, and a fair-sharing weight. The arithmetic
is Kueue's hierarchical cohorts (pkg/cache resource_node.go, described in docs/queues.md):

- a node's *subtree quota* is its nominal plus what its children lend up: each child's subtree
  quota less its *guaranteed* part (``subtree − lendingLimit``, at least 0; 0 without a lending
  limit);
- a node's *usage* counted against its subtree quota is, for a queue, what its admitted
  workloads hold, and for a cohort the sum of its children's usage above their guaranteed part;
- what a queue may still take (:func:`available`) is its unused guaranteed part plus what its
  parent has available, capped by the queue's borrowing limit, recursively up to the root;
- a queue uses more than its nominal amount: it *borrows*.

``capability`` (``quota`` / ``card_quota``) keeps its meaning as a hard ceiling, for a queue
and for every cohort on its path (a cohort's ceiling bounds its whole subtree).

What this module answers, all from definitions plus usage per queue (the replica's queue
tallies, :func:`usage_of_tallies`):

- :class:`QueueTree` builds and validates the tree: a cycle of parents, a negative amount, or
  a child whose nominal exceeds what its parent could ever hold makes that node Invalid with
  the reason; the queues under it wait; nothing else stops.
- :func:`check_admission`: may this request be admitted in queue Q, and how much of it is
  borrowed, per resource and per card model, within every limit on the path to the root.
- :func:`fair_order`: competing queues' heads by weighted dominant-resource share (lowest
  first), then priority, then FIFO, ties by key (Kueue's fair-sharing tournament).
- :func:`report`: per node its quota, usage, borrowed and lendable amounts and share, for
  ``tidegate queues`` and the Kueue-named metrics; :func:`lent`: what of it others use.
- :func:`plan_reclaim`: which whole gangs to preempt so a workload fits: the fewest, then the
  lowest priority and youngest, never more than needed, deterministic, under each queue's
  Kueue policies (:class:`~tidegate.model.QueuePreemption`), the tidal rules and, with fair
  sharing, Kueue's fair-share preemption rules (:func:`fair_share_allows`).

It does no I/O and decides no placement: quota decides whether, placement decides where.
"""

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from tidegate.model import (
    Admitted,
    CohortConfig,
    PendingReason,
    QueueConfig,
    WorkloadKey,
    WorkloadState,
    format_quantity,
    workload_key,
)
from tidegate.model.events import ServiceType
from tidegate.model.replica import QueueTally
from tidegate.policy.cards import WHOLE_GPU_RESOURCE
from tidegate.policy.ordering import blocks_queue
from tidegate.policy.quota import QueueUsage, QuotaRequest, check_quota

MAX_SHARE: Final = 2**63 - 1
"""The share of a borrowing node whose weight is 0: it yields to every other node."""

DimKind = Literal["resource", "card"]


class Dim(NamedTuple):
    """One quota dimension: a resource (``cpu``, ``nvidia.com/gpu``) or a GPU card model. A
    named tuple: hashed on every dictionary lookup of the tree's arithmetic."""

    kind: DimKind
    name: str

    def __str__(self) -> str:
        """The name as messages show it ("nvidia.com/gpu", "NVIDIA-H200 cards")."""
        return self.name if self.kind == "resource" else f"{self.name} cards"

    def show(self, amount: int) -> str:
        """``amount`` of this dimension in Kubernetes notation (cards as plain numbers)."""
        return format_quantity(self.name, amount) if self.kind == "resource" else str(amount)


NodeKind = Literal["queue", "cohort"]


class NodeId(NamedTuple):
    """A node of a queue tree. Queues and cohorts have separate names. A named tuple, as
    :class:`Dim`."""

    kind: NodeKind
    name: str

    def __str__(self) -> str:
        """ "queue team-a" or "cohort research"."""
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Limits:
    """A node's quota in one dimension."""

    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node as built: its definition, its place, and whether it is valid."""

    id: NodeId
    parent: NodeId | None
    """None for a root, and for a node whose parent link is broken (a cycle)."""
    children: tuple[NodeId, ...]
    limits: Mapping[Dim, Limits]
    weight_milli: int
    """Fair-sharing weight in thousandths (Kueue's ``fairSharing.weight`` milli-value)."""
    config: QueueConfig | CohortConfig | None
    """None for an implicit cohort (named as a parent, never defined)."""
    invalid: str | None = None
    """Why this node itself is Invalid (None when it is valid)."""


TreeReason = Literal["QueueNotFound", "Invalid", "ExceedsQuota", "CardQuotaExceeded"]
"""Why a request does not fit; the pending reason tokens admission already uses."""


@dataclass(frozen=True, slots=True)
class QuotaFit:
    """The answer of :func:`check_admission`."""

    fits: bool
    reason: TreeReason | None = None
    message: str | None = None
    """A sentence with the numbers; None when it fits."""
    lasting: bool = False
    """Not fitting is lasting: even with nothing else admitted, the request exceeds what the
    queue can ever use (a ceiling or the most its tree could give it). Otherwise it waits for
    quota to be given back."""
    borrowed: Mapping[Dim, int] = field(default_factory=dict)
    """The part of the request above the queue's remaining nominal, per dimension (when it
    fits; what it would borrow otherwise)."""
    short: Mapping[Dim, int] = field(default_factory=dict)
    """How much more each dimension needs before the request fits (empty when it fits)."""

    @property
    def borrowing(self) -> bool:
        """Whether admitting the request makes its queue borrow."""
        return any(amount > 0 for amount in self.borrowed.values())


class QueueTree:
    """Queues and cohorts as a validated forest (module docstring). Immutable once built."""

    def __init__(self, nodes: Mapping[NodeId, TreeNode], warnings: Mapping[NodeId, list[str]]):
        """Use :meth:`build`."""
        self.nodes: Mapping[NodeId, TreeNode] = nodes
        self.warnings: Mapping[NodeId, list[str]] = warnings
        """Per cohort, what is suspicious but not invalid (children's nominal above its
        ceiling: not every guarantee can be met at once)."""
        self._governed: dict[NodeId, frozenset[Dim]] = {}
        for node_id in nodes:
            root = self.root(node_id)
            if root not in self._governed:
                self._governed[root] = frozenset(
                    dim for member in self.subtree(root) for dim in self.nodes[member].limits
                )

    @classmethod
    def build(cls, queues: Iterable[QueueConfig], cohorts: Iterable[CohortConfig]) -> "QueueTree":
        """Build the forest and validate every node (see :data:`validate` rules in docs)."""
        configs: dict[NodeId, QueueConfig | CohortConfig] = {}
        for cohort in cohorts:
            configs[NodeId("cohort", cohort.name)] = cohort
        for queue in queues:
            configs[NodeId("queue", queue.name)] = queue
        parents: dict[NodeId, NodeId | None] = {}
        for node_id, config in configs.items():
            parents[node_id] = NodeId("cohort", config.parent) if config.parent else None
        for parent in list(parents.values()):
            if parent is not None and parent not in parents:
                parents[parent] = None  # an implicit cohort, at the root
        invalid: dict[NodeId, str] = {}
        limits: dict[NodeId, dict[Dim, Limits]] = {}
        weights: dict[NodeId, int] = {}
        for node_id in parents:
            defined = configs.get(node_id)
            problems: list[str] = []
            if defined is not None and defined.invalid_reason:
                problems.append(defined.invalid_reason)
            limits[node_id] = _limits(defined, problems)
            weights[node_id] = _weight(defined, problems)
            if problems:
                invalid[node_id] = "; ".join(problems)
        for node_id, cycle in _cycles(parents).items():
            invalid[node_id] = "; ".join(
                [*([invalid[node_id]] if node_id in invalid else []), cycle]
            )
            parents[node_id] = None
        warnings: dict[NodeId, list[str]] = {}
        _check_ceilings(parents, configs, limits, invalid, warnings)
        children: dict[NodeId, list[NodeId]] = {node_id: [] for node_id in parents}
        for node_id, parent in parents.items():
            if parent is not None:
                children[parent].append(node_id)
        nodes = {
            node_id: TreeNode(
                id=node_id,
                parent=parents[node_id],
                children=tuple(sorted(children[node_id])),
                limits=limits[node_id],
                weight_milli=weights[node_id],
                config=configs.get(node_id),
                invalid=invalid.get(node_id),
            )
            for node_id in sorted(parents)
        }
        return cls(nodes, warnings)

    # ---------------------------------------------------------------- navigation

    def queue(self, name: str) -> TreeNode | None:
        """The node of queue ``name``, or None."""
        return self.nodes.get(NodeId("queue", name))

    def path(self, node_id: NodeId) -> list[NodeId]:
        """``node_id`` and its ancestors, the node first and its root last."""
        path = [node_id]
        parent = self.nodes[node_id].parent
        while parent is not None:
            path.append(parent)
            parent = self.nodes[parent].parent
        return path

    def root(self, node_id: NodeId) -> NodeId:
        """The root of ``node_id``'s tree."""
        return self.path(node_id)[-1]

    def subtree(self, node_id: NodeId) -> list[NodeId]:
        """``node_id`` and every node under it."""
        found = [node_id]
        for child in self.nodes[node_id].children:
            found.extend(self.subtree(child))
        return found

    def queues_under(self, node_id: NodeId) -> list[str]:
        """The names of the queues in ``node_id``'s subtree."""
        return [n.name for n in self.subtree(node_id) if n.kind == "queue"]

    def governed(self, node_id: NodeId) -> frozenset[Dim]:
        """The dimensions some node of ``node_id``'s tree names: the tree shares those only."""
        return self._governed[self.root(node_id)]

    def blocked(self, node_id: NodeId) -> str | None:
        """Why workloads of ``node_id`` wait for an Invalid node (itself or an ancestor)."""
        for member in self.path(node_id):
            reason = self.nodes[member].invalid
            if reason is not None:
                return f"{member} is invalid: {reason}"
        return None

    def invalid(self) -> dict[NodeId, str]:
        """Every Invalid node and why (its own reason, not its ancestors')."""
        return {n: node.invalid for n, node in self.nodes.items() if node.invalid is not None}


def in_tree(queue: QueueConfig) -> bool:
    """Whether ``queue``'s quota is decided by its queue tree: it names a cohort or a nominal
    quota. Admission and preemption bound every other queue by ``capability`` and
    ``cardQuota`` alone (:mod:`tidegate.policy.quota`), exactly as before trees existed."""
    return queue.parent is not None or queue.nominal is not None or queue.card_nominal is not None


def build_services_tree(
    queues: Iterable[QueueConfig], cohorts: Iterable[CohortConfig]
) -> QueueTree | None:
    """The tree admission and preemption decide quota on: the queues :func:`in_tree` and
    the cohorts; None when no queue is in a tree."""
    members = [q for q in queues if in_tree(q)]
    return QueueTree.build(members, cohorts) if members else None


def cycle_groups(tree: QueueTree | None, queues: Sequence[QueueConfig]) -> list[list[QueueConfig]]:
    """``queues`` (in queue order) grouped for an admission cycle: the queues of one tree
    together, at the place of the first of them; every other queue alone, in its place."""
    groups: list[list[QueueConfig]] = []
    at: dict[NodeId, int] = {}
    for queue in queues:
        node = tree.queue(queue.name) if tree is not None and in_tree(queue) else None
        if tree is None or node is None:
            groups.append([queue])
            continue
        root = tree.root(node.id)
        if root in at:
            groups[at[root]].append(queue)
        else:
            at[root] = len(groups)
            groups.append([queue])
    return groups


def borrowing_summary(admitted: Admitted) -> str | None:
    """What an admission borrows, in words: "borrowing 8 GPUs from cohort research" (whole
    GPUs and card models first, then other resources in name order); None when it borrows
    nothing. The ungater's Event and ``tidegate explain`` say this."""
    if not admitted.borrowed and not admitted.borrowed_cards:
        return None
    parts: list[str] = []
    gpus = admitted.borrowed.get(WHOLE_GPU_RESOURCE, 0)
    if gpus:
        parts.append(f"{gpus} GPU{'' if gpus == 1 else 's'}")
    parts.extend(
        f"{n} {model} card{'' if n == 1 else 's'}"
        for model, n in sorted(admitted.borrowed_cards.items())
    )
    parts.extend(
        f"{format_quantity(name, amount)} {name}"
        for name, amount in sorted(admitted.borrowed.items())
        if name != WHOLE_GPU_RESOURCE
    )
    cohort = f" from cohort {admitted.cohort}" if admitted.cohort else ""
    return f"borrowing {', '.join(parts)}{cohort}"


# --------------------------------------------------------------------------- usage and state


def usage_of_tallies(tallies: Mapping[str, QueueTally]) -> dict[str, QueueUsage]:
    """Usage per queue from the replica's queue tallies (:meth:`Replica.tally`)."""
    return {
        name: QueueUsage(resources=dict(t.usage), cards=dict(t.cards))
        for name, t in tallies.items()
    }


def dims_of(request: QuotaRequest) -> dict[Dim, int]:
    """A request (or what a gang holds) per dimension, amounts above 0 only."""
    out = {Dim("resource", n): a for n, a in request.resources.items() if a > 0}
    out.update({Dim("card", n): a for n, a in request.cards.items() if a > 0})
    return out


def _usage_dims(usage: QueueUsage) -> dict[Dim, int]:
    return dims_of(QuotaRequest(resources=usage.resources, cards=usage.cards))


def take_turns(
    tree: QueueTree | None,
    group: Sequence[QueueConfig],
    ordered: Mapping[str, Sequence[WorkloadState]],
    request_of: Callable[[WorkloadState], QuotaRequest],
    usage: Callable[[], "Mapping[str, QueueUsage] | TreeState"],
    attempt: Callable[[WorkloadState, QueueConfig], PendingReason | None],
    strict_wait: Callable[[WorkloadState, QueueConfig, WorkloadState], None],
    will_wait: Callable[[WorkloadState, QueueConfig], bool] | None = None,
    stop: Callable[[], bool] | None = None,
) -> None:
    """One cycle over a group of :func:`cycle_groups`: the heads of its queues (each queue's
    workloads in ``ordered``, in the queue's own order) take turns; the next tried is the first
    by :func:`fair_order` on ``usage()`` as it is after every attempt so far. ``attempt`` tries
    a workload and says why it waits (None: admitted); a StrictFIFO queue whose head waits
    stops there, each workload behind it handed to ``strict_wait`` with that head.

    A head that ``will_wait`` says is sure to wait again as before (nothing it depends on
    moved) is tried at once, without a turn: it changes nobody's usage, so the order among
    the others is the same, and a long queue of such heads costs no fair-share comparisons.
    ``stop`` (asked before each turn) ends the cycle early: the rest is not tried."""
    heads = {q.name: deque(ordered[q.name]) for q in group if ordered[q.name]}
    queues = {q.name: q for q in group}
    at_head: dict[str, Contender] = {}

    def tried(name: str, workload: WorkloadState) -> bool:
        """Attempt ``workload``, the head of ``name``; False when that closed the queue."""
        queue = queues[name]
        reason = attempt(workload, queue)
        if reason is not None and blocks_queue(queue, reason):
            for behind in heads.pop(name):
                strict_wait(behind, queue, workload)
            return False
        return True

    def settle(name: str) -> None:
        """Try at once the heads of ``name`` sure to wait; the next one contends."""
        queue, items = queues[name], heads[name]
        while items and will_wait is not None and will_wait(items[0], queue):
            if not tried(name, items.popleft()):
                return
        if not items:
            del heads[name]
            return
        head = items[0]
        at_head[name] = Contender(
            queue=name,
            key=workload_key(head.namespace, head.name),
            priority=head.priority,
            created_at=head.created_at,
            request=request_of(head),
        )

    for name in list(heads):
        settle(name)
    paths: dict[str, list[NodeId]] = {}
    while heads and (stop is None or not stop()):
        contenders = [at_head[name] for name in sorted(heads)]
        first = contenders[0]
        if len(contenders) > 1 and tree is not None:
            first = fair_first(tree, usage(), contenders, paths=paths)
        if tried(first.queue, heads[first.queue].popleft()):
            settle(first.queue)


class TreeState:
    """The tree's arithmetic for one usage snapshot (module docstring). Cheap to rebuild."""

    def __init__(self, tree: QueueTree, usage: Mapping[str, QueueUsage | Mapping[Dim, int]]):
        """Compute every node's subtree quota, usage and subtree total from ``usage`` per
        queue (a :class:`QueueUsage`, or amounts per :class:`Dim`)."""
        self.tree = tree
        self.leaf: dict[str, dict[Dim, int]] = {
            name: dict(_usage_dims(u)) if isinstance(u, QueueUsage) else dict(u)
            for name, u in usage.items()
        }
        self.subtree_quota: dict[NodeId, dict[Dim, int]] = {}
        self.used: dict[NodeId, dict[Dim, int]] = {}
        """Usage counted against the subtree quota (Kueue's ``Usage``)."""
        self.total: dict[NodeId, dict[Dim, int]] = {}
        """Everything the subtree's admitted workloads hold (for ceilings)."""
        self.shares: dict[tuple[NodeId, frozenset[tuple[Dim, int]]], tuple[int, Dim | None]] = {}
        """:func:`weighted_share` answers on this state, by node and extra amounts."""
        for node_id, node in tree.nodes.items():
            if node.parent is None:
                self._accumulate(node_id)

    def _accumulate(self, node_id: NodeId) -> None:
        node = self.tree.nodes[node_id]
        quota = {dim: limit.nominal for dim, limit in node.limits.items()}
        for child in node.children:
            self._accumulate(child)
            if self.tree.nodes[child].invalid is not None:
                continue  # an Invalid subtree neither lends nor counts against the pool
            for dim, amount in self.subtree_quota[child].items():
                quota[dim] = quota.get(dim, 0) + amount - self.guaranteed(child, dim)
        self.subtree_quota[node_id] = quota
        self._sum_usage(node_id)

    def _sum_usage(self, node_id: NodeId) -> None:
        """``used`` and ``total`` of ``node_id`` from its own usage and its children's."""
        node = self.tree.nodes[node_id]
        used: dict[Dim, int] = {}
        total: dict[Dim, int] = {}
        if node_id.kind == "queue":
            used = dict(self.leaf.get(node_id.name, {}))
            total = dict(used)
        for child in node.children:
            for dim, amount in self.total[child].items():
                total[dim] = total.get(dim, 0) + amount
            if self.tree.nodes[child].invalid is not None:
                continue
            for dim, amount in self.used[child].items():
                above = amount - self.guaranteed(child, dim)
                if above > 0:
                    used[dim] = used.get(dim, 0) + above
        self.used[node_id] = used
        self.total[node_id] = total

    def guaranteed(self, node_id: NodeId, dim: Dim) -> int:
        """What ``node_id`` keeps for itself in ``dim``: never lent to its cohort."""
        limit = self.tree.nodes[node_id].limits.get(dim)
        if limit is None or limit.lending_limit is None:
            return 0
        return max(0, self.subtree_quota[node_id].get(dim, 0) - limit.lending_limit)

    def available(self, node_id: NodeId, dim: Dim) -> int:
        """What ``node_id`` may still take in ``dim`` now (may be negative when over)."""
        node = self.tree.nodes[node_id]
        quota = self.subtree_quota[node_id].get(dim, 0)
        used = self.used[node_id].get(dim, 0)
        if node.parent is None or node.invalid is not None:
            return quota - used
        guaranteed = self.guaranteed(node_id, dim)
        parent_available = self.available(node.parent, dim)
        limit = node.limits.get(dim)
        if limit is not None and limit.borrowing_limit is not None:
            stored = quota - guaranteed
            used_in_parent = max(0, used - guaranteed)
            parent_available = min(
                stored - used_in_parent + limit.borrowing_limit, parent_available
            )
        return max(0, guaranteed - used) + parent_available

    def potential(self, node_id: NodeId, dim: Dim) -> int:
        """The most ``node_id`` could take in ``dim`` with nothing in use anywhere."""
        node = self.tree.nodes[node_id]
        quota = self.subtree_quota[node_id].get(dim, 0)
        if node.parent is None or node.invalid is not None:
            return quota
        most = self.guaranteed(node_id, dim) + self.potential(node.parent, dim)
        limit = node.limits.get(dim)
        if limit is not None and limit.borrowing_limit is not None:
            most = min(most, quota + limit.borrowing_limit)
        return most

    def borrowed(self, node_id: NodeId, dim: Dim) -> int:
        """How much ``node_id`` uses above its (subtree) quota in ``dim``."""
        return max(0, self.used[node_id].get(dim, 0) - self.subtree_quota[node_id].get(dim, 0))

    def with_change(self, changes: Mapping[str, Mapping[Dim, int]]) -> "TreeState":
        """A new state with amounts added to (negative: removed from) queues' usage. Only the
        changed queues' paths are summed again: quotas do not depend on usage."""
        new = TreeState.__new__(TreeState)
        new.tree = self.tree
        new.leaf = dict(self.leaf)
        new.subtree_quota = self.subtree_quota
        new.used = dict(self.used)
        new.total = dict(self.total)
        new.shares = {}
        for name, delta in changes.items():
            amounts = dict(new.leaf.get(name, {}))
            for dim, amount in delta.items():
                amounts[dim] = amounts.get(dim, 0) + amount
            new.leaf[name] = amounts
            node = self.tree.queue(name)
            if node is not None:
                for node_id in self.tree.path(node.id):
                    new._sum_usage(node_id)
        return new

    def queue_usage(self, name: str) -> QueueUsage:
        """A queue's usage as :mod:`tidegate.policy.quota` reads it."""
        amounts = self.leaf.get(name, {})
        return QueueUsage(
            resources={d.name: a for d, a in amounts.items() if d.kind == "resource" and a},
            cards={d.name: a for d, a in amounts.items() if d.kind == "card" and a},
        )


# --------------------------------------------------------------------------- admission


def check_admission(
    tree: QueueTree,
    usage: Mapping[str, QueueUsage] | TreeState,
    queue: str,
    request: QuotaRequest,
) -> QuotaFit:
    """Whether ``request`` may be admitted in ``queue`` on top of ``usage``, and what it borrows.

    Checked in order, the first failure reported, or the first that waiting never cures when
    there is one (every shortfall is in ``short``): the queue
    exists; it and its ancestors are valid; the queue's own capability
    (:func:`tidegate.policy.quota.check_quota`); every cohort's capability on its path, on what
    the cohort's subtree holds; then, per dimension the tree shares, in :class:`Dim` order,
    what the tree has available for the queue (borrowing and lending limits on the whole
    path). A dimension the tree does not share is bounded by the ceilings only.
    """
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    node = tree.queue(queue)
    if node is None:
        return QuotaFit(
            fits=False,
            reason="QueueNotFound",
            message=f"queue {queue} does not exist",
            lasting=True,
        )
    blocked = tree.blocked(node.id)
    if blocked is not None:
        return QuotaFit(fits=False, reason="Invalid", message=blocked, lasting=True)
    wanted = dims_of(request)
    short: dict[Dim, int] = {}
    failures: list[tuple[TreeReason, str, bool]] = []
    for member in tree.path(node.id):
        config = tree.nodes[member].config
        if config is None:
            continue
        held = (
            state.queue_usage(queue)
            if member.kind == "queue"
            else _as_usage(state.total.get(member, {}))
        )
        for dim, over, token, message, lasting in _ceiling_shortfalls(config, held, request):
            short[dim] = max(short.get(dim, 0), over)
            failures.append((token, message, lasting))
    governed = tree.governed(node.id)
    borrowed: dict[Dim, int] = {}
    own = state.leaf.get(queue, {})
    for dim in sorted(wanted):
        if dim not in governed:
            continue
        amount = wanted[dim]
        nominal = node.limits.get(dim, Limits()).nominal
        in_use = own.get(dim, 0)
        borrowed_now = max(0, in_use + amount - nominal) - max(0, in_use - nominal)
        if borrowed_now:
            borrowed[dim] = borrowed_now
        available = state.available(node.id, dim)
        if amount <= available:
            continue
        short[dim] = max(short.get(dim, 0), amount - available)
        potential = state.potential(node.id, dim)
        reason: TreeReason = "CardQuotaExceeded" if dim.kind == "card" else "ExceedsQuota"
        if amount > potential:
            message = (
                f"queue {queue}: {dim} {dim.show(amount)} requested > {dim.show(potential)} its "
                f"tree can ever give it (nominal {dim.show(nominal)}"
                f"{_limits_note(tree, node.id, dim)})"
            )
            failures.append((reason, message, True))
        else:
            lend = (
                f"; the rest is what cohort {node.parent.name} can lend while others use it"
                if node.parent is not None
                else ""
            )
            message = (
                f"queue {queue}: {dim} {dim.show(in_use)} in use + {dim.show(amount)} requested "
                f"> {dim.show(in_use + max(available, 0))} available now (nominal "
                f"{dim.show(nominal)}{lend})"
            )
            failures.append((reason, message, False))
    if not failures:
        return QuotaFit(fits=True, borrowed=borrowed)
    # A shortfall that waiting never cures is the one to report.
    reason_token, message, lasting = next((f for f in failures if f[2]), failures[0])
    return QuotaFit(
        fits=False,
        reason=reason_token,
        message=message,
        lasting=lasting,
        borrowed=borrowed,
        short=dict(sorted(short.items())),
    )


def resized_borrowing(
    tree: QueueTree,
    usage: Mapping[str, QueueUsage] | TreeState,
    admitted: Admitted,
    charge: QuotaRequest,
) -> tuple[dict[str, int], dict[str, int]]:
    """What ``admitted`` borrows once resized to ``charge`` (per resource, per card model),
    ``usage`` being its queue's as it is before the resize (with its current charge).

    The borrowed amounts change by what the change of its charge changes in its queue's
    borrowing, the rule :func:`check_admission` applies to a first admission: growth borrows
    the part of the extra above the queue's nominal, a shrink gives back borrowed quota while
    the queue is above its nominal. Never below 0 nor above the new charge; none outside a
    tree or in a dimension the tree does not share."""
    node = tree.queue(admitted.queue)
    if node is None:
        return {}, {}
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    used = state.leaf.get(admitted.queue, {})
    old = dims_of(QuotaRequest(resources=admitted.charged, cards=admitted.charged_cards))
    new = dims_of(charge)
    before = dims_of(QuotaRequest(resources=admitted.borrowed, cards=admitted.borrowed_cards))
    after: dict[Dim, int] = {}
    for dim in sorted((set(old) | set(new) | set(before)) & tree.governed(node.id)):
        nominal = node.limits.get(dim, Limits()).nominal
        in_use = used.get(dim, 0)
        delta = new.get(dim, 0) - old.get(dim, 0)
        change = max(0, in_use + delta - nominal) - max(0, in_use - nominal)
        amount = min(new.get(dim, 0), max(0, before.get(dim, 0) + change))
        if amount:
            after[dim] = amount
    return (
        {d.name: a for d, a in after.items() if d.kind == "resource"},
        {d.name: a for d, a in after.items() if d.kind == "card"},
    )


def _limits_note(tree: QueueTree, node_id: NodeId, dim: Dim) -> str:
    notes = []
    for member in tree.path(node_id):
        limit = tree.nodes[member].limits.get(dim)
        if limit is not None and limit.borrowing_limit is not None:
            notes.append(f"{member} borrowing limit {dim.show(limit.borrowing_limit)}")
    return "; " + "; ".join(notes) if notes else ""


def _as_usage(amounts: Mapping[Dim, int]) -> QueueUsage:
    return QueueUsage(
        resources={d.name: a for d, a in amounts.items() if d.kind == "resource"},
        cards={d.name: a for d, a in amounts.items() if d.kind == "card"},
    )


def _without(request: QuotaRequest, dim: Dim) -> QuotaRequest:
    if dim.kind == "card":
        cards = {k: v for k, v in request.cards.items() if k != dim.name}
        return QuotaRequest(request.resources, cards, request.card_resources)
    resources = {k: v for k, v in request.resources.items() if k != dim.name}
    return QuotaRequest(resources, request.cards, request.card_resources)


def _ceiling_shortfalls(
    config: QueueConfig | CohortConfig, held: QueueUsage, request: QuotaRequest
) -> list[tuple[Dim, int, TreeReason, str, bool]]:
    """Every dimension in which ``request`` goes over ``config``'s capability: the dimension,
    by how much, the reason token, the message, and whether the request alone is too big."""
    found: list[tuple[Dim, int, TreeReason, str, bool]] = []
    remaining = request
    while (exceeded := check_quota(config, held, remaining)) is not None:
        card = exceeded.reason == "CardQuotaExceeded"
        dim = Dim("card" if card else "resource", exceeded.name)
        over = exceeded.in_use + exceeded.requested - exceeded.quota
        lasting = exceeded.requested > exceeded.quota
        found.append((dim, over, exceeded.reason, exceeded.message, lasting))
        remaining = _without(remaining, dim)
    return found


# --------------------------------------------------------------------------- fair sharing


def weighted_share(
    state: TreeState, node_id: NodeId, extra: Mapping[Dim, int] | None = None
) -> tuple[int, Dim | None]:
    """Kueue's weighted dominant-resource share of ``node_id`` (with ``extra`` added to its
    usage): the largest ratio, in thousandths, of what it borrows to what its parent can lend,
    over the dimensions, then × 1000 / its weight in thousandths. 0 for a root or a node that
    does not borrow; :data:`MAX_SHARE` for a borrowing node of weight 0. Returns the share and
    the dominant dimension (ties: the smallest :class:`Dim`)."""
    key = (node_id, frozenset(extra.items()) if extra else frozenset())
    known = state.shares.get(key)
    if known is None:
        known = state.shares[key] = _weighted_share(state, node_id, extra or {})
    return known


def _weighted_share(
    state: TreeState, node_id: NodeId, extra: Mapping[Dim, int]
) -> tuple[int, Dim | None]:
    node = state.tree.nodes[node_id]
    if node.parent is None:
        return 0, None
    quota = state.subtree_quota[node_id]
    used = state.used[node_id]
    borrowing = {
        dim: used.get(dim, 0) + extra.get(dim, 0) - quota.get(dim, 0)
        for dim in set(quota) | set(used) | set(extra)
    }
    borrowing = {dim: amount for dim, amount in borrowing.items() if amount > 0}
    if not borrowing:
        return 0, None
    if node.weight_milli == 0:
        return MAX_SHARE, None
    lendable = state.subtree_quota[node.parent]
    share, dominant = -1, None
    for dim in sorted(borrowing):
        pool = lendable.get(dim, 0)
        if pool <= 0:
            continue
        ratio = borrowing[dim] * 1000 // pool
        if ratio > share:
            share, dominant = ratio, dim
    if dominant is None:
        return 0, None
    return share * 1000 // node.weight_milli, dominant


@dataclass(frozen=True, slots=True)
class Contender:
    """A workload at the head of its queue, competing for shared quota."""

    queue: str
    key: WorkloadKey
    priority: int = 0
    created_at: float = 0.0
    request: QuotaRequest = field(default_factory=QuotaRequest)


def fair_order(
    tree: QueueTree,
    usage: Mapping[str, QueueUsage] | TreeState,
    contenders: Sequence[Contender],
) -> list[Contender]:
    """``contenders`` in the order they should be tried, on ``usage`` as it is now.

    Kueue's fair-sharing tournament: at each cohort the best contender of every child subtree
    meets the others, compared by the child's weighted share with that contender's request
    added (:func:`weighted_share`, lowest first), then the contender's priority (highest
    first), creation time (oldest first), key and queue. Contenders of different trees, and of
    queues in no cohort, compare with share 0. The winner is removed and the tournament run
    again; a caller that admits the winner should ask again with the new usage.
    """
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    paths = _contender_paths(tree, contenders)
    remaining = list(range(len(contenders)))
    ordered: list[Contender] = []
    while remaining:
        winner = _tournament(state, contenders, paths, remaining, 0)
        ordered.append(contenders[winner])
        remaining.remove(winner)
    return ordered


def fair_first(
    tree: QueueTree,
    usage: Mapping[str, QueueUsage] | TreeState,
    contenders: Sequence[Contender],
    *,
    paths: dict[str, list[NodeId]] | None = None,
) -> Contender:
    """The first of :func:`fair_order` (one tournament instead of all of them); ``paths``
    keeps each queue's path from the root between calls."""
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    indexed = _contender_paths(tree, contenders, {} if paths is None else paths)
    return contenders[_tournament(state, contenders, indexed, range(len(contenders)), 0)]


def _contender_paths(
    tree: QueueTree, contenders: Sequence[Contender], known: dict[str, list[NodeId]] | None = None
) -> dict[int, list[NodeId]]:
    known = {} if known is None else known
    paths: dict[int, list[NodeId]] = {}
    for index, contender in enumerate(contenders):
        path = known.get(contender.queue)
        if path is None:
            node = tree.queue(contender.queue)
            path = known[contender.queue] = (
                list(reversed(tree.path(node.id))) if node is not None else []
            )
        paths[index] = path
    return paths


def _tie_key(c: Contender) -> tuple[int, float, str, str]:
    return (-c.priority, c.created_at, str(c.key), c.queue)


def _tournament(
    state: TreeState,
    contenders: Sequence[Contender],
    paths: Mapping[int, list[NodeId]],
    members: Sequence[int],
    depth: int,
) -> int:
    groups: dict[NodeId | None, list[int]] = {}
    for index in members:
        path = paths[index]
        groups.setdefault(path[depth] if depth < len(path) else None, []).append(index)
    finalists: list[tuple[int, tuple[int, float, str, str], int]] = []
    for child, group in groups.items():
        if child is None or child.kind == "queue":
            best = min(group, key=lambda i: _tie_key(contenders[i]))
        else:
            best = _tournament(state, contenders, paths, group, depth + 1)
        share = 0
        if child is not None:
            share, _ = weighted_share(state, child, dims_of(contenders[best].request))
        finalists.append((share, _tie_key(contenders[best]), best))
    return min(finalists)[2]


FairStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
"""Kueue's fair-sharing preemption strategies (rules S2-a and S2-b of its KEP-1714)."""

DEFAULT_STRATEGIES: Final[tuple[FairStrategy, ...]] = (
    "LessThanOrEqualToFinalShare",
    "LessThanInitialShare",
)


def fair_share_allows(
    state: TreeState,
    *,
    preemptor_queue: str,
    request: QuotaRequest,
    victim_queue: str,
    victim_holds: QuotaRequest,
    strategies: Sequence[FairStrategy] = DEFAULT_STRATEGIES,
) -> bool:
    """Whether fair sharing lets a workload of ``preemptor_queue`` take ``victim_holds`` from
    ``victim_queue``. Shares are compared where the two queues' paths meet: the preemptor's
    side with the request added against the victim's side before (``LessThanInitialShare``:
    strictly less) or after the removal (``LessThanOrEqualToFinalShare``: at most). Queues of
    different trees, or the same queue, are never compared (False)."""
    tree = state.tree
    a, b = tree.queue(preemptor_queue), tree.queue(victim_queue)
    if a is None or b is None or a.id == b.id:
        return False
    path_a, path_b = tree.path(a.id), tree.path(b.id)
    if path_a[-1] != path_b[-1]:
        return False
    ancestors_b = set(path_b)
    meet = next(n for n in path_a if n in ancestors_b)
    side_a = path_a[path_a.index(meet) - 1]
    side_b = path_b[path_b.index(meet) - 1]
    preemptor_new, _ = weighted_share(state, side_a, dims_of(request))
    target_old, _ = weighted_share(state, side_b)
    removed = {dim: -amount for dim, amount in dims_of(victim_holds).items()}
    after = state.with_change({victim_queue: removed})
    target_new, _ = weighted_share(after, side_b)
    for strategy in strategies:
        if strategy == "LessThanOrEqualToFinalShare" and preemptor_new <= target_new:
            return True
        if strategy == "LessThanInitialShare" and preemptor_new < target_old:
            return True
    return False


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One node as ``tidegate queues`` and the metrics show it."""

    id: NodeId
    parent: NodeId | None
    depth: int
    """0 for a root."""
    blocked: str | None
    """Why its workloads wait for an Invalid node (itself or an ancestor), or None."""
    warnings: tuple[str, ...]
    nominal: Mapping[Dim, int]
    """Its own nominal quota per dimension."""
    quota: Mapping[Dim, int]
    """Its subtree quota: its nominal plus what its children lend up."""
    usage: Mapping[Dim, int]
    """What the admitted workloads of its subtree hold."""
    borrowed: Mapping[Dim, int]
    """What it uses above its quota, taken from its parent."""
    lendable: Mapping[Dim, int]
    """Its unused quota its parent may lend to others now."""
    share: int
    """Its weighted dominant-resource share (:func:`weighted_share`)."""
    dominant: Dim | None
    limits: Mapping[Dim, Limits] = field(default_factory=dict)
    """Its definition per dimension: nominal, borrowing and lending limits."""


def report(tree: QueueTree, usage: Mapping[str, QueueUsage] | TreeState) -> list[NodeReport]:
    """Every node of ``tree`` with its quota, usage, borrowed and lendable amounts and share,
    roots first then depth first, children by name."""
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    out: list[NodeReport] = []

    def visit(node_id: NodeId, depth: int) -> None:
        node = tree.nodes[node_id]
        dims = sorted(set(state.subtree_quota[node_id]) | set(state.used[node_id]))
        lendable: dict[Dim, int] = {}
        for dim in dims:
            guaranteed = state.guaranteed(node_id, dim)
            stored = state.subtree_quota[node_id].get(dim, 0) - guaranteed
            used_above = max(0, state.used[node_id].get(dim, 0) - guaranteed)
            if node.parent is not None and stored - used_above > 0:
                lendable[dim] = stored - used_above
        share, dominant = weighted_share(state, node_id)
        out.append(
            NodeReport(
                id=node_id,
                parent=node.parent,
                depth=depth,
                blocked=tree.blocked(node_id),
                warnings=tuple(tree.warnings.get(node_id, ())),
                nominal={dim: limit.nominal for dim, limit in sorted(node.limits.items())},
                quota={d: a for d, a in sorted(state.subtree_quota[node_id].items()) if a},
                usage={d: a for d, a in sorted(state.total[node_id].items()) if a},
                borrowed={d: b for d in dims if (b := state.borrowed(node_id, d))},
                lendable=lendable,
                share=share,
                dominant=dominant,
                limits=dict(sorted(node.limits.items())),
            )
        )
        for child in node.children:
            visit(child, depth + 1)

    for node_id, node in tree.nodes.items():
        if node.parent is None:
            visit(node_id, 0)
    return out


def lent(reports: Sequence[NodeReport]) -> dict[NodeId, dict[Dim, int]]:
    """What each node of a :func:`report` lends now, per dimension of its ``lendable``: as
    much of its unused quota as the other children of its parent borrow (never more than it
    could lend, nor than they borrow). ``tidegate admit`` and the console show it beside
    ``borrowed``."""
    borrowed: dict[NodeId | None, dict[Dim, int]] = {}
    for node in reports:
        into = borrowed.setdefault(node.parent, {})
        for dim, amount in node.borrowed.items():
            into[dim] = into.get(dim, 0) + amount
    out: dict[NodeId, dict[Dim, int]] = {}
    for node in reports:
        beside = borrowed.get(node.parent, {})
        out[node.id] = {
            dim: min(amount, beside.get(dim, 0) - node.borrowed.get(dim, 0))
            for dim, amount in node.lendable.items()
        }
    return out


# --------------------------------------------------------------------------- reclaim


@dataclass(frozen=True, slots=True)
class Holder:
    """An admitted gang as reclaim sees it: whole, in one queue."""

    key: WorkloadKey
    queue: str
    holds: QuotaRequest
    """What it is charged (per resource and card model)."""
    priority: int = 0
    service_type: ServiceType = "training"
    admitted_at: float = 0.0
    """When its admission was made (the youngest is preempted first)."""
    created_at: float = 0.0
    preemptable: bool = True
    protected: str | None = None
    """Why its PodDisruptionBudgets do not allow evicting it whole now (None: they do)."""


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The workload that does not fit and would preempt."""

    key: WorkloadKey
    queue: str
    request: QuotaRequest
    priority: int = 0
    service_type: ServiceType = "training"
    created_at: float = 0.0


VictimReason = Literal[
    "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing"
]
"""Why a gang is preempted, under Kueue's reason names."""


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    """How :func:`plan_reclaim` searches."""

    fair_sharing: bool = True
    """Whether a queue above its nominal may take from a queue with a higher share
    (:func:`fair_share_allows`); without it only queues below nominal reclaim."""
    strategies: tuple[FairStrategy, ...] = DEFAULT_STRATEGIES
    combination_budget: int = 20_000
    """Sets checked in full before settling for a minimal (not fewest) set."""


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """The answer of :func:`plan_reclaim`."""

    outcome: Literal["fits", "reclaims", "cannot"]
    victims: tuple[WorkloadKey, ...] = ()
    """The gangs to preempt, in the order they were taken (best-ranked first)."""
    reasons: Mapping[WorkloadKey, VictimReason] = field(default_factory=dict)
    ineligible: Mapping[WorkloadKey, str] = field(default_factory=dict)
    """Gangs that may not be victims of this preemptor, with why (never a reason to give up)."""
    fit: QuotaFit | None = None
    """The preemptor's fit once the victims are gone (as it is now when nothing helps)."""
    exact: bool = True
    """False when the budget ran out: the set is minimal but maybe not the fewest."""
    message: str | None = None


SERVICE_RECLAIM: Final = ReclaimSettings(combination_budget=500)
"""How the admission and preemption services (and ``tidegate admit``) plan reclaim: a queue
gets back what it lent up to its nominal quota, and with fair-share preemption a queue above
its nominal takes from one whose weighted share is higher, by Kueue's strategies in
:data:`DEFAULT_STRATEGIES` (LessThanOrEqualToFinalShare, then LessThanInitialShare).

Always on, as Kueue with ``fairSharing.enable`` (tidegate always orders a tree's queues by
fair share, :func:`fair_order`); a queue takes from others only when its
``reclaimWithinCohort`` allows it, or for inference (the tidal rule), as in Kueue
(docs/queues.md, "Fair-share preemption"). The fewest victims are searched among 500 sets
that free enough, then a minimal set is taken (a cycle plans many reclaims)."""


def plan_reclaim(
    tree: QueueTree,
    usage: Mapping[str, QueueUsage] | TreeState,
    preemptor: Preemptor,
    holders: Sequence[Holder],
    settings: ReclaimSettings | None = None,
) -> ReclaimPlan:
    """Which whole gangs to preempt so that ``preemptor`` fits its queue's quota.

    Eligible victims (:func:`why_not_victim`) are ranked: other queues' gangs before the
    preemptor's own queue's, lower priority first, then the youngest admission, then key. The
    plan is the valid set with the fewest gangs, the best-ranked among those. A set is valid
    when, taking its gangs in rank order, each gang of another queue is taken either because
    that queue still borrows in a dimension the preemptor is short of and the preemptor's
    queue ends within its nominal (reclaim; or, under ``borrowWithinCohort``, the gang is of
    lower priority and at most the threshold), or because fair sharing allows it; and once
    all are gone the preemptor fits. Beyond the budget the plan is the first valid prefix of
    the ranking with gangs put back while it stays valid (minimal, flagged not exact).
    """
    settings = settings or ReclaimSettings()
    state = usage if isinstance(usage, TreeState) else TreeState(tree, usage)
    fit = check_admission(tree, state, preemptor.queue, preemptor.request)
    if fit.fits:
        return ReclaimPlan(outcome="fits", fit=fit)
    if fit.lasting:
        return ReclaimPlan(outcome="cannot", fit=fit, message=fit.message)
    node = tree.queue(preemptor.queue)
    assert node is not None  # not lasting, so the queue exists
    ineligible: dict[WorkloadKey, str] = {}
    candidates: list[Holder] = []
    for holder in holders:
        if holder.key == preemptor.key:
            continue
        why = why_not_victim(tree, state, preemptor, holder, short=fit.short)
        if (
            why is None
            and holder.queue != preemptor.queue
            and not _borrows_in(
                tree,
                state.leaf.get(holder.queue, {}),
                holder.queue,
                dims_of(holder.holds),
                fit.short,
            )
        ):
            # Every reason to take a gang of another queue needs its queue to borrow what the
            # preemptor is short of; taking gangs only lowers usage, so it never will.
            why = f"queue {holder.queue} does not borrow what the preemptor is short of"
        if why is None:
            candidates.append(holder)
        else:
            ineligible[holder.key] = why
    candidates.sort(key=lambda h: (h.queue == preemptor.queue, h.priority, -h.admitted_at, h.key))
    search = _Search(tree, state, preemptor, candidates, fit.short, settings)
    found = search.fewest()
    exact = True
    if found is None and search.exhausted:
        found = search.minimal_prefix()
        exact = False
    if found is None:
        return ReclaimPlan(
            outcome="cannot",
            ineligible=ineligible,
            fit=fit,
            exact=exact,
            message=(
                f"{fit.message}; no set of the {len(candidates)} eligible gang"
                f"{'' if len(candidates) == 1 else 's'} frees enough"
                + (f" ({len(ineligible)} not eligible)" if ineligible else "")
            ),
        )
    chosen, reasons, after = found
    victims = tuple(candidates[i].key for i in chosen)
    return ReclaimPlan(
        outcome="reclaims",
        victims=victims,
        reasons=reasons,
        ineligible=ineligible,
        fit=after,
        exact=exact,
        message=(
            f"{len(victims)} gang{'' if len(victims) == 1 else 's'} preempted for "
            f"{preemptor.key}: " + ", ".join(f"{v} ({reasons[v]})" for v in victims)
        ),
    )


def _borrows_in(
    tree: QueueTree,
    used: Mapping[Dim, int],
    queue: str,
    holds: Mapping[Dim, int],
    short: Iterable[Dim],
) -> bool:
    """Whether ``queue``, using ``used``, is above its nominal in a dimension of ``short`` that
    ``holds`` (a victim's amounts) has some of: the one condition of taking a gang of another
    queue."""
    other = tree.queue(queue)
    assert other is not None
    return any(
        used.get(dim, 0) > other.limits.get(dim, Limits()).nominal
        for dim in short
        if holds.get(dim, 0) > 0
    )


def why_not_victim(
    tree: QueueTree,
    state: TreeState,
    preemptor: Preemptor,
    holder: Holder,
    *,
    short: Mapping[Dim, int] | None = None,
) -> str | None:
    """Why ``holder`` may not be preempted for ``preemptor`` at all; None if it may.

    The tidal rules first: only training is ever a victim, and an unknown workload never
    preempts. Then the gang itself (preemptable, its PodDisruptionBudgets). Then the preemptor
    queue's policies: ``withinClusterQueue`` for its own queue; for another queue of its tree,
    that queue must be reclaimable, must hold some of what the preemptor is short of
    (``short``), and ``reclaimWithinCohort`` must allow it, an inference preemptor reclaiming
    from lower-priority training even under ``Never`` (the tidal rule).
    """
    if preemptor.service_type == "unknown":
        return "an unknown workload never preempts"
    if holder.service_type != "training":
        return f"{holder.service_type} workloads are never preempted"
    if not holder.preemptable:
        return "not preemptable"
    if holder.protected is not None:
        return holder.protected
    if short:
        holds = dims_of(holder.holds)
        if not any(holds.get(dim, 0) > 0 for dim in short):
            return "holds none of what the preemptor is short of"
    own = tree.queue(preemptor.queue)
    assert own is not None
    policies = own.config.preemption if isinstance(own.config, QueueConfig) else None
    if policies is None:  # pragma: no cover - a queue node always has its QueueConfig
        return "no policies"
    if holder.queue == preemptor.queue:
        within = policies.within_cluster_queue
        if within == "Never":
            return f"queue {preemptor.queue} does not preempt inside itself (withinClusterQueue: Never)"
        if holder.priority < preemptor.priority:
            return None
        if (
            within == "LowerOrNewerEqualPriority"
            and holder.priority == preemptor.priority
            and holder.created_at > preemptor.created_at
        ):
            return None
        return f"priority {holder.priority} is not below the preemptor's {preemptor.priority}"
    other = tree.queue(holder.queue)
    if other is None:
        return f"queue {holder.queue} does not exist"
    if tree.root(other.id) != tree.root(own.id):
        return f"queue {holder.queue} shares no cohort with queue {preemptor.queue}"
    if isinstance(other.config, QueueConfig) and not other.config.reclaimable:
        return f"queue {holder.queue} is not reclaimable"
    policy = policies.reclaim_within_cohort
    if policy == "Never" and preemptor.service_type == "inference":
        policy = "LowerPriority"  # the tidal rule: inference reclaims from training
    if policy == "Never":
        return (
            f"queue {preemptor.queue} does not reclaim from other queues "
            "(reclaimWithinCohort: Never; training never preempts training unless its queue "
            "opts in)"
        )
    if policy == "LowerPriority" and holder.priority >= preemptor.priority:
        return f"priority {holder.priority} is not below the preemptor's {preemptor.priority}"
    return None


class _Search:
    """The victim-set search of :func:`plan_reclaim`."""

    def __init__(
        self,
        tree: QueueTree,
        state: TreeState,
        preemptor: Preemptor,
        candidates: Sequence[Holder],
        short: Mapping[Dim, int],
        settings: ReclaimSettings,
    ) -> None:
        self.tree, self.state, self.preemptor = tree, state, preemptor
        self.candidates, self.short, self.settings = candidates, short, settings
        self.exhausted = False
        self.holds = [dims_of(c.holds) for c in candidates]
        self.request = dims_of(preemptor.request)
        node = tree.queue(preemptor.queue)
        assert node is not None
        self.node = node
        config = node.config
        assert isinstance(config, QueueConfig)
        self.policies = config.preemption

    def fewest(self) -> tuple[tuple[int, ...], dict[WorkloadKey, VictimReason], QuotaFit] | None:
        checked = enumerated = 0
        count = len(self.candidates)
        smallest = self._fewest_that_could_free_enough()
        if smallest is None:
            return None
        for size in range(smallest, count + 1):
            if enumerated + math.comb(count, size) > 50 * self.settings.combination_budget:
                # Too many sets of this size to look at all of them: settle for a minimal set
                # at once rather than after a million tries (a cycle asks for many plans).
                self.exhausted = True
                return None
            for combo in itertools.combinations(range(count), size):
                enumerated += 1
                if enumerated > 50 * self.settings.combination_budget:
                    self.exhausted = True
                    return None
                if not self._frees_enough(combo):
                    continue
                checked += 1
                if checked > self.settings.combination_budget:
                    self.exhausted = True
                    return None
                found = self._simulate(combo, require_fit=True)
                if found is not None:
                    return combo, found[0], found[1]
        return None

    def minimal_prefix(
        self,
    ) -> tuple[tuple[int, ...], dict[WorkloadKey, VictimReason], QuotaFit] | None:
        taken: list[int] = []
        for index in range(len(self.candidates)):
            if self._simulate((*taken, index), require_fit=False) is None:
                continue
            taken.append(index)
            if self._simulate(tuple(taken), require_fit=True) is not None:
                break
        else:
            return None
        for index in reversed(list(taken)):
            trial = tuple(i for i in taken if i != index)
            if trial and self._simulate(trial, require_fit=True) is not None:
                taken = list(trial)
        found = self._simulate(tuple(taken), require_fit=True)
        assert found is not None
        return tuple(taken), found[0], found[1]

    def _fewest_that_could_free_enough(self) -> int | None:
        """No set of fewer candidates frees ``short`` (each dimension's largest holds
        first); None when all of them together do not."""
        fewest = 1
        for dim, amount in self.short.items():
            freed = 0
            for taken, held in enumerate(sorted((h.get(dim, 0) for h in self.holds), reverse=True)):
                freed += held
                if freed >= amount:
                    fewest = max(fewest, taken + 1)
                    break
            else:
                return None
        return fewest

    def _frees_enough(self, combo: Sequence[int]) -> bool:
        for dim, amount in self.short.items():
            if sum(self.holds[i].get(dim, 0) for i in combo) < amount:
                return False
        return True

    def _simulate(
        self, combo: Sequence[int], *, require_fit: bool
    ) -> tuple[dict[WorkloadKey, VictimReason], QuotaFit] | None:
        queue = self.preemptor.queue
        own_removed: dict[Dim, int] = {}
        for i in combo:
            if self.candidates[i].queue == queue:
                for dim, amount in self.holds[i].items():
                    own_removed[dim] = own_removed.get(dim, 0) + amount
        within_nominal = self._ends_within_nominal(own_removed)
        # The usage as each victim is taken; the tree's arithmetic on it is built only when a
        # rule needs it (fair sharing, the final fit), not once per victim.
        removed: dict[str, dict[Dim, int]] = {}
        built: list[TreeState] = [self.state]

        def state_now() -> TreeState:
            if not built:
                built.append(self.state.with_change(removed))
            return built[0]

        reasons: dict[WorkloadKey, VictimReason] = {}
        for i in combo:
            victim = self.candidates[i]
            if victim.queue == queue:
                reasons[victim.key] = "InClusterQueue"
            else:
                used = dict(self.state.leaf.get(victim.queue, {}))
                for dim, amount in removed.get(victim.queue, {}).items():
                    used[dim] = used.get(dim, 0) + amount
                why = self._cross_queue_reason(
                    state_now, used, victim, self.holds[i], within_nominal
                )
                if why is None:
                    return None
                reasons[victim.key] = why
            into = removed.setdefault(victim.queue, {})
            for dim, amount in self.holds[i].items():
                into[dim] = into.get(dim, 0) - amount
            built.clear()
        fit = check_admission(self.tree, state_now(), queue, self.preemptor.request)
        if require_fit and not fit.fits:
            return None
        return reasons, fit

    def _ends_within_nominal(self, own_removed: Mapping[Dim, int]) -> bool:
        governed = self.tree.governed(self.node.id)
        used = self.state.leaf.get(self.preemptor.queue, {})
        for dim, amount in self.request.items():
            if dim not in governed:
                continue
            after = used.get(dim, 0) - own_removed.get(dim, 0) + amount
            if after > self.node.limits.get(dim, Limits()).nominal:
                return False
        return True

    def _cross_queue_reason(
        self,
        state: Callable[[], TreeState],
        used: Mapping[Dim, int],
        victim: Holder,
        holds: Mapping[Dim, int],
        within_nominal: bool,
    ) -> VictimReason | None:
        """Why ``victim`` (of another queue, whose usage is ``used`` now) may be taken, or
        None; ``state`` gives the tree's arithmetic on the usage now when fair sharing asks."""
        borrows = _borrows_in(self.tree, used, victim.queue, holds, self.short)
        if borrows:
            if within_nominal:
                return "InCohortReclamation"
            policies = self.policies
            threshold = policies.max_priority_threshold
            if (
                policies.borrow_within_cohort == "LowerPriority"
                and victim.priority < self.preemptor.priority
                and (threshold is None or victim.priority <= threshold)
            ):
                return "InCohortReclaimWhileBorrowing"
        # Fair sharing takes only from a queue that borrows what the preemptor is short of
        # (Kueue's candidates): a queue within its nominal has share 0 and is never a victim
        # of a preemptor that is itself within its share.
        if (
            borrows
            and self.settings.fair_sharing
            and fair_share_allows(
                state(),
                preemptor_queue=self.preemptor.queue,
                request=self.preemptor.request,
                victim_queue=victim.queue,
                victim_holds=victim.holds,
                strategies=self.settings.strategies,
            )
        ):
            return "InCohortFairSharing"
        return None


# --------------------------------------------------------------------------- building helpers


_FIELDS: Final = (
    ("resource", "nominal", "borrowing_limit", "lending_limit"),
    ("card", "card_nominal", "card_borrowing_limit", "card_lending_limit"),
)


def _limits(config: QueueConfig | CohortConfig | None, problems: list[str]) -> dict[Dim, Limits]:
    if config is None:
        return {}
    out: dict[Dim, Limits] = {}
    for kind, *names in _FIELDS:
        maps: list[Mapping[str, int]] = []
        for name in names:
            values: Mapping[str, int] = getattr(config, name) or {}
            for key, amount in sorted(values.items()):
                if amount < 0:
                    problems.append(f"{name}[{key}]: {amount} is negative")
            maps.append(values)
        nominal, borrowing, lending = maps
        for key in sorted(set(nominal) | set(borrowing) | set(lending)):
            out[Dim("card" if kind == "card" else "resource", key)] = Limits(
                nominal=max(0, nominal.get(key, 0)),
                borrowing_limit=borrowing.get(key),
                lending_limit=lending.get(key),
            )
    for label, ceiling in (("quota", config.quota), ("card_quota", config.card_quota)):
        for key, amount in sorted((ceiling or {}).items()):
            if amount < 0:
                problems.append(f"{label}[{key}]: {amount} is negative")
    return out


def _weight(config: QueueConfig | CohortConfig | None, problems: list[str]) -> int:
    if config is None:
        return 1000
    weight = config.fair_weight
    if not math.isfinite(weight) or weight < 0:
        problems.append(f"fair_weight: {weight} is not a non-negative number")
        return 1000
    return round(weight * 1000)


def _cycles(parents: Mapping[NodeId, NodeId | None]) -> dict[NodeId, str]:
    """Every node on a cycle of parent links, with the cycle in words."""
    found: dict[NodeId, str] = {}
    for start in sorted(parents):
        seen: list[NodeId] = []
        node: NodeId | None = start
        while node is not None and node not in seen and node not in found:
            seen.append(node)
            node = parents.get(node)
        if node is None or node in found or node not in seen:
            continue
        cycle = seen[seen.index(node) :]
        words = " → ".join(n.name for n in [*cycle, node])
        for member in cycle:
            found[member] = f"parent chain {words} is a cycle"
    return found


def _ceiling(config: QueueConfig | CohortConfig | None, dim: Dim) -> int | None:
    if config is None:
        return None
    if dim.kind == "resource":
        return None if config.quota is None else config.quota.get(dim.name)
    return None if config.card_quota is None else config.card_quota.get(dim.name, 0)


def _check_ceilings(
    parents: Mapping[NodeId, NodeId | None],
    configs: Mapping[NodeId, QueueConfig | CohortConfig],
    limits: Mapping[NodeId, Mapping[Dim, Limits]],
    invalid: dict[NodeId, str],
    warnings: dict[NodeId, list[str]],
) -> None:
    """A child whose nominal exceeds what its parent could ever hold (the lowest capability on
    the parent's path) is Invalid; children's nominals that together exceed it are a warning."""
    children: dict[NodeId, list[NodeId]] = {}
    for node_id, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(node_id)

    def bound(node_id: NodeId, dim: Dim) -> tuple[int, NodeId] | None:
        best: tuple[int, NodeId] | None = None
        current: NodeId | None = node_id
        while current is not None:
            amount = _ceiling(configs.get(current), dim)
            if amount is not None and (best is None or amount < best[0]):
                best = (amount, current)
            current = parents.get(current)
        return best

    for parent, members in sorted(children.items()):
        for dim in sorted({d for m in members for d in limits[m]}):
            limit = bound(parent, dim)
            if limit is None:
                continue
            amount, where = limit
            total = 0
            for member in sorted(members):
                nominal = limits[member].get(dim, Limits()).nominal
                total += nominal
                if nominal > amount:
                    problem = (
                        f"nominal {dim} {dim.show(nominal)} exceeds what {parent} can ever "
                        f"hold: capability {dim.show(amount)} of {where}"
                    )
                    invalid[member] = (
                        f"{invalid[member]}; {problem}" if member in invalid else problem
                    )
            if total > amount:
                warnings.setdefault(parent, []).append(
                    f"its children's nominal {dim} {dim.show(total)} exceeds capability "
                    f"{dim.show(amount)} of {where}: not every guarantee can be met at once"
                )
