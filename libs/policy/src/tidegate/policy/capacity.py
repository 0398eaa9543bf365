"""Admission's picture of free capacity: one placement view per Topology, overlay included.

The topology-cache publishes free capacity per node and Topology (``CapacityNode``); the
watcher publishes node labels and taints (``NodeState``). :class:`ClusterCapacity` folds both
into one :class:`tidegate.placement.CapacityView` per Topology, with two corrections a capacity
report cannot know about:

- the :class:`~tidegate.policy.overlay.Overlay` of admission's own decisions the report does
  not reflect yet, and
- *holds*: capacity set aside by admission for a while, e.g. room freed by preemption and
  nominated for its preemptor, invisible to everyone else.

A node's ``used`` in a view is therefore allocatable − reported free + overlay + holds, and a
node in several Topologies is corrected in all of them. Beside each view it keeps an *empty*
view of the same nodes with nothing used, not cordoned and ready, to tell "cannot fit now"
from "can never fit here" (TopologyPlacementFailed).

Changes reach the views when they are next read, not as they arrive: a node reported
several times in between is written once. Placement is a pure function of a view and a
request, so :meth:`ClusterCapacity.place` remembers its answers per view until that view
changes: workloads of the same shape waiting for capacity cost one placement per change of the
view, not one each (docs/admission.md).

Pure: no I/O; the admission service feeds it messages in the order the bus delivers them.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec
from cachetools import LRUCache

from tidegate.model import (
    CapacityNode,
    NodeName,
    NodeState,
    Reserved,
    Resources,
    TopologyConfig,
)
from tidegate.model import resources as res
from tidegate.placement import (
    CapacityView,
    NodeCapacity,
    PlacementError,
    PlacementRequest,
    PlacementResult,
    place,
)
from tidegate.policy.overlay import Overlay
from tidegate.policy.reservation import view_without_reserved

PLACEMENTS_REMEMBERED: Final = 1024
"""Answers :meth:`ClusterCapacity.place` keeps per view (the least recently used go first)."""

STALE_WRITTEN_AT: Final = 1024
"""Stale (Topology, node) entries at which the views are rewritten at once rather than on the
next read: a burst of reports (every node of a large cluster at start) is written as it comes,
so no read pays for more than this many (docs/admission.md, "A cycle")."""

_request_key = msgspec.msgpack.Encoder().encode


class ClusterCapacity:
    """Per-Topology placement views of free capacity, corrected by the overlay and holds."""

    def __init__(self) -> None:
        """Start with no topology and no node."""
        self.overlay = Overlay()
        self._levels: dict[str, tuple[str, ...]] = {}
        self._views: dict[str, CapacityView] = {}
        self._empty: dict[str, CapacityView] = {}
        self._empty_nodes: dict[str, dict[NodeName, NodeCapacity]] = {}
        """What each empty view holds per node: most reports change only what is free."""
        self._reports: dict[str, dict[NodeName, CapacityNode]] = {}
        self._nodes: dict[NodeName, NodeState] = {}
        self._topologies_of: dict[NodeName, set[str]] = {}
        self._holds: dict[NodeName, Resources] = {}
        self._watermark = 0
        self._stale: set[tuple[str, NodeName]] = set()
        """(Topology, node) pairs whose entries in the views are behind: rewritten on a read."""
        self._placements: dict[
            tuple[str, bool, frozenset[str]], LRUCache[bytes, PlacementResult | str]
        ] = {}
        """Per (Topology, empty view?, nodes left out): answers of :meth:`place` while that
        view is unchanged."""
        self.version = 0
        """Bumped whenever capacity may have grown (more free room, a node or topology added,
        levels changed), so callers can skip re-trying workloads when nothing grew."""

    # ------------------------------------------------------------------ inputs

    def set_topology(self, config: TopologyConfig) -> None:
        """Add a Topology or change its levels (its views are rebuilt from the last reports)."""
        levels = tuple(config.levels)
        if self._levels.get(config.name) == levels:
            return
        self._levels[config.name] = levels
        self._rebuild(config.name)
        self.version += 1

    def remove_topology(self, name: str) -> None:
        """Forget a deleted Topology and its views."""
        self._forget_placements(name, empty=True)
        self._levels.pop(name, None)
        self._views.pop(name, None)
        self._empty.pop(name, None)
        self._empty_nodes.pop(name, None)
        for node in self._reports.pop(name, {}):
            self._leave(name, node)

    def set_node(self, node: NodeState) -> None:
        """Take a node's labels and taints (from the watcher) into every view holding it."""
        name = NodeName(node.name)
        before = self._nodes.get(name)
        self._nodes[name] = node
        if before is None or before != node:
            for topology in self._topologies_of.get(name, ()):
                self._mark_stale(topology, name)
            self.version += 1

    def remove_node(self, name: str) -> None:
        """Forget a deleted node's labels (its capacity reports are removed separately)."""
        self._nodes.pop(NodeName(name), None)

    def update(self, report: CapacityNode) -> None:
        """Apply a capacity report of one node in one Topology."""
        node = NodeName(report.node)
        reports = self._reports.setdefault(report.topology, {})
        before = reports.get(node)
        reports[node] = report
        self._topologies_of.setdefault(node, set()).add(report.topology)
        self._watermark = max(self._watermark, report.applied_sequence)
        self.overlay.report(report.topology, node, report.applied_sequence)
        self._mark_stale(report.topology, node)
        if before is None or _grew(before, report):
            self.version += 1

    def remove(self, topology: str, node: str) -> None:
        """A node left a Topology's capacity view."""
        name = NodeName(node)
        if self._reports.get(topology, {}).pop(name, None) is not None:
            self._leave(topology, name)
            self.version += 1

    def take(self, sequence: int, usage: Mapping[NodeName, Resources], *, at: float) -> None:
        """Record decision ``sequence`` taking ``usage``: unavailable until reported applied."""
        self.overlay.add(sequence, usage, at=at)
        self._mark_stale_nodes(usage)

    def expire_overlay(self, *, before: float) -> None:
        """Drop overlay entries the cache has applied (sequence ≤ its highest report) that are
        older than ``before``: their nodes were never republished (see overlay.py)."""
        changed = self.overlay.expire(watermark=self._watermark, before=before)
        self._mark_stale_nodes(changed)
        if changed:
            self.version += 1

    def hold(self, node: NodeName, amount: Mapping[str, int]) -> None:
        """Set ``amount`` aside on ``node`` (in every Topology) until :meth:`unhold`."""
        self._holds[node] = res.add(self._holds.get(node, {}), amount)
        self._mark_stale_nodes([node])

    def unhold(self, node: NodeName, amount: Mapping[str, int]) -> None:
        """Give back what :meth:`hold` set aside (callers decide whether that is growth)."""
        left = res.non_zero(res.subtract(self._holds.get(node, {}), amount))
        if left:
            self._holds[node] = left
        else:
            self._holds.pop(node, None)
        self._mark_stale_nodes([node])

    # ------------------------------------------------------------------ queries

    def place(
        self,
        topology: str,
        request: PlacementRequest,
        *,
        empty: bool = False,
        outside: Sequence[Reserved] = (),
    ) -> PlacementResult | str | None:
        """Place ``request`` on the live view of ``topology`` (``empty``: on its empty view;
        ``outside``: on :func:`~tidegate.policy.reservation.view_without_reserved` of these
        reservations, those the workload may not backfill into):
        the result, an invalid request's message, or None if the Topology is unknown. The same
        request on a view unchanged since is answered from memory."""
        view = self.empty_view(topology) if empty else self.view(topology)
        if view is None:
            return None
        without = frozenset(node for reservation in outside for node in reservation.nodes)
        slot = (topology, empty, without)
        answers = self._placements.get(slot)
        if answers is None:
            answers = self._placements[slot] = LRUCache(PLACEMENTS_REMEMBERED)
        key = _request_key(request)
        answer = answers.get(key)
        if answer is None:
            if without:
                view = view_without_reserved(view, outside)
            answer = answers[key] = place_or_message(view, request)
        return answer

    def topologies(self) -> list[str]:
        """Names of the known Topologies, sorted."""
        return sorted(self._levels)

    def levels(self, topology: str) -> tuple[str, ...] | None:
        """A Topology's levels, widest first, or None if unknown."""
        return self._levels.get(topology)

    def view(self, topology: str) -> CapacityView | None:
        """The live view of ``topology`` (corrected), or None if the Topology is unknown.
        It is current when returned; later changes reach it at the next call."""
        self._catch_up()
        return self._views.get(topology)

    def empty_view(self, topology: str) -> CapacityView | None:
        """The same nodes with nothing used: what ``topology`` could ever hold."""
        self._catch_up()
        return self._empty.get(topology)

    def nodes(self, topology: str) -> int:
        """Number of nodes reported in ``topology``."""
        return len(self._reports.get(topology, {}))

    def watermark(self) -> int:
        """The highest decision sequence any capacity report said it applied."""
        return self._watermark

    def topologies_of(self, node: NodeName) -> list[str]:
        """The Topologies whose views hold ``node``."""
        return sorted(self._topologies_of.get(node, ()))

    # ------------------------------------------------------------------ internals

    def _forget_placements(self, topology: str, *, empty: bool) -> None:
        """The live view of ``topology`` changed (``empty``: its empty view too)."""
        for slot in [s for s in self._placements if s[0] == topology and (empty or not s[1])]:
            del self._placements[slot]

    def _rebuild(self, topology: str) -> None:
        self._forget_placements(topology, empty=True)
        levels = self._levels[topology]
        reports = self._reports.get(topology, {})
        self._views[topology] = CapacityView(
            levels, [self._node(topology, n, r, empty=False) for n, r in sorted(reports.items())]
        )
        empty = {n: self._node(topology, n, r, empty=True) for n, r in sorted(reports.items())}
        self._empty[topology] = CapacityView(levels, list(empty.values()))
        self._empty_nodes[topology] = empty

    def _mark_stale_nodes(self, nodes: Iterable[NodeName]) -> None:
        for node in nodes:
            for topology in self._topologies_of.get(node, ()):
                self._mark_stale(topology, node)

    def _mark_stale(self, topology: str, node: NodeName) -> None:
        self._stale.add((topology, node))
        if len(self._stale) >= STALE_WRITTEN_AT:
            self._catch_up()

    def _catch_up(self) -> None:
        """Rewrite the stale entries of the views."""
        while self._stale:
            self._rewrite(*self._stale.pop())

    def _rewrite(self, topology: str, node: NodeName) -> None:
        view = self._views.get(topology)
        report = self._reports.get(topology, {}).get(node)
        if view is None or report is None:
            return
        view.upsert_node(self._node(topology, node, report, empty=False))
        empty = self._node(topology, node, report, empty=True)
        known = self._empty_nodes[topology]
        changed = known.get(node) != empty
        if changed:
            self._empty[topology].upsert_node(empty)
            known[node] = empty
        self._forget_placements(topology, empty=changed)

    def _leave(self, topology: str, node: NodeName) -> None:
        self._forget_placements(topology, empty=True)
        self.overlay.forget(topology, node)
        topologies = self._topologies_of.get(node)
        if topologies is not None:
            topologies.discard(topology)
            if not topologies:
                del self._topologies_of[node]
        self._empty_nodes.get(topology, {}).pop(node, None)
        for views in (self._views, self._empty):
            view = views.get(topology)
            if view is not None and node in view.node_names():
                view.remove_node(node)

    def _node(
        self, topology: str, node: NodeName, report: CapacityNode, *, empty: bool
    ) -> NodeCapacity:
        state = self._nodes.get(node)
        levels = self._levels[topology]
        labels = dict(state.labels) if state is not None else {}
        labels.update(zip(levels, report.domain, strict=False))
        taints = tuple(state.taints) if state is not None else ()
        if empty:
            return NodeCapacity(
                name=node, labels=labels, allocatable=dict(report.allocatable), taints=taints
            )
        used = {r: amount - report.free.get(r, 0) for r, amount in report.allocatable.items()}
        used = res.add(used, self.overlay.pending(topology, node))
        used = res.add(used, self._holds.get(node, {}))
        ready = report.schedulable and (state is None or state.ready)
        return NodeCapacity(
            name=node,
            labels=labels,
            allocatable=dict(report.allocatable),
            used=res.non_zero(used),
            taints=taints,
            ready=ready,
            unschedulable=state is not None and state.unschedulable,
        )


def place_or_message(view: CapacityView, request: PlacementRequest) -> PlacementResult | str:
    """Place ``request`` on ``view``, turning an invalid request into its message."""
    try:
        return place(view, request)
    except PlacementError as exc:
        return str(exc)


def _grew(before: CapacityNode, after: CapacityNode) -> bool:
    if before.schedulable != after.schedulable or before.domain != after.domain:
        return True
    if any(after.free.get(r, 0) > before.free.get(r, 0) for r in after.free):
        return True
    return any(after.allocatable.get(r, 0) > v for r, v in before.allocatable.items())
