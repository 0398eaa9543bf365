"""Where a gang's pods go: the placement algorithm.

:func:`place` takes a :class:`~tidegate.placement.capacity.CapacityView` and a
:class:`~tidegate.placement.request.PlacementRequest` and returns a
:class:`~tidegate.placement.request.PlacementResult`; it never changes the view (:func:`apply`
reserves a result, :func:`release` gives it back).

How one podset is placed (a group of podsets is placed the same way, in one shared domain):

1. *Room per node*: for every node, min over the requested resources (and one ``pods`` slot)
   of ⌊free / request⌋, zero where the node is not ready, cordoned, unlabelled, lacks a label of
   the nodeSelector or has a NoSchedule/NoExecute taint the pods do not tolerate. A domain's
   room is the sum of its nodes' rooms (what its nodes can each hold, so fragmentation counts).
   With slices, a domain's room is counted in whole slices that each fit in one slice domain.
2. *One domain*: from the preferred level (the narrowest level by default) up to the required
   level (the widest level by default), the first level where some single domain has room for
   every pod wins. Among the domains that fit there, the one needing the fewest children at the
   next level wins; then the profile decides (best-fit: least room, spread: most room); then
   path order.
3. *Several top-level domains*: when nothing is required and no top-level domain fits, the pods
   are spread over as few top-level domains as possible.
4. *Inside the chosen domain*, pods go down the tree the same way: into one child when one
   fits, else into as few children as possible (largest first, and the last one chosen like in
   step 2 so the remaining holes stay large under best-fit). The children of all the domains
   chosen at one level are pooled for the next level, so a level below is also kept to as few
   domains as the choice above allows (except at the slice level, which keeps whole slices).

Podsets are placed one after another on a working copy of free capacity, so what one takes
the next cannot use; the gang fits only if every podset does. Everything is vectorized over
the path-ordered layout of :mod:`tidegate.placement.structure`: no Python loop over nodes.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tidegate.model import DomainCount, TopologyAssignment
from tidegate.placement.capacity import CapacityView
from tidegate.placement.reasons import Shortfall, explain
from tidegate.placement.request import (
    GroupPlan,
    PlacementRequest,
    PlacementResult,
    PodSetPlan,
    normalize,
    resolve_profile,
)
from tidegate.placement.structure import Structure

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

MAX_GROUP_ATTEMPTS = 64
"""Candidate domains tried for a group whose podsets each fit but may crowd each other out."""

LOOKAHEAD_BUDGET = 65_536
"""Most children :meth:`_Placer.choose_last` looks at to pick the last of several domains."""


def spans(starts: IntArray, lengths: IntArray) -> IntArray:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` for every i, concatenated."""
    offsets = np.cumsum(lengths) - lengths
    index: IntArray = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        starts - offsets, lengths
    )
    return index


def fewest_to_hold(caps: IntArray, lengths: IntArray, need: int) -> IntArray:
    """For consecutive groups of ``caps`` (sizes ``lengths``, each adding up to at least
    ``need``): how many of the group's largest entries add up to ``need``."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    top = int(caps.max()) + 1 if total else 1
    # One sort orders entries by group, then by room, largest first.
    key = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths) * top + (top - 1 - caps)
    key.sort()
    ordered = top - 1 - key % top
    running = np.cumsum(ordered)
    base = running[offsets] - ordered[offsets]
    within = running - np.repeat(base, lengths)
    hit = np.where(within >= need, np.arange(total, dtype=np.int64), total)
    first = np.minimum.reduceat(hit, offsets)
    needed: IntArray = first - offsets + 1
    return needed


@dataclass(slots=True)
class Demand:
    """One podset's room on the current free capacity, per node and per domain."""

    plan: PodSetPlan
    eligible: BoolArray
    """Per node position: the podset may run there at all."""
    fits: IntArray
    """Per node position: how many of its pods fit."""
    pod_caps: list[IntArray]
    """Per level (the last entry is the nodes): pods each domain can hold."""
    unit_caps: list[IntArray]
    """Per level: room in that level's unit (slices at or above the slice level, else pods)."""
    unit_sizes: list[int]
    """Per level: pods per unit."""
    root_cap: int
    """Room of the whole cluster, in the unit of the top level."""

    def unit_size(self, level: int) -> int:
        """Pods per unit at ``level`` (-1 is the whole cluster)."""
        return self.unit_sizes[0] if level < 0 else self.unit_sizes[level]


@dataclass(slots=True)
class _Placed:
    plan: PodSetPlan
    take: IntArray
    level: int | None


class _Placer:
    """State of one :func:`place` call: the layout and the working copy of free capacity."""

    def __init__(self, view: CapacityView, structure: Structure, profile: str) -> None:
        self.view = view
        self.structure = structure
        self.best_fit = profile == "best-fit"
        self.free: IntArray = view.free_matrix()[:, structure.row_of_pos]
        self.ready: BoolArray = view.ready_mask()[structure.row_of_pos]
        self.depth = structure.depth
        self._eligible_cache: dict[object, BoolArray] = {}

    # ------------------------------------------------------------------ room

    def eligible(self, plan: PodSetPlan) -> BoolArray:
        """Per node position: ready, labelled, matching the nodeSelector, taints tolerated."""
        key = (tuple(sorted(plan.node_selector.items())), plan.tolerations)
        cached = self._eligible_cache.get(key)
        if cached is not None:
            return cached
        mask = self.ready.copy()
        rows = self.structure.row_of_pos
        for label, value in plan.node_selector.items():
            mask &= self.view.selector_mask(label, value)[rows]
        if plan.selector_conflicts:
            mask[:] = False
        mask &= self.view.tolerated_rows(plan.tolerations)[rows]
        self._eligible_cache[key] = mask
        return mask

    def demand(self, plan: PodSetPlan) -> Demand:
        """Room of every node and domain for ``plan``'s pods on the working free capacity."""
        s = self.structure
        eligible = self.eligible(plan)
        fits: IntArray | None = None
        for resource, amount in plan.requests.items():
            row = self.view.resource_index(resource)
            if row is None:
                fits = np.zeros(s.node_count, np.int64)
                break
            room = self.free[row] // amount
            fits = room if fits is None else np.minimum(fits, room, out=fits)
        assert fits is not None  # requests always hold "pods"
        np.maximum(fits, 0, out=fits)
        fits[~eligible] = 0
        running = np.concatenate(([0], np.cumsum(fits)))
        pod_caps = [running[s.node_end[m]] - running[s.node_start[m]] for m in range(self.depth)]
        pod_caps.append(fits)
        slice_level, size = plan.slice_level, plan.slice_size
        unit_sizes = [size if m <= slice_level else 1 for m in range(self.depth + 1)]
        unit_caps: list[IntArray] = list(pod_caps)
        if slice_level >= 0:
            unit_caps[slice_level] = pod_caps[slice_level] // size
            for m in range(slice_level - 1, -1, -1):
                below = np.concatenate(([0], np.cumsum(unit_caps[m + 1])))
                unit_caps[m] = below[s.child_end[m]] - below[s.child_start[m]]
        root_cap = int(unit_caps[0].sum()) if self.depth else 0
        return Demand(
            plan=plan,
            eligible=eligible,
            fits=fits,
            pod_caps=pod_caps,
            unit_caps=unit_caps,
            unit_sizes=unit_sizes,
            root_cap=root_cap,
        )

    # ------------------------------------------------------------------ choosing

    def children_needed(self, d: Demand, m: int, candidates: IntArray, need: int) -> IntArray:
        """For each candidate domain at level ``m``: the fewest children (level m+1) whose
        room adds up to ``need`` units of level m+1."""
        s = self.structure
        starts = s.child_start[m][candidates]
        lengths = s.child_end[m][candidates] - starts
        if int(lengths.sum()) == candidates.size:
            return np.ones(candidates.size, np.int64)
        return fewest_to_hold(d.unit_caps[m + 1][spans(starts, lengths)], lengths, need)

    def choose_last(
        self, d: Demand, m: int, full: IntArray, candidates: IntArray, need: int
    ) -> int:
        """The last domain to add to ``full`` (level ``m``) so that ``need`` units fit: the
        candidate whose children, pooled with those of ``full``, hold them in the fewest
        children; then as :meth:`choose`. Falls back to :meth:`choose` when that look-ahead
        would touch more than :data:`LOOKAHEAD_BUDGET` children."""
        remaining = need - int(d.unit_caps[m][full].sum())
        if candidates.size <= 1 or m == self.depth or m == d.plan.slice_level:
            return self.choose(d, m, candidates, remaining)
        s = self.structure
        below = d.unit_caps[m + 1]
        full_starts = s.child_start[m][full]
        full_lengths = s.child_end[m][full] - full_starts
        pooled = below[spans(full_starts, full_lengths)]
        starts = s.child_start[m][candidates]
        lengths = s.child_end[m][candidates] - starts
        total = candidates.size * pooled.size + int(lengths.sum())
        if total > LOOKAHEAD_BUDGET:
            return self.choose(d, m, candidates, remaining)
        own = below[spans(starts, lengths)]
        group_lengths = lengths + pooled.size
        # Each group: the pooled children of ``full``, then the candidate's own children.
        own_offsets = np.cumsum(lengths) - lengths
        groups = np.empty(total, np.int64)
        group_offsets = np.cumsum(group_lengths) - group_lengths
        pooled_index = group_offsets[:, None] + np.arange(pooled.size, dtype=np.int64)[None, :]
        groups[pooled_index.ravel()] = np.tile(pooled, candidates.size)
        own_index = np.repeat(group_offsets + pooled.size - own_offsets, lengths) + np.arange(
            own.size, dtype=np.int64
        )
        groups[own_index] = own
        child_need = need * d.unit_size(m) // d.unit_size(m + 1)
        needed = fewest_to_hold(groups, group_lengths, child_need)
        return self.choose(d, m, candidates[needed == needed.min()], remaining)

    def ranked(self, d: Demand, m: int, candidates: IntArray, need: int) -> IntArray:
        """Candidates at level ``m`` (all with room for ``need`` units), best first, in the
        order :meth:`choose` prefers them."""
        if candidates.size <= 1:
            return candidates
        sign = 1 if self.best_fit else -1
        rooms: list[IntArray] = [sign * d.unit_caps[m][candidates]]
        positions, level = candidates, m
        while level > 0:
            positions = self.parent_of(level, positions)
            level -= 1
            rooms.append(sign * d.unit_caps[level][positions])
        # np.lexsort sorts by its last key first: path order is the last resort.
        keys = [candidates, *reversed(rooms)]
        if m < self.depth:
            child_need = need * d.unit_size(m) // d.unit_size(m + 1)
            keys.append(self.children_needed(d, m, candidates, child_need))
        ranked: IntArray = candidates[np.lexsort(keys)]
        return ranked

    def choose(self, d: Demand, m: int, candidates: IntArray, need: int) -> int:
        """The best of ``candidates`` at level ``m`` (see the module docstring, step 2):
        fewest children needed, then the profile on the candidate's own room, then on its
        ancestors' room (nearest first), then path order."""
        if candidates.size == 1:
            return int(candidates[0])
        if m < self.depth:
            child_need = need * d.unit_size(m) // d.unit_size(m + 1)
            needed = self.children_needed(d, m, candidates, child_need)
            candidates = candidates[needed == needed.min()]
        level, positions = m, candidates
        while candidates.size > 1 and level >= 0:
            caps = d.unit_caps[level][positions]
            keep = caps == (caps.min() if self.best_fit else caps.max())
            candidates, positions = candidates[keep], positions[keep]
            positions = self.parent_of(level, positions)
            level -= 1
        return int(candidates[0])

    def parent_of(self, level: int, positions: IntArray) -> IntArray:
        """Positions one level up of the domains (or nodes, at the node level) ``positions``."""
        s = self.structure
        if level == self.depth:
            parents: IntArray = s.leaf_of_node[positions]
            return parents
        return s.parent[level][positions]

    # ------------------------------------------------------------------ distributing

    def distribute(self, d: Demand, m: int, p: int, units: int, take: IntArray) -> None:
        """Put ``units`` units of the podset into domain ``p`` of level ``m`` (-1 = cluster),
        which has room for them, adding pods per node position to ``take``."""
        s = self.structure
        pods = units * d.unit_size(m)
        if pods == 0:
            return
        if m == self.depth:
            take[p] += pods
            return
        if m >= 0:
            start, end = int(s.node_start[m][p]), int(s.node_end[m][p])
            room = int(d.pod_caps[m][p])
            children = np.arange(s.child_start[m][p], s.child_end[m][p], dtype=np.int64)
        else:
            start, end = 0, s.node_count
            room = int(d.fits.sum())
            children = np.arange(s.domain_count(0), dtype=np.int64)
        if pods == room:
            take[start:end] += d.fits[start:end]
            return
        self.fill(d, m + 1, children, pods // d.unit_size(m + 1), take)

    def fill(self, d: Demand, m: int, domains: IntArray, need: int, take: IntArray) -> None:
        """Put ``need`` units into as few of ``domains`` (level ``m``, in path order, with room
        for them together) as possible, adding pods per node position to ``take``.

        One domain when one fits; else the largest ones and a last one chosen like a single
        domain. Below that, the children of every chosen domain are pooled and filled the same
        way, so the count at each level is as low as the choice above it allows. Pooling stops
        at the slice level, where each domain keeps whole slices.
        """
        caps = d.unit_caps[m][domains]
        fitting = np.flatnonzero(caps >= need)
        if fitting.size:
            self.distribute(d, m, self.choose(d, m, domains[fitting], need), need, take)
            return
        order = np.argsort(-caps, kind="stable")
        running = np.cumsum(caps[order])
        whole = int(np.searchsorted(running, need, side="left"))
        remaining = need - (int(running[whole - 1]) if whole else 0)
        rest = order[whole:]
        full = domains[order[:whole]]
        last = self.choose_last(d, m, full, domains[np.sort(rest[caps[rest] >= remaining])], need)
        if m == self.depth:
            take[full] += d.fits[full]
            take[last] += remaining
            return
        if m == d.plan.slice_level:
            for c in full.tolist():
                self.distribute(d, m, c, int(d.unit_caps[m][c]), take)
            self.distribute(d, m, last, remaining, take)
            return
        s = self.structure
        chosen = np.sort(np.append(full, last))
        starts = s.child_start[m][chosen]
        children = spans(starts, s.child_end[m][chosen] - starts)
        self.fill(d, m + 1, children, need * d.unit_size(m) // d.unit_size(m + 1), take)

    def consume(self, plan: PodSetPlan, take: IntArray, sign: int = -1) -> None:
        """Take (sign -1) or give back (+1) the capacity ``take`` pods of ``plan`` use."""
        used = np.flatnonzero(take)
        if used.size == 0:
            return
        counts = take[used]
        for resource, amount in plan.requests.items():
            row = self.view.resource_index(resource)
            if row is not None:
                self.free[row, used] += sign * counts * amount

    # ------------------------------------------------------------------ units

    def place_unit(self, unit: GroupPlan) -> tuple[list[_Placed], None] | tuple[None, Shortfall]:
        """Place one podset or group; on success the working capacity has been taken."""
        members = unit.members
        if not any(plan.count for plan in members):
            empty = np.zeros(self.structure.node_count, np.int64)
            return [_Placed(plan, empty, None) for plan in members], None
        demands = [self.demand(plan) for plan in members]
        for d in demands:
            if d.plan.count and not d.eligible.any():
                return None, Shortfall(demand=d, level=None, no_node=True)
        lowest = unit.required if unit.required is not None else 0
        for m in range(unit.preferred, lowest - 1, -1):
            ok: BoolArray | None = None
            for d in demands:
                need = d.plan.count // d.unit_size(m)
                fits = d.unit_caps[m] >= need
                ok = fits if ok is None else ok & fits
            assert ok is not None
            candidates = np.flatnonzero(ok)
            if candidates.size == 0:
                continue
            lead = max(demands, key=lambda d: d.plan.count)
            lead_need = lead.plan.count // lead.unit_size(m)
            if len(members) == 1:
                best = self.choose(lead, m, candidates, lead_need)
                take = np.zeros(self.structure.node_count, np.int64)
                self.distribute(lead, m, best, lead_need, take)
                self.consume(lead.plan, take)
                return [_Placed(lead.plan, take, m)], None
            ranked = self.ranked(lead, m, candidates, lead_need)
            for p in ranked[:MAX_GROUP_ATTEMPTS].tolist():
                placed = self.place_group_in(demands, m, p)
                if placed is not None:
                    return placed, None
        if unit.required is None:
            if all(d.root_cap >= d.plan.count // d.unit_size(-1) for d in demands):
                placed = self.place_group_in(demands, -1, 0)
                if placed is not None:
                    return placed, None
                return None, Shortfall(demand=demands[0], level=None, group=unit)
            short = next(d for d in demands if d.root_cap < d.plan.count // d.unit_size(-1))
            return None, Shortfall(demand=short, level=None)
        level = unit.required
        for d in demands:
            if not (d.unit_caps[level] >= d.plan.count // d.unit_size(level)).any():
                return None, Shortfall(demand=d, level=level)
        return None, Shortfall(demand=demands[0], level=level, group=unit)

    def place_group_in(self, demands: Sequence[Demand], m: int, p: int) -> list[_Placed] | None:
        """Place every member into domain ``p`` of level ``m``, one after another, the
        member with the most pods first (the leader then takes what is left)."""
        placed: list[_Placed] = []
        ordered = sorted(demands, key=lambda d: -d.plan.count)
        for index, d in enumerate(ordered):
            current = d if index == 0 else self.demand(d.plan)
            need = current.plan.count // current.unit_size(m)
            room = current.root_cap if m < 0 else int(current.unit_caps[m][p])
            if room < need:
                for done in placed:
                    self.consume(done.plan, done.take, +1)
                return None
            take = np.zeros(self.structure.node_count, np.int64)
            self.distribute(current, m, p, need, take)
            self.consume(current.plan, take)
            placed.append(_Placed(current.plan, take, None if m < 0 else m))
        order = {d.plan.name: index for index, d in enumerate(demands)}
        return sorted(placed, key=lambda done: order[done.plan.name])

    def place_partial(self, unit: GroupPlan) -> tuple[list[_Placed], None] | tuple[None, Shortfall]:
        """Place a lone podset with ``min_count`` < ``count``: as many pods as fit, at least
        ``min_count`` (in whole slices)."""
        plan = unit.members[0]
        placed, shortfall = self.place_unit(unit)
        if placed is not None:
            return placed, None
        step = plan.slice_size
        low, high = plan.min_count // step, plan.count // step - 1
        best: list[_Placed] | None = None
        while low <= high:
            middle = (low + high) // 2
            trial = GroupPlan(
                name=None,
                members=(plan.with_count(middle * step),),
                required=unit.required,
                preferred=unit.preferred,
            )
            attempt, _ = self.place_unit(trial)
            if attempt is None:
                high = middle - 1
                continue
            for done in attempt:
                self.consume(done.plan, done.take, +1)
            best = attempt
            low = middle + 1
        if best is None:
            minimum = GroupPlan(
                name=None,
                members=(plan.with_count(plan.min_count),),
                required=unit.required,
                preferred=unit.preferred,
            )
            _, shortfall = self.place_unit(minimum)
            assert shortfall is not None
            return None, shortfall
        for done in best:
            self.consume(done.plan, done.take)
        return best, None


def place(view: CapacityView, request: PlacementRequest) -> PlacementResult:
    """Place every podset of ``request`` on ``view``'s free capacity, all or nothing.

    Pure: the view is not changed. Raises :class:`~tidegate.placement.request.PlacementError`
    for an invalid request (unknown level, bad slice, negative count, unknown profile, …).
    """
    started = time.perf_counter()
    profile = resolve_profile(request.profile)
    units = normalize(view.levels, request)
    structure = view.structure()
    layout_done = time.perf_counter()
    placer = _Placer(view, structure, profile)
    placed: list[_Placed] = []
    for unit in units:
        lone = len(unit.members) == 1
        if lone and unit.members[0].min_count < unit.members[0].count:
            outcome, shortfall = placer.place_partial(unit)
        else:
            outcome, shortfall = placer.place_unit(unit)
        if outcome is None:
            assert shortfall is not None
            earlier = [p.plan.name for p in placed]
            return PlacementResult(
                fits=False,
                reason=explain(shortfall, placer.structure, view, placer.free, earlier),
                timings_ms=_timings(started, layout_done),
            )
        placed.extend(outcome)
    return _result(structure, placed, started, layout_done)


def _timings(started: float, layout_done: float) -> dict[str, float]:
    now = time.perf_counter()
    return {"layout": (layout_done - started) * 1e3, "total": (now - started) * 1e3}


def _result(
    structure: Structure, placed: Sequence[_Placed], started: float, layout_done: float
) -> PlacementResult:
    levels = list(structure.levels)
    assignments: dict[str, TopologyAssignment] = {}
    node_counts: dict[str, dict[str, int]] = {}
    levels_chosen: dict[str, str | None] = {}
    placed_counts: dict[str, int] = {}
    requests: dict[str, dict[str, int]] = {}
    for item in placed:
        name = item.plan.name
        positions = np.flatnonzero(item.take)
        counts = item.take[positions]
        leaves = structure.leaf_of_node[positions]
        domains: list[DomainCount] = []
        if positions.size:
            starts = np.flatnonzero(np.concatenate(([True], leaves[1:] != leaves[:-1])))
            sums = np.add.reduceat(counts, starts)
            leaf_paths = structure.paths[-1]
            domains = [
                DomainCount(values=list(leaf_paths[leaf]), count=count)
                for leaf, count in zip(leaves[starts].tolist(), sums.tolist(), strict=True)
            ]
        assignments[name] = TopologyAssignment(levels=levels, domains=domains)
        names = structure.node_names
        node_counts[name] = {
            names[p]: c for p, c in zip(positions.tolist(), counts.tolist(), strict=True)
        }
        levels_chosen[name] = None if item.level is None else levels[item.level]
        placed_counts[name] = int(counts.sum())
        requests[name] = dict(item.plan.requests)
    return PlacementResult(
        fits=True,
        assignments=assignments,
        node_counts=node_counts,
        levels_chosen=levels_chosen,
        placed=placed_counts,
        requests=requests,
        timings_ms=_timings(started, layout_done),
    )


def apply(view: CapacityView, result: PlacementResult) -> None:
    """Reserve on ``view`` the capacity ``result`` takes (admitted, pods not bound yet)."""
    for node, amount in result.usage().items():
        view.reserve(node, amount)


def release(view: CapacityView, result: PlacementResult) -> None:
    """Give back what :func:`apply` reserved for ``result``."""
    for node, amount in result.usage().items():
        if node in view:
            view.unreserve(node, amount)
