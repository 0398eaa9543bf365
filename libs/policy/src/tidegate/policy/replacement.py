"""Replacement slots after node failures: what to place, and the admission that results.

When nodes holding slots of an admitted workload are deleted or go NotReady, or the scheduler
finds no room for pods released into them (``ReplaceRequested.cause``), the ungater asks for
replacements (:class:`~tidegate.model.ReplaceRequested`, docs/ungater.md#node-failure).
Admission answers by placing only the lost slots again, **inside the workload's required
domain**, and publishing the whole new assignment:

- the required domain of a podset is its assignment's domain at the podset's required level
  (``topology.required``), or, for ``"auto"``, the narrowest domain holding all its slots; a
  podset without a required level may go anywhere in its Topology (its preferred level still
  asks for closeness);
- the replacement podset is the original with the lost count, pinned to that domain through
  its node selector (and to the admitted card model), without slices or groups (those shaped
  the original placement, which the kept pods still follow);
- failed nodes are taken out of the capacity view before placing;
- the new assignment is the old one minus the lost slots, plus the new domains.

If the lost slots cannot be placed the workload is evicted whole and re-queued (admission
releases it with ``evict_pods``). Pure: :meth:`tidegate.policy.admission.Admission.replace`
calls these with its state.
"""

from collections.abc import Mapping, Sequence

import msgspec

from tidegate.model import (
    Admitted,
    DomainCount,
    PodSetSpec,
    ReplaceRequested,
    TopologyAssignment,
    TopologyRequest,
    WorkloadState,
)


class ReplacementError(ValueError):
    """The request cannot be turned into a placement; the message says why."""


def lost_slots_cause(request: ReplaceRequested) -> str:
    """Why the request's slots are lost, in words for decision messages."""
    nodes = ", ".join(request.nodes) or "gone"
    if request.cause == "Unschedulable":
        return f"the scheduler found no room for released pods on nodes {nodes}"
    return f"slots lost with nodes {nodes}"


def shared_prefix(domains: Sequence[Sequence[str]]) -> list[str]:
    """The leading values (widest level first) that every one of ``domains`` shares."""
    prefix: list[str] = []
    if not domains:
        return prefix
    for position, value in enumerate(domains[0]):
        if all(len(d) > position and d[position] == value for d in domains):
            prefix.append(value)
        else:
            break
    return prefix


def required_prefix(podset: PodSetSpec, assignment: TopologyAssignment) -> list[str]:
    """The values (widest first) of the domain the podset's replacements must stay inside;
    empty when it has no required level."""
    required = podset.topology.required
    domains = [d.values for d in assignment.domains]
    if required is None or not domains:
        return []
    levels = assignment.levels
    if required == "auto":
        return shared_prefix(domains)
    if required not in levels:
        raise ReplacementError(
            f"podset {podset.name}: required level {required} is not a level of the assignment"
        )
    return list(domains[0][: levels.index(required) + 1])


def replacement_podsets(
    workload: WorkloadState, admitted: Admitted, request: ReplaceRequested
) -> list[PodSetSpec]:
    """The podsets to place: per podset with lost slots, a copy counting only those."""
    specs = {p.name: p for p in workload.podsets}
    out: list[PodSetSpec] = []
    for name, lost in sorted(request.lost.items()):
        spec = specs.get(name)
        assignment = admitted.assignments.get(name)
        if spec is None or assignment is None:
            raise ReplacementError(f"podset {name} is not part of the admission")
        count = _lost_count(assignment, lost)
        if count == 0:
            continue
        prefix = required_prefix(spec, assignment)
        levels = assignment.levels
        selector = {**spec.node_selector, **dict(zip(levels, prefix, strict=False))}
        preferred = spec.topology.preferred
        if preferred not in (None, "auto") and (
            preferred not in levels or levels.index(preferred) < len(prefix) - 1
        ):
            preferred = None  # wider than the domain the pods are pinned to
        topology = TopologyRequest(
            required=levels[len(prefix) - 1] if prefix else None,
            preferred=preferred,
            unconstrained=spec.topology.unconstrained and not prefix,
        )
        out.append(
            msgspec.structs.replace(
                spec,
                count=count,
                min_count=None,
                node_selector=selector,
                topology=topology,
                group=None,
                pods_per_index_group=None,
            )
        )
    return out


def merged_assignments(
    admitted: Admitted,
    request: ReplaceRequested,
    placed: Mapping[str, TopologyAssignment],
) -> dict[str, TopologyAssignment]:
    """The admission's assignments with the lost slots taken out and ``placed`` added."""
    out: dict[str, TopologyAssignment] = {}
    for name, assignment in admitted.assignments.items():
        remaining = _subtract(assignment.domains, request.lost.get(name, []))
        added = placed.get(name)
        if added is not None:
            for domain in added.domains:
                remaining = _add(remaining, domain)
        out[name] = TopologyAssignment(levels=assignment.levels, domains=remaining)
    return out


def _lost_count(assignment: TopologyAssignment, lost: Sequence[DomainCount]) -> int:
    held = {tuple(d.values): 0 for d in assignment.domains}
    for domain in assignment.domains:
        held[tuple(domain.values)] += domain.count
    return sum(min(max(d.count, 0), held.get(tuple(d.values), 0)) for d in lost)


def _subtract(domains: Sequence[DomainCount], lost: Sequence[DomainCount]) -> list[DomainCount]:
    left = {tuple(d.values): max(d.count, 0) for d in lost}
    out: list[DomainCount] = []
    for domain in domains:
        key = tuple(domain.values)
        taken = min(left.get(key, 0), domain.count)
        left[key] = left.get(key, 0) - taken
        if domain.count - taken > 0:
            out.append(DomainCount(values=list(domain.values), count=domain.count - taken))
    return out


def _add(domains: list[DomainCount], extra: DomainCount) -> list[DomainCount]:
    for index, domain in enumerate(domains):
        if domain.values == extra.values:
            domains[index] = DomainCount(
                values=list(domain.values), count=domain.count + extra.count
            )
            return domains
    return [*domains, DomainCount(values=list(extra.values), count=extra.count)]
