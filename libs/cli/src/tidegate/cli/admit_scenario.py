"""Reading a ``tidegate admit`` scenario: cohorts, queues, running and pending workloads.

The format is WHAT-IF.md's (section ``tidegate admit``); quantities and podsets are read by the
shared :mod:`tidegate.cli.snapshot` building blocks, so every what-if command accepts and
rejects the same things. Errors are :class:`~tidegate.cli.snapshot.SnapshotError` with the
path of the offending field (``queues[1].borrowing_limit: ...``). This module decides nothing.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar, get_args

import msgspec

from tidegate.cli.snapshot import Field, SnapshotError, parse_podsets
from tidegate.model import (
    CohortConfig,
    QueueConfig,
    QueuePreemption,
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
from tidegate.policy.cards import CardError, parse_card_name
from tidegate.policy.queuetree import Holder
from tidegate.policy.quota import QuotaRequest, gang_resources
from tidegate.policy.service_type import ServiceTypeError, parse_service_type

ROOT_KEYS: Final = ("cohorts", "queues", "nodes", "running", "pending", "until_stable", "now")
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
class AdmitScenario:
    """Everything ``tidegate admit`` reads, as the policy's own types."""

    cohorts: list[CohortConfig]
    queues: dict[str, QueueConfig]
    running: list[Holder]
    pending: list[tuple[WorkloadState, QuotaRequest]]
    """Each pending workload with what its whole gang would charge."""
    until_stable: bool = False


def parse_admit_scenario(document: object) -> AdmitScenario:
    """The whole ``tidegate admit`` input (see the module docstring)."""
    if not isinstance(document, dict):
        raise SnapshotError("input", "expected an object")
    root = Field(document).only(*ROOT_KEYS)
    nodes = root.get("nodes")
    if nodes is not None and list(nodes.items()):
        nodes.fail(
            "placement is not checked by tidegate admit yet: leave nodes empty for a quota-only"
            " answer, and ask tidegate place / tidegate preempt where gangs fit"
        )
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
    running = [_holder(item, keys) for item in _items(root.get("running"))]
    pending = [_pending(item, keys) for item in _items(root.get("pending"))]
    for index, (workload, _) in enumerate(pending):
        if workload.queue is not None and workload.queue not in queues:
            Field(workload.queue, f"pending[{index}].queue").fail(
                f"{workload.queue!r} is not a queue of the scenario"
            )
    stable = root.get("until_stable")
    return AdmitScenario(
        cohorts=cohorts,
        queues=queues,
        running=running,
        pending=pending,
        until_stable=stable.boolean() if stable else False,
    )


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
    return _Common(
        key=key,
        queue=queue.string() if queue else None,
        priority=priority.integer() if priority else 0,
        service_type=service_type,
        preemptable=preemptable.boolean() if preemptable else True,
        created_at=_time(item.get("created")),
        started=_time(item.get("started")),
        card=card.string() if card else None,
    )


def _charge(resources: dict[str, int], card: str | None) -> QuotaRequest:
    """What a gang charges: its resources, and with a card model, that many cards of it."""
    cards = {}
    if card is not None:
        model = parse_card_name(card)
        if resources.get(model.resource, 0):
            cards[card] = resources[model.resource]
    return QuotaRequest(resources=resources, cards=cards)


def _holder(item: Field, keys: set[str]) -> Holder:
    item.only(*RUNNING_KEYS)
    common = _common(item, keys)
    total: dict[str, int] = {}
    for pod in item.require("pods").items():
        pod.only("node", "requests")
        requests = pod.get("requests")
        for resource, amount in (requests.quantities() if requests else {}).items():
            total[resource] = total.get(resource, 0) + amount
    return Holder(
        key=common.key,
        queue=common.queue or item.require("queue").string(),
        holds=_charge(total, common.card),
        priority=common.priority,
        service_type=common.service_type,
        admitted_at=common.started or common.created_at,
        created_at=common.created_at,
        preemptable=common.preemptable,
    )


def _pending(item: Field, keys: set[str]) -> tuple[WorkloadState, QuotaRequest]:
    item.only(*PENDING_KEYS)
    common = _common(item, keys)
    podsets = parse_podsets(item.require("podsets"))
    namespace, name = common.key.split("/", 1)
    workload = WorkloadState(
        namespace=namespace,
        name=name,
        uid=f"uid-{common.key}",
        owner_kind="",
        queue=common.queue,
        priority=common.priority,
        service_type=common.service_type,
        preemptable=common.preemptable,
        podsets=podsets,
        created_at=common.created_at,
    )
    return workload, _charge(gang_resources(podsets), common.card)
