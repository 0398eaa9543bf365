"""Reading a ``tidegate admit`` scenario: cohorts, queues, a cluster, running and pending
workloads, and the time.

The format is WHAT-IF.md's (section ``tidegate admit``); topology, nodes, quantities and
podsets are read by the shared :mod:`tidegate.cli.snapshot` building blocks (nodes as
``tidegate place`` reads them, a scenario without ``topology`` placed by hostname as
``tidegate preempt`` does), so every what-if command accepts and rejects the same things.
Errors are :class:`~tidegate.cli.snapshot.SnapshotError` with the path of the offending field
(``queues[1].borrowing_limit: ...``, ``pending[0].podsets[0].topology.required: ...``). This
module decides nothing.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar, get_args

import msgspec

from tidegate.cli.preempt_scenario import DEFAULT_TOPOLOGY, with_hostname
from tidegate.cli.snapshot import Field, SnapshotError, parse_nodes, parse_podsets, parse_topology
from tidegate.cli.whatif import podset_error_detail
from tidegate.model import (
    CohortConfig,
    PodSetSpec,
    QueueConfig,
    QueuePreemption,
    Resources,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.events import (
    BorrowWithinCohortPolicy,
    QueueingStrategy,
    ReclaimPolicy,
    ServiceType,
    WithinQueuePolicy,
)
from tidegate.placement import NodeCapacity, PlacementError, PlacementRequest
from tidegate.placement.request import normalize
from tidegate.policy.cards import CardError, parse_card_name
from tidegate.policy.queuetree import Holder
from tidegate.policy.quota import QuotaRequest, gang_resources
from tidegate.policy.service_type import ServiceTypeError, parse_service_type

ROOT_KEYS: Final = (
    "cohorts",
    "queues",
    "topology",
    "nodes",
    "running",
    "pending",
    "until_stable",
    "now",
)
LIMIT_KEYS: Final = (
    "nominal",
    "borrowing_limit",
    "lending_limit",
    "card_nominal",
    "card_borrowing_limit",
    "card_lending_limit",
    "capability",
    "card_quota",
    "weight",
)
COHORT_KEYS: Final = ("name", "parent", *LIMIT_KEYS)
QUEUE_KEYS: Final = (
    "name",
    "cohort",
    *LIMIT_KEYS,
    "priority",
    "reclaimable",
    "preemption",
    "queueing_strategy",
)
PREEMPTION_KEYS: Final = (
    "within_queue",
    "reclaim_within_cohort",
    "borrow_within_cohort",
    "max_priority_threshold",
    "training_preempts_training",
)
WORKLOAD_KEYS: Final = (
    "name",
    "namespace",
    "queue",
    "priority",
    "created",
    "started",
    "service_type",
    "owner_kind",
    "preemptable",
    "card",
    "max_runtime_seconds",
)
RUNNING_KEYS: Final = (*WORKLOAD_KEYS, "pods")
T = TypeVar("T", bound=str)
PENDING_KEYS: Final = (*WORKLOAD_KEYS, "podsets")


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """A running workload as the cluster holds it: the workload, its pods and when it
    started (what placement and reservations need beside its :class:`Holder`)."""

    workload: WorkloadState
    """Its podsets: one per distinct pod request (``main`` when all are alike)."""
    pods: list[tuple[str | None, Resources]]
    """Each pod's node (None without ``nodes``) and requests, in input order."""
    started: float
    """When it was admitted (Unix seconds): ``started``, else ``created``."""


@dataclass(frozen=True, slots=True)
class AdmitScenario:
    """Everything ``tidegate admit`` reads, as the policy's own types."""

    cohorts: list[CohortConfig]
    queues: dict[str, QueueConfig]
    running: list[Holder]
    pending: list[tuple[WorkloadState, QuotaRequest]]
    """Each pending workload with what its whole gang would charge."""
    until_stable: bool = False
    topology: TopologyConfig = DEFAULT_TOPOLOGY
    nodes: list[NodeCapacity] = field(default_factory=list)
    """The cluster; empty: placement is not checked (quota only)."""
    workloads: dict[WorkloadKey, RunningWorkload] = field(default_factory=dict)
    """The running workloads by key (same order as ``running``)."""
    now: float = 0.0
    """``now``, else the newest ``created`` / ``started`` of the document (Unix seconds)."""


def parse_admit_scenario(document: object) -> AdmitScenario:
    """The whole ``tidegate admit`` input (see the module docstring)."""
    if not isinstance(document, dict):
        raise SnapshotError("input", "expected an object")
    root = Field(document).only(*ROOT_KEYS)
    topology_field = root.get("topology")
    topology = parse_topology(topology_field) if topology_field is not None else DEFAULT_TOPOLOGY
    nodes_field = root.get("nodes")
    nodes = parse_nodes(nodes_field) if nodes_field is not None else []
    if topology_field is None:
        nodes = [with_hostname(node) for node in nodes]
    cohorts: list[CohortConfig] = []
    names: set[str] = set()
    for item in _items(root.get("cohorts")):
        item.only(*COHORT_KEYS)
        name = _unique(item.require("name"), names, "cohort")
        parent = item.get("parent")
        node = CohortConfig(name=name, parent=parent.string() if parent else None)
        cohorts.append(msgspec.structs.replace(node, **_limits(item)))
    queues: dict[str, QueueConfig] = {}
    for item in _items(root.get("queues")):
        item.only(*QUEUE_KEYS)
        name = _unique(item.require("name"), set(queues), "queue")
        cohort = item.get("cohort")
        priority = item.get("priority")
        reclaimable = item.get("reclaimable")
        strategy = item.get("queueing_strategy")
        queue = QueueConfig(
            name=name,
            parent=cohort.string() if cohort else None,
            priority=priority.integer() if priority else 0,
            reclaimable=reclaimable.boolean() if reclaimable else True,
            strategy=_choice(strategy, QueueingStrategy, "BestEffortFIFO"),
            preemption=_preemption(item.get("preemption")),
        )
        queues[name] = msgspec.structs.replace(queue, **_limits(item))
    keys: set[str] = set()
    node_names = {node.name for node in nodes} if nodes else None
    running = [_running(item, keys, node_names) for item in _items(root.get("running"))]
    pending = [_pending(item, keys) for item in _items(root.get("pending"))]
    for index, (workload, _) in enumerate(pending):
        if workload.queue is not None and workload.queue not in queues:
            Field(workload.queue, f"pending[{index}].queue").fail(
                f"{workload.queue!r} is not a queue of the scenario"
            )
        if nodes:
            _check_placeable(workload.podsets, topology, f"pending[{index}]")
    stable = root.get("until_stable")
    now_field = root.get("now")
    times = [w.created_at for w, _ in pending] + [
        max(r.started, r.workload.created_at) for _, r in running
    ]
    return AdmitScenario(
        cohorts=cohorts,
        queues=queues,
        running=[holder for holder, _ in running],
        pending=pending,
        until_stable=stable.boolean() if stable else False,
        topology=topology,
        nodes=nodes,
        workloads={holder.key: workload for holder, workload in running},
        now=_time(now_field) if now_field is not None else max(times, default=0.0),
    )


def _check_placeable(podsets: list[PodSetSpec], topology: TopologyConfig, path: str) -> None:
    """Malformed topology requests are the input's fault: an error naming the field (as
    ``tidegate place`` and ``tidegate preempt`` say it), not a workload left Invalid."""
    try:
        normalize(topology.levels, PlacementRequest(podsets=podsets))
    except PlacementError as exc:
        names = [podset.name for podset in podsets]
        if exc.podset in names and exc.field is not None:
            index = names.index(exc.podset)
            raise SnapshotError(
                f"{path}.podsets[{index}].{exc.field}", podset_error_detail(exc)
            ) from exc
        raise SnapshotError(path, exc.detail) from exc


# --------------------------------------------------------------------------- pieces


def _items(field: Field | None) -> list[Field]:
    return list(field.items()) if field is not None else []


def _unique(field: Field, seen: set[str], what: str) -> str:
    name = field.string()
    if name in seen:
        field.fail(f"duplicate {what} {name!r}")
    seen.add(name)
    return name


def _choice(field: Field | None, kind: object, default: T) -> T:
    if field is None:
        return default
    value = field.string()
    allowed = get_args(kind)
    if value not in allowed:
        field.fail(f"{value!r} is not one of {', '.join(allowed)}")
    return value  # type: ignore[return-value]


def _cards(field: Field | None) -> dict[str, int] | None:
    if field is None:
        return None
    out: dict[str, int] = {}
    for model, amount in field.entries():
        value = amount.integer()
        if value < 0:
            amount.fail(f"{value} is negative")
        out[model] = value
    return out


def _limits(item: Field) -> dict[str, Any]:
    """The quota fields a queue and a cohort share, as :class:`QueueConfig` names them."""
    out: dict[str, Any] = {}
    for key, name in (
        ("nominal", "nominal"),
        ("borrowing_limit", "borrowing_limit"),
        ("lending_limit", "lending_limit"),
        ("capability", "quota"),
    ):
        field = item.get(key)
        if field is not None:
            out[name] = field.quantities()
    for key, name in (
        ("card_nominal", "card_nominal"),
        ("card_borrowing_limit", "card_borrowing_limit"),
        ("card_lending_limit", "card_lending_limit"),
        ("card_quota", "card_quota"),
    ):
        cards = _cards(item.get(key))
        if cards is not None:
            out[name] = cards
    weight = item.get("weight")
    if weight is not None:
        if not isinstance(weight.value, int | float) or isinstance(weight.value, bool):
            weight.fail("expected a number")
        if weight.value < 0:
            weight.fail(f"{weight.value} is negative")
        out["fair_weight"] = float(weight.value)
    return out


def _preemption(field: Field | None) -> QueuePreemption:
    """The queue's policies. Without ``training_preempts_training`` (the tidal rule) a training
    workload reclaims from and preempts no one: only inference does (as the services decide)."""
    if field is None:
        return QueuePreemption()
    field.only(*PREEMPTION_KEYS)
    opted = field.get("training_preempts_training")
    if opted is None or not opted.boolean():
        return QueuePreemption()
    threshold = field.get("max_priority_threshold")
    return QueuePreemption(
        within_cluster_queue=_choice(field.get("within_queue"), WithinQueuePolicy, "Never"),
        reclaim_within_cohort=_choice(field.get("reclaim_within_cohort"), ReclaimPolicy, "Never"),
        borrow_within_cohort=_choice(
            field.get("borrow_within_cohort"), BorrowWithinCohortPolicy, "Never"
        ),
        max_priority_threshold=threshold.integer() if threshold else None,
    )


def _time(field: Field | None) -> float:
    if field is None:
        return 0.0
    try:
        return datetime.fromisoformat(field.string().replace("Z", "+00:00")).timestamp()
    except ValueError:
        field.fail("expected an RFC 3339 time")


@dataclass(frozen=True, slots=True)
class _Common:
    """What running and pending workloads share."""

    key: WorkloadKey
    queue: str | None
    priority: int
    service_type: ServiceType
    preemptable: bool
    created_at: float
    started: float
    card: str | None
    max_runtime_seconds: float | None


def _common(item: Field, keys: set[str]) -> _Common:
    name = item.require("name")
    namespace = item.get("namespace")
    key = workload_key(namespace.string() if namespace else "default", name.string())
    if key in keys:
        name.fail(f"duplicate workload {key}")
    keys.add(key)
    service = item.get("service_type")
    try:
        service_type = (
            parse_service_type(service.string(), field=service.path) if service else "training"
        )
    except ServiceTypeError as exc:
        raise SnapshotError("", str(exc)) from exc
    queue = item.get("queue")
    priority = item.get("priority")
    preemptable = item.get("preemptable")
    card = item.get("card")
    if card is not None:
        try:
            parse_card_name(card.string())
        except CardError as exc:
            card.fail(str(exc))
    runtime = item.get("max_runtime_seconds")
    seconds: float | None = None
    if runtime is not None:
        if not isinstance(runtime.value, int | float) or isinstance(runtime.value, bool):
            runtime.fail("expected a number of seconds")
        if runtime.value <= 0:
            runtime.fail(f"{runtime.value} is not positive")
        seconds = float(runtime.value)
    return _Common(
        key=key,
        queue=queue.string() if queue else None,
        priority=priority.integer() if priority else 0,
        service_type=service_type,
        preemptable=preemptable.boolean() if preemptable else True,
        created_at=_time(item.get("created")),
        started=_time(item.get("started")),
        card=card.string() if card else None,
        max_runtime_seconds=seconds,
    )


def _charge(resources: dict[str, int], card: str | None) -> QuotaRequest:
    """What a gang charges: its resources, and with a card model, that many cards of it."""
    cards = {}
    if card is not None:
        model = parse_card_name(card)
        if resources.get(model.resource, 0):
            cards[card] = resources[model.resource]
    return QuotaRequest(resources=resources, cards=cards)


def _running(item: Field, keys: set[str], nodes: set[str] | None) -> tuple[Holder, RunningWorkload]:
    """A running workload; with ``nodes`` (the scenario's node names) every pod names one."""
    item.only(*RUNNING_KEYS)
    common = _common(item, keys)
    total: dict[str, int] = {}
    pods: list[tuple[str | None, Resources]] = []
    for pod in item.require("pods").items():
        pod.only("node", "requests")
        node: str | None = None
        if nodes is not None:
            node_field = pod.get("node")
            if node_field is None:
                Field(None, pod.child_path("node")).fail("is required when nodes are given")
            node = node_field.string()
            if node not in nodes:
                node_field.fail(f"{node!r} is not a node of the scenario")
        requests = pod.get("requests")
        amounts = requests.quantities() if requests else {}
        pods.append((node, amounts))
        for resource, amount in amounts.items():
            total[resource] = total.get(resource, 0) + amount
    queue = common.queue or item.require("queue").string()
    holder = Holder(
        key=common.key,
        queue=queue,
        holds=_charge(total, common.card),
        priority=common.priority,
        service_type=common.service_type,
        admitted_at=common.started or common.created_at,
        created_at=common.created_at,
        preemptable=common.preemptable,
    )
    workload = _workload(common, queue, _podsets_of(pods, common.card))
    started = common.started or common.created_at
    return holder, RunningWorkload(workload=workload, pods=pods, started=started)


def podset_name(requests: Resources, distinct: list[Resources]) -> str:
    """The podset a running pod of ``requests`` belongs to among the ``distinct`` requests of
    its workload: ``main`` when there is one, else ``main-<i>``."""
    return "main" if len(distinct) == 1 else f"main-{distinct.index(requests)}"


def distinct_requests(pods: list[tuple[str | None, Resources]]) -> list[Resources]:
    """The distinct pod requests of a running workload, in order of first appearance."""
    distinct: list[Resources] = []
    for _, requests in pods:
        if requests not in distinct:
            distinct.append(requests)
    return distinct


def _podsets_of(pods: list[tuple[str | None, Resources]], card: str | None) -> list[PodSetSpec]:
    distinct = distinct_requests(pods)
    counts = {podset_name(r, distinct): 0 for r in distinct}
    for _, requests in pods:
        counts[podset_name(requests, distinct)] += 1
    return [
        PodSetSpec(
            name=podset_name(requests, distinct),
            count=counts[podset_name(requests, distinct)],
            requests=requests,
            card_name=card,
        )
        for requests in distinct
    ]


def _pending(item: Field, keys: set[str]) -> tuple[WorkloadState, QuotaRequest]:
    item.only(*PENDING_KEYS)
    common = _common(item, keys)
    podsets = parse_podsets(item.require("podsets"))
    if common.card is not None:
        podsets = [
            p if p.card_name is not None else msgspec.structs.replace(p, card_name=common.card)
            for p in podsets
        ]
    workload = _workload(common, common.queue, podsets)
    return workload, _charge(gang_resources(podsets), common.card)


def _workload(common: _Common, queue: str | None, podsets: list[PodSetSpec]) -> WorkloadState:
    """A scenario's workload as the watcher would publish it."""
    namespace, name = common.key.split("/", 1)
    return WorkloadState(
        namespace=namespace,
        name=name,
        uid=f"uid-{common.key}",
        owner_kind="",
        queue=queue,
        priority=common.priority,
        service_type=common.service_type,
        preemptable=common.preemptable,
        podsets=podsets,
        created_at=common.created_at,
        max_runtime_seconds=common.max_runtime_seconds,
    )
