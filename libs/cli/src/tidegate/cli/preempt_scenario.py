"""Reading a ``tidegate preempt`` scenario: queues, running gangs and the incoming workload.

The scenario format is in WHAT-IF.md and docs/preemption.md. Topology, nodes, quantities,
taints and podsets are read by the shared :mod:`tidegate.cli.snapshot` building blocks, so both
what-if commands accept and reject the same things; this module adds what only preemption
needs and turns the document into the arguments of
:func:`tidegate.policy.victims.select_victims`. Errors are
:class:`~tidegate.cli.snapshot.SnapshotError` with the path of the offending field
(``running[2].pods[0].node: "n9" is not a node of the snapshot``).

Nodes carry no ``used``: what is used is what the running gangs' pods request. This module
decides nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidegate.cli.snapshot import (
    Field,
    SnapshotError,
    parse_nodes,
    parse_podsets,
    parse_toleration,
    parse_topology,
    parse_topology_request,
)
from tidegate.model import (
    NodeName,
    PodSetSpec,
    QueueConfig,
    Resources,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model import resources as res
from tidegate.model.events import OnPreemption, ServiceType
from tidegate.placement import CapacityView, NodeCapacity
from tidegate.policy.cards import CardError, parse_card_name
from tidegate.policy.service_type import (
    DEFAULT_OWNER_KIND_SERVICE_TYPES,
    ServiceTypeError,
    parse_service_type,
    resolve_service_type,
)
from tidegate.policy.victims import RunningGang, RunningPod

HOSTNAME_LEVEL: Final = "kubernetes.io/hostname"
"""The only level when a scenario names no topology (each node its own domain)."""

DEFAULT_TOPOLOGY: Final = TopologyConfig(name="default", levels=[HOSTNAME_LEVEL])

ROOT_KEYS: Final = (
    "topology",
    "nodes",
    "queues",
    "running",
    "incoming",
    "owner_kind_service_types",
)
QUEUE_KEYS: Final = ("name", "priority", "reclaimable", "capability", "card_quota")
RUNNING_KEYS: Final = (
    "name",
    "namespace",
    "queue",
    "service_type",
    "owner_kind",
    "priority",
    "preemptable",
    "min_available",
    "card",
    "pods",
    "on_preemption",
    "running_seconds",
)
INCOMING_KEYS: Final = (
    "name",
    "namespace",
    "queue",
    "service_type",
    "owner_kind",
    "priority",
    "min_available",
    "card",
    "pods",
    "podsets",
    "topology",
    "node_selector",
    "tolerations",
    "profile",
)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything ``tidegate preempt`` reads, as the policy's own types."""

    topology: TopologyConfig
    nodes: list[NodeCapacity]
    """Nodes with ``used`` filled in from the running gangs' pods."""
    queues: dict[str, QueueConfig]
    running: list[RunningGang]
    incoming: WorkloadState
    owner_kind_service_types: dict[str, ServiceType]
    incoming_from_pods: bool = True
    """Whether the incoming workload was given as ``pods`` (one topology for all) rather than
    ``podsets``; error paths differ."""

    def view(self) -> CapacityView:
        """The capacity view of the snapshot (every running pod counted as used)."""
        return CapacityView(self.topology.levels, self.nodes)


def parse_scenario(document: object) -> Scenario:
    """The whole ``tidegate preempt`` input (see the module docstring)."""
    if not isinstance(document, dict):
        raise SnapshotError("input", "expected an object")
    root = Field(document).only(*ROOT_KEYS)
    topology_field = root.get("topology")
    topology = parse_topology(topology_field) if topology_field is not None else DEFAULT_TOPOLOGY
    nodes = parse_nodes(root.require("nodes"), allow_used=False)
    if topology_field is None:
        nodes = [with_hostname(node) for node in nodes]
    mapping_field = root.get("owner_kind_service_types")
    owner_map = (
        _owner_kind_map(mapping_field)
        if mapping_field is not None
        else dict(DEFAULT_OWNER_KIND_SERVICE_TYPES)
    )
    queues_field = root.get("queues")
    queues = _queues(queues_field) if queues_field is not None else {}
    running_field = root.get("running")
    names = {node.name for node in nodes}
    running = _running(running_field, names, owner_map) if running_field is not None else []
    incoming = _incoming(root.require("incoming"), owner_map)
    return Scenario(
        topology=topology,
        nodes=_charge_nodes(nodes, running),
        queues=queues,
        running=running,
        incoming=incoming,
        owner_kind_service_types=owner_map,
        incoming_from_pods=root.require("incoming").get("pods") is not None,
    )


# --------------------------------------------------------------------------- pieces


def with_hostname(node: NodeCapacity) -> NodeCapacity:
    """Without a topology the hostname is the only level; a node is its own host by default."""
    if HOSTNAME_LEVEL in node.labels:
        return node
    return NodeCapacity(
        name=node.name,
        labels={**node.labels, HOSTNAME_LEVEL: node.name},
        allocatable=node.allocatable,
        used=node.used,
        taints=node.taints,
        ready=node.ready,
        unschedulable=node.unschedulable,
    )


def _charge_nodes(nodes: list[NodeCapacity], running: list[RunningGang]) -> list[NodeCapacity]:
    used: dict[str, Resources] = {}
    for gang in running:
        for pod in gang.pods:
            used[pod.node] = res.add(used.get(pod.node, {}), {**pod.requests, "pods": 1})
    return [
        NodeCapacity(
            name=node.name,
            labels=node.labels,
            allocatable=node.allocatable,
            used=used.get(node.name, {}),
            taints=node.taints,
            ready=node.ready,
            unschedulable=node.unschedulable,
        )
        for node in nodes
    ]


def _service_type(field: Field) -> ServiceType:
    if not isinstance(field.value, str):
        field.fail("expected inference, training or null")
    try:
        return parse_service_type(field.value, field=field.path)
    except ServiceTypeError as exc:
        raise SnapshotError("", str(exc)) from exc


def _owner_kind_map(field: Field) -> dict[str, ServiceType]:
    return {kind: _service_type(value) for kind, value in field.entries()}


def _non_negative(field: Field) -> int:
    value = field.integer()
    if value < 0:
        field.fail(f"{value} is negative")
    return value


def _card(field: Field | None) -> str | None:
    if field is None:
        return None
    name = field.string()
    try:
        parse_card_name(name)
    except CardError as exc:
        field.fail(str(exc))
    return name


def _queues(field: Field) -> dict[str, QueueConfig]:
    queues: dict[str, QueueConfig] = {}
    for item in field.items():
        item.only(*QUEUE_KEYS)
        name_field = item.require("name")
        name = name_field.string()
        if name in queues:
            name_field.fail(f"duplicate queue {name!r}")
        priority = item.get("priority")
        reclaimable = item.get("reclaimable")
        capability = item.get("capability")
        card_quota = item.get("card_quota")
        cards: dict[str, int] | None = None
        if card_quota is not None:
            cards = {}
            for model, amount in card_quota.entries():
                _card(Field(model, amount.path))
                cards[model] = _non_negative(amount)
        queues[name] = QueueConfig(
            name=name,
            priority=priority.integer() if priority is not None else 0,
            reclaimable=reclaimable.boolean() if reclaimable is not None else True,
            quota=capability.quantities() if capability is not None else None,
            card_quota=cards,
        )
    return queues


def _resolve(item: Field, owner_map: Mapping[str, ServiceType]) -> tuple[ServiceType, str]:
    """The workload's service type (explicit, else from its owner kind) and its owner kind."""
    kind_field = item.get("owner_kind")
    kind = kind_field.string() if kind_field is not None else ""
    type_field = item.get("service_type")
    if type_field is not None:
        return _service_type(type_field), kind
    return resolve_service_type(None, kind, owner_map), kind


def _on_preemption(field: Field | None) -> OnPreemption:
    if field is None:
        return "restart"
    value = field.string()
    if value == "abort":
        return "abort"
    if value != "restart":
        field.fail(f"{value!r} is not restart or abort")
    return "restart"


def _running(
    field: Field, nodes: set[str], owner_map: Mapping[str, ServiceType]
) -> list[RunningGang]:
    gangs: list[RunningGang] = []
    seen: set[WorkloadKey] = set()
    for item in field.items():
        item.only(*RUNNING_KEYS)
        name_field = item.require("name")
        namespace = item.get("namespace")
        key = workload_key(namespace.string() if namespace else "default", name_field.string())
        if key in seen:
            name_field.fail(f"duplicate running workload {key}")
        seen.add(key)
        service_type, _ = _resolve(item, owner_map)
        pods: list[RunningPod] = []
        for pod in item.require("pods").items():
            pod.only("node", "requests")
            node_field = pod.require("node")
            node = node_field.string()
            if node not in nodes:
                node_field.fail(f"{node!r} is not a node of the snapshot")
            requests = pod.get("requests")
            pods.append(
                RunningPod(
                    node=NodeName(node),
                    requests=requests.quantities() if requests is not None else {},
                )
            )
        min_available = item.get("min_available")
        if min_available is not None and _non_negative(min_available) > len(pods):
            min_available.fail(f"{min_available.value} is more than its {len(pods)} pods")
        card = _card(item.get("card"))
        cards: dict[str, int] = {}
        if card is not None:
            model = parse_card_name(card)
            cards[card] = sum(pod.requests.get(model.resource, 0) for pod in pods)
        priority = item.get("priority")
        preemptable = item.get("preemptable")
        seconds = item.get("running_seconds")
        queue = item.get("queue")
        gangs.append(
            RunningGang(
                key=key,
                queue=queue.string() if queue is not None else None,
                service_type=service_type,
                priority=priority.integer() if priority is not None else 0,
                preemptable=preemptable.boolean() if preemptable is not None else True,
                on_preemption=_on_preemption(item.get("on_preemption")),
                pods=tuple(pods),
                cards=cards,
                running_seconds=_non_negative(seconds) if seconds is not None else 0,
            )
        )
    return gangs


def _pods_as_podsets(field: Field, name: str) -> list[PodSetSpec]:
    """Identical pods become one podset named after the workload; different ones, one podset
    each per distinct request (in order of first appearance), grouped so they share a domain."""
    distinct: list[Resources] = []
    counts: list[int] = []
    for pod in field.items():
        pod.only("requests")
        requests_field = pod.get("requests")
        requests = requests_field.quantities() if requests_field is not None else {}
        if requests in distinct:
            counts[distinct.index(requests)] += 1
        else:
            distinct.append(requests)
            counts.append(1)
    if not distinct:
        field.fail("needs at least one pod")
    if len(distinct) == 1:
        return [PodSetSpec(name=name, count=counts[0], requests=distinct[0])]
    return [
        PodSetSpec(name=f"{name}-{i}", count=count, requests=requests, group=name)
        for i, (requests, count) in enumerate(zip(distinct, counts, strict=True))
    ]


def _incoming(item: Field, owner_map: Mapping[str, ServiceType]) -> WorkloadState:
    item.only(*INCOMING_KEYS)
    name = item.require("name").string()
    namespace = item.get("namespace")
    service_type, kind = _resolve(item, owner_map)
    pods = item.get("pods")
    podsets_field = item.get("podsets")
    if (pods is None) == (podsets_field is None):
        Field(None, item.child_path("pods")).fail("give either pods or podsets")
    if pods is not None:
        podsets = _pods_as_podsets(pods, name)
        topology = parse_topology_request(item.get("topology"))
        podsets = [
            PodSetSpec(
                name=p.name,
                count=p.count,
                requests=p.requests,
                topology=topology,
                group=p.group,
            )
            for p in podsets
        ]
    else:
        assert podsets_field is not None
        if item.get("topology") is not None:
            Field(None, item.child_path("topology")).fail(
                "with podsets, give each podset its own topology"
            )
        podsets = parse_podsets(podsets_field)
    total = sum(p.count for p in podsets)
    min_available = item.get("min_available")
    if min_available is not None and _non_negative(min_available) > total:
        min_available.fail(f"{min_available.value} is more than its {total} pods")
    selector_field = item.get("node_selector")
    selector = selector_field.strings() if selector_field is not None else {}
    tolerations_field = item.get("tolerations")
    tolerations = (
        [parse_toleration(t) for t in tolerations_field.items()] if tolerations_field else []
    )
    card = _card(item.get("card"))
    podsets = [
        PodSetSpec(
            name=p.name,
            count=p.count,
            requests=p.requests,
            topology=p.topology,
            node_selector={**selector, **p.node_selector},
            tolerations=[*tolerations, *p.tolerations],
            group=p.group,
            min_count=p.min_count,
            pods_per_index_group=p.pods_per_index_group,
            card_name=p.card_name if p.card_name is not None else card,
        )
        for p in podsets
    ]
    queue = item.get("queue")
    priority = item.get("priority")
    profile = item.get("profile")
    return WorkloadState(
        namespace=namespace.string() if namespace is not None else "default",
        name=name,
        uid=f"what-if/{name}",
        owner_kind=kind,
        queue=queue.string() if queue is not None else None,
        priority=priority.integer() if priority is not None else 0,
        service_type=service_type,
        min_members=min_available.integer() if min_available is not None else None,
        podsets=podsets,
        profile=profile.string() if profile is not None else None,
    )
