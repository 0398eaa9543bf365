"""The HTTP face of the simulated API server: Kubernetes REST paths, watch streams, discovery.

Routes every request the way the kube-apiserver does: ``/api/v1/...`` and
``/apis/<group>/<version>/...``, cluster-scoped and namespaced collections, named objects and
their subresources (status, binding, eviction, scale), the legacy ``bindings`` collection,
discovery documents, ``/version`` and health endpoints. Answers are JSON; errors are Status
objects with the real codes and reasons. A watch is a chunked stream of JSON lines
(ADDED/MODIFIED/DELETED, BOOKMARK when asked for, ERROR 410 when the resourceVersion is too
old), filtered by namespace and selectors; an object that stops or starts matching a selector
is reported as DELETED or ADDED, like the real watch cache.

With RBAC enforcement on (:class:`~tidegate.sim.rbac.Access`), every request is first
authenticated by its bearer token (401 for an unknown one) and authorised against the stored
Roles and ClusterRoles (403 in the kube-apiserver's words), and recorded.

A few control endpoints under ``/sim/v1`` (not part of Kubernetes) let tests compact the
watch history and inject faults (429/5xx answers); they need no token.

The verbs themselves live in :class:`~tidegate.sim.apiserver.ApiServer`; this module only
parses requests and writes responses.
"""

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import msgspec
import yaml
from aiohttp import web

from tidegate.sim import openapi, tables
from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import (
    ApiError,
    JsonObject,
    bad_request,
    method_not_allowed,
    resource_not_found,
)
from tidegate.sim.kinds import (
    BINDING,
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    EVICTION,
    JOBS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SCALE,
    ResourceType,
)
from tidegate.sim.patching import APPLY_PATCH
from tidegate.sim.rbac import Access, Policy, authorize, forbidden_error, request_attributes
from tidegate.sim.selectors import Selector
from tidegate.sim.store import ADDED, DELETED, MODIFIED, WatchEvent, with_resource_version

_ENCODER: Final = msgspec.json.Encoder()
_LOG: Final = logging.getLogger(__name__)
_JSON: Final = "application/json"
_JOB_ORPHAN_WARNING: Final = (
    '299 - "child pods are preserved by default when jobs are deleted; set '
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress "
    'this warning"'
)
SERVER_VERSION: Final[JsonObject] = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-tidegate-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True, kw_only=True)
class WatchSettings:
    """How watches behave: bookmark cadence and the longest a watch stays open."""

    bookmark_interval_seconds: float = 5.0
    max_watch_seconds: float = 1800.0


@dataclass
class Fault:
    """An injected failure: the next ``count`` matching requests get ``code``."""

    code: int
    count: int
    method: str | None = None
    path_prefix: str = ""
    retry_after_seconds: int | None = None


@dataclass
class FaultInjector:
    """Pending injected faults, consumed in order."""

    faults: list[Fault] = field(default_factory=list)

    def take(self, method: str, path: str) -> Fault | None:
        """The fault that applies to this request (consuming one use of it), if any."""
        for fault in self.faults:
            if fault.method not in (None, method) or not path.startswith(fault.path_prefix):
                continue
            fault.count -= 1
            if fault.count <= 0:
                self.faults.remove(fault)
            return fault
        return None


def json_response(body: object, status: int = 200) -> web.Response:
    """A JSON answer encoded with msgspec."""
    return web.Response(body=_ENCODER.encode(body), status=status, content_type=_JSON)


def error_response(error: ApiError) -> web.Response:
    """The Status object for an error."""
    response = json_response(error.status(), error.code)
    if error.retry_after_seconds is not None:
        response.headers["Retry-After"] = str(error.retry_after_seconds)
    return response


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


@dataclass
class Route:
    """A parsed resource path."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


class HttpApi:
    """aiohttp handlers over one :class:`ApiServer`."""

    def __init__(self, api: ApiServer, watch: WatchSettings, access: Access | None = None) -> None:
        self.api = api
        self.watch_settings = watch
        self.access = access or Access()
        self.faults = FaultInjector()
        self._stopping = asyncio.Event()
        self._watch_tasks: set[asyncio.Task[None]] = set()

    def application(self) -> web.Application:
        """The aiohttp application serving everything."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.stop_watches()

    def stop_watches(self) -> None:
        """End every open watch stream (before shutting down)."""
        self._stopping.set()
        self.api.store.close_watchers()

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """Route one request; every ApiError becomes a Status answer."""
        try:
            if request.path.startswith("/sim/"):
                return await self._control(request)
            if self.access.enforce:
                self._authorize(request)
            fault = self.faults.take(request.method, request.path)
            if fault is not None:
                raise ApiError(
                    fault.code,
                    "TooManyRequests" if fault.code == 429 else "InternalError",
                    f"injected fault {fault.code}",
                    retry_after_seconds=fault.retry_after_seconds,
                )
            return await self._serve(request)
        except ApiError as error:
            return error_response(error)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            # Whatever went wrong, the client gets a Status like a real server's 500.
            _LOG.exception("%s %s failed", request.method, request.path)
            return error_response(ApiError(500, "InternalError", f"internal error: {exc!r}"))

    def _authorize(self, request: web.Request) -> None:
        """Raise 401 for an unknown token, 403 when RBAC does not allow the request."""
        user = self.access.authenticate(request.headers.get("Authorization"))
        attributes = request_attributes(request.method, request.path, request.query)
        allowed = authorize(self._policy(), user, attributes)
        self.access.log.record(user, attributes, allowed=allowed)
        if not allowed:
            raise forbidden_error(user, attributes)

    def _policy(self) -> Policy:
        """The stored Roles, ClusterRoles and their bindings, as the authorizer reads them."""
        store = self.api.store
        role_bindings: dict[str, list[JsonObject]] = {}
        for binding in store.objects(ROLEBINDINGS.key):
            role_bindings.setdefault(_namespace_of(binding), []).append(binding)
        return Policy(
            cluster_roles={_name_of(r): r for r in store.objects(CLUSTERROLES.key)},
            cluster_role_bindings=list(store.objects(CLUSTERROLEBINDINGS.key)),
            roles={(_namespace_of(r), _name_of(r)): r for r in store.objects(ROLES.key)},
            role_bindings=role_bindings,
        )

    # --- routing -------------------------------------------------------------------------

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        segments = [s for s in request.path.split("/") if s]
        if not segments:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz"]})
        head = segments[0]
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "version":
            return json_response(SERVER_VERSION)
        registry = self.api.registry
        if head == "openapi":
            return self._openapi(segments)
        if head == "api":
            if len(segments) == 1:
                return json_response(registry.api_versions(request.host))
            group, version, rest = "", segments[1], segments[2:]
        elif head == "apis":
            if len(segments) == 1:
                return json_response(registry.api_group_list())
            group = segments[1]
            if len(segments) == 2:
                document = registry.api_group(group)
                if document is None:
                    raise resource_not_found()
                return json_response(document)
            version, rest = segments[2], segments[3:]
        else:
            raise resource_not_found()
        if not rest:
            if request.method != "GET":
                raise method_not_allowed("discovery documents are read-only")
            resources = registry.resource_list(group, version)
            if resources is None:
                raise resource_not_found()
            return json_response(resources)
        if group == "" and rest[0] == "namespaces" and len(rest) == 3 and rest[2] == "bindings":
            return await self._legacy_binding(request, rest[1])
        route = self._route(group, version, rest)
        return await self._verb(request, route)

    def _route(self, group: str, version: str, rest: list[str]) -> Route:
        registry = self.api.registry
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            inner = registry.lookup(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        rtype = registry.lookup(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            raise resource_not_found()
        if namespace is not None and not rtype.namespaced:
            raise resource_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rtype.subresources:
            raise resource_not_found()
        return Route(rtype, namespace, name, sub)

    async def _verb(self, request: web.Request, route: Route) -> web.StreamResponse:
        api = self.api
        query = request.query
        method = request.method
        rtype, namespace, name, sub = route.rtype, route.namespace, route.name, route.subresource
        dry_run = "dryRun" in query
        if name is None:
            if method == "GET":
                selector = Selector.parse(
                    query.get("labelSelector", ""), query.get("fieldSelector", ""), rtype.kind
                )
                if _flag(query.get("watch")):
                    return await self._watch(request, rtype, namespace, selector)
                limit = _int_param(query, "limit")
                listing = api.list_objects(
                    rtype,
                    namespace,
                    selector,
                    limit=limit or 0,
                    continue_token=query.get("continue", ""),
                )
                if tables.wants_table(request.headers.get("Accept", "")):
                    items = listing["items"]
                    assert isinstance(items, list)
                    metadata = listing["metadata"]
                    assert isinstance(metadata, dict)
                    return json_response(tables.table(rtype, items, metadata))
                return json_response(listing)
            if method == "POST":
                if rtype.namespaced and namespace is None:
                    raise method_not_allowed(
                        f"create of namespaced {rtype.plural} needs a namespace in the path"
                    )
                body = await _body(request)
                if rtype is PODS and namespace is not None and isinstance(body, dict):
                    body = await api.webhooks.admit(rtype, namespace, body)
                created = api.create(rtype, namespace, body, dry_run=dry_run)
                return json_response(created, 201)
            if method == "DELETE":
                selector = Selector.parse(
                    query.get("labelSelector", ""), query.get("fieldSelector", ""), rtype.kind
                )
                options = await _delete_options(request)
                return json_response(api.delete_collection(rtype, namespace, selector, options))
            raise method_not_allowed(f"{method} is not supported on a collection")
        if rtype.namespaced and namespace is None:
            raise resource_not_found()
        if sub == BINDING:
            if method != "POST" or namespace is None:
                raise method_not_allowed("binding supports POST only")
            return json_response(api.bind(namespace, name, await _body(request)), 201)
        if sub == EVICTION:
            if method != "POST" or namespace is None:
                raise method_not_allowed("eviction supports POST only")
            return json_response(
                api.evict(namespace, name, await _body(request), dry_run=dry_run), 201
            )
        if sub == SCALE:
            assert namespace is not None
            if method == "GET":
                return json_response(api.get_scale(rtype, namespace, name))
            if method == "PUT":
                return json_response(
                    api.set_scale(rtype, namespace, name, await _body(request), None)
                )
            if method == "PATCH":
                content_type = request.content_type
                return json_response(
                    api.set_scale(rtype, namespace, name, await _body(request), content_type)
                )
            raise method_not_allowed(f"{method} is not supported on scale")
        if method == "GET":
            found = api.get(rtype, namespace, name)
            if sub is None and tables.wants_table(request.headers.get("Accept", "")):
                metadata = found.get("metadata")
                rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
                return json_response(tables.table(rtype, [found], {"resourceVersion": rv}))
            return json_response(found)
        if method == "PUT":
            updated = api.update(
                rtype, namespace, name, await _body(request), subresource=sub, dry_run=dry_run
            )
            return json_response(updated)
        if method == "PATCH":
            content_type = request.content_type
            if content_type == APPLY_PATCH:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "server-side apply is not simulated; use a merge or strategic merge patch",
                )
            patched = api.patch(
                rtype,
                namespace,
                name,
                await _body(request),
                content_type,
                subresource=sub,
                dry_run=dry_run,
            )
            return json_response(patched)
        if method == "DELETE":
            if sub is not None:
                raise method_not_allowed("DELETE is not supported on a subresource")
            options = await _delete_options(request)
            obj, removed = api.delete(rtype, namespace, name, options, dry_run=dry_run)
            response = self._deleted(rtype, name, obj, removed)
            if rtype is JOBS and "propagationPolicy" not in options:
                response.headers["Warning"] = _JOB_ORPHAN_WARNING
            return response
        raise method_not_allowed(f"{method} is not supported")

    def _deleted(
        self, rtype: ResourceType, name: str, obj: JsonObject, removed: bool
    ) -> web.Response:
        if rtype is PODS or not removed:
            return json_response(obj)
        metadata = obj.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": rtype.group, "kind": rtype.plural, "uid": uid},
            }
        )

    def _openapi(self, segments: list[str]) -> web.StreamResponse:
        registry = self.api.registry
        if segments[1:] == ["v3"]:
            return json_response(openapi.index(registry))
        rest = segments[2:]
        document = None
        if len(segments) > 2 and segments[1] == "v3":
            if rest[:1] == ["api"] and len(rest) == 2:
                document = openapi.group_version(registry, "", rest[1])
            elif rest[:1] == ["apis"] and len(rest) == 3:
                document = openapi.group_version(registry, rest[1], rest[2])
        if document is None:
            raise resource_not_found()
        return json_response(document)

    async def _legacy_binding(self, request: web.Request, namespace: str) -> web.StreamResponse:
        if request.method != "POST":
            raise method_not_allowed("bindings supports POST only")
        body = await _body(request)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            raise bad_request("a Binding needs metadata.name (the pod)")
        return json_response(self.api.bind(namespace, name, body), 201)

    # --- watch ---------------------------------------------------------------------------

    async def _watch(
        self,
        request: web.Request,
        rtype: ResourceType,
        namespace: str | None,
        selector: Selector,
    ) -> web.StreamResponse:
        query = request.query
        rv_param = query.get("resourceVersion", "")
        send_initial = _flag(query.get("sendInitialEvents"))
        if rv_param in ("", "0") or send_initial:
            since: int | None = None
        else:
            try:
                since = int(rv_param)
            except ValueError as exc:
                raise bad_request(f'invalid resource version "{rv_param}"') from exc
        timeout = self.watch_settings.max_watch_seconds
        requested_timeout = _int_param(query, "timeoutSeconds")
        if requested_timeout is not None:
            timeout = min(timeout, float(requested_timeout))
        bookmarks = _flag(query.get("allowWatchBookmarks"))
        response = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        # The subscription is taken before the first await, so no event can slip between
        # the resume point and the live stream.
        try:
            watcher, replay = self.api.store.watch(rtype.key, namespace, since)
        except ApiError as error:
            await response.prepare(request)
            await response.write(
                _ENCODER.encode({"type": "ERROR", "object": error.status()}) + b"\n"
            )
            await response.write_eof()
            return response
        project = _project
        if tables.wants_table(request.headers.get("Accept", "")):
            project = _TableLines(rtype).line
        try:
            await response.prepare(request)
            lines = [line for e in replay if (line := project(e, selector)) is not None]
            if lines:
                await response.write(b"".join(lines))
            if send_initial and bookmarks:
                await response.write(self._bookmark(rtype, {"k8s.io/initial-events-end": "true"}))
            deadline = time.monotonic() + timeout
            interval = self.watch_settings.bookmark_interval_seconds
            next_bookmark = time.monotonic() + interval
            while not self._stopping.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                batch = await watcher.next_batch(min(next_bookmark, deadline) - now)
                if batch:
                    lines = [line for e in batch if (line := project(e, selector)) is not None]
                    if lines:
                        await response.write(b"".join(lines))
                if watcher.closed:
                    break
                # A bookmark promises every event up to its resourceVersion was sent, so it
                # is only built when nothing is queued (no await between check and build).
                if time.monotonic() >= next_bookmark and watcher.backlog == 0:
                    next_bookmark = time.monotonic() + interval
                    if bookmarks:
                        await response.write(self._bookmark(rtype, None))
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away; nothing left to tell it
        finally:
            watcher.close()
        return response

    def _bookmark(self, rtype: ResourceType, annotations: dict[str, str] | None) -> bytes:
        metadata: JsonObject = {"resourceVersion": str(self.api.store.resource_version)}
        if annotations:
            metadata["annotations"] = annotations
        obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": metadata}
        return _ENCODER.encode({"type": "BOOKMARK", "object": obj}) + b"\n"

    # --- control endpoints ---------------------------------------------------------------

    async def _control(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        if path == "/sim/v1/compact" and request.method == "POST":
            self.api.store.compact()
            return json_response({"resourceVersion": str(self.api.store.resource_version)})
        if path == "/sim/v1/faults":
            if request.method == "POST":
                body = await _body(request)
                if not isinstance(body, dict) or not isinstance(body.get("code"), int):
                    raise bad_request("a fault needs an integer code")
                retry_after = body.get("retryAfterSeconds")
                self.faults.faults.append(
                    Fault(
                        code=int(str(body["code"])),
                        count=int(str(body.get("count", 1))),
                        method=str(body["method"]) if body.get("method") else None,
                        path_prefix=str(body.get("pathPrefix", "")),
                        retry_after_seconds=int(str(retry_after))
                        if retry_after is not None
                        else None,
                    )
                )
                return json_response({"pending": len(self.faults.faults)}, 201)
            if request.method == "DELETE":
                self.faults.faults.clear()
                return json_response({"pending": 0})
        if path == "/sim/v1/webhook-services" and request.method == "POST":
            body = await _body(request)
            if not isinstance(body, dict) or not all(
                isinstance(body.get(k), str) and body.get(k) for k in ("namespace", "name", "url")
            ):
                raise bad_request("a webhook service needs string namespace, name and url")
            key = f"{body['namespace']}/{body['name']}"
            self.api.webhooks.services[key] = str(body["url"])
            return json_response(dict(self.api.webhooks.services), 201)
        raise resource_not_found()


def _visible_as(event: WatchEvent, selector: Selector) -> str | None:
    """The event type a watcher with ``selector`` sees for ``event``, or None."""
    if selector.everything:
        return event.type
    if event.type != MODIFIED:
        return event.type if selector.matches(event.obj) else None
    now = selector.matches(event.obj)
    before = event.old is not None and selector.matches(event.old)
    if now and before:
        return MODIFIED
    if now:
        return ADDED
    if before:
        return DELETED
    return None


def _project(event: WatchEvent, selector: Selector) -> bytes | None:
    """The line a watcher with ``selector`` sees for ``event``, or None."""
    seen_as = _visible_as(event, selector)
    return None if seen_as is None else event.line(seen_as)


class _TableLines:
    """Watch lines as one-row Tables (kubectl get --watch); headers on the first only."""

    def __init__(self, rtype: ResourceType) -> None:
        self.rtype = rtype
        self.headers = True

    def line(self, event: WatchEvent, selector: Selector) -> bytes | None:
        """The Table line for ``event``, or None when the selector hides it."""
        seen_as = _visible_as(event, selector)
        if seen_as is None:
            return None
        obj = event.obj
        if seen_as == DELETED and event.type == MODIFIED and event.old is not None:
            obj = with_resource_version(event.old, event.rv)
        rows = tables.table(
            self.rtype, [obj], {"resourceVersion": str(event.rv)}, headers=self.headers
        )
        self.headers = False
        return _ENCODER.encode({"type": seen_as, "object": rows}) + b"\n"


def _name_of(obj: JsonObject) -> str:
    """``metadata.name`` ("" when absent)."""
    metadata = obj.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, dict) else ""


def _namespace_of(obj: JsonObject) -> str:
    """``metadata.namespace`` ("" for a cluster-scoped object)."""
    metadata = obj.get("metadata")
    return str(metadata.get("namespace", "")) if isinstance(metadata, dict) else ""


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(str(raw))
    except ValueError as exc:
        raise bad_request(f"{name}: invalid integer {raw!r}") from exc


async def _body(request: web.Request) -> object:
    raw = await request.read()
    if not raw:
        return None
    if request.content_type in (APPLY_PATCH, "application/yaml"):
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise bad_request(f"the request body is not valid YAML: {exc}") from exc
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from exc


async def _delete_options(request: web.Request) -> JsonObject:
    options: JsonObject = {}
    body = await _body(request)
    if isinstance(body, dict):
        options.update(body)
    grace = request.query.get("gracePeriodSeconds")
    if grace is not None and "gracePeriodSeconds" not in options:
        try:
            options["gracePeriodSeconds"] = int(grace)
        except ValueError as exc:
            raise bad_request(f"gracePeriodSeconds: invalid integer {grace!r}") from exc
    policy = request.query.get("propagationPolicy")
    if policy is not None and "propagationPolicy" not in options:
        options["propagationPolicy"] = policy
    return options


__all__ = ["FaultInjector", "HttpApi", "WatchSettings", "json_response"]
