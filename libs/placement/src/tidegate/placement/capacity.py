"""Free capacity of the nodes of one topology, kept in NumPy arrays and updated in place.

Placement asks "how many of these pods fit on each node" for tens of thousands of nodes many
times per scheduling cycle (preemption simulates one placement per candidate victim set), so
capacity lives in dense ``int64`` arrays, one row per resource and one column per node, and a
change to one node touches only that node's column and the running sums of the domains it
belongs to: O(levels) work, never a rebuild.

Free capacity of a node = allocatable − used − reserved:

- *used* is what pods bound to the node request, including pods tidegate does not manage
  (DaemonSets): the caller (topology-cache) sums them and calls :meth:`CapacityView.set_used`;
- *reserved* is what admission has promised to gangs whose pods are not bound yet
  (:meth:`CapacityView.reserve` / :meth:`CapacityView.unreserve`).

A node takes part in placement only when it is ready, not cordoned (unschedulable) and labelled
with every level of the topology. A node that does not list ``pods`` in its allocatable is
given :data:`DEFAULT_MAX_PODS` (the kubelet's default ``maxPods``).

The view knows nothing of podsets or workloads; :func:`tidegate.placement.place` reads it.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from tidegate.model import Resources, Taint, Toleration
from tidegate.placement.ordering import NaturalKey, natural_key
from tidegate.placement.structure import Structure, build_structure

DEFAULT_MAX_PODS: Final = 110
"""Pods a node may hold when its allocatable does not say (the kubelet's default maxPods)."""

PODS: Final = "pods"
"""The resource every pod takes one of."""

HARD_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects a pod must tolerate to be placed on the node (PreferNoSchedule is advice)."""

_SELECTOR_CACHE_SIZE: Final = 256
_ARRAYS: Final = (
    "_alloc",
    "_used",
    "_reserved",
    "_free",
    "_active",
    "_ready",
    "_domain",
    "_taint_sig",
)
_TABLES: Final = (
    "_resources",
    "_resource_names",
    "_names",
    "_labels",
    "_taints",
    "_flags",
    "_rows",
    "_spare",
    "_node_keys",
    "_domain_ids",
    "_domain_paths",
    "_domain_parent",
    "_domain_keys",
    "_signatures",
    "_signature_taints",
)
_INITIAL_ROWS: Final = 64

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


class OverReleaseError(ValueError):
    """More capacity was given back than was reserved (a double release)."""


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One node as placement sees it: where it sits, what it offers and what is taken."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    """Node labels: the topology levels, the GPU product, anything a nodeSelector may name."""
    allocatable: Resources = field(default_factory=dict)
    """``status.allocatable`` in tidegate units (cpu in millicores, the rest in base units)."""
    used: Resources = field(default_factory=dict)
    """Requests of the pods bound to the node, managed or not, with ``pods`` = their number."""
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any toleration matches ``taint`` (Kubernetes rules: an empty key with Exists
    matches every key, an empty effect matches every effect, Exists ignores the value)."""
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == taint.key:
                return True
        elif toleration.key == taint.key and toleration.value == taint.value:
            return True
    return False


def _hard_taint_signature(taints: Iterable[Taint]) -> tuple[tuple[str, str, str], ...]:
    return tuple(
        sorted({(t.key, t.value, t.effect) for t in taints if t.effect in HARD_TAINT_EFFECTS})
    )


class CapacityView:
    """Free capacity of the nodes of one topology, with per-domain running sums.

    ``levels`` are node label keys, widest first (block, rack, host). A domain at level ``i``
    is identified by the node's values at levels ``0..i`` (its path), so two racks with the same
    name in different blocks are different domains. Every update costs O(levels); the ordering
    of domains that placement uses is rebuilt lazily, only after nodes are added, removed or
    moved to another domain.
    """

    def __init__(self, levels: Sequence[str], nodes: Iterable[NodeCapacity] = ()) -> None:
        """Create an empty view on ``levels`` (widest first) and add ``nodes``."""
        levels = tuple(levels)
        if not levels:
            raise ValueError("levels: a topology needs at least one level")
        if len(set(levels)) != len(levels):
            raise ValueError(f"levels: duplicate level in {list(levels)}")
        if any(not level for level in levels):
            raise ValueError("levels: a level must be a non-empty node label key")
        self._levels: tuple[str, ...] = levels
        self._resources: dict[str, int] = {PODS: 0}
        self._resource_names: list[str] = [PODS]
        rows = _INITIAL_ROWS
        self._alloc: IntArray = np.zeros((1, rows), np.int64)
        self._used: IntArray = np.zeros((1, rows), np.int64)
        self._reserved: IntArray = np.zeros((1, rows), np.int64)
        self._free: IntArray = np.zeros((1, rows), np.int64)
        self._active: BoolArray = np.zeros(rows, np.bool_)
        self._ready: BoolArray = np.zeros(rows, np.bool_)
        self._domain: NDArray[np.int32] = np.full((len(levels), rows), -1, np.int32)
        self._taint_sig: NDArray[np.int32] = np.zeros(rows, np.int32)
        self._names: list[str | None] = [None] * rows
        self._labels: list[Mapping[str, str]] = [{}] * rows
        self._taints: list[tuple[Taint, ...]] = [()] * rows
        self._flags: list[tuple[bool, bool]] = [(False, False)] * rows
        self._rows: dict[str, int] = {}
        self._spare: list[int] = list(range(rows - 1, -1, -1))
        self._node_keys: list[NaturalKey | None] = [None] * rows
        self._domain_ids: list[dict[tuple[str, ...], int]] = [{} for _ in levels]
        self._domain_paths: list[list[tuple[str, ...]]] = [[] for _ in levels]
        self._domain_parent: list[list[int]] = [[] for _ in levels]
        self._domain_keys: list[list[NaturalKey]] = [[] for _ in levels]
        self._domain_free: list[IntArray] = [np.zeros((1, 16), np.int64) for _ in levels]
        self._domain_nodes: list[IntArray] = [np.zeros(16, np.int64) for _ in levels]
        self._selector_masks: dict[tuple[str, str], BoolArray] = {}
        self._signatures: dict[tuple[tuple[str, str, str], ...], int] = {(): 0}
        self._signature_taints: list[tuple[Taint, ...]] = [()]
        self._structure: Structure | None = None
        self._shared = False
        for node in nodes:
            self.upsert_node(node)

    # ------------------------------------------------------------------ reading

    @property
    def levels(self) -> tuple[str, ...]:
        """The topology's level labels, widest first."""
        return self._levels

    def __len__(self) -> int:
        """Number of nodes in the view (schedulable or not)."""
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        """Whether a node of that name is in the view."""
        return name in self._rows

    def node_names(self) -> list[str]:
        """Names of every node in the view, in no particular order."""
        return list(self._rows)

    def free(self, name: str) -> Resources:
        """Free capacity of node ``name`` (allocatable − used − reserved; may be negative when
        a node is overcommitted). Raises KeyError for an unknown node."""
        return self._column(self._free, self._row(name), always=True)

    def allocatable(self, name: str) -> Resources:
        """Allocatable of node ``name`` as the view holds it (``pods`` filled in)."""
        return self._column(self._alloc, self._row(name))

    def used(self, name: str) -> Resources:
        """Usage of node ``name`` last set by :meth:`set_used` or :meth:`upsert_node`."""
        return self._column(self._used, self._row(name))

    def reserved(self, name: str) -> Resources:
        """Capacity of node ``name`` reserved for admitted gangs whose pods are not bound."""
        return self._column(self._reserved, self._row(name))

    def schedulable(self, name: str) -> bool:
        """Whether node ``name`` takes part in placement (ready, not cordoned, fully labelled)."""
        row = self._row(name)
        return bool(self._ready[row] and self._domain[0, row] >= 0)

    def taints(self, name: str) -> tuple[Taint, ...]:
        """The taints of node ``name``."""
        return self._taints[self._row(name)]

    def node_domain(self, name: str) -> tuple[str, ...] | None:
        """The node's values at every level, widest first; None when a level label is missing."""
        row = self._row(name)
        leaf = int(self._domain[-1, row])
        return None if leaf < 0 else self._domain_paths[-1][leaf]

    def domains(self, level: str) -> list[tuple[str, ...]]:
        """Paths of every domain at ``level`` that holds a schedulable node, in path order."""
        m = self._level_index(level)
        counts = self._domain_nodes[m]
        paths = [path for d, path in enumerate(self._domain_paths[m]) if counts[d] > 0]
        return sorted(paths, key=lambda path: tuple(natural_key(value) for value in path))

    def domain_free(self, level: str, path: Sequence[str]) -> Resources:
        """Sum of free capacity over the schedulable nodes of one domain (informational:
        a domain's room for pods is what its nodes can each hold, not this sum)."""
        m = self._level_index(level)
        d = self._domain_ids[m].get(tuple(path))
        if d is None:
            return {}
        column = self._domain_free[m][:, d]
        return {res: int(column[j]) for j, res in enumerate(self._resource_names) if column[j]}

    def domain_node_count(self, level: str, path: Sequence[str]) -> int:
        """Number of schedulable nodes in one domain."""
        m = self._level_index(level)
        d = self._domain_ids[m].get(tuple(path))
        return 0 if d is None else int(self._domain_nodes[m][d])

    def nodes(self) -> Iterator[NodeCapacity]:
        """Every node as a :class:`NodeCapacity` (used = the view's usage, without reserved)."""
        for name, row in self._rows.items():
            yield NodeCapacity(
                name=name,
                labels=dict(self._labels[row]),
                allocatable=self._column(self._alloc, row),
                used=self._column(self._used, row),
                taints=self._taints[row],
                ready=self._flags[row][0],
                unschedulable=self._flags[row][1],
            )

    # ------------------------------------------------------------------ updating

    def upsert_node(self, node: NodeCapacity) -> None:
        """Add a node or replace everything the view knows about it except its reservations."""
        self._own_tables()
        for resource in (*node.allocatable, *node.used):
            self._column_index(resource)
        row = self._rows.get(node.name)
        structural = False
        if row is None:
            row = self._take_row()
            self._rows[node.name] = row
            self._names[row] = node.name
            self._node_keys[row] = natural_key(node.name)
            self._active[row] = True
        else:
            self._contribute(row, -1)
        self._alloc[:, row] = 0
        for resource, amount in node.allocatable.items():
            self._alloc[self._resources[resource], row] = amount
        if PODS not in node.allocatable:
            self._alloc[0, row] = DEFAULT_MAX_PODS
        self._used[:, row] = 0
        for resource, amount in node.used.items():
            self._used[self._resources[resource], row] = amount
        self._free[:, row] = self._alloc[:, row] - self._used[:, row] - self._reserved[:, row]
        labels = dict(node.labels)
        self._labels[row] = labels
        self._taints[row] = tuple(node.taints)
        self._taint_sig[row] = self._signature(node.taints)
        self._ready[row] = node.ready and not node.unschedulable
        self._flags[row] = (node.ready, node.unschedulable)
        domain = self._domain_of(labels)
        if not np.array_equal(domain, self._domain[:, row]):
            structural = True
            self._domain[:, row] = domain
        for (key, value), mask in self._selector_masks.items():
            mask[row] = labels.get(key) == value
        self._contribute(row, +1)
        if structural:
            self._structure = None

    def upsert_nodes(self, nodes: Iterable[NodeCapacity]) -> None:
        """:meth:`upsert_node` for each of ``nodes``."""
        for node in nodes:
            self.upsert_node(node)

    def remove_node(self, name: str) -> None:
        """Forget node ``name`` (and its reservations); unknown names are ignored."""
        self._own_tables()
        row = self._rows.pop(name, None)
        if row is None:
            return
        self._contribute(row, -1)
        if self._domain[0, row] >= 0:
            self._structure = None
        for array in (self._alloc, self._used, self._reserved, self._free):
            array[:, row] = 0
        self._active[row] = False
        self._ready[row] = False
        self._domain[:, row] = -1
        self._taint_sig[row] = 0
        self._names[row] = None
        self._labels[row] = {}
        self._taints[row] = ()
        self._flags[row] = (False, False)
        self._node_keys[row] = None
        for mask in self._selector_masks.values():
            mask[row] = False
        self._spare.append(row)

    def set_used(self, name: str, used: Mapping[str, int]) -> None:
        """Replace node ``name``'s usage (requests of bound pods, ``pods`` = their number)."""
        for resource in used:
            self._column_index(resource)
        row = self._row(name)
        self._contribute(row, -1)
        self._used[:, row] = 0
        for resource, amount in used.items():
            self._used[self._resources[resource], row] = amount
        self._free[:, row] = self._alloc[:, row] - self._used[:, row] - self._reserved[:, row]
        self._contribute(row, +1)

    def reserve(self, name: str, amount: Mapping[str, int]) -> None:
        """Take ``amount`` of node ``name`` for an admitted gang whose pods are not bound yet."""
        self._change_reserved(name, amount, +1)

    def unreserve(self, name: str, amount: Mapping[str, int]) -> None:
        """Give back a reservation.

        Raises :class:`OverReleaseError` (and changes nothing) when ``amount`` is more than node
        ``name`` has reserved: a double release is a bug upstream, and clamping at zero would
        hide it while the reservation of some other gang silently shrinks.
        """
        reserved = self.reserved(name)
        over = {
            resource: (value, reserved.get(resource, 0))
            for resource, value in sorted(amount.items())
            if value > reserved.get(resource, 0)
        }
        if over:
            detail = ", ".join(f"{r}: {v} > {have} reserved" for r, (v, have) in over.items())
            raise OverReleaseError(
                f"unreserve on node {name} gives back more than reserved ({detail})"
            )
        self._change_reserved(name, amount, -1)

    def copy(self) -> "CapacityView":
        """An independent copy (for what-if and preemption simulations).

        Capacity arrays are copied; the node and domain tables are shared until either side
        adds, removes or changes a node (copy on write), and the immutable ordering structure
        is shared until either side changes the topology. Cost: a few array copies.
        """
        other = CapacityView.__new__(CapacityView)
        other._levels = self._levels
        for name in _ARRAYS:
            setattr(other, name, getattr(self, name).copy())
        other._domain_free = [sums.copy() for sums in self._domain_free]
        other._domain_nodes = [counts.copy() for counts in self._domain_nodes]
        other._selector_masks = {key: mask.copy() for key, mask in self._selector_masks.items()}
        for name in _TABLES:
            setattr(other, name, getattr(self, name))
        self._shared = other._shared = True
        other._structure = self._structure
        return other

    def _own_tables(self) -> None:
        """Copy the node and domain tables if a copy of this view still shares them."""
        if not self._shared:
            return
        self._resources = dict(self._resources)
        self._resource_names = list(self._resource_names)
        self._names = list(self._names)
        self._labels = list(self._labels)
        self._taints = list(self._taints)
        self._flags = list(self._flags)
        self._rows = dict(self._rows)
        self._spare = list(self._spare)
        self._node_keys = list(self._node_keys)
        self._domain_ids = [dict(ids) for ids in self._domain_ids]
        self._domain_paths = [list(paths) for paths in self._domain_paths]
        self._domain_parent = [list(parents) for parents in self._domain_parent]
        self._domain_keys = [list(keys) for keys in self._domain_keys]
        self._signatures = dict(self._signatures)
        self._signature_taints = list(self._signature_taints)
        self._shared = False

    # ------------------------------------------------------------------ for the placement engine

    def structure(self) -> Structure:
        """The ordering of domains and nodes placement works in (rebuilt lazily, see module)."""
        if self._structure is None:
            self._structure = build_structure(
                levels=self._levels,
                active=self._active,
                domain=self._domain,
                domain_parent=self._domain_parent,
                domain_keys=self._domain_keys,
                domain_paths=self._domain_paths,
                names=self._names,
                node_keys=self._node_keys,
            )
        return self._structure

    def resource_index(self, resource: str) -> int | None:
        """Row of ``resource`` in :meth:`free_matrix`, None if no node ever listed it."""
        return self._resources.get(resource)

    @property
    def resource_names(self) -> tuple[str, ...]:
        """Resource names in the order of the rows of :meth:`free_matrix`."""
        return tuple(self._resource_names)

    def free_matrix(self) -> IntArray:
        """Free capacity as a (resources × node rows) array. Read-only by contract."""
        return self._free

    def ready_mask(self) -> BoolArray:
        """Per node row: ready and not cordoned."""
        return self._ready

    def selector_mask(self, key: str, value: str) -> BoolArray:
        """Per node row: whether label ``key`` equals ``value`` (cached, kept up to date)."""
        mask = self._selector_masks.get((key, value))
        if mask is None:
            mask = np.fromiter(
                (labels.get(key) == value for labels in self._labels),
                dtype=np.bool_,
                count=len(self._labels),
            )
            mask &= self._active
            if len(self._selector_masks) >= _SELECTOR_CACHE_SIZE:
                del self._selector_masks[next(iter(self._selector_masks))]
            self._selector_masks[(key, value)] = mask
        return mask

    def tolerated_rows(self, tolerations: Sequence[Toleration]) -> BoolArray:
        """Per node row: whether ``tolerations`` tolerate all of the node's hard taints."""
        table = np.fromiter(
            (
                all(tolerates(tolerations, taint) for taint in taints)
                for taints in self._signature_taints
            ),
            dtype=np.bool_,
            count=len(self._signature_taints),
        )
        result: BoolArray = table[self._taint_sig]
        return result

    # ------------------------------------------------------------------ internals

    def _row(self, name: str) -> int:
        row = self._rows.get(name)
        if row is None:
            raise KeyError(f"node {name!r} is not in the capacity view")
        return row

    def _level_index(self, level: str) -> int:
        try:
            return self._levels.index(level)
        except ValueError:
            raise KeyError(f"{level!r} is not a level of this topology") from None

    def _column(self, array: IntArray, row: int, *, always: bool = False) -> Resources:
        has = self._alloc[:, row] != 0
        column = array[:, row]
        return {
            res: int(column[j])
            for j, res in enumerate(self._resource_names)
            if column[j] or (always and has[j])
        }

    def _column_index(self, resource: str) -> int:
        index = self._resources.get(resource)
        if index is not None:
            return index
        self._own_tables()
        index = len(self._resource_names)
        self._resources[resource] = index
        self._resource_names.append(resource)

        def grow(array: IntArray) -> IntArray:
            return np.vstack([array, np.zeros((1, array.shape[1]), np.int64)])

        self._alloc = grow(self._alloc)
        self._used = grow(self._used)
        self._reserved = grow(self._reserved)
        self._free = grow(self._free)
        self._domain_free = [grow(sums) for sums in self._domain_free]
        return index

    def _take_row(self) -> int:
        if not self._spare:
            self._grow_rows()
        return self._spare.pop()

    def _grow_rows(self) -> None:
        old = self._active.shape[0]
        new = old * 2

        def widen(array: NDArray[np.generic], fill: object = 0) -> NDArray[np.generic]:
            shape = (*array.shape[:-1], new)
            out = np.full(shape, fill, array.dtype)
            out[..., :old] = array
            return out

        self._alloc = widen(self._alloc)  # type: ignore[assignment]
        self._used = widen(self._used)  # type: ignore[assignment]
        self._reserved = widen(self._reserved)  # type: ignore[assignment]
        self._free = widen(self._free)  # type: ignore[assignment]
        self._active = widen(self._active, False)  # type: ignore[assignment]
        self._ready = widen(self._ready, False)  # type: ignore[assignment]
        self._domain = widen(self._domain, -1)  # type: ignore[assignment]
        self._taint_sig = widen(self._taint_sig)  # type: ignore[assignment]
        self._selector_masks = {
            key: widen(mask, False)  # type: ignore[misc]
            for key, mask in self._selector_masks.items()
        }
        extra = new - old
        self._names.extend([None] * extra)
        self._labels.extend([{}] * extra)
        self._taints.extend([()] * extra)
        self._flags.extend([(False, False)] * extra)
        self._node_keys.extend([None] * extra)
        self._spare.extend(range(new - 1, old - 1, -1))

    def _signature(self, taints: Iterable[Taint]) -> int:
        signature = _hard_taint_signature(taints)
        index = self._signatures.get(signature)
        if index is None:
            index = len(self._signature_taints)
            self._signatures[signature] = index
            self._signature_taints.append(
                tuple(Taint(key=k, value=v, effect=e) for k, v, e in signature)
            )
        return index

    def _domain_of(self, labels: Mapping[str, str]) -> NDArray[np.int32]:
        values: list[str] = []
        for level in self._levels:
            value = labels.get(level)
            if value is None:
                return np.full(len(self._levels), -1, np.int32)
            values.append(value)
        ids = np.empty(len(self._levels), np.int32)
        parent = 0
        for m in range(len(self._levels)):
            path = tuple(values[: m + 1])
            d = self._domain_ids[m].get(path)
            if d is None:
                d = self._new_domain(m, path, parent)
            ids[m] = d
            parent = d
        return ids

    def _new_domain(self, m: int, path: tuple[str, ...], parent: int) -> int:
        d = len(self._domain_paths[m])
        self._domain_ids[m][path] = d
        self._domain_paths[m].append(path)
        self._domain_parent[m].append(parent)
        self._domain_keys[m].append(natural_key(path[-1]))
        if d >= self._domain_nodes[m].shape[0]:
            size = self._domain_nodes[m].shape[0] * 2
            sums = np.zeros((self._domain_free[m].shape[0], size), np.int64)
            sums[:, :d] = self._domain_free[m][:, :d]
            self._domain_free[m] = sums
            counts = np.zeros(size, np.int64)
            counts[:d] = self._domain_nodes[m][:d]
            self._domain_nodes[m] = counts
        return d

    def _contribute(self, row: int, sign: int) -> None:
        """Add (sign=+1) or remove (-1) the node's free capacity to its domains' sums."""
        if not self._ready[row] or self._domain[0, row] < 0:
            return
        column = self._free[:, row] * sign
        for m in range(len(self._levels)):
            d = self._domain[m, row]
            self._domain_free[m][:, d] += column
            self._domain_nodes[m][d] += sign

    def _change_reserved(self, name: str, amount: Mapping[str, int], sign: int) -> None:
        for resource in amount:
            self._column_index(resource)
        row = self._row(name)
        self._contribute(row, -1)
        for resource, value in amount.items():
            j = self._resources[resource]
            self._reserved[j, row] = max(0, int(self._reserved[j, row]) + sign * value)
        self._free[:, row] = self._alloc[:, row] - self._used[:, row] - self._reserved[:, row]
        self._contribute(row, +1)
