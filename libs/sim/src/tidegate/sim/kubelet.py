"""The simulated kubelets: run bound pods for a while, then finish them; complete deletions.

For every pod bound to a Ready node the kubelet carries out the pod lifecycle of
:mod:`tidegate.sim.podlife` (the same rules the node agent ``tidegate nodes`` plays on real
clusters): the pod becomes Running; with ``tidegate.io/sim-duration-seconds`` it exits after
that many simulated seconds (wall time × ``time_scale``) and becomes Succeeded or Failed, or is
restarted, following its ``restartPolicy``; a pod being deleted gracefully is removed once its
grace period (scaled) has passed. Pods on a node that is NotReady or gone are left alone: their
kubelet is unreachable, as in a real cluster.

One object stands for the kubelets of all nodes; it writes pod status through the same
:class:`~tidegate.sim.apiserver.ApiServer` as any client.
"""

import time
from collections.abc import Callable, Hashable
from typing import Final

from tidegate.sim import podlife
from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import JsonObject
from tidegate.sim.kinds import NODES, PODS, STATUS
from tidegate.sim.loop import Reconciler
from tidegate.sim.nodeinfo import node_ready
from tidegate.sim.store import DELETED, WatchEvent, object_key

DURATION_ANNOTATION: Final = podlife.DURATION_ANNOTATION
EXIT_CODE_ANNOTATION: Final = podlife.EXIT_CODE_ANNOTATION


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


class Kubelet(Reconciler):
    """All simulated kubelets (see module docstring)."""

    name = "kubelet"

    def __init__(self, api: ApiServer, *, time_scale: float = 1.0) -> None:
        super().__init__()
        self.api = api
        self.time_scale = time_scale
        self._pods_on_node: dict[str, set[tuple[str, str]]] = {}
        self._ready_nodes: set[str] = set()
        self._started: dict[str, float] = {}
        self._unsubscribe: list[Callable[[], None]] = []

    def start(self) -> None:
        """Follow nodes and pods."""
        store = self.api.store
        self._unsubscribe.append(store.subscribe(NODES.key, self._on_node))
        self._unsubscribe.append(store.subscribe(PODS.key, self._on_pod))
        for node in store.objects(NODES.key):
            if node_ready(node):
                self._ready_nodes.add(object_key(node)[1])
        for pod in store.objects(PODS.key):
            self._index(object_key(pod), pod)

    def stop(self) -> None:
        """Stop following the store."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()

    def _on_node(self, event: WatchEvent) -> None:
        name = object_key(event.obj)[1]
        ready = event.type != DELETED and node_ready(event.obj)
        was_ready = name in self._ready_nodes
        if ready:
            self._ready_nodes.add(name)
        else:
            self._ready_nodes.discard(name)
        if ready and not was_ready:
            for key in self._pods_on_node.get(name, ()):
                self.mark(key)

    def _on_pod(self, event: WatchEvent) -> None:
        key = object_key(event.obj)
        if event.type == DELETED:
            self._unindex(key, event.obj)
            uid = _dict(event.obj.get("metadata")).get("uid")
            self._started.pop(str(uid), None)
            return
        self._index(key, event.obj)

    def _index(self, key: tuple[str, str], pod: JsonObject) -> None:
        node = _dict(pod.get("spec")).get("nodeName")
        if not node:
            return
        self._pods_on_node.setdefault(str(node), set()).add(key)
        self.mark(key)

    def _unindex(self, key: tuple[str, str], pod: JsonObject) -> None:
        node = _dict(pod.get("spec")).get("nodeName")
        if node:
            members = self._pods_on_node.get(str(node))
            if members is not None:
                members.discard(key)

    # --- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> None:
        """Carry out the next step of one pod's lifecycle (:func:`podlife.next_step`)."""
        assert isinstance(key, tuple)
        namespace, name = key
        pod = self.api.store.get(PODS.key, namespace, name)
        if pod is None:
            return
        node = str(_dict(pod.get("spec")).get("nodeName") or "")
        if not node or node not in self._ready_nodes:
            return
        uid = str(_dict(pod.get("metadata")).get("uid"))
        now = time.time()
        step = podlife.next_step(
            pod, started=self._started.get(uid), now=now, time_scale=self.time_scale
        )
        if isinstance(step, podlife.Wait):
            self._wake_at(step.at, now, key)
        elif isinstance(step, podlife.Remove):
            self._started.pop(uid, None)
            self.api.delete(PODS, namespace, name, {"gracePeriodSeconds": 0})
        elif isinstance(step, podlife.WriteStatus):
            self.api.update(
                PODS, namespace, name, {**pod, "status": step.status}, subresource=STATUS
            )
            if step.started is None:
                self._started.pop(uid, None)
            else:
                self._started[uid] = step.started
            if step.due is not None:
                self._wake_at(step.due, now, key)

    def _wake_at(self, wall: float, now: float, key: tuple[str, str]) -> None:
        self.at(time.monotonic() + max(wall - now, 0.0), key)
