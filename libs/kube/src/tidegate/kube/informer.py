"""List-then-watch of one resource type, surviving reconnects and 410 Gone, as one event stream.

An :class:`Informer` lists the objects (in pages), reports each as ADDED, says
:class:`Synced`, then watches from the list's resourceVersion with bookmarks on. BOOKMARK events
only advance the resourceVersion. When the stream ends (server timeout, dropped connection) it
reconnects from the last resourceVersion it saw. When the server says that resourceVersion is
too old (410 Gone, as an HTTP status or as a watch ERROR event), it relists and turns the
difference into events: DELETED tombstones (the last state it saw) for objects that vanished
meanwhile, ADDED for new ones, MODIFIED for changed ones, nothing for unchanged ones. This is
the loop client-go's reflector and kopf run; it works for any
:class:`~tidegate.kube.resources.ResourceType`, core or custom, with label/field selectors.

Events carry the object as the API server sent it (a dict, never a generated model). The
informer keeps the last state of every object (needed for tombstones) and exposes it as
:meth:`Informer.state`, which can seed a later informer to resume without relisting. With
``cache="metadata"`` it keeps only each object's identity (apiVersion, kind, and metadata
without managedFields): a consumer that reads nothing but metadata from a DELETED event saves
most of the memory (a pod object is kilobytes), and only tombstones synthesized after a relist
are then metadata-only.

What it does not do: interpret objects, rate-limit the consumer, or retry permanent errors
(403, 404 for a CRD that is not installed): those raise out of the iteration.
"""

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from tidegate.kube.client import KubeClient
from tidegate.kube.errors import TRANSIENT, Gone, UnexpectedResponse, error_for_status
from tidegate.kube.resources import ResourceType
from tidegate.kube.transport import JsonObject, render_query

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
"""What happened to an object."""

_EVENT_TYPES: dict[str, EventType] = {
    "ADDED": "ADDED",
    "MODIFIED": "MODIFIED",
    "DELETED": "DELETED",
}

ObjectKey = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""

CacheMode = Literal["objects", "metadata"]
"""What an informer keeps of each object: all of it, or its identity only."""


def identity(obj: JsonObject) -> JsonObject:
    """apiVersion, kind and metadata (without managedFields) of ``obj``: what a metadata-only
    cache keeps."""
    kept: JsonObject = {key: obj[key] for key in ("apiVersion", "kind") if key in obj}
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        kept["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return kept


@dataclass(frozen=True, slots=True)
class KubeEvent:
    """One change of one object; ``obj`` is the JSON object as the server sent it.

    For DELETED, ``obj`` is the object's final state (from the server, or for a tombstone
    synthesized after a relist, the last state this informer saw).
    """

    type: EventType
    """ADDED, MODIFIED or DELETED."""
    obj: JsonObject
    """The object."""

    @property
    def key(self) -> ObjectKey:
        """(namespace, name) of the object."""
        return object_key(self.obj)

    @property
    def resource_version(self) -> str:
        """The object's metadata.resourceVersion ("" if absent)."""
        return _metadata_str(self.obj, "resourceVersion")


@dataclass(frozen=True, slots=True)
class Synced:
    """The events so far reproduce the server's state at ``resource_version``.

    Sent after the initial list and after every relist (``relist`` True), and once at the start
    of an informer resumed from a saved state.
    """

    resource_version: str
    """The collection resourceVersion the state corresponds to."""
    count: int
    """How many objects the informer knows at this point."""
    relist: bool = False
    """True when this follows a relist after 410 Gone rather than the first list."""


InformerItem = KubeEvent | Synced
"""What iterating an :class:`Informer` yields."""


@dataclass(frozen=True, kw_only=True)
class InformerState:
    """A snapshot to resume from: the objects known and the resourceVersion they reflect."""

    resource_version: str
    """Watch from here."""
    objects: Mapping[ObjectKey, JsonObject] = field(default_factory=dict)
    """Last known state of every object, by (namespace, name)."""


class _WatchLine(msgspec.Struct):
    type: str
    object: JsonObject


class Informer:
    """Iterate to get :class:`KubeEvent` and :class:`Synced` items, forever.

    ``namespace`` None watches all namespaces (for namespaced types). Iterate once per
    informer; cancel the consuming task (or break out) to stop. Transient failures (429, 5xx,
    connection loss) are retried with backoff indefinitely; other
    :class:`~tidegate.kube.errors.KubeError` subclasses raise out of the iteration.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        initial_state: InformerState | None = None,
        cache: CacheMode = "objects",
    ) -> None:
        self._client = client
        self._keep = identity if cache == "metadata" else None
        self._resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._objects: dict[ObjectKey, JsonObject] = {}
        self._resource_version = ""
        if initial_state is not None:
            self._objects = dict(initial_state.objects)
            self._resource_version = initial_state.resource_version
        self._synced = asyncio.Event()
        self._relists = 0
        self._started = False

    @property
    def resource(self) -> ResourceType:
        """What this informer watches."""
        return self._resource

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a list, an event or a bookmark)."""
        return self._resource_version

    @property
    def relists(self) -> int:
        """How many times the informer relisted after 410 Gone."""
        return self._relists

    async def wait_synced(self) -> None:
        """Return once the first list (or the resumed state) has been delivered."""
        await self._synced.wait()

    def state(self) -> InformerState:
        """A snapshot of what the informer knows, to resume a later informer from."""
        return InformerState(resource_version=self._resource_version, objects=dict(self._objects))

    def __aiter__(self) -> AsyncIterator[InformerItem]:
        if self._started:
            raise RuntimeError("an Informer can be iterated only once")
        self._started = True
        return self._run()

    async def _run(self) -> AsyncIterator[InformerItem]:
        need_list = not self._resource_version
        if not need_list:
            self._synced.set()
            yield Synced(self._resource_version, len(self._objects))
        failures = 0
        while True:
            try:
                if need_list:
                    relist = self._synced.is_set()
                    for item in await self._list_and_diff():
                        yield item
                    if relist:
                        self._relists += 1
                    self._synced.set()
                    yield Synced(self._resource_version, len(self._objects), relist=relist)
                    need_list = False
                async with aclosing(self._watch_once()) as events:
                    async for item in events:
                        failures = 0
                        yield item
                failures = 0
            except Gone as exc:
                log.info("%s: %s; relisting", self._resource.plural, exc)
                if need_list:
                    # The list itself was refused as expired; do not spin on it.
                    await asyncio.sleep(self._client.transport.backoff.delay(failures))
                    failures += 1
                need_list = True
            except TRANSIENT as exc:
                delay = self._client.transport.backoff.delay(failures)
                failures += 1
                log.warning("%s: %s; retrying in %.2fs", self._resource.plural, exc, delay)
                await asyncio.sleep(delay)

    async def _list_and_diff(self) -> list[InformerItem]:
        """List everything (all pages) and return the events that bring the cache up to it."""
        items, resource_version = await self._list_all()
        fresh: dict[ObjectKey, JsonObject] = {object_key(obj): obj for obj in items}
        events: list[InformerItem] = []
        keep = self._keep
        for key, old in self._objects.items():
            new = fresh.get(key)
            if new is None or _metadata_str(new, "uid") != _metadata_str(old, "uid"):
                events.append(KubeEvent("DELETED", old))
        for key, new in fresh.items():
            old_or_none = self._objects.get(key)
            if old_or_none is None or _metadata_str(new, "uid") != _metadata_str(
                old_or_none, "uid"
            ):
                events.append(KubeEvent("ADDED", new))
            elif _metadata_str(new, "resourceVersion") != _metadata_str(
                old_or_none, "resourceVersion"
            ):
                events.append(KubeEvent("MODIFIED", new))
        self._objects = fresh if keep is None else {k: keep(o) for k, o in fresh.items()}
        self._resource_version = resource_version
        return events

    async def _list_all(self) -> tuple[list[JsonObject], str]:
        page_size = self._client.settings.list_page_size or None
        while True:
            items: list[JsonObject] = []
            token: str | None = None
            try:
                while True:
                    page = await self._client.list_objects(
                        self._resource,
                        namespace=self._namespace,
                        label_selector=self._label_selector,
                        field_selector=self._field_selector,
                        limit=page_size,
                        continue_token=token,
                    )
                    items.extend(page.items)
                    if not page.continue_token:
                        return items, page.resource_version
                    token = page.continue_token
            except Gone:
                if token is None:
                    raise
                # The continue token expired between pages: the pages no longer form one
                # snapshot, so start over.
                log.info("%s: list continuation expired; listing again", self._resource.plural)

    async def _watch_once(self) -> AsyncGenerator[KubeEvent, None]:
        """One watch request from the current resourceVersion until the server ends it."""
        settings = self._client.settings
        query = render_query(
            {
                "watch": True,
                "resourceVersion": self._resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": settings.watch_timeout_seconds,
                "labelSelector": self._label_selector or None,
                "fieldSelector": self._field_selector or None,
            }
        )
        path = self._resource.path(namespace=self._namespace)
        operation = f"watch {self._resource.plural}"
        async with self._client.transport.stream(
            path,
            operation=operation,
            query=query,
            read_timeout_seconds=settings.watch_timeout_seconds + 30,
        ) as body:
            while True:
                line = await body.readline()
                if not line:
                    return
                if line.isspace():
                    continue
                event = self._apply(line, operation)
                if event is not None:
                    yield event

    def _apply(self, line: bytes, operation: str) -> KubeEvent | None:
        """Fold one watch line into the cache; the event to report, or None (bookmarks)."""
        try:
            parsed = msgspec.json.decode(line, type=_WatchLine)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UnexpectedResponse(f"bad watch event: {exc}", operation=operation) from exc
        obj = parsed.object
        if parsed.type == "ERROR":
            code = obj.get("code")
            error = error_for_status(
                code if isinstance(code, int) else 500, obj, operation=operation
            )
            raise error
        version = _metadata_str(obj, "resourceVersion")
        if parsed.type == "BOOKMARK":
            if version:
                self._resource_version = version
            return None
        kind = _EVENT_TYPES.get(parsed.type)
        if kind is None:
            raise UnexpectedResponse(
                f"unknown watch event type {parsed.type!r}", operation=operation
            )
        obj.setdefault("apiVersion", self._resource.api_version)
        obj.setdefault("kind", self._resource.kind)
        key = object_key(obj)
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj if self._keep is None else self._keep(obj)
        if version:
            self._resource_version = version
        return KubeEvent(kind, obj)


def object_key(obj: Mapping[str, object]) -> ObjectKey:
    """(namespace, name) of an API object; namespace "" when cluster-scoped."""
    return _metadata_str(obj, "namespace"), _metadata_str(obj, "name")


def _metadata_str(obj: Mapping[str, object], key: str) -> str:
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        value = metadata.get(key)
        if isinstance(value, str):
            return value
    return ""
