"""What a caller asks placement and what it answers, and the checks that make a request valid.

A :class:`PlacementRequest` is a gang: the podsets (:class:`tidegate.model.PodSetSpec`) that
must all be placed together, the profile that chooses among domains, and labels every pod
needs. Before anything is placed, :func:`normalize` checks the request against the topology
and turns each podset into a :class:`PodSetPlan` with level names resolved to level indexes;
anything wrong is a :class:`PlacementError` whose message names the podset and the field, so
a service can put it on the workload's condition as it is.

This module does not place anything (:mod:`tidegate.placement.engine` does).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tidegate.model import PodSetSpec, Resources, Toleration, TopologyAssignment
from tidegate.placement.capacity import PODS

PROFILES: Final = ("best-fit", "spread")
"""Placement profiles: how to choose among domains that can all hold a podset.

- ``best-fit`` (default): the domain with the least room that still fits, so large holes stay
  free for large gangs (bin packing).
- ``spread``: the domain with the most room, so load spreads over the cluster.

Both keep every podset as compact as its topology request allows.
"""

AUTO: Final = "auto"
"""Topology level value meaning "the narrowest level whose single domain can hold it"."""


class PlacementError(ValueError):
    """An invalid placement request. The message names the podset and field at fault."""

    def __init__(self, message: str, *, podset: str | None = None, field: str | None = None):
        """``message`` is complete on its own; ``podset``/``field`` let callers build a path."""
        super().__init__(message)
        self.podset = podset
        self.field = field
        self.detail = message


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """A gang to place: every podset is placed, or none is."""

    podsets: Sequence[PodSetSpec]
    """Placed in this order; capacity one podset takes is gone for the next."""
    profile: str | None = "best-fit"
    """One of :data:`PROFILES`; None means the default."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Labels every pod of the gang needs besides its podset's own (e.g. the GPU model)."""


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """Where each podset goes, or why the gang does not fit."""

    fits: bool
    assignments: dict[str, TopologyAssignment] = field(default_factory=dict)
    """Podset name → domains at the narrowest level, in rank order (empty when not fits)."""
    node_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """Podset name → node name → pods, so callers can reserve exactly what was placed."""
    reason: str | None = None
    """When it does not fit: a sentence naming the podset, the level, the best domain's room
    and what is short."""
    levels_chosen: dict[str, str | None] = field(default_factory=dict)
    """Podset name → the level of the single domain that holds it (what "auto" resolved to),
    or None when it is spread over several top-level domains."""
    placed: dict[str, int] = field(default_factory=dict)
    """Podset name → pods placed (less than ``count`` only when ``min_count`` allowed it)."""
    requests: dict[str, Resources] = field(default_factory=dict)
    """Podset name → per-pod requests, so :func:`apply` can reserve the result."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Where the time went, for diagnostics."""

    def usage(self) -> dict[str, Resources]:
        """Node name → capacity the result takes there (per-pod requests + 1 pod slot, × pods)."""
        out: dict[str, Resources] = {}
        for podset, nodes in self.node_counts.items():
            per_pod = _per_pod(self.requests.get(podset, {}))
            for node, count in nodes.items():
                taken = out.setdefault(node, {})
                for resource, amount in per_pod.items():
                    taken[resource] = taken.get(resource, 0) + amount * count
        return out


def _per_pod(requests: Mapping[str, int]) -> Resources:
    per_pod = {resource: amount for resource, amount in requests.items() if amount > 0}
    per_pod.setdefault(PODS, 1)
    return per_pod


@dataclass(frozen=True, slots=True)
class PodSetPlan:
    """A validated podset with its topology request resolved to level indexes."""

    spec: PodSetSpec
    count: int
    min_count: int
    requests: Resources
    """Per-pod requests above zero, ``pods`` included (1 unless the podset says otherwise)."""
    required: int | None
    """Index of the level all pods must share one domain of; None when nothing is required."""
    required_auto: bool
    """Required level was "auto": any single domain, the narrowest that fits."""
    preferred: int
    """Index of the level the search for a single domain starts from (narrowest by default)."""
    slice_size: int
    """Pods per slice (1 when the podset is not sliced)."""
    slice_level: int
    """Index of the level each slice must sit inside; -1 when not sliced."""
    node_selector: Mapping[str, str]
    """The podset's nodeSelector merged with the request's."""
    tolerations: tuple[Toleration, ...]
    selector_conflicts: tuple[str, ...] = ()
    """Labels the podset and the request want with different values: no node can match."""

    @property
    def name(self) -> str:
        """The podset's name."""
        return self.spec.name

    def with_count(self, count: int) -> "PodSetPlan":
        """The same plan for fewer pods (used when ``min_count`` allows a partial podset)."""
        return PodSetPlan(
            spec=self.spec,
            count=count,
            min_count=self.min_count,
            requests=self.requests,
            required=self.required,
            required_auto=self.required_auto,
            preferred=self.preferred,
            slice_size=self.slice_size,
            slice_level=self.slice_level,
            node_selector=self.node_selector,
            tolerations=self.tolerations,
            selector_conflicts=self.selector_conflicts,
        )


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """Podsets placed in one domain together (one podset, or a leader + workers group)."""

    name: str | None
    """The group's name; None for a podset that is not in a group."""
    members: tuple[PodSetPlan, ...]
    required: int | None
    """Narrowest level any member requires: the whole group shares one domain of it."""
    preferred: int
    """Narrowest preferred level of the members: where the search starts."""


def resolve_profile(profile: str | None) -> str:
    """Return the profile to use (the default for None); PlacementError for an unknown one."""
    if profile is None:
        return PROFILES[0]
    if profile not in PROFILES:
        raise PlacementError(
            f"profile: unknown profile {profile!r} (known: {', '.join(PROFILES)})",
            field="profile",
        )
    return profile


def normalize(levels: Sequence[str], request: PlacementRequest) -> list[GroupPlan]:
    """Validate ``request`` against ``levels`` and return its placement units in order.

    A group is placed where its first member appears. Raises :class:`PlacementError`.
    """
    resolve_profile(request.profile)
    plans: list[PodSetPlan] = []
    seen: set[str] = set()
    for index, spec in enumerate(request.podsets):
        if not spec.name:
            raise PlacementError(
                f"podsets[{index}].name: a podset needs a name", field=f"podsets[{index}].name"
            )
        if spec.name in seen:
            raise PlacementError(
                f"{spec.name}: podset name used twice", podset=spec.name, field="name"
            )
        seen.add(spec.name)
        plans.append(_plan(levels, spec, request.node_selector))
    units: list[GroupPlan] = []
    grouped: dict[str, list[PodSetPlan]] = {}
    order: list[str | PodSetPlan] = []
    for plan in plans:
        group = plan.spec.group
        if group is None:
            order.append(plan)
        else:
            if group not in grouped:
                grouped[group] = []
                order.append(group)
            grouped[group].append(plan)
    for item in order:
        if isinstance(item, PodSetPlan):
            units.append(
                GroupPlan(
                    name=None, members=(item,), required=item.required, preferred=item.preferred
                )
            )
        else:
            members = tuple(grouped[item])
            required_levels = [m.required for m in members if m.required is not None]
            required = max(required_levels) if required_levels else None
            preferred = max(m.preferred for m in members)
            units.append(
                GroupPlan(name=item, members=members, required=required, preferred=preferred)
            )
    return units


def _level(levels: Sequence[str], podset: str, field_name: str, value: str) -> int:
    if value in levels:
        return list(levels).index(value)
    raise PlacementError(
        f"{podset}: topology.{field_name}: unknown level {value!r} "
        f"(levels: {', '.join(levels)}, or {AUTO!r})",
        podset=podset,
        field=f"topology.{field_name}",
    )


def _plan(levels: Sequence[str], spec: PodSetSpec, extra: Mapping[str, str]) -> PodSetPlan:
    name = spec.name
    narrowest = len(levels) - 1

    def fail(field_name: str, message: str) -> PlacementError:
        return PlacementError(f"{name}: {field_name}: {message}", podset=name, field=field_name)

    if spec.count < 0:
        raise fail("count", f"{spec.count} is negative")
    min_count = spec.count if spec.min_count is None else spec.min_count
    if min_count < 0 or min_count > spec.count:
        raise fail("min_count", f"{min_count} is not between 0 and count ({spec.count})")
    requests: Resources = {}
    for resource, amount in spec.requests.items():
        if amount < 0:
            raise fail(f"requests.{resource}", f"{amount} is negative")
        if amount > 0:
            requests[resource] = amount
    requests.setdefault(PODS, 1)

    topology = spec.topology
    required: int | None = None
    required_auto = False
    if topology.required is not None:
        if topology.required == AUTO:
            required, required_auto = 0, True
        else:
            required = _level(levels, name, "required", topology.required)
    preferred = narrowest
    if topology.preferred is not None and topology.preferred != AUTO:
        preferred = _level(levels, name, "preferred", topology.preferred)
        if required is not None and not required_auto and preferred < required:
            raise fail(
                "topology.preferred",
                f"{topology.preferred} is wider than the required level {topology.required}",
            )
    if topology.unconstrained and (topology.required is not None):
        raise fail("topology.unconstrained", "cannot be combined with a required level")

    slice_size = 1
    slice_level = -1
    slice_field = "topology.slice_size"
    if topology.slice_size is not None or topology.slice_required is not None:
        if topology.slice_size is None or topology.slice_required is None:
            raise fail(
                "topology.slice_size",
                "slice_size and slice_required must be given together",
            )
        slice_size = topology.slice_size
        slice_level = _level(levels, name, "slice_required", topology.slice_required)
        podset_level = required if (required is not None and not required_auto) else None
        if podset_level is None and topology.preferred not in (None, AUTO):
            podset_level = preferred
        if podset_level is not None and slice_level < podset_level:
            raise fail(
                "topology.slice_required",
                f"{topology.slice_required} is wider than the podset's level "
                f"{levels[podset_level]}",
            )
    elif spec.pods_per_index_group is not None and required is not None and not required_auto:
        # JobSet replicated jobs: the requirement holds for each child job, not the podset.
        slice_size = spec.pods_per_index_group
        slice_level = required
        slice_field = "pods_per_index_group"
        required = None
    if slice_level >= 0:
        if slice_size <= 0:
            raise fail(slice_field, f"{slice_size} must be positive")
        if slice_size > spec.count:
            raise fail(slice_field, f"{slice_size} is larger than count {spec.count}")
        if spec.count % slice_size:
            raise fail(slice_field, f"{slice_size} does not divide count {spec.count}")
        if min_count % slice_size:
            raise fail("min_count", f"{min_count} is not a multiple of {slice_field} {slice_size}")

    selector = dict(extra)
    conflicts = tuple(sorted(k for k, v in spec.node_selector.items() if selector.get(k, v) != v))
    selector.update(spec.node_selector)
    return PodSetPlan(
        spec=spec,
        count=spec.count,
        min_count=min_count,
        requests=requests,
        required=required,
        required_auto=required_auto,
        preferred=preferred,
        slice_size=slice_size,
        slice_level=slice_level,
        node_selector=selector,
        tolerations=tuple(spec.tolerations),
        selector_conflicts=conflicts,
    )
