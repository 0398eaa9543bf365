"""The simulator's in-memory object store: objects, one global resourceVersion, watch history.

Like etcd behind the kube-apiserver, every write gets the next value of one cluster-wide,
monotonically increasing resourceVersion, and every write is an event (ADDED, MODIFIED,
DELETED) kept in a bounded per-resource history so watches can resume from a resourceVersion;
a resume point older than the retained history is answered with 410 Gone, as after an etcd
compaction. Objects are indexed per resource and per namespace, so a namespaced list or a
watch never scans other kinds or namespaces. Each event is JSON-encoded at most once whatever
the number of watchers.

Stored objects are never mutated: a write stores a new dict. This module does no validation
and knows nothing of HTTP; :mod:`tidegate.sim.apiserver` decides what may be written.
"""

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

import msgspec
from sortedcontainers import SortedList  # type: ignore[import-untyped]

from tidegate.sim.errors import JsonObject, gone

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"

ResourceKey = tuple[str, str]
"""(group, plural): the unit of storage and of watch history."""

ObjectKey = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""

_ENCODER: Final = msgspec.json.Encoder()


class WatchEvent:
    """One committed write: its type, resourceVersion, new object and previous object."""

    __slots__ = ("_lines", "obj", "old", "rv", "type")

    def __init__(self, type_: str, rv: int, obj: JsonObject, old: JsonObject | None) -> None:
        self.type = type_
        self.rv = rv
        self.obj = obj
        self.old = old
        self._lines: dict[str, bytes] = {}

    def line(self, as_type: str | None = None) -> bytes:
        """The watch-stream line for this event (encoded once per distinct type)."""
        type_ = as_type or self.type
        cached = self._lines.get(type_)
        if cached is None:
            obj = self.obj
            if type_ == DELETED and self.type == MODIFIED and self.old is not None:
                # An object leaving a selector is reported with its previous content at the
                # event's resourceVersion, as the real watch cache does.
                obj = with_resource_version(self.old, self.rv)
            cached = _ENCODER.encode({"type": type_, "object": obj}) + b"\n"
            self._lines[type_] = cached
        return cached


def with_resource_version(obj: JsonObject, rv: int) -> JsonObject:
    """A shallow copy of ``obj`` whose metadata carries ``rv``."""
    metadata = obj.get("metadata")
    copied = dict(obj)
    copied["metadata"] = {
        **(metadata if isinstance(metadata, dict) else {}),
        "resourceVersion": str(rv),
    }
    return copied


def object_key(obj: JsonObject) -> ObjectKey:
    """(namespace, name) of a stored object."""
    metadata = obj["metadata"]
    assert isinstance(metadata, dict)
    return (str(metadata.get("namespace") or ""), str(metadata["name"]))


class Watcher:
    """A subscription to one resource (optionally one namespace), fed synchronously on commit.

    Events queue up until the consumer takes them; a consumer that falls more than ``limit``
    events behind is cut off (``overflowed``), as the real server drops slow watchers, and must
    resume from its last resourceVersion.
    """

    def __init__(self, bucket: "Bucket", namespace: str | None, limit: int) -> None:
        self._bucket = bucket
        self.namespace = namespace
        self._limit = limit
        self._pending: deque[WatchEvent] = deque()
        self._ready = asyncio.Event()
        self.overflowed = False
        self.closed = False

    def push(self, event: WatchEvent) -> None:
        """Queue an event (called by the store while committing)."""
        if self.closed:
            return
        self._pending.append(event)
        if len(self._pending) > self._limit:
            self.overflowed = True
            self.close()
        self._ready.set()

    async def next_batch(self, wait_seconds: float | None) -> list[WatchEvent] | None:
        """Every queued event, waiting up to ``wait_seconds``; None if none came."""
        if not self._pending and not self.closed:
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_seconds):
                    await self._ready.wait()
        if not self._pending and not self.closed:
            return None
        batch = list(self._pending)
        self._pending.clear()
        return batch

    @property
    def backlog(self) -> int:
        """Events queued and not yet taken."""
        return len(self._pending)

    def close(self) -> None:
        """Stop receiving events and wake the consumer."""
        self.closed = True
        self._bucket.watchers.discard(self)
        self._ready.set()


Listener = Callable[[WatchEvent], None]
"""An in-process subscriber (a simulated controller), called synchronously on commit."""


@dataclass
class Bucket:
    """Every object of one resource, its watch history, watchers and listeners."""

    history_limit: int
    objects: dict[ObjectKey, JsonObject] = field(default_factory=dict)
    order: SortedList = field(default_factory=SortedList)
    by_namespace: dict[str, dict[str, JsonObject]] = field(default_factory=dict)
    history: deque[WatchEvent] = field(default_factory=deque)
    compacted_rv: int = 0
    watchers: set[Watcher] = field(default_factory=set)
    listeners: list[Listener] = field(default_factory=list)


class Store:
    """All objects of the simulated cluster (see module docstring)."""

    def __init__(self, *, history_window: int = 10_000, watcher_backlog: int = 100_000) -> None:
        if history_window < 1:
            raise ValueError(f"history_window must be at least 1, got {history_window}")
        self._rv = 0
        self._buckets: dict[ResourceKey, Bucket] = {}
        self.history_window = history_window
        self.watcher_backlog = watcher_backlog
        self._global_listeners: list[Callable[[ResourceKey, WatchEvent], None]] = []

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out (0 before the first write)."""
        return self._rv

    def bucket(self, key: ResourceKey) -> Bucket:
        """The storage of one resource, created on first use."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = Bucket(history_limit=self.history_window)
            self._buckets[key] = bucket
        return bucket

    # --- reads ---------------------------------------------------------------------------

    def get(self, key: ResourceKey, namespace: str, name: str) -> JsonObject | None:
        """The current object, or None."""
        return self.bucket(key).objects.get((namespace, name))

    def objects(self, key: ResourceKey, namespace: str | None = None) -> Iterator[JsonObject]:
        """Current objects of a resource (in one namespace when given), in no set order."""
        bucket = self.bucket(key)
        if namespace is None:
            return iter(list(bucket.objects.values()))
        return iter(list(bucket.by_namespace.get(namespace, {}).values()))

    def list_sorted(
        self, key: ResourceKey, namespace: str | None, after: ObjectKey | None
    ) -> Iterator[JsonObject]:
        """Objects in (namespace, name) order, strictly after ``after`` when given."""
        bucket = self.bucket(key)
        if namespace is not None:
            low: ObjectKey = (namespace, "")
            keys = bucket.order.irange(low, (namespace + "\x00", ""), inclusive=(True, False))
        else:
            keys = bucket.order.irange(None, None)
        objects = bucket.objects
        for object_key_ in keys:
            if after is not None and object_key_ <= after:
                continue
            found = objects.get(object_key_)
            if found is not None:
                yield found

    def count(self, key: ResourceKey, namespace: str | None = None) -> int:
        """Number of objects of a resource (in one namespace when given)."""
        bucket = self.bucket(key)
        if namespace is None:
            return len(bucket.objects)
        return len(bucket.by_namespace.get(namespace, {}))

    # --- writes --------------------------------------------------------------------------

    def put(self, key: ResourceKey, obj: JsonObject) -> WatchEvent:
        """Store ``obj`` (a new dict the store now owns) under the next resourceVersion."""
        bucket = self.bucket(key)
        self._rv += 1
        metadata = obj["metadata"]
        assert isinstance(metadata, dict)
        metadata["resourceVersion"] = str(self._rv)
        okey = object_key(obj)
        old = bucket.objects.get(okey)
        bucket.objects[okey] = obj
        if old is None:
            bucket.order.add(okey)
        bucket.by_namespace.setdefault(okey[0], {})[okey[1]] = obj
        event = WatchEvent(MODIFIED if old is not None else ADDED, self._rv, obj, old)
        self._publish(key, bucket, event, okey[0])
        return event

    def remove(self, key: ResourceKey, namespace: str, name: str) -> WatchEvent | None:
        """Delete an object now; the DELETED event carries its last state at a new version."""
        bucket = self.bucket(key)
        okey = (namespace, name)
        old = bucket.objects.pop(okey, None)
        if old is None:
            return None
        bucket.order.discard(okey)
        in_namespace = bucket.by_namespace.get(namespace)
        if in_namespace is not None:
            in_namespace.pop(name, None)
            if not in_namespace:
                del bucket.by_namespace[namespace]
        self._rv += 1
        event = WatchEvent(DELETED, self._rv, with_resource_version(old, self._rv), old)
        self._publish(key, bucket, event, namespace)
        return event

    def _publish(self, key: ResourceKey, bucket: Bucket, event: WatchEvent, namespace: str) -> None:
        bucket.history.append(event)
        if len(bucket.history) > bucket.history_limit:
            bucket.compacted_rv = bucket.history.popleft().rv
        for watcher in list(bucket.watchers):
            if watcher.namespace is None or watcher.namespace == namespace:
                watcher.push(event)
        for listener in list(bucket.listeners):
            listener(event)
        for global_listener in list(self._global_listeners):
            global_listener(key, event)

    def compact(self) -> None:
        """Forget all watch history (as an etcd compaction does): older resumes get 410."""
        for bucket in self._buckets.values():
            if bucket.history:
                bucket.compacted_rv = bucket.history[-1].rv
                bucket.history.clear()
            bucket.compacted_rv = max(bucket.compacted_rv, self._rv)

    # --- subscriptions -------------------------------------------------------------------

    def watch(
        self, key: ResourceKey, namespace: str | None, since: int | None
    ) -> tuple[Watcher, list[WatchEvent]]:
        """Subscribe; returns the watcher and the events to replay first.

        ``since`` None means "current state": every existing object as a synthetic ADDED
        event. Otherwise the retained events after ``since``; 410 Gone (an
        :class:`~tidegate.sim.errors.ApiError`) when some were already forgotten.
        """
        bucket = self.bucket(key)
        if since is None:
            source = (
                bucket.objects.values()
                if namespace is None
                else bucket.by_namespace.get(namespace, {}).values()
            )
            replay = [WatchEvent(ADDED, _rv_of(obj), obj, None) for obj in source]
        else:
            if since < bucket.compacted_rv:
                raise gone(f"too old resource version: {since} ({bucket.compacted_rv})")
            replay = []
            for event in reversed(bucket.history):
                if event.rv <= since:
                    break
                if namespace is None or object_key(event.obj)[0] == namespace:
                    replay.append(event)
            replay.reverse()
        watcher = Watcher(bucket, namespace, self.watcher_backlog)
        bucket.watchers.add(watcher)
        return watcher, replay

    def subscribe(self, key: ResourceKey, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every future event of a resource; returns an unsubscribe."""
        bucket = self.bucket(key)
        bucket.listeners.append(listener)

        def unsubscribe() -> None:
            if listener in bucket.listeners:
                bucket.listeners.remove(listener)

        return unsubscribe

    def subscribe_all(
        self, listener: Callable[[ResourceKey, WatchEvent], None]
    ) -> Callable[[], None]:
        """Call ``listener`` for every future event of every resource; returns an unsubscribe."""
        self._global_listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._global_listeners:
                self._global_listeners.remove(listener)

        return unsubscribe

    def resource_keys(self) -> list[ResourceKey]:
        """Every resource that has (or had) objects."""
        return list(self._buckets)

    def close_watchers(self) -> None:
        """End every open watch (server shutdown)."""
        for bucket in self._buckets.values():
            for watcher in list(bucket.watchers):
                watcher.close()


def _rv_of(obj: JsonObject) -> int:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        return int(str(metadata.get("resourceVersion") or 0))
    return 0
