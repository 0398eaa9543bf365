"""The simulated kube-scheduler: binds ungated, unbound pods to a node where they fit.

A node fits when it is Ready and schedulable, matches the pod's nodeSelector and required node
affinity, carries no NoSchedule/NoExecute taint the pod does not tolerate, and has free
allocatable for the pod's requests (cpu, memory, extended resources such as
``nvidia.com/gpu``, and the ``pods`` count). Free means allocatable minus the requests of
every bound pod that has not finished, whoever manages it. Pods are taken by priority, then
age; among fitting nodes the first by name wins (a bin-packing order). A pod that fits nowhere
stays Pending with ``PodScheduled=False, reason=Unschedulable`` and a message like the real
scheduler's (``0/64 nodes are available: 60 Insufficient nvidia.com/gpu, 4 node(s) didn't
match Pod's node affinity/selector.``) and is retried when capacity frees up or nodes change.
Only pods whose ``schedulerName`` is ``default-scheduler`` are handled.

Not simulated: preemption, pod (anti-)affinity, topology spread, scoring plugins, volumes.

The scheduler keeps its own cache (nodes, usage, a label index), fed synchronously by store
listeners, so a pass costs O(pending pods + nodes examined), not O(all objects).
"""

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from tidegate.sim import pods as podrules
from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import ApiError, JsonObject
from tidegate.sim.kinds import NODES, PODS, STATUS
from tidegate.sim.names import rfc3339
from tidegate.sim.nodeinfo import (
    affinity_matches,
    node_ready,
    parse_resource_list,
    pod_requests,
    untolerated_taint,
)
from tidegate.sim.store import DELETED, WatchEvent, object_key

DEFAULT_SCHEDULER: Final = "default-scheduler"
_YIELD_EVERY: Final = 100
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


@dataclass
class NodeState:
    """What the scheduler knows of one node."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    taints: list[object]
    schedulable: bool
    used: dict[str, int] = field(default_factory=dict)

    def fits(self, requests: dict[str, int]) -> str | None:
        """None if ``requests`` fit in what is free, else the first resource that does not."""
        for name, amount in requests.items():
            if self.used.get(name, 0) + amount > self.allocatable.get(name, 0):
                return name
        return None


@dataclass
class _Attempt:
    """Per scheduling pass and per pod signature: where to resume and why it failed."""

    candidates: list[str]
    cursor: int = 0
    failure: str | None = None


class Scheduler:
    """The scheduler loop (see module docstring)."""

    def __init__(self, api: ApiServer, *, interval_seconds: float = 0.05) -> None:
        self.api = api
        self.interval_seconds = interval_seconds
        self.nodes: dict[str, NodeState] = {}
        self._label_index: dict[tuple[str, str], set[str]] = {}
        self._sorted_names: list[str] | None = None
        self._bound: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}
        self._pending: dict[tuple[str, str], tuple[int, int]] = {}
        self._unschedulable: dict[tuple[str, str], tuple[int, int]] = {}
        self._sequence = 0
        self._wake = asyncio.Event()
        self._unsubscribe: list[Callable[[], None]] = []

    # --- cache maintenance (store listeners: synchronous, no writes) ----------------------

    def start(self) -> None:
        """Load current nodes and pods and follow changes."""
        store = self.api.store
        self._unsubscribe.append(store.subscribe(NODES.key, self._on_node))
        self._unsubscribe.append(store.subscribe(PODS.key, self._on_pod))
        for node in store.objects(NODES.key):
            self._upsert_node(node)
        for pod in store.objects(PODS.key):
            self._track_pod(object_key(pod), pod)

    def stop(self) -> None:
        """Stop following the store."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()

    def _on_node(self, event: WatchEvent) -> None:
        name = object_key(event.obj)[1]
        if event.type == DELETED:
            state = self.nodes.pop(name, None)
            if state is not None:
                self._index_labels(name, state.labels, {})
                self._sorted_names = None
        else:
            self._upsert_node(event.obj)
        self._retry_unschedulable()

    def _upsert_node(self, node: JsonObject) -> None:
        metadata = _dict(node.get("metadata"))
        name = str(metadata.get("name"))
        labels = {str(k): str(v) for k, v in _dict(metadata.get("labels")).items()}
        spec = _dict(node.get("spec"))
        allocatable = parse_resource_list(_dict(node.get("status")).get("allocatable"))
        schedulable = node_ready(node) and not spec.get("unschedulable")
        existing = self.nodes.get(name)
        if existing is None:
            self.nodes[name] = NodeState(
                name, labels, allocatable, _list(spec.get("taints")), schedulable
            )
            self._index_labels(name, {}, labels)
            self._sorted_names = None
        else:
            self._index_labels(name, existing.labels, labels)
            existing.labels = labels
            existing.allocatable = allocatable
            existing.taints = _list(spec.get("taints"))
            existing.schedulable = schedulable

    def _index_labels(self, name: str, old: dict[str, str], new: dict[str, str]) -> None:
        for item in old.items():
            if new.get(item[0]) != item[1]:
                members = self._label_index.get(item)
                if members is not None:
                    members.discard(name)
        for item in new.items():
            self._label_index.setdefault(item, set()).add(name)

    def _on_pod(self, event: WatchEvent) -> None:
        key = object_key(event.obj)
        freed = self._track_pod(key, None if event.type == DELETED else event.obj)
        if freed:
            self._retry_unschedulable()

    def _track_pod(self, key: tuple[str, str], pod: JsonObject | None) -> bool:
        """Update usage and the pending set; True when capacity was released."""
        freed = False
        previous = self._bound.pop(key, None)
        if previous is not None:
            node = self.nodes.get(previous[0])
            if node is not None:
                for name, amount in previous[1].items():
                    node.used[name] = node.used.get(name, 0) - amount
            freed = True
        if pod is None:
            self._pending.pop(key, None)
            self._unschedulable.pop(key, None)
            return freed
        spec = _dict(pod.get("spec"))
        phase = _dict(pod.get("status")).get("phase")
        node_name = spec.get("nodeName")
        if node_name:
            self._pending.pop(key, None)
            self._unschedulable.pop(key, None)
            if phase not in _TERMINAL:
                requests = previous[1] if previous is not None else pod_requests(pod)
                self._bound[key] = (str(node_name), requests)
                node = self.nodes.get(str(node_name))
                if node is not None:
                    for name, amount in requests.items():
                        node.used[name] = node.used.get(name, 0) + amount
                freed = freed and previous is not None and previous[0] != node_name
            return freed
        eligible = (
            not spec.get("schedulingGates")
            and not _dict(pod.get("metadata")).get("deletionTimestamp")
            and spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and phase not in _TERMINAL
        )
        if eligible:
            if key not in self._pending and key not in self._unschedulable:
                self._sequence += 1
                priority = spec.get("priority")
                self._pending[key] = (
                    int(priority) if isinstance(priority, int) else 0,
                    self._sequence,
                )
                self._wake.set()
        else:
            self._pending.pop(key, None)
            self._unschedulable.pop(key, None)
        return freed

    def _retry_unschedulable(self) -> None:
        if self._unschedulable:
            self._pending.update(self._unschedulable)
            self._unschedulable.clear()
        self._wake.set()

    # --- scheduling ----------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until cancelled."""
        self.start()
        try:
            while True:
                if not self._pending:
                    self._wake.clear()
                    await self._wake.wait()
                if self.interval_seconds:
                    await asyncio.sleep(self.interval_seconds)
                await self.schedule_pending()
        finally:
            self.stop()

    async def schedule_pending(self) -> None:
        """One scheduling pass over every pending pod."""
        queue = sorted(self._pending.items(), key=lambda item: (-item[1][0], item[1][1]))
        self._pending.clear()
        attempts: dict[bytes, _Attempt] = {}
        for count, (key, order) in enumerate(queue, start=1):
            if count % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            pod = self.api.store.get(PODS.key, *key)
            if pod is None or key in self._bound:
                continue
            spec = _dict(pod.get("spec"))
            if spec.get("schedulingGates") or spec.get("nodeName"):
                continue
            requests = pod_requests(pod)
            signature = msgspec.json.encode(
                [
                    spec.get("nodeSelector"),
                    spec.get("tolerations"),
                    spec.get("affinity"),
                    sorted(requests.items()),
                ]
            )
            attempt = attempts.get(signature)
            if attempt is None:
                attempt = _Attempt(self._candidates(spec))
                attempts[signature] = attempt
            node = None if attempt.failure else self._find(pod, requests, attempt)
            if node is None:
                if attempt.failure is None:
                    attempt.failure = self._explain(pod, requests)
                self._unschedulable[key] = order
                self._mark_unschedulable(key, pod, attempt.failure)
                continue
            try:
                self.api.bind(
                    key[0],
                    key[1],
                    {"metadata": {"name": key[1]}, "target": {"kind": "Node", "name": node}},
                )
            except ApiError:
                continue

    def _candidates(self, spec: JsonObject) -> list[str]:
        selector = _dict(spec.get("nodeSelector"))
        if not selector:
            if self._sorted_names is None:
                self._sorted_names = sorted(self.nodes)
            return self._sorted_names
        sets = [self._label_index.get((str(k), str(v)), set()) for k, v in selector.items()]
        smallest = min(sets, key=len)
        return sorted(name for name in smallest if all(name in s for s in sets))

    def _find(self, pod: JsonObject, requests: dict[str, int], attempt: _Attempt) -> str | None:
        candidates = attempt.candidates
        while attempt.cursor < len(candidates):
            node = self.nodes.get(candidates[attempt.cursor])
            if node is not None and self._feasible(pod, node) and node.fits(requests) is None:
                return node.name
            attempt.cursor += 1
        return None

    def _feasible(self, pod: JsonObject, node: NodeState) -> bool:
        return (
            node.schedulable
            and untolerated_taint(pod, node.taints) is None
            and affinity_matches(pod, node.name, node.labels)
        )

    def _explain(self, pod: JsonObject, requests: dict[str, int]) -> str:
        selector = _dict(_dict(pod.get("spec")).get("nodeSelector"))
        reasons: dict[str, int] = {}
        for node in self.nodes.values():
            if any(node.labels.get(str(k)) != v for k, v in selector.items()) or not (
                affinity_matches(pod, node.name, node.labels)
            ):
                reason = "node(s) didn't match Pod's node affinity/selector"
            elif not node.schedulable:
                reason = "node(s) were unschedulable or not ready"
            elif (taint := untolerated_taint(pod, node.taints)) is not None:
                reason = f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            else:
                missing = node.fits(requests)
                reason = (
                    ("Too many pods" if missing == "pods" else f"Insufficient {missing}")
                    if missing
                    else "node(s) were skipped"
                )
            reasons[reason] = reasons.get(reason, 0) + 1
        details = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        text = f"0/{len(self.nodes)} nodes are available"
        return f"{text}: {details}." if details else f"{text}."

    def _mark_unschedulable(self, key: tuple[str, str], pod: JsonObject, message: str) -> None:
        status = dict(_dict(pod.get("status")))
        condition: JsonObject = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(),
        }
        if not podrules.set_condition(status, condition):
            return
        with contextlib.suppress(ApiError):
            self.api.update(PODS, key[0], key[1], {**pod, "status": status}, subresource=STATUS)
