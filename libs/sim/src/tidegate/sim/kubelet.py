"""The simulated kubelets: run bound pods for a while, then finish them; complete deletions.

For every pod bound to a Ready node the kubelet reports it Running (conditions, start time,
container statuses, a pod IP). A pod annotated ``tidegate.io/sim-duration-seconds: "<s>"`` runs
for that many simulated seconds (wall time × ``time_scale``); then it exits with the code in
``tidegate.io/sim-exit-code`` (default 0) and, following its ``restartPolicy``, becomes
Succeeded or Failed, or is restarted (``restartCount`` + 1). Without the annotation it runs
until deleted. A pod being deleted gracefully is removed once its grace period (scaled) has
passed. Pods on a node that is NotReady or gone are left alone: their kubelet is unreachable,
as in a real cluster.

One object stands for the kubelets of all nodes; it writes pod status through the same
:class:`~tidegate.sim.apiserver.ApiServer` as any client.
"""

import itertools
import time
from collections.abc import Callable, Hashable
from typing import Final

from tidegate.sim import pods as podrules
from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import JsonObject
from tidegate.sim.kinds import NODES, PODS, STATUS
from tidegate.sim.loop import Reconciler
from tidegate.sim.names import parse_rfc3339, rfc3339
from tidegate.sim.nodeinfo import node_ready
from tidegate.sim.store import DELETED, WatchEvent, object_key

DURATION_ANNOTATION: Final = "tidegate.io/sim-duration-seconds"
EXIT_CODE_ANNOTATION: Final = "tidegate.io/sim-exit-code"
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _condition(kind: str, status: str, reason: str | None = None) -> JsonObject:
    condition: JsonObject = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(),
    }
    if reason:
        condition["reason"] = reason
    return condition


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
        self._ips = itertools.count(1)
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
        """Advance one pod's lifecycle on its node."""
        assert isinstance(key, tuple)
        namespace, name = key
        pod = self.api.store.get(PODS.key, namespace, name)
        if pod is None:
            return
        node = str(_dict(pod.get("spec")).get("nodeName") or "")
        if not node or node not in self._ready_nodes:
            return
        metadata = _dict(pod.get("metadata"))
        if metadata.get("deletionTimestamp"):
            self._finish_deletion(key, pod, metadata)
            return
        phase = _dict(pod.get("status")).get("phase")
        if phase in _TERMINAL:
            return
        uid = str(metadata.get("uid"))
        if phase != "Running" or uid not in self._started:
            self._run(key, pod, node)
            return
        duration = self._duration(pod)
        if duration is None:
            return
        due = self._started[uid] + duration
        if time.monotonic() < due:
            self.at(due, key)
            return
        self._exit(key, pod)

    def _duration(self, pod: JsonObject) -> float | None:
        raw = _dict(_dict(pod.get("metadata")).get("annotations")).get(DURATION_ANNOTATION)
        if raw is None:
            return None
        try:
            seconds = float(str(raw))
        except ValueError:
            return None
        return max(seconds, 0.0) * self.time_scale

    def _run(self, key: tuple[str, str], pod: JsonObject, node: str) -> None:
        metadata = _dict(pod.get("metadata"))
        spec = _dict(pod.get("spec"))
        status = dict(_dict(pod.get("status")))
        now = rfc3339()
        uid = str(metadata.get("uid"))
        if status.get("phase") != "Running":
            serial = next(self._ips)
            status["phase"] = "Running"
            status["startTime"] = status.get("startTime") or now
            status["hostIP"] = f"192.168.{(serial >> 16) & 255}.{(serial >> 8) & 255}"
            status["hostIPs"] = [{"ip": status["hostIP"]}]
            status["podIP"] = f"10.{(serial >> 16) & 255}.{(serial >> 8) & 255}.{serial & 255}"
            status["podIPs"] = [{"ip": status["podIP"]}]
            status["containerStatuses"] = [
                self._container_status(c, uid, now, restarts=0)
                for c in _list(spec.get("containers"))
            ]
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
                podrules.set_condition(status, _condition(kind, "True"))
            podrules.set_condition(status, _condition("PodScheduled", "True"))
            self.api.update(PODS, key[0], key[1], {**pod, "status": status}, subresource=STATUS)
        self._started[uid] = time.monotonic()
        duration = self._duration(pod)
        if duration is not None:
            self.at(self._started[uid] + duration, key)

    def _container_status(
        self, container: object, uid: str, started: str, *, restarts: int
    ) -> JsonObject:
        spec = _dict(container)
        name = str(spec.get("name"))
        image = str(spec.get("image"))
        return {
            "name": name,
            "image": image,
            "imageID": f"sim://{image}",
            "containerID": f"sim://{uid}/{name}",
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": started}},
        }

    def _exit(self, key: tuple[str, str], pod: JsonObject) -> None:
        metadata = _dict(pod.get("metadata"))
        spec = _dict(pod.get("spec"))
        annotations = _dict(metadata.get("annotations"))
        try:
            exit_code = int(str(annotations.get(EXIT_CODE_ANNOTATION, "0")))
        except ValueError:
            exit_code = 1
        policy = spec.get("restartPolicy", "Always")
        uid = str(metadata.get("uid"))
        status = dict(_dict(pod.get("status")))
        now = rfc3339()
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            statuses = [_dict(s) for s in _list(status.get("containerStatuses"))]
            restarts = int(str(statuses[0].get("restartCount", 0))) + 1 if statuses else 1
            status["containerStatuses"] = [
                self._container_status(c, uid, now, restarts=restarts)
                for c in _list(spec.get("containers"))
            ]
            self.api.update(PODS, key[0], key[1], {**pod, "status": status}, subresource=STATUS)
            self._started[uid] = time.monotonic()
            duration = self._duration(pod)
            if duration is not None:
                self.at(self._started[uid] + duration, key)
            return
        succeeded = exit_code == 0
        status["phase"] = "Succeeded" if succeeded else "Failed"
        reason = "Completed" if succeeded else "Error"
        status["containerStatuses"] = [
            {
                **_dict(s),
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "startedAt": _dict(_dict(_dict(s).get("state")).get("running")).get(
                            "startedAt", now
                        ),
                        "finishedAt": now,
                    }
                },
            }
            for s in _list(status.get("containerStatuses"))
        ]
        for kind in ("Ready", "ContainersReady"):
            podrules.set_condition(status, _condition(kind, "False", "PodCompleted"))
        podrules.set_condition(status, _condition("PodReadyToStartContainers", "False"))
        self._started.pop(uid, None)
        self.api.update(PODS, key[0], key[1], {**pod, "status": status}, subresource=STATUS)

    def _finish_deletion(self, key: tuple[str, str], pod: JsonObject, metadata: JsonObject) -> None:
        grace = metadata.get("deletionGracePeriodSeconds")
        grace_seconds = float(grace) if isinstance(grace, int) else 0.0
        try:
            deadline = parse_rfc3339(str(metadata["deletionTimestamp"]))
        except ValueError:
            deadline = time.time()
        requested = deadline - grace_seconds
        due_wall = requested + grace_seconds * self.time_scale
        remaining = due_wall - time.time()
        if remaining > 0:
            self.at(time.monotonic() + remaining, key)
            return
        self._started.pop(str(metadata.get("uid")), None)
        self.api.delete(PODS, key[0], key[1], {"gracePeriodSeconds": 0})
