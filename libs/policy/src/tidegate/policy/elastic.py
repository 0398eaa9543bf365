"""Elastic workloads: a running workload that grows or shrinks (Kueue KEP-77, workload slices).

A workload is admitted whole (or at its minimum) once. Afterwards its size may change: a
Deployment or ReplicaSet scaled, a Deployment rolling out (its surge pods are a temporary
growth, its old pods leaving a shrink), a Job's parallelism changed, a PodGroup gaining or
losing members. Admission follows the size with a **resize**: a new
:class:`~tidegate.model.Admitted` that ``replaces`` the one in force, with ``resized`` set, the
whole new assignment and the whole new charge (KEP-77's new workload slice that supersedes the
old one). Everything that makes an admission exactly-once (the ledger record, the outbox, the
fences, consumers keeping the newest sequence) applies to it unchanged.

**Growth** (desired pods > assigned slots) is admitted per pod, as a *delta*:

- the quota check covers only what the new charge adds to the old one;
- the delta is placed next to the pods the workload already has: first inside the narrowest
  domain holding all its slots, then anywhere inside its *required* domain (the domain of its
  assignment at the podset's required level; for ``auto`` the narrowest domain holding its
  slots), never outside it: a workload required in one rack grows inside that rack or its
  delta waits with reason ``RequiredDomainFull``;
- when not every extra pod fits, as many as fit are admitted now (the largest count that
  passes quota and placement) and the rest waits with a reason;
- slices and podset groups shape the first placement only; the delta is placed by the
  required domain (as replacements after node failures are).

**Shrink** (desired pods < assigned slots) follows the pods: the ungater, which knows which
slots no live pod holds, names them in a :class:`~tidegate.model.ReplaceRequested` with
``give_back`` set; admission drops at most ``assigned − desired`` of them and charges the rest.
Only owners sized by their spec shrink (:data:`SPEC_SIZED_KINDS`).

Pure: :class:`tidegate.policy.admission.Admission` calls these with its state.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from tidegate.model import (
    Admitted,
    DomainCount,
    PodSetSpec,
    PreemptRequested,
    TopologyAssignment,
    TopologyRequest,
    WorkloadState,
)
from tidegate.policy.replacement import required_prefix, shared_prefix


def assigned_counts(admitted: Admitted) -> dict[str, int]:
    """Podset name → slots the admission gives it."""
    return {
        name: sum(max(d.count, 0) for d in assignment.domains)
        for name, assignment in admitted.assignments.items()
    }


def growth(workload: WorkloadState, admitted: Admitted) -> dict[str, int]:
    """Podset name → pods the workload wants beyond its slots (only podsets that grow)."""
    counts = assigned_counts(admitted)
    return {
        podset.name: podset.count - counts.get(podset.name, 0)
        for podset in workload.podsets
        if podset.count > counts.get(podset.name, 0)
    }


def surplus(workload: WorkloadState, admitted: Admitted) -> dict[str, int]:
    """Podset name → slots beyond what the workload wants now (only podsets that shrank; a
    podset the workload no longer has wants none)."""
    wanted = {podset.name: max(podset.count, 0) for podset in workload.podsets}
    return {
        name: count - wanted.get(name, 0)
        for name, count in assigned_counts(admitted).items()
        if count > wanted.get(name, 0)
    }


SPEC_SIZED_KINDS: Final = frozenset({"Deployment", "ReplicaSet", "Job", "JobSet"})
"""Owner kinds whose size is their spec (replicas, parallelism): when it drops, the slots their
pods leave are given back. Workloads sized by the pods seen (PodGroups, bare Pods, other
owners) keep their slots when a member goes, so the member its controller re-creates takes
its slot back; their room comes back when they are released."""


def gives_back(workload: WorkloadState) -> bool:
    """Whether ``workload`` gives back the slots its pods leave when it shrinks."""
    return workload.owner_kind in SPEC_SIZED_KINDS


def common_prefix(assignment: TopologyAssignment) -> list[str]:
    """The values (widest first) of the narrowest domain holding every slot of ``assignment``."""
    return shared_prefix([d.values for d in assignment.domains if d.count > 0])


def pinned(spec: PodSetSpec, levels: Sequence[str], prefix: Sequence[str]) -> PodSetSpec:
    """``spec`` reduced to what a delta needs, pinned inside the domain ``prefix`` of
    ``levels`` (nothing pinned for an empty prefix): no slices, groups or minimum."""
    selector = {**spec.node_selector, **dict(zip(levels, prefix, strict=False))}
    preferred = spec.topology.preferred
    if (
        prefix
        and preferred not in (None, "auto")
        and (preferred not in levels or levels.index(preferred) < len(prefix) - 1)
    ):
        preferred = None  # wider than the domain the pods are pinned to
    topology = (
        TopologyRequest(required=levels[len(prefix) - 1], preferred=preferred)
        if prefix
        else TopologyRequest(
            required=spec.topology.required,
            preferred=preferred,
            unconstrained=spec.topology.unconstrained,
        )
    )
    return msgspec.structs.replace(
        spec,
        min_count=None,
        node_selector=selector,
        topology=topology,
        group=None,
        pods_per_index_group=None,
    )


def delta_shapes(spec: PodSetSpec, assignment: TopologyAssignment | None) -> list[PodSetSpec]:
    """The podsets to try for a delta of ``spec``, in order (counts to be set by the caller):
    next to its slots, then anywhere inside its required domain. Without slots yet (a podset
    left out of an admission at its minimum), its own request.

    Raises :class:`~tidegate.policy.replacement.ReplacementError` when the required level is
    not a level of the assignment.
    """
    if assignment is None or not any(d.count > 0 for d in assignment.domains):
        return [pinned(spec, [], [])]
    levels = assignment.levels
    required = required_prefix(spec, assignment)
    near = common_prefix(assignment)
    shapes = []
    if len(near) > len(required):
        shapes.append(pinned(spec, levels, near))
    shapes.append(pinned(spec, levels, required))
    return shapes


def grown(assignment: TopologyAssignment | None, placed: TopologyAssignment) -> TopologyAssignment:
    """``assignment`` with the slots of ``placed`` added (a domain already there grows)."""
    if assignment is None:
        return TopologyAssignment(levels=list(placed.levels), domains=list(placed.domains))
    domains = [DomainCount(values=list(d.values), count=d.count) for d in assignment.domains]
    for extra in placed.domains:
        for index, domain in enumerate(domains):
            if domain.values == extra.values:
                domains[index] = DomainCount(values=domain.values, count=domain.count + extra.count)
                break
        else:
            domains.append(DomainCount(values=list(extra.values), count=extra.count))
    return TopologyAssignment(levels=list(assignment.levels), domains=domains)


def shrunk(
    assignment: TopologyAssignment, freed: Iterable[DomainCount], at_most: int
) -> tuple[TopologyAssignment, int]:
    """``assignment`` without up to ``at_most`` of the ``freed`` slots (named by domain; the
    assignment's own counts bound them); returns it and how many slots were taken out."""
    left = max(at_most, 0)
    take: dict[tuple[str, ...], int] = {}
    for domain in freed:
        key = tuple(domain.values)
        take[key] = take.get(key, 0) + max(domain.count, 0)
    removed = 0
    out: list[DomainCount] = []
    for domain in assignment.domains:
        key = tuple(domain.values)
        cut = min(take.get(key, 0), domain.count, left)
        take[key] = take.get(key, 0) - cut
        left -= cut
        removed += cut
        if domain.count - cut > 0:
            out.append(DomainCount(values=list(domain.values), count=domain.count - cut))
    return TopologyAssignment(levels=list(assignment.levels), domains=out), removed


def sized_podsets(workload: WorkloadState, counts: Mapping[str, int]) -> list[PodSetSpec]:
    """The workload's podsets at ``counts`` (podsets not named are left out): what a resized
    admission charges, at the workload's current per-pod requests."""
    return [
        msgspec.structs.replace(p, count=counts[p.name], min_count=None)
        for p in workload.podsets
        if counts.get(p.name, 0) > 0
    ]


def growth_still_wanted(
    request: PreemptRequested, workload: WorkloadState, admitted: Admitted
) -> list[PodSetSpec] | None:
    """What of a growth preempt ``request`` (``podsets`` set) still needs room, given the
    admission in force ``admitted`` (the request's uid) and the workload now: its podsets
    capped at the workload's growth. Empty when the request is stale: a later admission
    replaced the one it grows (the growth was admitted, or a resize or move happened) or
    the workload shrank back. None when ``admitted`` is older than the one the request grows
    (the caller has not seen that admission yet). A request without ``admitted_sequence``
    (an older writer) is checked by the growth alone."""
    grows = request.admitted_sequence
    if grows is not None and admitted.sequence < grows:
        return None
    if grows is not None and admitted.sequence > grows:
        return []
    wanted = growth(workload, admitted)
    out = []
    for spec in request.podsets:
        extra = min(spec.count, wanted.get(spec.name, 0))
        if extra > 0:
            out.append(msgspec.structs.replace(spec, count=extra))
    return out
