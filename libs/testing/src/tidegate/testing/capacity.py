"""The capacity view a simulated cluster calls for, recomputed from its own objects.

Why: the topology-cache's end-to-end test and the whole-system tests both check the capacity
view on the bus against the truth, and the truth is the simulator's store, not another
accounting fed the same messages (that would repeat the services' mistakes). This module is the
one recomputation they share: per node, allocatable minus the requests of its bound pods that
have not finished (one ``pods`` slot each), and whether it is schedulable (Ready, not cordoned,
no taint Kubernetes sets for a node condition, every level label present); per domain, the
number of schedulable nodes under it and the sum of their free capacity.
:func:`published_capacity` puts what the bus says in the same shape, and
:func:`capacity_differences` names every difference.

It reads the store (in this process, read only) or Node and Pod objects listed from any API
server (:func:`capacity_of`) and does no I/O; it does not follow the bus
(the tests do) and knows nothing of placement profiles or topologies other than one.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple, cast

from tidegate.model import CapacityDomain, CapacityNode, Message, parse_resources
from tidegate.model import resources as res
from tidegate.model.pods import TERMINAL_PHASES
from tidegate.placement import DEFAULT_MAX_PODS
from tidegate.placement.accounting import (
    UNSCHEDULABLE_TAINTS,
    CapacityKey,
    DomainKey,
    NodeKey,
    key_of,
)
from tidegate.sim.kinds import NODES, PODS
from tidegate.sim.store import Store

DEFAULT_TOPOLOGY: Final = "default"
"""The Topology the simulator creates for its node levels (and the capacity view's name)."""

HARD_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep new pods off a node."""


class NodeFigures(NamedTuple):
    """What a node's capacity record says, reduced to what is compared."""

    domain: tuple[str, ...]
    """The node's level values, widest first."""
    free: dict[str, int]
    """Allocatable minus what its bound, unfinished pods request."""
    schedulable: bool
    """Whether new pods may land on it."""


class DomainFigures(NamedTuple):
    """What a domain's capacity record says, reduced to what is compared."""

    nodes: int
    """Schedulable nodes under the domain."""
    free: dict[str, int]
    """Their free capacity, summed (zero amounts left out)."""


CapacityFigures = dict[CapacityKey, NodeFigures | DomainFigures]
"""A capacity view, record by record."""


def pod_requests(pod: Mapping[str, object]) -> dict[str, int]:
    """A pod's requests as kube-scheduler counts them: the sum of its containers, at least its
    largest init container, plus its overhead (no ``pods`` slot)."""
    spec = cast(Mapping[str, Any], pod).get("spec", {})
    total: dict[str, int] = {}
    for container in spec.get("containers", []):
        total = res.add(total, parse_resources(container.get("resources", {}).get("requests")))
    for container in spec.get("initContainers", []):
        init = parse_resources(container.get("resources", {}).get("requests"))
        total = {r: max(total.get(r, 0), init.get(r, 0)) for r in {*total, *init}}
    return res.add(total, parse_resources(spec.get("overhead")))


def node_schedulable(node: Mapping[str, object]) -> bool:
    """Ready, not cordoned, and without a taint Kubernetes sets for a node condition."""
    spec = cast(Mapping[str, Any], node).get("spec", {})
    status = cast(Mapping[str, Any], node).get("status", {})
    ready = all(
        c.get("status") == "True" for c in status.get("conditions", []) if c.get("type") == "Ready"
    )
    tainted = any(
        t.get("key") in UNSCHEDULABLE_TAINTS and t.get("effect") in HARD_EFFECTS
        for t in spec.get("taints", [])
    )
    return ready and not spec.get("unschedulable", False) and not tainted


def recompute_capacity(
    store: Store, levels: Sequence[str], *, topology: str = DEFAULT_TOPOLOGY
) -> CapacityFigures:
    """The capacity view ``store``'s nodes and pods call for (module docstring), for the
    topology named ``topology`` whose level labels are ``levels``, widest first."""
    return capacity_of(
        cast(Iterable[Mapping[str, Any]], store.objects(NODES.key)),
        cast(Iterable[Mapping[str, Any]], store.objects(PODS.key)),
        levels,
        topology=topology,
    )


def capacity_of(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    levels: Sequence[str],
    *,
    topology: str = DEFAULT_TOPOLOGY,
    reserved: Mapping[str, Mapping[str, int]] | None = None,
) -> CapacityFigures:
    """The capacity view Node and Pod objects (as any API server lists them) call for, for
    the topology named ``topology`` whose level labels are ``levels``, widest first; with
    ``reserved`` (node → resources held for admitted pods not bound yet), less that."""
    used: dict[str, dict[str, int]] = {}
    for node_name, amount in (reserved or {}).items():
        used[node_name] = res.add(used.get(node_name, {}), amount)
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if node and pod.get("status", {}).get("phase") not in TERMINAL_PHASES:
            used[node] = res.add(res.add(used.get(node, {}), pod_requests(pod)), {"pods": 1})
    out: CapacityFigures = {}
    domains: dict[DomainKey, tuple[int, dict[str, int]]] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        allocatable = parse_resources(node.get("status", {}).get("allocatable"))
        allocatable.setdefault("pods", DEFAULT_MAX_PODS)
        taken = used.get(name, {})
        free = {
            r: allocatable.get(r, 0) - taken.get(r, 0)
            for r in sorted({*allocatable, *taken})
            if r in allocatable or taken.get(r, 0)
        }
        path = tuple(labels[level] for level in levels if level in labels)
        schedulable = node_schedulable(node) and len(path) == len(levels)
        out[NodeKey(topology, name)] = NodeFigures(path, free, schedulable)
        if schedulable:
            for depth in range(len(levels)):
                key = DomainKey(topology, depth, path[: depth + 1])
                count, total = domains.get(key, (0, {}))
                domains[key] = (count + 1, res.add(total, free))
    for key, (count, total) in domains.items():
        out[key] = DomainFigures(count, res.non_zero(total))
    return out


def published_capacity(
    capacity: Iterable[Message], *, topology: str = DEFAULT_TOPOLOGY
) -> CapacityFigures:
    """The view the last message of every capacity subject gives for ``topology`` (domains
    without nodes left out, as a follower of the capacity stream drops them)."""
    out: CapacityFigures = {}
    for body in capacity:
        if isinstance(body, CapacityNode) and body.topology == topology:
            out[key_of(body)] = NodeFigures(tuple(body.domain), body.free, body.schedulable)
        elif isinstance(body, CapacityDomain) and body.topology == topology and body.nodes:
            out[key_of(body)] = DomainFigures(body.nodes, body.free)
    return out


def capacity_differences(want: CapacityFigures, got: CapacityFigures) -> list[str]:
    """Every record missing from ``got``, extra in it, or saying something else than in
    ``want``, sorted; ``got`` is what the bus says, ``want`` what the simulator says."""
    problems = [f"missing {k}" for k in want.keys() - got.keys()]
    problems += [f"extra {k}" for k in got.keys() - want.keys()]
    problems += [
        f"{k}: bus says {got[k]}, simulator says {want[k]}"
        for k in want.keys() & got.keys()
        if got[k] != want[k]
    ]
    return sorted(problems)
