"""Fake GPU nodes for any cluster: a kwok-style node agent that plays the kubelet of each.

``tidegate nodes`` (and tests, through :func:`fake_nodes`) register Node objects shaped exactly
as ``tidegate sim --nodes`` makes them (:mod:`tidegate.sim.topology`: topology labels,
``nvidia.com/gpu`` allocatable, the card model label) on a cluster reached by a kubeconfig, and
then do what a kubelet does for them, so that a real control plane with no GPU (no kubelet at
all) runs tidegate as on a GPU cluster:

- **Ready**: the node's status (capacity, the Ready condition) is posted through the
  ``nodes/status`` subresource at registration and again every ``status_interval_seconds``
  (or at once when someone sets it otherwise), and one loop renews a Lease per node in
  ``kube-node-lease`` every ``renew_interval_seconds``, so the node-lifecycle controller
  removes the ``node.kubernetes.io/not-ready`` taint and never marks the nodes unreachable.
- **Pods**: one pod watch (bound, unfinished pods, filtered to the agent's nodes on arrival)
  feeds a work queue; each pod's next step comes from :func:`tidegate.sim.podlife.next_step`,
  the same lifecycle the simulator's kubelets follow (Running, then Succeeded/Failed/restarted
  after ``tidegate.io/sim-duration-seconds``, graceful deletions finished with grace 0).
- **Robust**: the watches are :class:`tidegate.kube.Informer` (410 Gone answered by a relist);
  requests go through one rate-limited client with bounded concurrency, so 1,000 nodes cost one
  pod watch, one node watch and one lease loop.

A node of the same name that exists already is adopted only when it carries the agent's
annotation (a real node is never touched). On exit the agent stops; with
``delete_nodes_on_exit`` it deletes its nodes and leases.
"""

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Self

from tidegate.kube import (
    NODES,
    PODS,
    AlreadyExists,
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    KubeEvent,
    KubeSettings,
    NotFound,
    ResourceType,
    connect,
    object_key,
)
from tidegate.kube.read.objects import Meta, Node, ObjectError, Pod, decode
from tidegate.sim import podlife
from tidegate.sim.names import label_value_problem, rfc3339, rfc3339_micro
from tidegate.sim.topology import (
    BLOCK,
    DEFAULT_GPU_PRODUCT,
    HOSTNAME,
    RACK,
    ZONE,
    ClusterLayout,
    NodeSpec,
    layout_for,
    node_object,
    topology_object,
)

log = logging.getLogger(__name__)

LEASES: Final = ResourceType(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease"
)
LEASE_NAMESPACE: Final = "kube-node-lease"
AGENT_ANNOTATION: Final = "tidegate.io/node-agent"
"""On every node the agent registers; only nodes carrying it are adopted or deleted."""
NOT_READY_TAINTS: Final = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)
_POD_SELECTOR: Final = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_RETRY_SECONDS: Final = 1.0
_TOPOLOGY_VERSIONS: Final = (
    ("tidegate.io", "v1alpha1"),
    ("kueue.x-k8s.io", "v1beta1"),
    ("kueue.x-k8s.io", "v1alpha1"),
)

JsonObject = dict[str, object]
Say = Callable[[str], None]
PodKey = tuple[str, str]


class AgentError(RuntimeError):
    """The agent cannot do its job (a node it may not adopt, a watch refused); says why."""


@dataclass(frozen=True, kw_only=True)
class AgentSettings:
    """What nodes to fake and how to keep them (see the module docstring and docs/nodes.md)."""

    nodes: str | Path = "1x2x4x8gpu"
    """Topology description ("4x8x16x8gpu") or a YAML/CSV file, as ``tidegate sim --nodes``."""
    gpu_product: str = DEFAULT_GPU_PRODUCT
    allocatable: Mapping[str, str] = field(default_factory=dict)
    """Overrides of every node's allocatable (e.g. {"cpu": "64"})."""
    time_scale: float = 1.0
    """Wall seconds per simulated second of pod durations and grace periods."""
    topology_name: str | None = None
    """Create Topology objects (tidegate.io, and Kueue's when installed) of this name for the
    node levels; None for none."""
    lease_duration_seconds: int = 40
    renew_interval_seconds: float = 10.0
    """How often each node's Lease is renewed (a kubelet's default is 10 s)."""
    status_interval_seconds: float = 60.0
    """How often each node's Ready condition is posted again."""
    concurrency: int = 32
    """Requests in flight at once (registration, lease rounds, pod updates)."""
    delete_nodes_on_exit: bool = False
    prefix: str = ""
    """Put before every node name and topology label value (``t1-block0-rack0``), so that
    several agents (say, one per test) share a cluster without sharing nodes or racks."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """More labels on every node (e.g. one a test's pods select with a nodeSelector)."""

    def validate(self) -> None:
        """Raise :class:`AgentError` naming the first bad setting."""
        if self.time_scale <= 0:
            raise AgentError(f"time_scale: must be positive, got {self.time_scale}")
        if self.lease_duration_seconds < 1:
            raise AgentError("lease_duration_seconds: must be at least 1")
        if not 0 < self.renew_interval_seconds < self.lease_duration_seconds:
            raise AgentError(
                "renew_interval_seconds: must be positive and shorter than the lease duration"
            )
        if self.status_interval_seconds <= 0:
            raise AgentError("status_interval_seconds: must be positive")
        if self.concurrency < 1:
            raise AgentError("concurrency: must be at least 1")
        if self.prefix and label_value_problem(f"{self.prefix}x") is not None:
            raise AgentError(f"prefix: {self.prefix!r} cannot start a node name or label value")


@dataclass
class AgentStats:
    """What the agent has done so far (progress output and tests read it)."""

    registered: int = 0
    """Nodes created or adopted."""
    status_posts: int = 0
    lease_renewals: int = 0
    lease_rounds: int = 0
    started: int = 0
    """Pods moved to Running."""
    restarted: int = 0
    finished: int = 0
    """Pods moved to Succeeded or Failed."""
    removed: int = 0
    """Gracefully deleted pods whose deletion the agent finished."""
    relists: int = 0


def agent_kube_settings(kubeconfig: Path | None, *, context: str | None = None) -> KubeSettings:
    """Client settings for the agent: a kubeconfig and a rate limit fit for ~1,000 kubelets."""
    return KubeSettings(
        source="kubeconfig",
        kubeconfig=kubeconfig,
        context=context,
        qps=500.0,
        burst=1000,
        backoff_max_seconds=2.0,
        user_agent="tidegate-nodes",
    )


@contextlib.asynccontextmanager
async def fake_nodes(
    kubeconfig: Path | None,
    settings: AgentSettings | None = None,
    *,
    say: Say | None = None,
    context: str | None = None,
) -> AsyncIterator["NodeAgent"]:
    """Connect to the cluster of ``kubeconfig`` and run a node agent for the block::

    async with fake_nodes(path, AgentSettings(nodes="1x2x4x8gpu")) as agent:
        await agent.wait_ready(timeout_seconds=60)
    """
    kube = await connect(agent_kube_settings(kubeconfig, context=context))
    try:
        async with NodeAgent.running(kube, settings or AgentSettings(), say=say) as agent:
            yield agent
    finally:
        await kube.close()


class _WorkQueue:
    """Keys to process, each at most once at a time, plus timers (client-go's workqueue)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[PodKey] = asyncio.Queue()
        self._queued: set[PodKey] = set()
        self._active: set[PodKey] = set()
        self._again: set[PodKey] = set()
        self._timers: list[tuple[float, int, PodKey]] = []
        self._sequence = 0
        self._wake = asyncio.Event()

    def mark(self, key: PodKey) -> None:
        """Process ``key`` soon (again after the current round if it is being processed)."""
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def at(self, when: float, key: PodKey) -> None:
        """Process ``key`` at wall time ``when``."""
        self._sequence += 1
        heapq.heappush(self._timers, (when, self._sequence, key))
        self._wake.set()

    async def get(self) -> PodKey:
        """The next key to process; call :meth:`done` after."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: PodKey) -> None:
        """``key`` was processed."""
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.mark(key)

    async def run_timers(self) -> None:
        """Mark keys whose time has come, until cancelled."""
        while True:
            now = time.time()
            while self._timers and self._timers[0][0] <= now:
                _, _, key = heapq.heappop(self._timers)
                self.mark(key)
            wait = self._timers[0][0] - now if self._timers else None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()


async def _bounded(
    items: Iterable[str], action: Callable[[str], Awaitable[None]], limit: int
) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(item: str) -> None:
        async with semaphore:
            await action(item)

    await asyncio.gather(*(one(item) for item in items))


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _uid(obj: Mapping[str, object]) -> str:
    try:
        return decode(obj, Meta).metadata.uid
    except ObjectError:
        return ""


def _resource_version(obj: Mapping[str, object]) -> int:
    try:
        return int(decode(obj, Meta).metadata.resource_version)
    except (ObjectError, ValueError):
        return -1


def _node_name(pod: Mapping[str, object]) -> str:
    """The node a pod is bound to; "" when unbound or unreadable."""
    try:
        return decode(pod, Pod).spec.node_name
    except ObjectError:
        return ""


def _ready(node: Mapping[str, object]) -> bool:
    """Whether a Node reports the Ready condition "True" (an unreadable one does not)."""
    try:
        conditions = decode(node, Node).status.conditions
    except ObjectError:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _customized(layout: ClusterLayout, *, prefix: str, labels: Mapping[str, str]) -> ClusterLayout:
    """The layout with ``prefix`` before node names and topology values, plus ``labels``."""
    if not prefix and not labels:
        return layout
    nodes = []
    for spec in layout.nodes:
        name = f"{prefix}{spec.name}"
        new_labels = {
            key: f"{prefix}{value}" if key in (ZONE, BLOCK, RACK) else value
            for key, value in spec.labels.items()
        }
        new_labels[HOSTNAME] = name
        new_labels.update(labels)
        nodes.append(replace(spec, name=name, labels=new_labels))
    return ClusterLayout(nodes=nodes, levels=list(layout.levels))


def node_ready_and_untainted(node: Mapping[str, object]) -> bool:
    """Whether a Node is Ready and carries neither the not-ready nor the unreachable taint."""
    try:
        view = decode(node, Node)
    except ObjectError:
        return False
    ready = any(c.type == "Ready" and c.status == "True" for c in view.status.conditions)
    tainted = any(t.key in NOT_READY_TAINTS for t in view.spec.taints)
    return ready and not tainted


class NodeAgent:
    """Registers and keeps fake nodes, and runs the pods bound to them; see :meth:`running`."""

    def __init__(
        self, kube: KubeClient, settings: AgentSettings, *, say: Say | None = None
    ) -> None:
        settings.validate()
        self.kube = kube
        self.settings = settings
        self.layout: ClusterLayout = _customized(
            layout_for(
                settings.nodes, gpu_product=settings.gpu_product, allocatable=settings.allocatable
            ),
            prefix=settings.prefix,
            labels=settings.labels,
        )
        self.stats = AgentStats()
        self._say: Say = say or (lambda _line: None)
        self._specs: dict[str, NodeSpec] = {spec.name: spec for spec in self.layout.nodes}
        self._uids: dict[str, str] = {}
        self._nodes: dict[str, JsonObject] = {}
        """Last state of each of the agent's nodes, from the node watch."""
        self._pods: dict[tuple[str, str], JsonObject] = {}
        self._started: dict[str, float] = {}
        self._queue = _WorkQueue()
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._changed = asyncio.Event()
        self._status_due: set[str] = set()
        self._down: set[str] = set()
        """Nodes whose kubelet plays dead (:meth:`kubelet_down`)."""
        self._pods_synced = asyncio.Event()
        self._nodes_synced = asyncio.Event()
        self._announced_ready = False

    # --- public --------------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, kube: KubeClient, settings: AgentSettings, *, say: Say | None = None
    ) -> AsyncIterator[Self]:
        """Register the nodes, keep them and their pods until the block ends, then stop."""
        agent = cls(kube, settings, say=say)
        try:
            await agent.start()
            yield agent
        finally:
            await agent.stop()

    @property
    def node_names(self) -> list[str]:
        """The names of the agent's nodes, in layout order."""
        return list(self._specs)

    def check(self) -> None:
        """Raise :class:`AgentError` if a loop of the agent has failed."""
        if self._failure is not None:
            raise AgentError(f"the node agent failed: {self._failure}") from self._failure

    def ready_count(self) -> int:
        """How many of the agent's nodes are Ready and untainted, as last watched."""
        return sum(1 for node in self._nodes.values() if node_ready_and_untainted(node))

    async def wait_ready(self, *, timeout_seconds: float = 120.0) -> None:
        """Wait until every node is Ready and has no not-ready/unreachable taint."""
        deadline = time.monotonic() + timeout_seconds
        while self.ready_count() < len(self._specs):
            self.check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentError(
                    f"only {self.ready_count()}/{len(self._specs)} nodes Ready and untainted "
                    f"after {timeout_seconds:.0f}s"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 1.0)):
                    await self._changed.wait()

    def kubelet_down(self, name: str) -> None:
        """Play a dead kubelet on one node until :meth:`kubelet_up`: no Lease renewal, no
        status post, no pod touched (its pods stay as they are, Terminating ones included)."""
        if name not in self._specs:
            raise AgentError(f"kubelet_down: {name} is not one of the agent's nodes")
        self._down.add(name)

    def kubelet_up(self, name: str) -> None:
        """Bring a node's kubelet back: its Ready status is posted at once and its pods are
        looked at again."""
        self._down.discard(name)
        self._status_due.add(name)
        for key, pod in self._pods.items():
            if _node_name(pod) == name:
                self._queue.mark(key)

    async def start(self) -> None:
        """Register every node and its Lease, then start the loops; returns once the pod and
        node watches have listed."""
        total = len(self._specs)
        self._say(f"tidegate nodes: registering {total} nodes on {self.kube.host}")
        begun = time.monotonic()
        await _bounded(self._specs, self._register, self.settings.concurrency)
        self._say(
            f"tidegate nodes: {total} nodes registered, status posted and leases held "
            f"({time.monotonic() - begun:.1f}s)"
        )
        if self.settings.topology_name:
            await self._create_topologies(self.settings.topology_name)
        for name, coroutine in (
            ("pod-watch", self._watch_pods()),
            ("node-watch", self._watch_nodes()),
            ("leases", self._renew_leases()),
            ("node-status", self._post_statuses()),
            ("timers", self._queue.run_timers()),
            *((f"pod-worker-{i}", self._work()) for i in range(self.settings.concurrency)),
        ):
            self._tasks.append(asyncio.create_task(self._supervised(name, coroutine)))
        waiting = [asyncio.ensure_future(e.wait()) for e in (self._pods_synced, self._nodes_synced)]
        try:
            while not all(w.done() for w in waiting):
                self.check()
                await asyncio.wait(waiting, timeout=0.5)
        finally:
            for w in waiting:
                w.cancel()

    async def stop(self) -> None:
        """Stop every loop; delete the nodes and leases when the settings say so."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(task, return_exceptions=True)
        self._tasks.clear()
        if self.settings.delete_nodes_on_exit and self._uids:
            names = list(self._uids)
            await _bounded(names, self._delete_node, self.settings.concurrency)
            self._say(f"tidegate nodes: deleted {len(names)} nodes and their leases")

    # --- registration --------------------------------------------------------------------

    def _node_body(self, spec: NodeSpec) -> JsonObject:
        body = node_object(spec, created=rfc3339())
        metadata = _dict(body["metadata"])
        metadata["annotations"] = {AGENT_ANNOTATION: "true"}
        return body

    async def _register(self, name: str) -> None:
        spec = self._specs[name]
        body = self._node_body(spec)
        try:
            node = await self.kube.create(NODES, body)
        except AlreadyExists:
            node = await self.kube.get(NODES, name)
            annotations = decode(node, Meta).metadata.annotations
            if AGENT_ANNOTATION not in annotations:
                raise AgentError(
                    f"node {name} exists and was not registered by tidegate nodes "
                    f"(no {AGENT_ANNOTATION} annotation): not touching it"
                ) from None
            node = await self.kube.patch(
                NODES, name, {"metadata": {"labels": dict(spec.labels)}}, patch_type="strategic"
            )
        self._uids[name] = _uid(node)
        self.stats.registered += 1
        await self._post_status(name, full=True)
        await self._renew_lease(name)

    async def _post_status(self, name: str, *, full: bool = False) -> None:
        now = rfc3339()
        ready: JsonObject = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status (tidegate nodes)",
            "lastHeartbeatTime": now,
        }
        current = self._nodes.get(name)
        was_ready = current is not None and _ready(current)
        if not was_ready:
            ready["lastTransitionTime"] = now
        if full:
            status = _dict(self._node_body(self._specs[name])["status"])
            status["conditions"] = [
                {**ready, "lastTransitionTime": ready.get("lastTransitionTime", now)}
            ]
        else:
            status = {"conditions": [ready]}
        await self.kube.patch(
            NODES, name, {"status": status}, patch_type="strategic", subresource="status"
        )
        self.stats.status_posts += 1

    def _lease_body(self, name: str) -> JsonObject:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self._uids[name]}
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": self.settings.lease_duration_seconds,
                "renewTime": rfc3339_micro(),
            },
        }

    async def _renew_lease(self, name: str) -> None:
        patch = {
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": self.settings.lease_duration_seconds,
                "renewTime": rfc3339_micro(),
            }
        }
        try:
            await self.kube.patch(LEASES, name, patch, namespace=LEASE_NAMESPACE)
        except NotFound:
            with contextlib.suppress(AlreadyExists):
                await self.kube.create(LEASES, self._lease_body(name), namespace=LEASE_NAMESPACE)
        self.stats.lease_renewals += 1

    async def _create_topologies(self, name: str) -> None:
        created_kueue = False
        for group, version in _TOPOLOGY_VERSIONS:
            if group == "kueue.x-k8s.io" and created_kueue:
                continue
            body = topology_object(name, self.layout.levels, group=group)
            body["apiVersion"] = f"{group}/{version}"
            resource = ResourceType(
                group=group, version=version, plural="topologies", kind="Topology", namespaced=False
            )
            try:
                await self.kube.create(resource, body)
            except AlreadyExists:
                pass
            except NotFound:
                continue
            self._say(f"tidegate nodes: Topology {name} ({group}/{version}) for the node levels")
            created_kueue = created_kueue or group == "kueue.x-k8s.io"

    async def _delete_node(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.kube.delete(LEASES, name, namespace=LEASE_NAMESPACE)
        with contextlib.suppress(NotFound, Conflict):
            await self.kube.delete(NODES, name, uid=self._uids.get(name))

    # --- loops ---------------------------------------------------------------------------

    async def _supervised(self, name: str, coroutine: Awaitable[None]) -> None:
        try:
            await coroutine
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("node agent: %s failed", name)
            self._failure = exc
            self._say(f"tidegate nodes: {name} failed: {exc}")
            self._changed.set()

    async def _paced_round(
        self, names: list[str], action: Callable[[str], Awaitable[None]]
    ) -> None:
        """Run ``action`` for every name, spread over half the renew interval."""
        if not names:
            return
        spacing = self.settings.renew_interval_seconds * 0.5 / len(names)
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        begun = time.monotonic()

        async def one(index: int, name: str) -> None:
            delay = begun + index * spacing - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with semaphore:
                try:
                    await action(name)
                except KubeError as exc:
                    log.warning("node agent: %s: %s", name, exc)

        await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))

    async def _renew_leases(self) -> None:
        interval = self.settings.renew_interval_seconds
        next_round = time.monotonic() + interval
        while True:
            await asyncio.sleep(max(next_round - time.monotonic(), 0.0))
            begun = time.monotonic()
            next_round = begun + interval
            await self._paced_round(
                [n for n in self._uids if n not in self._down], self._renew_lease
            )
            self.stats.lease_rounds += 1
            took = time.monotonic() - begun
            if took > interval:
                log.warning("node agent: renewing %d leases took %.1fs", len(self._uids), took)

    async def _post_statuses(self) -> None:
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - last_full >= self.settings.status_interval_seconds:
                last_full = time.monotonic()
                due = set(self._uids)
            else:
                due = self._status_due & set(self._uids)
            self._status_due.clear()
            due -= self._down
            if due:
                await self._paced_round(sorted(due), self._post_status)

    async def _watch_nodes(self) -> None:
        async for item in Informer(self.kube, NODES):
            if not isinstance(item, KubeEvent):
                if item.relist:
                    self.stats.relists += 1
                self._nodes_synced.set()
                self._changed.set()
                continue
            name = object_key(item.obj)[1]
            if name not in self._uids:
                continue
            if item.type == "DELETED":
                self._forget_node(name)
                continue
            if _uid(item.obj) != self._uids[name]:
                continue
            self._nodes[name] = item.obj
            if not _ready(item.obj):
                self._status_due.add(name)
            self._changed.set()
            if not self._announced_ready and self.ready_count() == len(self._specs):
                self._announced_ready = True
                self._say(f"tidegate nodes: all {len(self._specs)} nodes Ready and untainted")

    def _forget_node(self, name: str) -> None:
        """Someone deleted one of the agent's nodes: stop keeping it (and its pods)."""
        self._uids.pop(name, None)
        self._nodes.pop(name, None)
        self._say(f"tidegate nodes: node {name} was deleted; no longer keeping it")
        self._changed.set()

    async def _watch_pods(self) -> None:
        informer = Informer(self.kube, PODS, field_selector=_POD_SELECTOR)
        async for item in informer:
            if not isinstance(item, KubeEvent):
                if item.relist:
                    self.stats.relists += 1
                self._pods_synced.set()
                continue
            key = item.key
            if item.type == "DELETED":
                gone = self._pods.pop(key, None)
                if gone is not None:
                    self._started.pop(_uid(gone), None)
                continue
            node = _node_name(item.obj)
            if node not in self._specs:
                continue
            self._remember(key, item.obj)
            self._queue.mark(key)

    def _remember(self, key: tuple[str, str], pod: JsonObject) -> None:
        """Keep the newest state of a pod (our own writes may overtake their watch events)."""
        known = self._pods.get(key)
        same_pod = known is not None and _uid(known) == _uid(pod)
        if same_pod and known is not None and _resource_version(pod) < _resource_version(known):
            return
        self._pods[key] = pod

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._advance(key)
            except KubeError as exc:
                log.warning("node agent: pod %s/%s: %s; retrying", key[0], key[1], exc)
                self._queue.at(time.time() + _RETRY_SECONDS, key)
            finally:
                self._queue.done(key)

    async def _remove(self, namespace: str, name: str, uid: str) -> None:
        """Finish a deletion (grace 0), as a kubelet does once the containers are gone."""
        try:
            await self.kube.delete_pod(namespace, name, grace_seconds=0, uid=uid)
        except (NotFound, Conflict):
            return
        self.stats.removed += 1

    async def _advance(self, key: tuple[str, str]) -> None:
        """Carry out the next lifecycle step of one pod (:func:`podlife.next_step`)."""
        pod = self._pods.get(key)
        if pod is None:
            return
        node = _node_name(pod)
        if node not in self._uids or node in self._down:
            return
        metadata = _dict(pod.get("metadata"))
        uid = str(metadata.get("uid"))
        now = time.time()
        step = podlife.next_step(
            pod, started=self._started.get(uid), now=now, time_scale=self.settings.time_scale
        )
        namespace, name = key
        if isinstance(step, podlife.Wait):
            self._queue.at(step.at, key)
        elif isinstance(step, podlife.Remove):
            await self._remove(namespace, name, uid)
        elif isinstance(step, podlife.WriteStatus):
            patch = {
                "metadata": {"resourceVersion": metadata.get("resourceVersion")},
                "status": step.status,
            }
            try:
                written = await self.kube.patch(
                    PODS, name, patch, namespace=namespace, subresource="status"
                )
            except Conflict:
                # Someone changed the pod meanwhile; its watch event brings the new state.
                self._queue.at(time.time() + _RETRY_SECONDS, key)
                return
            except NotFound:
                return
            if step.transition == "kill":
                # A terminal pod leaves this agent's watch (its field selector): remove it now.
                await self._remove(namespace, name, uid)
                return
            self._remember(key, written)
            if step.started is None:
                self._started.pop(uid, None)
            else:
                self._started[uid] = step.started
            if step.due is not None:
                self._queue.at(step.due, key)
            if step.transition == "run":
                self.stats.started += 1
            elif step.transition == "restart":
                self.stats.restarted += 1
            elif step.transition == "finish":
                self.stats.finished += 1
