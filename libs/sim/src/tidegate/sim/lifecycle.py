"""Simulated housekeeping controllers: garbage collection, namespaces, node lifecycle.

- :class:`GarbageCollector`: when an owner is deleted, its dependents (objects whose
  ownerReferences name the owner's uid) are deleted too (background propagation), or, when the
  owner was deleted with ``propagationPolicy: Orphan`` (the default for batch/v1 Jobs, as in
  Kubernetes), their ownerReference is removed. Dependents whose owner never existed are left
  alone (the real collector would delete them).
- :class:`NamespaceController`: a terminating namespace has its content deleted, then is
  removed once empty; meanwhile its status conditions say what remains and which finalizers
  hold it, as kube-controller-manager's namespace controller writes them.
- :class:`NodeLifecycle`: a node whose Ready condition is False (Unknown) gets the
  ``node.kubernetes.io/not-ready`` (``unreachable``) NoSchedule and NoExecute taints, removed
  again when it is Ready; pods on it that do not tolerate the NoExecute taint are deleted
  (after their ``tolerationSeconds``, scaled by ``time_scale``); their kubelet being
  unreachable, they stay Terminating until the node is back or gone. When a node object is
  deleted, the pods bound to it are force-deleted (pod GC). Both first set the pod's
  ``DisruptionTarget`` condition (reasons ``DeletionByTaintManager``, ``DeletionByPodGC``), as
  Kubernetes does, so a Job's pod failure policy can tell them from the workload's failures.
"""

import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Final

from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import ApiError, JsonObject
from tidegate.sim.kinds import NAMESPACES, NODES, PODS, ResourceType
from tidegate.sim.loop import Reconciler
from tidegate.sim.names import parse_rfc3339, rfc3339
from tidegate.sim.nodeinfo import tolerates
from tidegate.sim.pods import set_condition
from tidegate.sim.store import DELETED, ResourceKey, WatchEvent, object_key

NOT_READY: Final = "node.kubernetes.io/not-ready"
UNREACHABLE: Final = "node.kubernetes.io/unreachable"


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


@contextlib.contextmanager
def _missing_ok() -> Iterator[None]:
    """Ignore 404: what we meant to delete or change is already gone."""
    try:
        yield
    except ApiError as exc:
        if exc.code != 404:
            raise


class GarbageCollector(Reconciler):
    """Cascading deletion through ownerReferences."""

    name = "garbage-collector"

    def __init__(self, api: ApiServer) -> None:
        super().__init__()
        self.api = api
        self._dependents: dict[str, set[tuple[ResourceKey, str, str]]] = {}
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        """Index every object with owners and follow all resources."""
        store = self.api.store
        for resource in store.resource_keys():
            for obj in store.objects(resource):
                self._index(resource, obj, add=True)
        self._unsubscribe = store.subscribe_all(self._on_event)

    def stop(self) -> None:
        """Stop following the store."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _index(self, resource: ResourceKey, obj: JsonObject, *, add: bool) -> None:
        refs = _list(_dict(obj.get("metadata")).get("ownerReferences"))
        if not refs:
            return
        namespace, name = object_key(obj)
        for ref in refs:
            uid = str(_dict(ref).get("uid"))
            entry = (resource, namespace, name)
            if add:
                self._dependents.setdefault(uid, set()).add(entry)
            else:
                members = self._dependents.get(uid)
                if members is not None:
                    members.discard(entry)
                    if not members:
                        del self._dependents[uid]

    def _on_event(self, resource: ResourceKey, event: WatchEvent) -> None:
        if event.old is not None:
            self._index(resource, event.old, add=False)
        if event.type != DELETED:
            self._index(resource, event.obj, add=True)
            return
        uid = _dict(event.obj.get("metadata")).get("uid")
        if uid and str(uid) in self._dependents:
            self.mark(str(uid))

    def reconcile(self, key: Hashable) -> None:
        """Delete (or orphan) the dependents of one deleted owner."""
        owner_uid = str(key)
        orphan = owner_uid in self.api.orphaned_owners
        for resource, namespace, name in sorted(self._dependents.get(owner_uid, set())):
            obj = self.api.store.get(resource, namespace, name)
            if obj is None:
                continue
            rtype = self.api.resolve_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
            if rtype is None:
                continue
            if orphan:
                refs = [
                    r
                    for r in _list(_dict(obj.get("metadata")).get("ownerReferences"))
                    if _dict(r).get("uid") != owner_uid
                ]
                body = {**obj, "metadata": {**_dict(obj.get("metadata")), "ownerReferences": refs}}
                with _missing_ok():
                    self.api.update(rtype, namespace or None, name, body)
            else:
                with _missing_ok():
                    self.api.delete(rtype, namespace or None, name, {})
        self.api.orphaned_owners.discard(owner_uid)


class NamespaceController(Reconciler):
    """Empties terminating namespaces, then removes them."""

    name = "namespace-controller"

    def __init__(self, api: ApiServer) -> None:
        super().__init__()
        self.api = api
        self._terminating: set[str] = set()
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        """Follow every resource (content of terminating namespaces)."""
        for namespace in self.api.store.objects(NAMESPACES.key):
            if _dict(namespace.get("metadata")).get("deletionTimestamp"):
                name = object_key(namespace)[1]
                self._terminating.add(name)
                self.mark(name)
        self._unsubscribe = self.api.store.subscribe_all(self._on_event)

    def stop(self) -> None:
        """Stop following the store."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_event(self, resource: ResourceKey, event: WatchEvent) -> None:
        if resource == NAMESPACES.key:
            name = object_key(event.obj)[1]
            if event.type == DELETED:
                self._terminating.discard(name)
            elif _dict(event.obj.get("metadata")).get("deletionTimestamp"):
                self._terminating.add(name)
                self.mark(name)
            return
        # Any change (a finalizer removed, an object gone) may change what remains.
        namespace = object_key(event.obj)[0]
        if namespace in self._terminating:
            self.mark(namespace)

    def reconcile(self, key: Hashable) -> None:
        """Delete what is left in a terminating namespace; remove it when empty."""
        namespace = str(key)
        if namespace not in self._terminating:
            return
        types = self._namespaced_types()
        for rtype in types:
            for obj in list(self.api.store.objects(rtype.key, namespace)):
                if _dict(obj.get("metadata")).get("deletionTimestamp"):
                    continue
                name = object_key(obj)[1]
                with _missing_ok():
                    self.api.delete(rtype, namespace, name, {})
        by_type: dict[str, int] = {}
        by_finalizer: dict[str, int] = {}
        for rtype in types:
            for obj in self.api.store.objects(rtype.key, namespace):
                # "pods." for the core group: the real controller's format.
                what = f"{rtype.plural}.{rtype.group}"
                by_type[what] = by_type.get(what, 0) + 1
                for finalizer in _list(_dict(obj.get("metadata")).get("finalizers")):
                    by_finalizer[str(finalizer)] = by_finalizer.get(str(finalizer), 0) + 1
        if not by_type:
            self.api.finalize_namespace(namespace)
            return
        self._write_conditions(namespace, by_type, by_finalizer)

    def _write_conditions(
        self, namespace: str, by_type: dict[str, int], by_finalizer: dict[str, int]
    ) -> None:
        """The namespace's deletion conditions (what remains, which finalizers hold it), as
        the real namespace controller writes them; written only when they change."""
        obj = self.api.store.get(NAMESPACES.key, "", namespace)
        if obj is None:
            return
        remaining = ", ".join(f"{k} has {n} resource instances" for k, n in sorted(by_type.items()))
        held = ", ".join(f"{k} in {n} resource instances" for k, n in sorted(by_finalizer.items()))
        wanted: list[tuple[str, str, str, str]] = [
            (
                "NamespaceDeletionDiscoveryFailure",
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            (
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            (
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                f"Some resources are remaining: {remaining}",
            ),
            (
                "NamespaceFinalizersRemaining",
                "True" if held else "False",
                "SomeFinalizersRemain" if held else "ContentHasNoFinalizers",
                f"Some content in the namespace has finalizers remaining: {held}"
                if held
                else "All content-preserving finalizers finished",
            ),
        ]
        status = dict(_dict(obj.get("status")))
        changed = False
        for kind, value, reason, message in wanted:
            condition: JsonObject = {
                "type": kind,
                "status": value,
                "lastTransitionTime": rfc3339(),
                "reason": reason,
                "message": message,
            }
            changed = set_condition(status, condition) or changed
        if changed:
            with _missing_ok():
                self.api.update(
                    NAMESPACES, None, namespace, {**obj, "status": status}, subresource="status"
                )

    def _namespaced_types(self) -> list[ResourceType]:
        seen: dict[ResourceKey, ResourceType] = {}
        for group in ["", *self.api.registry.groups()]:
            for version in self.api.registry.versions_of(group) if group else ["v1"]:
                for rtype in self.api.registry.in_group_version(group, version):
                    if rtype.namespaced and rtype.key not in seen:
                        seen[rtype.key] = rtype
        return list(seen.values())


class NodeLifecycle(Reconciler):
    """Taints for not-ready nodes, taint-based eviction, pod GC for deleted nodes."""

    name = "node-lifecycle"

    def __init__(self, api: ApiServer, *, time_scale: float = 1.0) -> None:
        super().__init__()
        self.api = api
        self.time_scale = time_scale
        self._pods_on_node: dict[str, set[tuple[str, str]]] = {}
        self._unsubscribe: list[Callable[[], None]] = []

    def start(self) -> None:
        """Follow nodes and pods."""
        store = self.api.store
        for pod in store.objects(PODS.key):
            self._index_pod(pod, add=True)
        for node in store.objects(NODES.key):
            self.mark(("node", object_key(node)[1]))
        self._unsubscribe.append(store.subscribe(NODES.key, self._on_node))
        self._unsubscribe.append(store.subscribe(PODS.key, self._on_pod))

    def stop(self) -> None:
        """Stop following the store."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()

    def _index_pod(self, pod: JsonObject, *, add: bool) -> None:
        node = _dict(pod.get("spec")).get("nodeName")
        if not node:
            return
        if add:
            self._pods_on_node.setdefault(str(node), set()).add(object_key(pod))
        else:
            members = self._pods_on_node.get(str(node))
            if members is not None:
                members.discard(object_key(pod))

    def _on_pod(self, event: WatchEvent) -> None:
        if event.old is not None:
            self._index_pod(event.old, add=False)
        if event.type != DELETED:
            self._index_pod(event.obj, add=True)
            node = _dict(event.obj.get("spec")).get("nodeName")
            if node and (event.old is None or not _dict(event.old.get("spec")).get("nodeName")):
                self.mark(("node", str(node)))

    def _on_node(self, event: WatchEvent) -> None:
        name = object_key(event.obj)[1]
        if event.type == DELETED:
            self.mark(("gone", name))
        else:
            self.mark(("node", name))

    def reconcile(self, key: Hashable) -> None:
        """Handle one node (taints, evictions) or one deleted node (pod GC)."""
        assert isinstance(key, tuple)
        kind, name = key
        pods = sorted(self._pods_on_node.get(name, set()))
        if kind == "gone":
            if self.api.store.get(NODES.key, "", name) is not None:
                return
            for namespace, pod_name in pods:
                with _missing_ok():
                    self.api.mark_disruption_target(
                        namespace,
                        pod_name,
                        reason="DeletionByPodGC",
                        message="PodGC: node no longer exists",
                    )
                    self.api.delete(PODS, namespace, pod_name, {"gracePeriodSeconds": 0})
            return
        node = self.api.store.get(NODES.key, "", name)
        if node is None:
            return
        taints = self._sync_taints(node)
        no_execute = [t for t in taints if _dict(t).get("effect") == "NoExecute"]
        if not no_execute:
            return
        now = time.time()
        for namespace, pod_name in pods:
            pod = self.api.store.get(PODS.key, namespace, pod_name)
            if pod is None or _dict(pod.get("metadata")).get("deletionTimestamp"):
                continue
            due = self._eviction_time(pod, no_execute)
            if due is None:
                continue
            if due <= now:
                with _missing_ok():
                    self.api.mark_disruption_target(
                        namespace,
                        pod_name,
                        reason="DeletionByTaintManager",
                        message="Taint manager: deleting due to NoExecute taint",
                    )
                    self.api.delete(PODS, namespace, pod_name, {})
            else:
                self.at(time.monotonic() + (due - now), key)

    def _sync_taints(self, node: JsonObject) -> list[object]:
        status = "True"
        for condition in _list(_dict(node.get("status")).get("conditions")):
            if _dict(condition).get("type") == "Ready":
                status = str(_dict(condition).get("status"))
        wanted = {"False": NOT_READY, "Unknown": UNREACHABLE}.get(status)
        spec = _dict(node.get("spec"))
        taints = [_dict(t) for t in _list(spec.get("taints"))]
        kept = [
            t
            for t in taints
            if t.get("key") not in (NOT_READY, UNREACHABLE) or t.get("key") == wanted
        ]
        if wanted is not None:
            for effect in ("NoSchedule", "NoExecute"):
                if not any(t.get("key") == wanted and t.get("effect") == effect for t in kept):
                    taint: JsonObject = {"key": wanted, "effect": effect}
                    if effect == "NoExecute":
                        taint["timeAdded"] = rfc3339()
                    kept.append(taint)
        if kept != taints:
            body = {**node, "spec": {**spec, "taints": kept}}
            if not kept:
                body["spec"] = {k: v for k, v in spec.items() if k != "taints"}
            name = object_key(node)[1]
            self.api.update(NODES, None, name, body)
        return list(kept)

    def _eviction_time(self, pod: JsonObject, taints: list[object]) -> float | None:
        """Wall time at which the pod must go, or None if it tolerates the taints forever.

        As the taint-eviction controller decides: at once when a NoExecute taint is not
        tolerated; else after the least ``tolerationSeconds`` among every toleration used
        (those without one do not count; none with one is forever), counted from the
        earliest of the taints."""
        tolerations = _list(_dict(pod.get("spec")).get("tolerations"))
        used: list[object] = []
        for item in taints:
            matching = [t for t in tolerations if tolerates([t], _dict(item))]
            if not matching:
                return 0.0
            used.extend(matching)
        seconds = [
            int(str(_dict(t).get("tolerationSeconds")))
            for t in used
            if isinstance(_dict(t).get("tolerationSeconds"), int)
        ]
        if not seconds:
            return None
        if min(seconds) <= 0:
            return 0.0
        added: list[float] = []
        for item in taints:
            try:
                added.append(parse_rfc3339(str(_dict(item).get("timeAdded"))))
            except ValueError:
                added.append(time.time())
        return min(added) + min(seconds) * self.time_scale
