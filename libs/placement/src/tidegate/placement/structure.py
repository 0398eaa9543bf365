"""The topology as a tree laid out in path order, so that every domain is a contiguous range.

Placement works in *positions*, not in the view's storage rows: the labelled nodes are sorted
by path (natural order, see :mod:`tidegate.placement.ordering`), and the domains of each level
are numbered in that same order. Then the nodes of any domain, at any level, are one slice
``node_start[m][d]:node_end[m][d]`` of the node positions, and the children of a domain are one
slice ``child_start[m][d]:child_end[m][d]`` of the next level's positions. Summing the capacity of
every domain is a cumulative sum and two gathers, and listing pods in position order is rank
order (consecutive ranks in the same or neighbouring domains).

The structure depends only on which nodes exist and where they sit, never on capacity, so it
survives every capacity update and is rebuilt (one sort) only after nodes are added, removed or
relabelled. It is immutable and may be shared between copies of a view.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tidegate.placement.ordering import NaturalKey

IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True, eq=False)
class Structure:
    """Path-ordered layout of one topology's labelled nodes (see the module docstring).

    Levels are numbered 0 (widest) to ``depth - 1`` (narrowest); ``depth`` stands for the
    nodes themselves. Arrays are indexed by position at their level.
    """

    levels: tuple[str, ...]
    """The topology's level labels, widest first."""
    depth: int
    """Number of topology levels."""
    row_of_pos: IntArray
    """Storage row in the view of the node at each node position."""
    node_names: tuple[str, ...]
    """Node name at each node position."""
    node_start: tuple[IntArray, ...]
    """Per level: first node position of each domain."""
    node_end: tuple[IntArray, ...]
    """Per level: one past the last node position of each domain."""
    child_start: tuple[IntArray, ...]
    """Per level: first position of each domain's children at the next level (nodes for the
    narrowest level)."""
    child_end: tuple[IntArray, ...]
    """Per level: one past the last child position."""
    parent: tuple[IntArray, ...]
    """Per level: position of each domain's parent one level up (zeros at the top level)."""
    paths: tuple[tuple[tuple[str, ...], ...], ...]
    """Per level: the path (values widest first) of each domain."""
    leaf_of_node: IntArray
    """Position of each node's domain at the narrowest level."""

    @property
    def node_count(self) -> int:
        """Number of labelled nodes."""
        return int(self.row_of_pos.shape[0])

    def domain_count(self, level: int) -> int:
        """Number of domains at ``level`` that hold at least one labelled node."""
        return len(self.paths[level])


def build_structure(
    *,
    levels: tuple[str, ...],
    active: NDArray[np.bool_],
    domain: NDArray[np.int32],
    domain_parent: Sequence[Sequence[int]],
    domain_keys: Sequence[Sequence[NaturalKey]],
    domain_paths: Sequence[Sequence[tuple[str, ...]]],
    names: Sequence[str | None],
    node_keys: Sequence[NaturalKey | None],
) -> Structure:
    """Lay out the labelled nodes (``active`` and ``domain[0] >= 0``) in path order.

    ``domain[m, row]`` is the view's id of the row's domain at level ``m``; ``domain_parent``,
    ``domain_keys`` and ``domain_paths`` describe those ids per level.
    """
    depth = domain.shape[0]
    rows = np.flatnonzero(active & (domain[0] >= 0)).astype(np.int64)
    position_of_id: list[IntArray] = []
    parent_positions: list[IntArray] = []
    paths: list[tuple[tuple[str, ...], ...]] = []
    for m in range(depth):
        ids = np.unique(domain[m, rows]).tolist()
        keys = domain_keys[m]
        if m == 0:
            order = sorted(ids, key=keys.__getitem__)
            parents = np.zeros(len(order), np.int64)
        else:
            upper = position_of_id[m - 1].tolist()
            parent_of = domain_parent[m]
            keyed = sorted([(upper[parent_of[d]], keys[d], d) for d in ids])
            order = [d for _, _, d in keyed]
            parents = np.asarray([parent for parent, _, _ in keyed], np.int64)
        positions = np.full(len(domain_paths[m]), -1, np.int64)
        positions[np.asarray(order, np.int64)] = np.arange(len(order), dtype=np.int64)
        position_of_id.append(positions)
        parent_positions.append(parents)
        paths.append(tuple(domain_paths[m][d] for d in order))

    leaf = position_of_id[-1][domain[-1, rows]] if rows.size else np.zeros(0, np.int64)
    if rows.size and np.bincount(leaf).max() > 1:
        # Several nodes share a narrowest domain: order them by name inside it.
        order_list = sorted(range(rows.size), key=lambda i: (int(leaf[i]), node_keys[int(rows[i])]))
        node_order = np.asarray(order_list, np.int64)
    else:
        node_order = np.argsort(leaf, kind="stable")
    row_of_pos = rows[node_order]
    leaf_of_node = leaf[node_order]

    node_start: list[IntArray] = []
    node_end: list[IntArray] = []
    for m in range(depth):
        of_node = position_of_id[m][domain[m, row_of_pos]]
        span = np.arange(len(paths[m]), dtype=np.int64)
        node_start.append(np.searchsorted(of_node, span, side="left").astype(np.int64))
        node_end.append(np.searchsorted(of_node, span, side="right").astype(np.int64))
    child_start: list[IntArray] = []
    child_end: list[IntArray] = []
    for m in range(depth - 1):
        span = np.arange(len(paths[m]), dtype=np.int64)
        below = parent_positions[m + 1]
        child_start.append(np.searchsorted(below, span, side="left").astype(np.int64))
        child_end.append(np.searchsorted(below, span, side="right").astype(np.int64))
    child_start.append(node_start[-1])
    child_end.append(node_end[-1])

    return Structure(
        levels=levels,
        depth=depth,
        row_of_pos=row_of_pos,
        node_names=tuple([str(names[row]) for row in row_of_pos.tolist()]),
        node_start=tuple(node_start),
        node_end=tuple(node_end),
        child_start=tuple(child_start),
        child_end=tuple(child_end),
        parent=tuple(parent_positions),
        paths=tuple(paths),
        leaf_of_node=leaf_of_node,
    )
