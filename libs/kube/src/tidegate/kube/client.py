"""The Kubernetes operations tidegate performs, as typed methods of one client.

:func:`connect` loads credentials (kubeconfig or in-cluster) into a kubernetes-asyncio
ApiClient and returns a :class:`KubeClient`. Generic verbs (get, list, create, patch, delete)
work on any :class:`~tidegate.kube.resources.ResourceType`; the typed writes encode what
tidegate needs and the API server's rules for them (ungating a pod, eviction, binding, status of
custom resources, suspending Jobs and JobSets, Events that stay current). Objects go in and come
out as plain JSON dicts exactly as the server sends them.

What it does not do: watch (see :mod:`tidegate.kube.informer`), cache, or decide anything.
"""

import asyncio
import copy
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

import msgspec
import yaml
from cachetools import LRUCache
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes_asyncio.config.kube_config import refresh_token

from tidegate.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Invalid,
    KubeConfigError,
    NotFound,
    UnexpectedResponse,
)
from tidegate.kube.eventrecord import EventType, ObjectRef, event_name, new_event, repeat_patch
from tidegate.kube.resources import EVENTS, JOBS, JOBSETS, PODS, ResourceType, resource_for_kind
from tidegate.kube.settings import KubeSettings
from tidegate.kube.transport import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    JsonObject,
    Transport,
    WriteGuard,
    decode_object,
    render_query,
)
from tidegate.kube.ungate import KnownPod, ungate_json_patch, ungate_patch
from tidegate.model.names import REQUEUE_ANNOTATION, RESUME_ANNOTATION

PatchType = Literal["merge", "json", "strategic"]
"""JSON merge patch (RFC 7386), JSON patch (RFC 6902), or Kubernetes strategic merge patch."""

_CONTENT_TYPES: dict[str, str] = {
    "merge": MERGE_PATCH,
    "json": JSON_PATCH,
    "strategic": STRATEGIC_MERGE_PATCH,
}

CONFLICT_ATTEMPTS = 5
"""Read-modify-write rounds before a persistent 409 is given to the caller."""

_EVENT_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class ObjectList:
    """One page of a list: the items, the list's resourceVersion, and the continue token."""

    items: list[JsonObject]
    """Objects, each with apiVersion and kind filled in (list items omit them on the wire)."""
    resource_version: str
    """The collection's resourceVersion: watch from here to see what happened after."""
    continue_token: str = ""
    """Non-empty when more pages follow (pass it back as ``continue_token``)."""


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""  # noqa: N815 - the API's field name
    # "continue" is a Python keyword, hence the rename.
    continue_: str = msgspec.field(default="", name="continue")


class _ListBody(msgspec.Struct):
    items: list[JsonObject] | None = None
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


async def connect(settings: KubeSettings | None = None) -> "KubeClient":
    """Load credentials as ``settings`` say and return a client; close it when done.

    Raises :class:`~tidegate.kube.errors.KubeConfigError` when no usable configuration is found
    (the message names the file or the missing in-cluster variable).
    """
    settings = settings or KubeSettings()
    configuration = Configuration()
    refresher: asyncio.Task[None] | None = None
    in_cluster = settings.source == "in-cluster" or (
        settings.source == "auto"
        and settings.kubeconfig is None
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    try:
        if in_cluster:
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            path = str(settings.kubeconfig) if settings.kubeconfig is not None else None
            loader = await load_kube_config(
                config_file=path,
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
            # Returns at once unless the credentials come from an exec plugin or GCP, which
            # hand out short-lived tokens that must be fetched again.
            refresher = asyncio.create_task(
                refresh_token(loader, configuration), name="tidegate-kube-token-refresh"
            )
    except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        where = (
            "in-cluster service account"
            if in_cluster
            else (f"kubeconfig {settings.kubeconfig or '$KUBECONFIG or ~/.kube/config'}")
        )
        raise KubeConfigError(f"cannot load {where}: {exc}") from exc
    api = ApiClient(configuration=configuration)
    api.user_agent = settings.user_agent
    # kubernetes-asyncio opens its aiohttp session with trust_env=True and offers no option;
    # the session's own flag is the one aiohttp reads per request.
    api.rest_client.pool_manager._trust_env = settings.trust_env
    return KubeClient(Transport(api, settings), settings, refresher=refresher)


class KubeClient:
    """Typed access to one Kubernetes API server; create with :func:`connect`.

    Safe to share between tasks. Every method raises only
    :class:`~tidegate.kube.errors.KubeError` subclasses.
    """

    def __init__(
        self,
        transport: Transport,
        settings: KubeSettings,
        *,
        refresher: "asyncio.Task[None] | None" = None,
    ) -> None:
        self._transport = transport
        self._owns_transport = True
        self._settings = settings
        self._refresher = refresher
        self._events: LRUCache[str, JsonObject] = LRUCache(maxsize=_EVENT_CACHE_SIZE)
        self._instance = socket.gethostname()

    def guarded(self, guard: WriteGuard) -> "KubeClient":
        """A view of this client (same session, rate limit, Event cache) whose writes are each
        attempted only while ``guard`` allows and within the time it grants, retries included
        (:data:`~tidegate.kube.transport.WriteGuard`): what a leader writes under its lease.
        Closing the view closes nothing; close this client."""
        view = copy.copy(self)
        view._transport = self._transport.guarded(guard)
        view._refresher = None
        view._owns_transport = False
        return view

    @property
    def settings(self) -> KubeSettings:
        """The settings this client was made with."""
        return self._settings

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return self._transport.host

    @property
    def transport(self) -> Transport:
        """The request layer (rate limit, retries); the informer sends through it."""
        return self._transport

    async def close(self) -> None:
        """Stop token refreshing and close the HTTP session."""
        if self._refresher is not None:
            self._refresher.cancel()
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None
        if self._owns_transport:
            await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- generic verbs -------------------------------------------------------------------

    async def get(
        self,
        resource: ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JsonObject:
        """One object (or its subresource, e.g. "status")."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        op = f"get {resource.plural} {_where(namespace, name)}"
        data = await self._transport.request("GET", path, operation=op, idempotent=True)
        return decode_object(data, operation=op)

    async def list_objects(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        """One page of objects (all of them when ``limit`` is None and the server does not page)."""
        path = resource.path(namespace=namespace)
        op = f"list {resource.plural}" + (f" in {namespace}" if namespace else "")
        query = render_query(
            {
                "labelSelector": label_selector or None,
                "fieldSelector": field_selector or None,
                "limit": limit or None,
                "continue": continue_token or None,
            }
        )
        data = await self._transport.request(
            "GET", path, operation=op, query=query, idempotent=True
        )
        try:
            body = msgspec.json.decode(data, type=_ListBody)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UnexpectedResponse(f"not a list: {exc}", operation=op) from exc
        items = body.items or []
        for item in items:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        return ObjectList(
            items=items,
            resource_version=body.metadata.resourceVersion,
            continue_token=body.metadata.continue_,
        )

    async def create(
        self, resource: ResourceType, body: Mapping[str, object], *, namespace: str | None = None
    ) -> JsonObject:
        """Create an object; :class:`~tidegate.kube.errors.AlreadyExists` if the name is taken.

        Not retried on 5xx or a lost connection (a retry could create twice with generateName).
        """
        path = resource.path(namespace=namespace)
        op = f"create {resource.plural}" + (f" in {namespace}" if namespace else "")
        data = await self._transport.request(
            "POST", path, operation=op, body=dict(body), idempotent=False
        )
        return decode_object(data, operation=op)

    async def patch(
        self,
        resource: ResourceType,
        name: str,
        patch: Mapping[str, object] | list[JsonObject],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str = "",
        uid: str | None = None,
    ) -> JsonObject:
        """Patch an object (or a subresource) and return it as stored.

        Retried on transient errors: a merge or strategic patch that sets values is idempotent;
        JSON patches are retried too, so only send ones that are (e.g. guarded by ``test``).
        With ``uid`` (merge or strategic patches) the patch carries ``metadata.uid``: it
        applies to that object only, and a newer one of the same name (deleted and created
        again) answers :class:`~tidegate.kube.errors.Conflict`.
        """
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        op = f"patch {resource.plural}{'/' + subresource if subresource else ''} {_where(namespace, name)}"
        body: object = list(patch) if isinstance(patch, list) else dict(patch)
        if uid:
            if not isinstance(body, dict):
                raise ValueError(f"{op}: a uid precondition needs a merge or strategic patch")
            metadata = body.get("metadata")
            body["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), "uid": uid}
        data = await self._transport.request(
            "PATCH",
            path,
            operation=op,
            body=body,
            content_type=_CONTENT_TYPES[patch_type],
            idempotent=True,
        )
        return decode_object(data, operation=op)

    async def delete(
        self,
        resource: ResourceType,
        name: str,
        *,
        namespace: str | None = None,
        grace_seconds: int | None = None,
        uid: str | None = None,
        propagation: Literal["Foreground", "Background", "Orphan"] | None = None,
    ) -> JsonObject:
        """Delete an object; ``uid`` guards against deleting a newer object of the same name.

        Returns the server's answer (the object being deleted, or a Status).
        """
        path = resource.path(namespace=namespace, name=name)
        op = f"delete {resource.plural} {_where(namespace, name)}"
        options: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        if propagation is not None:
            options["propagationPolicy"] = propagation
        data = await self._transport.request(
            "DELETE", path, operation=op, body=options, idempotent=True
        )
        return decode_object(data, operation=op)

    # --- pods ----------------------------------------------------------------------------

    async def ungate_pod(
        self,
        namespace: str,
        name: str,
        *,
        gate: str,
        node_selector: Mapping[str, str],
        known: KnownPod | None = None,
    ) -> JsonObject:
        """Remove scheduling gate ``gate`` (only that one) and merge ``node_selector`` in.

        With ``known`` (the pod as the caller last saw it), first one guarded JSON patch
        (:func:`~tidegate.kube.ungate.ungate_json_patch`); if the pod is no longer as known,
        or without ``known``, read-modify-write with the pod's resourceVersion as
        precondition, re-read on 409. When the gate is already gone and the selector already
        set it returns the pod unchanged, so calling it twice is safe. An illegal change
        (e.g. altering a selector key, or any selector change on a pod that is no longer
        gated) raises :class:`~tidegate.kube.errors.Invalid` from the server's 422.
        """
        guarded = None if known is None else ungate_json_patch(known, gate, node_selector)
        if guarded is not None:
            try:
                return await self.patch(PODS, name, guarded, namespace=namespace, patch_type="json")
            except (Invalid, BadRequest):
                pass  # not as known (or an illegal change): read it and decide below
        for _ in range(CONFLICT_ATTEMPTS):
            pod = await self.get(PODS, name, namespace=namespace)
            patch = ungate_patch(pod, gate, node_selector)
            if patch is None:
                return pod
            try:
                return await self.patch(PODS, name, patch, namespace=namespace)
            except Conflict:
                continue
        raise Conflict(
            f"pod kept changing during {CONFLICT_ATTEMPTS} read-modify-write rounds",
            status=409,
            operation=f"ungate pod {namespace}/{name}",
        )

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_seconds: int | None = None,
        uid: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """Evict through the Eviction subresource (policy/v1), so PodDisruptionBudgets apply;
        with ``dry_run`` the server only checks (``dryRun=All``: budgets, preconditions).

        A budget that forbids it raises :class:`~tidegate.kube.errors.TooManyRequests` (after the
        configured retries); a pod that is already gone raises
        :class:`~tidegate.kube.errors.NotFound`. With ``uid``, a newer pod of the same name is
        not evicted: the server answers :class:`~tidegate.kube.errors.Conflict` instead.
        """
        eviction: JsonObject = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        options: JsonObject = {}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        if options:
            eviction["deleteOptions"] = options
        path = PODS.path(namespace=namespace, name=name, subresource="eviction")
        await self._transport.request(
            "POST",
            path,
            operation=f"{'dry-run ' if dry_run else ''}evict pod {namespace}/{name}",
            query=(("dryRun", "All"),) if dry_run else (),
            body=eviction,
            idempotent=True,
        )

    async def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_seconds: int = 0,
        uid: str | None = None,
        missing_ok: bool = False,
    ) -> None:
        """Delete a pod, by default at once (grace 0: nothing waits for a kubelet).

        With ``missing_ok`` a pod that is already gone is not an error.
        """
        try:
            await self.delete(PODS, name, namespace=namespace, grace_seconds=grace_seconds, uid=uid)
        except NotFound:
            if not missing_ok:
                raise

    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> None:
        """Bind a pod to a node (the Binding subresource), as a scheduler does.

        A pod that still has scheduling gates or is already bound gets
        :class:`~tidegate.kube.errors.Conflict`. Not retried on 5xx (binding is not idempotent).
        """
        metadata: JsonObject = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        binding: JsonObject = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = PODS.path(namespace=namespace, name=name, subresource="binding")
        await self._transport.request(
            "POST",
            path,
            operation=f"bind pod {namespace}/{name} to {node}",
            body=binding,
            idempotent=False,
        )

    # --- custom resources, annotations, suspension ---------------------------------------

    async def patch_custom(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        patch: Mapping[str, object],
        *,
        namespace: str | None = None,
    ) -> JsonObject:
        """JSON-merge-patch a custom object (cluster-scoped when ``namespace`` is None)."""
        resource = _custom(group, version, plural, namespaced=namespace is not None)
        return await self.patch(resource, name, patch, namespace=namespace)

    async def patch_custom_status(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        status: Mapping[str, object],
        *,
        namespace: str | None = None,
    ) -> JsonObject:
        """Merge ``status`` into a custom object's status subresource and return the object.

        The CRD must declare the status subresource; otherwise the server answers 404.
        """
        resource = _custom(group, version, plural, namespaced=namespace is not None)
        return await self.patch(
            resource, name, {"status": dict(status)}, namespace=namespace, subresource="status"
        )

    async def annotate(
        self,
        kind: ResourceType | str,
        namespace: str | None,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        uid: str | None = None,
    ) -> JsonObject:
        """Set annotations (a None value removes that key); others are left alone.

        ``kind`` is a :class:`~tidegate.kube.resources.ResourceType` or a built-in kind name
        such as "Pod" or "Job". With ``uid``, only on that object (:meth:`patch`).
        """
        resource = resource_for_kind(kind) if isinstance(kind, str) else kind
        patch = {"metadata": {"annotations": dict(annotations)}}
        return await self.patch(resource, name, patch, namespace=namespace, uid=uid)

    async def suspend_job(self, namespace: str, name: str, *, suspend: bool = True) -> JsonObject:
        """Set a batch/v1 Job's ``spec.suspend`` (the Job controller then deletes its pods)."""
        return await self.patch(JOBS, name, {"spec": {"suspend": suspend}}, namespace=namespace)

    async def requeue_owner(
        self, resource: ResourceType, namespace: str, name: str, *, uid: str, why: str
    ) -> JsonObject:
        """Suspend a Job or JobSet so that tidegate admits it again (``why`` goes into the
        ``tidegate.io/requeued`` annotation; ``tidegate.io/resume`` is removed), in one merge
        patch guarded by ``uid``: a re-created object of the same name answers Conflict."""
        patch = {
            "metadata": {"annotations": {REQUEUE_ANNOTATION: why, RESUME_ANNOTATION: None}},
            "spec": {"suspend": True},
        }
        return await self.patch(resource, name, patch, namespace=namespace, uid=uid)

    async def suspend_jobset(
        self, namespace: str, name: str, *, suspend: bool = True, resource: ResourceType = JOBSETS
    ) -> JsonObject:
        """Set a JobSet's ``spec.suspend`` through a custom-object merge patch."""
        return await self.patch(resource, name, {"spec": {"suspend": suspend}}, namespace=namespace)

    # --- events --------------------------------------------------------------------------

    async def create_event(
        self,
        involved: ObjectRef | Mapping[str, object],
        *,
        reason: str,
        message: str,
        type: EventType = "Normal",
        action: str = "",
        component: str | None = None,
    ) -> JsonObject:
        """Record an Event about ``involved``; a repeat of (object, reason, type) counts up.

        The first occurrence creates the Event (count 1); later ones bump its count and
        lastTimestamp and replace its message, as ``kubectl describe`` expects. ``involved`` is
        an :class:`~tidegate.kube.eventrecord.ObjectRef` or the object itself. Returns the Event.
        """
        ref = involved if isinstance(involved, ObjectRef) else ObjectRef.of(involved)
        name = event_name(ref, reason, type)
        namespace = ref.event_namespace
        known = self._events.get(name)
        for _ in range(CONFLICT_ATTEMPTS):
            if known is None:
                body = new_event(
                    ref,
                    reason=reason,
                    message=message,
                    event_type=type,
                    action=action,
                    component=component or self._settings.user_agent,
                    instance=self._instance,
                )
                try:
                    return self._remember_event(
                        name, await self.create(EVENTS, body, namespace=namespace)
                    )
                except AlreadyExists:
                    known = await self._read_event(name, namespace)
                    continue
            try:
                patch = repeat_patch(known, message=message, action=action)
                return self._remember_event(
                    name, await self.patch(EVENTS, name, patch, namespace=namespace)
                )
            except Conflict:
                known = await self._read_event(name, namespace)
            except NotFound:
                known = None
        raise Conflict(
            f"event kept changing during {CONFLICT_ATTEMPTS} attempts",
            status=409,
            operation=f"record event {namespace}/{name}",
        )

    async def _read_event(self, name: str, namespace: str) -> JsonObject | None:
        try:
            return await self.get(EVENTS, name, namespace=namespace)
        except NotFound:
            return None

    def _remember_event(self, name: str, event: JsonObject) -> JsonObject:
        self._events[name] = event
        return event


def _custom(group: str, version: str, plural: str, *, namespaced: bool) -> ResourceType:
    return ResourceType(group=group, version=version, plural=plural, kind="", namespaced=namespaced)


def _where(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name
