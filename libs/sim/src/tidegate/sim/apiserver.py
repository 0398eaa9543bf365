"""The API server's verbs on objects: create, get, list, update, patch, delete, bind, evict.

This is the simulator's equivalent of the kube-apiserver's registry: for every write it checks
names and namespaces, applies per-kind defaults and validation (pods in :mod:`.pods`, CRDs in
:mod:`.crds`), enforces optimistic concurrency on ``metadata.resourceVersion``, keeps
``status`` and the rest apart for kinds with a /status subresource, bumps
``metadata.generation`` on spec changes, skips no-op writes (no new resourceVersion, no event),
and implements graceful deletion, finalizers and preconditions. The HTTP layer
(:mod:`.http`) and the simulated controllers both call these methods, so internal writes obey
the same rules as clients' writes. It does no I/O and never awaits: each call is atomic.
"""

import base64
import binascii
import time
from collections.abc import Callable, Mapping
from typing import Final

import msgspec

from tidegate.sim import crds, disruption, pods
from tidegate.sim.errors import (
    STALE,
    ApiError,
    JsonObject,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    gone,
    invalid,
    namespace_terminating,
    not_found,
    unsupported_media_type,
)
from tidegate.sim.kinds import (
    CRDS,
    JOBS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    PRIORITY_CLASSES,
    RBAC_GROUP,
    SCALE,
    STATUS,
    Registry,
    ResourceType,
)
from tidegate.sim.names import (
    generate_name,
    label_name_problem,
    label_value_problem,
    new_uid,
    path_segment_problem,
    qualified_name_problem,
    rfc3339,
    subdomain_problem,
)
from tidegate.sim.patching import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from tidegate.sim.selectors import Selector, match_label_selector_object
from tidegate.sim.store import Store
from tidegate.sim.webhooks import Webhooks

_SYSTEM_METADATA: Final = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)
_METADATA_WITHOUT_GENERATION: Final = ("metadata", "status", "kind", "apiVersion")
DEFAULT_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
SYSTEM_PRIORITY_CLASSES: Final = (
    ("system-node-critical", 2000001000),
    ("system-cluster-critical", 2000000000),
)


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _copy(obj: JsonObject) -> JsonObject:
    copied = msgspec.json.decode(msgspec.json.encode(obj))
    assert isinstance(copied, dict)
    return copied


def _meta(obj: JsonObject) -> JsonObject:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        obj["metadata"] = metadata
    return metadata


def _spec_part(obj: JsonObject) -> JsonObject:
    return {k: v for k, v in obj.items() if k not in _METADATA_WITHOUT_GENERATION}


class ApiServer:
    """Verbs on the objects of one simulated cluster (see module docstring).

    ``gate_managed_pods`` emulates tidegate's mutating webhook: new pods that are
    tidegate-managed get the ``tidegate.io/admission`` scheduling gate, unless a
    MutatingWebhookConfiguration is stored: then :attr:`webhooks` calls the real webhooks
    (callers await :meth:`Webhooks.admit` before :meth:`create`; this class never awaits).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        gate_managed_pods: bool = False,
        clock: Callable[[], float] = time.time,
        webhook_services: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.webhooks = Webhooks(store, webhook_services)
        """The stored mutating webhooks, called by the HTTP layer and the controllers."""
        self.registry = registry
        self.gate_managed_pods = gate_managed_pods
        self.clock = clock
        self.orphaned_owners: set[str] = set()
        """uids of owners deleted with propagationPolicy Orphan (the GC keeps dependents)."""

    def bootstrap(self) -> None:
        """Create what a fresh cluster has: default namespaces and system PriorityClasses."""
        for name in DEFAULT_NAMESPACES:
            if self.store.get(NAMESPACES.key, "", name) is None:
                self.create(NAMESPACES, None, {"metadata": {"name": name}})
        for name, value in SYSTEM_PRIORITY_CLASSES:
            if self.store.get(PRIORITY_CLASSES.key, "", name) is None:
                self.create(
                    PRIORITY_CLASSES,
                    None,
                    {
                        "metadata": {"name": name},
                        "value": value,
                        "description": "Used for system critical pods.",
                        "preemptionPolicy": "PreemptLowerPriority",
                    },
                )

    # --- reads ---------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonObject:
        """The object, or 404."""
        found = self.store.get(rtype.key, self._ns(rtype, namespace), name)
        if found is None:
            raise not_found(rtype.plural, name, group=rtype.group)
        return found

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        selector: Selector,
        *,
        limit: int = 0,
        continue_token: str = "",
    ) -> JsonObject:
        """A list document (``<Kind>List``) with the store's current resourceVersion.

        Pagination follows the API: ``limit`` items at most and a ``continue`` token while
        more remain; a token whose list resourceVersion predates the retained history is 410.
        Pages after the first reflect current state (the real server serves a snapshot).
        """
        list_rv = self.store.resource_version
        after: tuple[str, str] | None = None
        if continue_token:
            list_rv, after = self._decode_continue(rtype, continue_token)
        items: list[JsonObject] = []
        more = False
        source = self.store.list_sorted(rtype.key, namespace if rtype.namespaced else None, after)
        last: tuple[str, str] | None = None
        for obj in source:
            if not selector.everything and not selector.matches(obj):
                continue
            if limit and len(items) >= limit:
                more = True
                break
            items.append(obj)
            metadata = _dict(obj.get("metadata"))
            last = (str(metadata.get("namespace") or ""), str(metadata.get("name")))
        list_meta: JsonObject = {"resourceVersion": str(list_rv)}
        if more and last is not None:
            token = msgspec.json.encode({"rv": list_rv, "start": list(last)})
            list_meta["continue"] = base64.urlsafe_b64encode(token).decode()
        return {
            "kind": rtype.list_kind,
            "apiVersion": rtype.api_version,
            "metadata": list_meta,
            "items": items,
        }

    def _decode_continue(self, rtype: ResourceType, token: str) -> tuple[int, tuple[str, str]]:
        try:
            decoded = msgspec.json.decode(base64.urlsafe_b64decode(token.encode()))
            rv = int(decoded["rv"])
            start = decoded["start"]
            after = (str(start[0]), str(start[1]))
        except (
            binascii.Error,
            msgspec.DecodeError,
            KeyError,
            TypeError,
            ValueError,
            IndexError,
        ) as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc
        if rv < self.store.bucket(rtype.key).compacted_rv:
            raise gone(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results."
            )
        return rv, after

    # --- create --------------------------------------------------------------------------

    def create(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: object,
        *,
        dry_run: bool = False,
    ) -> JsonObject:
        """Create an object (201 semantics): names, defaults, validation, metadata."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        obj = _copy(body)
        self._check_kind(rtype, obj)
        metadata = _meta(obj)
        ns = self._ns(rtype, namespace)
        body_ns = metadata.get("namespace")
        if rtype.namespaced:
            if body_ns not in (None, "", ns):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            metadata["namespace"] = ns
            self._check_namespace_open(rtype, ns, str(metadata.get("name") or ""))
        else:
            metadata.pop("namespace", None)
        name = metadata.get("name")
        if not name:
            prefix = metadata.get("generateName")
            if not isinstance(prefix, str) or not prefix:
                raise invalid(
                    rtype.kind,
                    "",
                    [("metadata.name", "Required value: name or generateName is required")],
                    group=rtype.group,
                )
            for _ in range(10):
                name = generate_name(prefix)
                if self.store.get(rtype.key, ns, name) is None:
                    break
            metadata["name"] = name
        if not isinstance(name, str):
            raise invalid(
                rtype.kind, str(name), [("metadata.name", "Invalid value: must be a string")]
            )
        causes = self._metadata_causes(rtype, obj)
        causes.extend(self._prepare_create(rtype, obj, ns))
        if causes:
            raise invalid(rtype.kind, name, causes, group=rtype.group)
        if self.store.get(rtype.key, ns, name) is not None:
            raise already_exists(rtype.plural, name, group=rtype.group)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            metadata.pop(field, None)
        metadata["uid"] = new_uid()
        metadata["creationTimestamp"] = rfc3339(self.clock())
        metadata["generation"] = 1
        obj = _canonical_order(obj)
        if dry_run:
            _meta(obj)["resourceVersion"] = str(self.store.resource_version)
            return obj
        self.store.put(rtype.key, obj)
        self._after_write(rtype, None, obj)
        return obj

    def _check_kind(self, rtype: ResourceType, obj: JsonObject) -> None:
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind not in (None, "", rtype.kind):
            raise bad_request(
                f"the kind of the provided object ({kind}) does not match the resource "
                f"{rtype.qualified()} ({rtype.kind})"
            )
        if api_version not in (None, "") and str(api_version).split("/")[0] != (
            rtype.group or rtype.version
        ):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})"
            )
        obj["kind"] = rtype.kind
        obj["apiVersion"] = rtype.api_version

    def _ns(self, rtype: ResourceType, namespace: str | None) -> str:
        if not rtype.namespaced:
            return ""
        if not namespace:
            raise bad_request("a namespace is required for namespaced resources")
        return namespace

    def _check_namespace_open(self, rtype: ResourceType, namespace: str, name: str) -> None:
        ns_obj = self.store.get(NAMESPACES.key, "", namespace)
        if ns_obj is None:
            raise not_found("namespaces", namespace)
        if _dict(ns_obj.get("metadata")).get("deletionTimestamp"):
            raise namespace_terminating(rtype.plural, name, namespace, group=rtype.group)

    def _metadata_causes(self, rtype: ResourceType, obj: JsonObject) -> list[tuple[str, str]]:
        metadata = _meta(obj)
        name = str(metadata.get("name"))
        causes: list[tuple[str, str]] = []
        if rtype is NAMESPACES:
            problem = label_name_problem(name)
        elif rtype.group == RBAC_GROUP:
            problem = path_segment_problem(name)
        else:
            problem = subdomain_problem(name)
        if problem:
            causes.append(("metadata.name", f"Invalid value: {name!r}: {problem}"))
        labels = metadata.get("labels")
        if labels is not None:
            if not isinstance(labels, dict):
                causes.append(("metadata.labels", "Invalid value: must be a map of strings"))
            else:
                for key, value in labels.items():
                    key_problem = qualified_name_problem(key)
                    if key_problem:
                        causes.append(("metadata.labels", f"Invalid value: {key!r}: {key_problem}"))
                    if not isinstance(value, str):
                        causes.append(
                            (f"metadata.labels[{key}]", "Invalid value: must be a string")
                        )
                    else:
                        value_problem = label_value_problem(value)
                        if value_problem:
                            causes.append(
                                ("metadata.labels", f"Invalid value: {value!r}: {value_problem}")
                            )
        annotations = metadata.get("annotations")
        if annotations is not None and (
            not isinstance(annotations, dict)
            or not all(isinstance(v, str) for v in annotations.values())
        ):
            causes.append(("metadata.annotations", "Invalid value: must be a map of strings"))
        return causes

    def _prepare_create(
        self, rtype: ResourceType, obj: JsonObject, namespace: str
    ) -> list[tuple[str, str]]:
        """Per-kind defaults and validation for a new object; returns causes."""
        if rtype is PODS:
            return self._prepare_pod(obj, namespace)
        if rtype is NAMESPACES:
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            labels = _dict(_meta(obj).get("labels"))
            labels["kubernetes.io/metadata.name"] = str(_meta(obj)["name"])
            _meta(obj)["labels"] = labels
            return []
        if rtype is CRDS:
            causes = crds.validate(obj)
            if not causes:
                obj["status"] = crds.accepted_status(obj)
            return causes
        if rtype is PRIORITY_CLASSES:
            if not isinstance(obj.get("value"), int) or isinstance(obj.get("value"), bool):
                return [("value", "Required value")]
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
            return []
        if rtype.has_status and rtype is not NODES:
            obj.pop("status", None)
        if rtype is JOBS:
            return _job_causes(obj)
        if rtype.group == "apps" and rtype.kind in ("Deployment", "ReplicaSet"):
            return _replicated_causes(obj)
        return []

    def _prepare_pod(self, pod: JsonObject, namespace: str) -> list[tuple[str, str]]:
        causes = pods.validate_create(pod)
        if causes:
            return causes
        spec = _dict(pod.get("spec"))
        if self.gate_managed_pods and not self.webhooks.configured():
            ns_labels = _dict(
                _dict(_dict(self.store.get(NAMESPACES.key, "", namespace)).get("metadata")).get(
                    "labels"
                )
            )
            if pods.is_managed(pod, ns_labels) and not spec.get("nodeName"):
                pods.add_admission_gate(spec)
        priority, policy = self._priority_of(pod)
        pods.apply_create_defaults(pod, priority=priority, preemption_policy=policy)
        return []

    def _priority_of(self, pod: JsonObject) -> tuple[int, str]:
        spec = _dict(pod.get("spec"))
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = self.store.get(PRIORITY_CLASSES.key, "", str(class_name))
            if pc is None:
                name = _meta(pod).get("name")
                raise forbidden(
                    f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found'
                )
            return int(str(pc.get("value", 0))), str(
                pc.get("preemptionPolicy", "PreemptLowerPriority")
            )
        for pc in self.store.objects(PRIORITY_CLASSES.key):
            if pc.get("globalDefault") is True:
                spec["priorityClassName"] = _meta(pc)["name"]
                return int(str(pc.get("value", 0))), str(
                    pc.get("preemptionPolicy", "PreemptLowerPriority")
                )
        return 0, "PreemptLowerPriority"

    # --- update and patch ----------------------------------------------------------------

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: object,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Replace an object (PUT). A resourceVersion in the body must be current (409)."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        ns = self._ns(rtype, namespace)
        old = self.store.get(rtype.key, ns, name)
        if old is None:
            raise not_found(rtype.plural, name, group=rtype.group)
        new = _copy(body)
        self._check_kind(rtype, new)
        metadata = _meta(new)
        if metadata.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name on "
                f"the URL ({name})"
            )
        if rtype.namespaced and metadata.get("namespace") not in (None, "", ns):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        return self._commit_update(rtype, old, new, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: object,
        content_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Apply a patch of the given media type, then validate like an update."""
        ns = self._ns(rtype, namespace)
        old = self.store.get(rtype.key, ns, name)
        if old is None:
            raise not_found(rtype.plural, name, group=rtype.group)
        accepted = [JSON_PATCH, MERGE_PATCH]
        if rtype.builtin:
            accepted.append(STRATEGIC_MERGE_PATCH)
        if content_type == JSON_PATCH:
            new = json_patch(old, patch)
        elif content_type == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise bad_request("merge patch must be a JSON object")
            merged = merge_patch(old, patch)
            assert isinstance(merged, dict)
            new = merged
        elif content_type == STRATEGIC_MERGE_PATCH and rtype.builtin:
            new = strategic_merge_patch(old, patch, rtype.kind)
        else:
            raise unsupported_media_type(content_type, accepted)
        new = _copy(new)
        metadata = _meta(new)
        if metadata.get("name") != name:
            raise bad_request("the patch must not change metadata.name")
        if rtype.namespaced and metadata.get("namespace") != ns:
            raise bad_request("the patch must not change metadata.namespace")
        return self._commit_update(rtype, old, new, subresource=subresource, dry_run=dry_run)

    def _commit_update(
        self,
        rtype: ResourceType,
        old: JsonObject,
        new: JsonObject,
        *,
        subresource: str | None,
        dry_run: bool,
    ) -> JsonObject:
        old_meta = _dict(old.get("metadata"))
        metadata = _meta(new)
        name = str(old_meta["name"])
        wanted_rv = metadata.get("resourceVersion")
        if wanted_rv not in (None, "") and str(wanted_rv) != old_meta.get("resourceVersion"):
            raise conflict(rtype.plural, name, STALE, group=rtype.group)
        if metadata.get("uid") not in (None, "", old_meta.get("uid")):
            raise conflict(
                rtype.plural,
                name,
                f"Precondition failed: UID in precondition: {metadata.get('uid')}, UID in object "
                f"meta: {old_meta.get('uid')}",
                group=rtype.group,
            )
        if subresource == STATUS:
            # Writes to /status change only the status.
            status = new.get("status")
            new = dict(old)
            new["metadata"] = dict(old_meta)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            metadata = _meta(new)
        elif rtype.has_status and subresource is None:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        for field in _SYSTEM_METADATA:
            if field in old_meta:
                metadata[field] = old_meta[field]
            else:
                metadata.pop(field, None)
        metadata.pop("resourceVersion", None)
        causes: list[tuple[str, str]] = []
        if subresource != STATUS:
            # A status write copies metadata and spec from the stored object: nothing to check.
            if metadata.get("labels") != old_meta.get("labels") or metadata.get(
                "annotations"
            ) != old_meta.get("annotations"):
                causes.extend(self._metadata_causes(rtype, new))
            causes.extend(self._validate_update(rtype, old, new))
        if causes:
            raise invalid(rtype.kind, name, causes, group=rtype.group)
        if _spec_part(new) != _spec_part(old):
            metadata["generation"] = int(str(old_meta.get("generation", 1))) + 1
        metadata["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:
            return old
        if dry_run:
            return new
        # A terminating namespace is held by its content (the namespace controller removes
        # it, :meth:`finalize_namespace`), not by metadata.finalizers: writing its status
        # must not remove it.
        if (
            metadata.get("deletionTimestamp")
            and not metadata.get("finalizers")
            and rtype is not NAMESPACES
        ):
            grace = metadata.get("deletionGracePeriodSeconds")
            if rtype is not PODS or grace in (None, 0):
                event = self.store.remove(rtype.key, str(metadata.get("namespace") or ""), name)
                self._after_delete(rtype, old)
                return event.obj if event is not None else new
        self.store.put(rtype.key, new)
        self._after_write(rtype, old, new)
        return new

    def _validate_update(
        self, rtype: ResourceType, old: JsonObject, new: JsonObject
    ) -> list[tuple[str, str]]:
        if rtype is PODS:
            return pods.validate_update(old, new)
        if rtype is CRDS:
            causes = crds.validate(new)
            old_spec = _dict(old.get("spec"))
            new_spec = _dict(new.get("spec"))
            if old_spec.get("group") != new_spec.get("group"):
                causes.append(("spec.group", "Invalid value: field is immutable"))
            if not causes:
                new["status"] = crds.accepted_status(new)
            return causes
        if rtype.group == "batch" and rtype.kind == "Job":
            return _job_update_causes(old, new)
        if rtype.group == "apps":
            old_sel = _dict(old.get("spec")).get("selector")
            if old_sel != _dict(new.get("spec")).get("selector"):
                return [("spec.selector", "Invalid value: field is immutable")]
        return []

    # --- delete --------------------------------------------------------------------------

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        options: JsonObject,
        *,
        dry_run: bool = False,
    ) -> tuple[JsonObject, bool]:
        """Delete (or start deleting) an object; returns (object, removed_now).

        Pods bound to a node are deleted gracefully unless the grace period is 0 (or the pod
        has finished): they get a deletionTimestamp and are removed later by the kubelet.
        Objects with finalizers are only marked. Preconditions (uid, resourceVersion) → 409.
        """
        ns = self._ns(rtype, namespace)
        old = self.store.get(rtype.key, ns, name)
        if old is None:
            raise not_found(rtype.plural, name, group=rtype.group)
        old_meta = _dict(old.get("metadata"))
        preconditions = _dict(options.get("preconditions"))
        if preconditions.get("uid") not in (None, old_meta.get("uid")):
            raise conflict(
                rtype.plural,
                name,
                f"Precondition failed: UID in precondition: {preconditions.get('uid')}, UID in "
                f"object meta: {old_meta.get('uid')}",
                group=rtype.group,
            )
        if preconditions.get("resourceVersion") not in (None, old_meta.get("resourceVersion")):
            raise conflict(
                rtype.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{preconditions.get('resourceVersion')}, ResourceVersion in object meta: "
                f"{old_meta.get('resourceVersion')}",
                group=rtype.group,
            )
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        if policy is None and rtype is JOBS:
            policy = "Orphan"  # batch/v1 keeps its pre-GC default: Job pods are orphaned
        if policy == "Orphan" and old_meta.get("uid"):
            self.orphaned_owners.add(str(old_meta["uid"]))
        grace = self._grace_period(rtype, old, options)
        finalizers = old_meta.get("finalizers") or []
        if rtype is NAMESPACES:
            finalizers = ["kubernetes"]
        if dry_run:
            return old, False
        if grace == 0 and not finalizers:
            event = self.store.remove(rtype.key, ns, name)
            self._after_delete(rtype, old)
            return (event.obj if event is not None else old), True
        if old_meta.get("deletionTimestamp"):
            current_grace = old_meta.get("deletionGracePeriodSeconds")
            if not isinstance(current_grace, int) or grace >= current_grace:
                return old, False
        new = dict(old)
        metadata = dict(old_meta)
        metadata["deletionTimestamp"] = rfc3339(self.clock() + grace)
        metadata["deletionGracePeriodSeconds"] = grace
        new["metadata"] = metadata
        if rtype is NAMESPACES:
            new["status"] = {**_dict(old.get("status")), "phase": "Terminating"}
        self.store.put(rtype.key, new)
        return new, False

    def _grace_period(self, rtype: ResourceType, obj: JsonObject, options: JsonObject) -> int:
        if rtype is not PODS:
            return 0
        requested = options.get("gracePeriodSeconds")
        spec = _dict(obj.get("spec"))
        phase = _dict(obj.get("status")).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if isinstance(requested, int) and not isinstance(requested, bool):
            return max(requested, 0)
        default = spec.get("terminationGracePeriodSeconds", 30)
        return int(default) if isinstance(default, int) else 30

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        selector: Selector,
        options: JsonObject,
    ) -> JsonObject:
        """Delete every selected object; returns the list of what was deleted."""
        listing = self.list_objects(rtype, namespace, selector)
        deleted: list[JsonObject] = []
        items = listing["items"]
        assert isinstance(items, list)
        for obj in items:
            metadata = _dict(_dict(obj).get("metadata"))
            try:
                gone_obj, _ = self.delete(
                    rtype,
                    str(metadata.get("namespace") or "") or None,
                    str(metadata["name"]),
                    options,
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            deleted.append(gone_obj)
        listing["items"] = deleted
        listing["metadata"] = {"resourceVersion": str(self.store.resource_version)}
        return listing

    # --- pod subresources ----------------------------------------------------------------

    def bind(self, namespace: str, name: str, body: object) -> JsonObject:
        """POST pods/<name>/binding: assign a node. 409 if bound already or still gated."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a Binding object")
        target = _dict(body.get("target"))
        node = target.get("name")
        if not isinstance(node, str) or not node:
            raise invalid("Binding", name, [("target.name", "Required value")])
        pod = self.store.get(PODS.key, namespace, name)
        if pod is None:
            raise not_found("pods", name)
        metadata = _dict(pod.get("metadata"))
        uid = _dict(body.get("metadata")).get("uid")
        if uid and uid != metadata.get("uid"):
            raise conflict("pods", name, "Precondition failed: UID mismatch")
        spec = _dict(pod.get("spec"))
        if metadata.get("deletionTimestamp"):
            raise conflict("pods", name, "pod is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise conflict(
                "pods", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
            )
        if pods.gate_names(pod):
            raise conflict("pods", name, f"pod {name} has non-empty .spec.schedulingGates")
        new = dict(pod)
        new["metadata"] = dict(metadata)
        new["spec"] = {**spec, "nodeName": node}
        status = dict(_dict(pod.get("status")))
        pods.set_condition(status, pods.scheduled_condition(node))
        new["status"] = status
        self.store.put(PODS.key, new)
        self._after_write(PODS, pod, new)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def evict(
        self, namespace: str, name: str, body: object, *, dry_run: bool = False
    ) -> JsonObject:
        """POST pods/<name>/eviction: delete the pod, honouring the given grace period, unless
        a PodDisruptionBudget forbids it now (429 TooManyRequests, as the real API server
        answers; :mod:`tidegate.sim.disruption`)."""
        pod = self.store.get(PODS.key, namespace, name)
        if pod is None:
            raise not_found("pods", name)
        options = _dict(_dict(body).get("deleteOptions"))
        wanted_uid = _dict(options.get("preconditions")).get("uid")
        if wanted_uid in (None, _dict(pod.get("metadata")).get("uid")):
            refusal = disruption.eviction_refusal(
                pod,
                list(self.store.objects(PDBS.key, namespace)),
                list(self.store.objects(PODS.key, namespace)),
            )
            if refusal is not None:
                raise refusal
        if not dry_run and wanted_uid in (None, _dict(pod.get("metadata")).get("uid")):
            self.mark_disruption_target(
                namespace, name, reason="EvictionByEvictionAPI", message="Eviction API: evicting"
            )
        self.delete(PODS, namespace, name, options, dry_run=dry_run)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def mark_disruption_target(
        self, namespace: str, name: str, *, reason: str, message: str
    ) -> None:
        """Set the pod's ``DisruptionTarget`` condition before the system deletes it for a
        disruption, as the Eviction API, the taint manager and pod GC do (their reason and
        message say which), unless it has finished or is being deleted already; a Job's
        podFailurePolicy reads it."""
        pod = self.store.get(PODS.key, namespace, name)
        if pod is None or _dict(pod.get("metadata")).get("deletionTimestamp"):
            return
        status = dict(_dict(pod.get("status")))
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        condition: JsonObject = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(self.clock()),
        }
        if pods.set_condition(status, condition):
            self.update(PODS, namespace, name, {**pod, "status": status}, subresource="status")

    # --- scale subresource ---------------------------------------------------------------

    def get_scale(self, rtype: ResourceType, namespace: str, name: str) -> JsonObject:
        """GET <deployments|replicasets>/<name>/scale as an autoscaling/v1 Scale."""
        obj = self.get(rtype, namespace, name)
        metadata = _dict(obj.get("metadata"))
        spec = _dict(obj.get("spec"))
        status = _dict(obj.get("status"))
        selector = _dict(spec.get("selector")).get("matchLabels") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: metadata[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in metadata
            },
            "spec": {"replicas": spec.get("replicas", 1)},
            "status": {
                "replicas": status.get("replicas", 0),
                "selector": ",".join(f"{k}={v}" for k, v in _dict(selector).items()),
            },
        }

    def set_scale(
        self, rtype: ResourceType, namespace: str, name: str, body: object, content_type: str | None
    ) -> JsonObject:
        """PUT or PATCH the scale subresource: changes spec.replicas only."""
        current = self.get_scale(rtype, namespace, name)
        if content_type is None:
            scale = _dict(body)
        elif content_type == JSON_PATCH:
            scale = json_patch(current, body)
        else:
            merged = merge_patch(current, body)
            scale = _dict(merged)
        replicas = _dict(scale.get("spec")).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid("Scale", name, [("spec.replicas", f"Invalid value: {replicas!r}")])
        wanted_rv = _dict(scale.get("metadata")).get("resourceVersion")
        obj = self.get(rtype, namespace, name)
        new = _copy(obj)
        _dict(new.setdefault("spec", {}))["replicas"] = replicas
        if wanted_rv:
            _meta(new)["resourceVersion"] = wanted_rv
        self._commit_update(rtype, obj, new, subresource=None, dry_run=False)
        return self.get_scale(rtype, namespace, name)

    # --- hooks ---------------------------------------------------------------------------

    def _after_write(self, rtype: ResourceType, old: JsonObject | None, new: JsonObject) -> None:
        if rtype is CRDS:
            spec = _dict((old or new).get("spec"))
            names = _dict(spec.get("names"))
            self.registry.remove_group_resource(str(spec.get("group")), str(names.get("plural")))
            for served in crds.resource_types(new):
                self.registry.add(served)

    def _after_delete(self, rtype: ResourceType, old: JsonObject) -> None:
        if rtype is CRDS:
            spec = _dict(old.get("spec"))
            group = str(spec.get("group"))
            plural = str(_dict(spec.get("names")).get("plural"))
            self.registry.remove_group_resource(group, plural)
            bucket_key = (group, plural)
            for obj in list(self.store.objects(bucket_key)):
                metadata = _dict(obj.get("metadata"))
                self.store.remove(
                    bucket_key, str(metadata.get("namespace") or ""), str(metadata["name"])
                )

    def finalize_namespace(self, name: str) -> None:
        """Remove a terminating namespace whose content is gone (the namespace controller)."""
        namespace = self.store.get(NAMESPACES.key, "", name)
        if namespace is not None and _dict(namespace.get("metadata")).get("deletionTimestamp"):
            self.store.remove(NAMESPACES.key, "", name)

    def resolve_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The served type for an (apiVersion, kind) pair, e.g. from an ownerReference."""
        group, _, version = api_version.rpartition("/")
        for rtype in self.registry.in_group_version(group, version):
            if rtype.kind == kind:
                return rtype
        return None


def _canonical_order(obj: JsonObject) -> JsonObject:
    """apiVersion, kind, metadata first, as the real server serialises objects."""
    head: JsonObject = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    return {**head, **{k: v for k, v in obj.items() if k not in head}}


def _template_causes(spec: JsonObject, path: str) -> list[tuple[str, str]]:
    template = spec.get("template")
    if not isinstance(template, dict):
        return [(f"{path}.template", "Required value")]
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return [(f"{path}.template.spec", "Required value")]
    causes = pods.validate_create({"spec": pod_spec})
    return [(f"{path}.template.{field}", message) for field, message in causes]


def _job_causes(job: JsonObject) -> list[tuple[str, str]]:
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes = _template_causes(spec, "spec")
    restart = _dict(_dict(spec.get("template")).get("spec")).get("restartPolicy")
    if not causes and restart not in ("Never", "OnFailure"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                f'Unsupported value: {restart!r}: supported values: "OnFailure", "Never"',
            )
        )
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            causes.append(
                (f"spec.{field}", f"Invalid value: {value!r}: must be a non-negative integer")
            )
    return causes


def _replicated_causes(obj: JsonObject) -> list[tuple[str, str]]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes = _template_causes(spec, "spec")
    selector = spec.get("selector")
    labels = _dict(_dict(_dict(spec.get("template")).get("metadata")).get("labels"))
    if not isinstance(selector, dict) or not selector:
        causes.append(("spec.selector", "Required value"))
    elif not match_label_selector_object(selector, labels):
        causes.append(
            (
                "spec.template.metadata.labels",
                f"Invalid value: {labels!r}: `selector` does not match template `labels`",
            )
        )
    replicas = spec.get("replicas")
    if replicas is not None and (
        not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0
    ):
        causes.append(
            ("spec.replicas", f"Invalid value: {replicas!r}: must be a non-negative integer")
        )
    return causes


def _job_update_causes(old: JsonObject, new: JsonObject) -> list[tuple[str, str]]:
    old_spec = _dict(old.get("spec"))
    new_spec = _dict(new.get("spec"))
    causes: list[tuple[str, str]] = []
    if old_spec.get("selector") != new_spec.get("selector"):
        causes.append(("spec.selector", "Invalid value: field is immutable"))
    if old_spec.get("completions") != new_spec.get("completions"):
        causes.append(("spec.completions", "Invalid value: field is immutable"))
    # A Job's pod template may change only while the Job is suspended (what Kueue relies on).
    if old_spec.get("template") != new_spec.get("template") and not old_spec.get("suspend"):
        causes.append(("spec.template", "Invalid value: field is immutable"))
    return causes


__all__ = ["DEFAULT_NAMESPACES", "SCALE", "ApiServer"]
