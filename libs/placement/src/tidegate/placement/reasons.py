"""Why a gang does not fit, in a sentence a user understands.

Kueue's lesson (STYLE.md): a reason that carries numbers is actionable. Every sentence names
the podset, the level it needed one domain of, how much the best such domain holds and which
resource ran out, e.g. ``workers: needs 16 pods in one example.com/rack; the best rack fits 12
(limited by nvidia.com/gpu)``. When no node can take the pods at all it says which filter
(readiness, labels, taints) excluded them.

This module only words what :mod:`tidegate.placement.engine` found; it decides nothing.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from tidegate.placement.capacity import PODS, CapacityView, tolerates
from tidegate.placement.request import GroupPlan, PodSetPlan
from tidegate.placement.structure import Structure

if TYPE_CHECKING:
    from tidegate.placement.engine import Demand

IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Shortfall:
    """What the engine could not do: which podset, at which level (None: the whole cluster)."""

    demand: "Demand"
    level: int | None
    no_node: bool = False
    """No node may run the podset at all (readiness, labels, selector, taints)."""
    group: GroupPlan | None = None
    """Set when each podset of the group fits alone but not all of them together."""


def short_name(level: str) -> str:
    """How a level reads in a sentence: ``example.com/rack`` → ``rack``, hostname → ``node``."""
    short = level.rsplit("/", 1)[-1]
    return "node" if short == "hostname" else short


def explain(
    shortfall: Shortfall,
    structure: Structure,
    view: CapacityView,
    free: IntArray,
    earlier: list[str],
) -> str:
    """The reason sentence for ``shortfall``; ``free`` is the working capacity (per node
    position) and ``earlier`` the podsets of the gang already placed on it."""
    plan = shortfall.demand.plan
    if shortfall.no_node:
        text = _no_node(plan, structure, view)
    elif shortfall.group is not None:
        text = _group(shortfall.group, shortfall.level, structure)
    else:
        text = _short(shortfall, structure, view, free)
    if earlier:
        text += f", after placing {', '.join(earlier)}"
    return text


def _no_node(plan: PodSetPlan, structure: Structure, view: CapacityView) -> str:
    name = plan.name
    rows = structure.row_of_pos
    ready = view.ready_mask()[rows]
    if not ready.any():
        return (
            f"{name}: no node can take pods: none is ready, not cordoned and labelled with "
            f"every topology level ({', '.join(structure.levels)})"
        )
    if plan.selector_conflicts:
        return (
            f"{name}: its node selector asks for two different values of "
            f"{plan.selector_conflicts[0]}"
        )
    matching = ready.copy()
    for label, value in plan.node_selector.items():
        matching &= view.selector_mask(label, value)[rows]
    if not matching.any():
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(plan.node_selector.items()))
        return f"{name}: no schedulable node has the labels {wanted}"
    example = ""
    for position in np.flatnonzero(matching)[:1].tolist():
        node = structure.node_names[position]
        for candidate in view.taints(node):
            if not tolerates(plan.tolerations, candidate):
                example = f" (e.g. {node} has {candidate.key}={candidate.value}:{candidate.effect})"
                break
    return f"{name}: no schedulable node that matches it tolerates its taints{example}"


def _group(group: GroupPlan, level: int | None, structure: Structure) -> str:
    members = ", ".join(plan.name for plan in group.members)
    if level is None:
        return f"group {group.name} ({members}): the cluster has no room for all of it together"
    label = structure.levels[level]
    return f"group {group.name} ({members}): no single {label} can hold all of it together"


def _short(shortfall: Shortfall, structure: Structure, view: CapacityView, free: IntArray) -> str:
    d = shortfall.demand
    plan = d.plan
    level = shortfall.level
    sliced = plan.slice_level >= 0
    unit = d.unit_size(-1 if level is None else level)
    need = plan.count // unit
    at_least = "at least " if plan.count < plan.spec.count else ""
    if sliced:
        slice_label = structure.levels[plan.slice_level]
        wanted = f"{at_least}{need} slices of {plan.slice_size} pods, each in one {slice_label}"
        noun = " slices"
    else:
        wanted = f"{at_least}{plan.count} pods"
        noun = ""
    if level is None:
        start, end = 0, structure.node_count
        text = f"{plan.name}: needs {wanted}; the cluster fits {d.root_cap}{noun}"
        best = d.root_cap
    else:
        caps = d.unit_caps[level]
        label = structure.levels[level]
        if caps.size:
            p = int(np.argmax(caps))
            best = int(caps[p])
            start, end = int(structure.node_start[level][p]), int(structure.node_end[level][p])
        else:
            best, start, end = 0, 0, 0
        scope = "one domain of any level" if plan.required_auto else f"one {label}"
        text = (
            f"{plan.name}: needs {wanted} in {scope}; "
            f"the best {short_name(label)} fits {best}{noun}"
        )
    limit = _limit(plan, d.eligible[start:end], free[:, start:end], view, need * unit)
    if sliced and limit is None:
        limit = (
            f"how free capacity is split across {short_name(structure.levels[plan.slice_level])}s"
        )
    return f"{text} (limited by {limit or 'how free capacity is split across nodes'})"


def _limit(
    plan: PodSetPlan,
    eligible: NDArray[np.bool_],
    free: IntArray,
    view: CapacityView,
    pods: int,
) -> str | None:
    """The resource that runs out first over the eligible nodes of a domain, or None when
    each resource alone would suffice (the room is lost to fragmentation)."""
    if not eligible.any():
        return "no eligible node in it"
    room: dict[str, int] = {}
    for resource, amount in plan.requests.items():
        row = view.resource_index(resource)
        if row is None:
            return f"{resource}: no node offers it"
        per_node = np.maximum(free[row][eligible] // amount, 0)
        room[resource] = int(per_node.sum())
    least = min(room.values())
    if least >= pods:
        return None
    scarcest = sorted(resource for resource, value in room.items() if value == least)
    if scarcest == [PODS]:
        return "the nodes' pod limit"
    return " and ".join(resource for resource in scarcest if resource != PODS)
