"""Nodes, pods, Topologies, Queues, Cohorts and PriorityClasses → tidegate state messages.

These conversions need only the object itself (plus, for a pod, what workload it belongs to,
which :mod:`tidegate.kube.read.index` works out). Each returns the message and the problems found
(bad quantities and the like, each naming its field); a problem drops the bad value, never the
object, and never raises. Workloads are assembled in :mod:`tidegate.kube.read.recognize`.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar, get_args

from tidegate.kube.read import keys
from tidegate.kube.read.objects import (
    AgingSpec,
    Cohort,
    FairSharing,
    K8sToleration,
    Meta,
    Node,
    ObjectError,
    Pod,
    PreemptionSpec,
    Queue,
    ResourceList,
    Topology,
    decode,
    describe_error,
    timestamp,
)
from tidegate.kube.read.requests import pod_requests
from tidegate.model import QuantityError, parse_quantity
from tidegate.model.duration import DurationError, parse_duration
from tidegate.model.events import (
    BorrowWithinCohortPolicy,
    CohortConfig,
    NodeState,
    PodState,
    QueueAging,
    QueueConfig,
    QueueingStrategy,
    QueuePreemption,
    ReclaimPolicy,
    Taint,
    Toleration,
    TopologyConfig,
    WithinQueuePolicy,
)
from tidegate.model.quantity import parse_decimal
from tidegate.model.resources import Resources

STRATEGIES: tuple[QueueingStrategy, ...] = get_args(QueueingStrategy)
RECLAIM_POLICIES: tuple[ReclaimPolicy, ...] = get_args(ReclaimPolicy)
BORROW_POLICIES: tuple[BorrowWithinCohortPolicy, ...] = get_args(BorrowWithinCohortPolicy)
WITHIN_QUEUE_POLICIES: tuple[WithinQueuePolicy, ...] = get_args(WithinQueuePolicy)

_P = TypeVar("_P", bound=str)


def parse_resource_list(values: Mapping[str, object], path: str, problems: list[str]) -> Resources:
    """Parse a ResourceList, leaving out (and reporting) values that are not quantities."""
    parsed: Resources = {}
    for name, value in values.items():
        try:
            parsed[name] = parse_quantity(name, value)
        except QuantityError as exc:
            problems.append(f"{path}.{name}: {exc}")
    return parsed


def node_state(node: Node) -> tuple[NodeState, list[str]]:
    """A node as tidegate sees it.

    ``ready`` is the Ready condition; a node reporting no Ready condition at all (an API server
    without kubelets) counts as ready, one reporting "False" or "Unknown" does not.
    """
    problems: list[str] = []
    allocatable = parse_resource_list(node.status.allocatable, "status.allocatable", problems)
    ready = True
    for condition in node.status.conditions:
        if condition.type == "Ready":
            ready = condition.status == "True"
    state = NodeState(
        name=node.metadata.name,
        labels=dict(node.metadata.labels),
        allocatable=allocatable,
        taints=[Taint(key=t.key, value=t.value, effect=t.effect) for t in node.spec.taints],
        ready=ready,
        unschedulable=node.spec.unschedulable,
    )
    return state, problems


def toleration(value: K8sToleration) -> Toleration:
    """A Kubernetes toleration in tidegate's form (an empty operator means Equal)."""
    return Toleration(
        key=value.key,
        operator="Exists" if value.operator == "Exists" else "Equal",
        value=value.value,
        effect=value.effect,
    )


def pod_state(
    pod: Pod,
    *,
    workload: str | None = None,
    podset: str | None = None,
    rank: int | None = None,
) -> tuple[PodState, list[str]]:
    """A pod reduced to what capacity accounting and ungating need."""
    requests, problems = pod_requests(pod.spec)
    meta = pod.metadata
    state = PodState(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        node_name=pod.spec.node_name or None,
        phase=pod.status.phase,
        requests=requests,
        scheduling_gates=[gate.name for gate in pod.spec.scheduling_gates],
        node_selector=dict(pod.spec.node_selector),
        workload=workload,
        podset=podset,
        rank=rank,
        terminating=meta.deletion_timestamp is not None,
        created_at=timestamp(meta.creation_timestamp),
        unschedulable_since=unschedulable_since(pod),
    )
    return state, problems


def unschedulable_since(pod: Pod) -> float | None:
    """When the scheduler found no node for an unbound pod (its ``PodScheduled=False`` condition
    with reason ``Unschedulable``: the lastTransitionTime), or None. A condition without a
    readable time counts from the pod's creation."""
    if pod.spec.node_name:
        return None
    for condition in pod.status.conditions:
        if (
            condition.type == "PodScheduled"
            and condition.status == "False"
            and condition.reason == "Unschedulable"
        ):
            return timestamp(condition.last_transition_time) or timestamp(
                pod.metadata.creation_timestamp
            )
    return None


def topology_config(topology: Topology) -> tuple[TopologyConfig | None, list[str]]:
    """A Topology's levels; None (with problems) when it has no levels or repeats one."""
    problems: list[str] = []
    levels = [level.node_label for level in topology.spec.levels]
    if not levels:
        problems.append("spec.levels: a Topology needs at least one level")
    for i, level in enumerate(levels):
        if not level.strip():
            problems.append(f"spec.levels[{i}].nodeLabel is empty")
        elif level in levels[:i]:
            problems.append(f"spec.levels[{i}].nodeLabel: {level!r} repeats an earlier level")
    if problems:
        return None, problems
    return TopologyConfig(name=topology.metadata.name, levels=levels), problems


def queue_config(obj: object) -> QueueConfig:
    """A Queue; a malformed spec gives a QueueConfig with ``invalid_reason`` naming the field.

    Raises :class:`~tidegate.kube.read.objects.ObjectError` only when even metadata.name cannot
    be read. A Queue without ``spec.cardQuota`` may carry Volcano's ``volcano.sh/card.quota``
    annotation (JSON) instead.
    """
    meta = decode(obj, Meta).metadata
    try:
        queue = decode(obj, Queue)
    except ObjectError as exc:
        return QueueConfig(
            name=meta.name, invalid_reason=f"Queue {meta.name}: {describe_error(exc)}"
        )
    spec = queue.spec
    problems: list[str] = []
    quota = None
    if spec.capability is not None:
        quota = parse_resource_list(spec.capability, "spec.capability", problems)
    card_quota = _card_quota(queue, problems)
    strategy = queueing_strategy(spec.queueing_strategy, problems)
    tree = tree_fields(spec, problems)
    policies = preemption(spec.preemption, problems)
    default_runtime = None
    if spec.default_max_runtime is not None:
        default_runtime = duration(spec.default_max_runtime, "spec.defaultMaxRuntime", problems)
    max_reservations = 1
    if spec.max_reservations is not None:
        if spec.max_reservations < 0:
            problems.append(f"spec.maxReservations: {spec.max_reservations} is negative")
        else:
            max_reservations = spec.max_reservations
    queue_aging = aging(spec.aging, problems)
    return QueueConfig(
        name=meta.name,
        priority=spec.priority,
        reclaimable=spec.reclaimable,
        quota=quota,
        card_quota=card_quota,
        profile=spec.placement_profile or None,
        strategy=strategy,
        topology=spec.topology or None,
        invalid_reason=f"Queue {meta.name}: {'; '.join(problems)}" if problems else None,
        parent=spec.cohort or None,
        nominal=tree.nominal,
        borrowing_limit=tree.borrowing_limit,
        lending_limit=tree.lending_limit,
        card_nominal=tree.card_nominal,
        card_borrowing_limit=tree.card_borrowing_limit,
        card_lending_limit=tree.card_lending_limit,
        fair_weight=tree.fair_weight,
        preemption=policies,
        default_max_runtime_seconds=default_runtime,
        max_reservations=max_reservations,
        aging=queue_aging,
    )


def queueing_strategy(value: str | None, problems: list[str]) -> QueueingStrategy:
    """``spec.queueingStrategy`` of a Queue or Kueue ClusterQueue (absent: BestEffortFIFO)."""
    if value is None:
        return "BestEffortFIFO"
    for known in STRATEGIES:
        if value == known:
            return known
    problems.append(f"spec.queueingStrategy: {value!r} is not one of {', '.join(STRATEGIES)}")
    return "BestEffortFIFO"


def duration(value: object, path: str, problems: list[str]) -> float | None:
    """A duration setting in seconds (:func:`tidegate.model.duration.parse_duration`)."""
    try:
        return parse_duration(value)
    except DurationError as exc:
        problems.append(f"{path}: {exc}")
        return None


def aging(spec: AgingSpec | None, problems: list[str]) -> QueueAging | None:
    """A Queue's ``spec.aging``: both ``step`` (a duration) and ``maxBoost`` (≥ 0) needed."""
    if spec is None:
        return None
    if spec.step is None or spec.max_boost is None:
        problems.append("spec.aging: both step and maxBoost are needed")
        return None
    step = duration(spec.step, "spec.aging.step", problems)
    if spec.max_boost < 0:
        problems.append(f"spec.aging.maxBoost: {spec.max_boost} is negative")
        return None
    return None if step is None else QueueAging(step_seconds=step, max_boost=spec.max_boost)


def cohort_config(obj: object) -> CohortConfig:
    """A tidegate Cohort; a malformed spec gives a CohortConfig with ``invalid_reason`` naming
    the field. Raises :class:`~tidegate.kube.read.objects.ObjectError` only when even
    metadata.name cannot be read."""
    meta = decode(obj, Meta).metadata
    try:
        cohort = decode(obj, Cohort)
    except ObjectError as exc:
        return CohortConfig(
            name=meta.name, invalid_reason=f"Cohort {meta.name}: {describe_error(exc)}"
        )
    spec = cohort.spec
    problems: list[str] = []
    quota = None
    if spec.capability is not None:
        quota = parse_resource_list(spec.capability, "spec.capability", problems)
    card_quota = None
    if spec.card_quota is not None:
        card_quota = card_counts(spec.card_quota, "spec.cardQuota", problems)
    tree = tree_fields(spec, problems)
    return CohortConfig(
        name=meta.name,
        parent=spec.parent or None,
        quota=quota,
        card_quota=card_quota,
        nominal=tree.nominal,
        borrowing_limit=tree.borrowing_limit,
        lending_limit=tree.lending_limit,
        card_nominal=tree.card_nominal,
        card_borrowing_limit=tree.card_borrowing_limit,
        card_lending_limit=tree.card_lending_limit,
        fair_weight=tree.fair_weight,
        invalid_reason=f"Cohort {meta.name}: {'; '.join(problems)}" if problems else None,
    )


class _TreeSpec(Protocol):
    @property
    def nominal_quota(self) -> ResourceList | None: ...
    @property
    def borrowing_limit(self) -> ResourceList | None: ...
    @property
    def lending_limit(self) -> ResourceList | None: ...
    @property
    def card_nominal_quota(self) -> dict[str, int] | None: ...
    @property
    def card_borrowing_limit(self) -> dict[str, int] | None: ...
    @property
    def card_lending_limit(self) -> dict[str, int] | None: ...
    @property
    def fair_sharing(self) -> FairSharing | None: ...


@dataclass(frozen=True)
class TreeFields:
    """A node's quota-sharing fields, parsed (the shape of QueueConfig's and CohortConfig's)."""

    nominal: Resources | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    card_nominal: dict[str, int] | None = None
    card_borrowing_limit: dict[str, int] | None = None
    card_lending_limit: dict[str, int] | None = None
    fair_weight: float = 1.0


def tree_fields(spec: _TreeSpec, problems: list[str]) -> TreeFields:
    """Parse the nominal quota, limits and fair-sharing weight of a Queue or Cohort spec."""

    def resources(values: ResourceList | None, path: str) -> Resources | None:
        return None if values is None else parse_resource_list(values, path, problems)

    def cards(values: dict[str, int] | None, path: str) -> dict[str, int] | None:
        return None if values is None else card_counts(values, path, problems)

    weight = spec.fair_sharing.weight if spec.fair_sharing is not None else None
    return TreeFields(
        nominal=resources(spec.nominal_quota, "spec.nominalQuota"),
        borrowing_limit=resources(spec.borrowing_limit, "spec.borrowingLimit"),
        lending_limit=resources(spec.lending_limit, "spec.lendingLimit"),
        card_nominal=cards(spec.card_nominal_quota, "spec.cardNominalQuota"),
        card_borrowing_limit=cards(spec.card_borrowing_limit, "spec.cardBorrowingLimit"),
        card_lending_limit=cards(spec.card_lending_limit, "spec.cardLendingLimit"),
        fair_weight=fair_weight(weight, "spec.fairSharing.weight", problems),
    )


def fair_weight(value: object, path: str, problems: list[str]) -> float:
    """A fair-sharing weight (a non-negative quantity; absent: 1)."""
    if value is None:
        return 1.0
    try:
        weight = parse_decimal(value)
    except QuantityError as exc:
        problems.append(f"{path}: {exc}")
        return 1.0
    if weight < 0:
        problems.append(f"{path}: {value!r} is negative")
        return 1.0
    return float(weight)


def card_counts(raw: Mapping[str, object], path: str, problems: list[str]) -> dict[str, int]:
    """Cards per card model: non-negative integers (others are reported and left out)."""
    cards: dict[str, int] = {}
    for model, count in raw.items():
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(f"{path}[{model}]: {count!r} is not an integer")
        elif count < 0:
            problems.append(f"{path}[{model}]: {count} is negative")
        else:
            cards[model] = count
    return cards


def preemption(spec: PreemptionSpec | None, problems: list[str]) -> QueuePreemption:
    """``spec.preemption`` (Kueue's names and values; absent fields are ``Never``)."""
    if spec is None:
        return QueuePreemption()
    reclaim = _choice(
        spec.reclaim_within_cohort,
        RECLAIM_POLICIES,
        "spec.preemption.reclaimWithinCohort",
        problems,
    )
    within = _choice(
        spec.within_cluster_queue,
        WITHIN_QUEUE_POLICIES,
        "spec.preemption.withinClusterQueue",
        problems,
    )
    borrow = spec.borrow_within_cohort
    policy = _choice(
        borrow.policy if borrow is not None else None,
        BORROW_POLICIES,
        "spec.preemption.borrowWithinCohort.policy",
        problems,
    )
    return QueuePreemption(
        reclaim_within_cohort=reclaim,
        borrow_within_cohort=policy,
        max_priority_threshold=borrow.max_priority_threshold if borrow is not None else None,
        within_cluster_queue=within,
    )


def _choice(value: str | None, allowed: tuple[_P, ...], path: str, problems: list[str]) -> _P:
    if value is None:
        return allowed[0]
    for known in allowed:
        if value == known:
            return known
    problems.append(f"{path}: {value!r} is not one of {', '.join(allowed)}")
    return allowed[0]


def _card_quota(queue: Queue, problems: list[str]) -> dict[str, int] | None:
    if queue.spec.card_quota is not None:
        path, raw = "spec.cardQuota", dict(queue.spec.card_quota)
    elif keys.VOLCANO_CARD_QUOTA in queue.metadata.annotations:
        path = f"annotation {keys.VOLCANO_CARD_QUOTA}"
        text = queue.metadata.annotations[keys.VOLCANO_CARD_QUOTA]
        try:
            data: object = json.loads(text)
        except ValueError as exc:
            problems.append(f"{path}: {text!r} is not valid JSON ({exc})")
            return None
        if not isinstance(data, dict):
            problems.append(f"{path}: {text!r} is not a JSON object of card model to count")
            return None
        raw = data
    else:
        return None
    return card_counts(raw, path, problems)
