"""Nodes, pods, Topologies, Queues and PriorityClasses → tidegate state messages.

These conversions need only the object itself (plus, for a pod, what workload it belongs to,
which :mod:`tidegate.kube.read.index` works out). Each returns the message and the problems found
(bad quantities and the like, each naming its field); a problem drops the bad value, never the
object, and never raises. Workloads are assembled in :mod:`tidegate.kube.read.recognize`.
"""

import json
from collections.abc import Mapping
from typing import get_args

from tidegate.kube.read import keys
from tidegate.kube.read.objects import (
    K8sToleration,
    Meta,
    Node,
    ObjectError,
    Pod,
    Queue,
    Topology,
    decode,
    describe_error,
    timestamp,
)
from tidegate.kube.read.requests import pod_requests
from tidegate.model import QuantityError, parse_quantity
from tidegate.model.events import (
    NodeState,
    PodState,
    QueueConfig,
    QueueingStrategy,
    Taint,
    Toleration,
    TopologyConfig,
)
from tidegate.model.resources import Resources

STRATEGIES: tuple[QueueingStrategy, ...] = get_args(QueueingStrategy)


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
    strategy: QueueingStrategy = "BestEffortFIFO"
    if spec.queueing_strategy is not None:
        for known in STRATEGIES:
            if spec.queueing_strategy == known:
                strategy = known
                break
        else:
            problems.append(
                f"spec.queueingStrategy: {spec.queueing_strategy!r} is not one of "
                f"{', '.join(STRATEGIES)}"
            )
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
    )


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
    cards: dict[str, int] = {}
    for model, count in raw.items():
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(f"{path}[{model}]: {count!r} is not an integer")
        elif count < 0:
            problems.append(f"{path}[{model}]: {count} is negative")
        else:
            cards[model] = count
    return cards
