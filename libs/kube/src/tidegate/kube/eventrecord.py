"""Kubernetes Events that stay current: one Event per (object, reason, type), counted up.

``kubectl describe`` shows "3x over 10m" because client-go's recorder updates an existing
Event's count and lastTimestamp instead of creating a new one for every repetition. tidegate
does the same without a shared cache: the Event's name is derived from the involved object, the
reason and the type, so every replica and every restart finds the same Event. This module builds
names and bodies (pure); :meth:`tidegate.kube.client.KubeClient.create_event` sends them.

The legacy core/v1 Event shape is used (count, firstTimestamp, lastTimestamp, source), which is
what ``kubectl describe`` and ``kubectl get events`` read; ``eventTime`` is left unset because
the API server then requires the events.k8s.io series fields instead.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from tidegate.kube.transport import JsonObject

EventType = Literal["Normal", "Warning"]
"""The two Event types Kubernetes knows."""

_MAX_NAME = 253
_SUFFIX_LEN = 16


@dataclass(frozen=True, kw_only=True)
class ObjectRef:
    """Which object an Event is about (the Event's ``involvedObject``)."""

    api_version: str
    """apiVersion of the object, e.g. "v1" or "batch/v1"."""
    kind: str
    """Kind, e.g. "Pod"."""
    name: str
    """Object name."""
    namespace: str = ""
    """Namespace; "" for cluster-scoped objects (their Events go to "default")."""
    uid: str = ""
    """The object's uid, so the Event is not shown for a later object of the same name."""

    @classmethod
    def of(cls, obj: Mapping[str, object]) -> "ObjectRef":
        """The reference to an object as the API server returned it.

        Raises ValueError naming the missing field when apiVersion, kind or metadata.name is
        absent.
        """
        metadata = obj.get("metadata")
        meta = metadata if isinstance(metadata, Mapping) else {}
        api_version, kind, name = obj.get("apiVersion"), obj.get("kind"), meta.get("name")
        for field, value in (("apiVersion", api_version), ("kind", kind), ("metadata.name", name)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{field}: missing or not a string in the involved object")
        namespace, uid = meta.get("namespace"), meta.get("uid")
        return cls(
            api_version=str(api_version),
            kind=str(kind),
            name=str(name),
            namespace=namespace if isinstance(namespace, str) else "",
            uid=uid if isinstance(uid, str) else "",
        )

    @property
    def event_namespace(self) -> str:
        """Where Events about this object live."""
        return self.namespace or "default"

    def as_involved_object(self) -> JsonObject:
        """The ``involvedObject`` field of an Event."""
        ref: JsonObject = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


def event_name(ref: ObjectRef, reason: str, event_type: EventType) -> str:
    """The stable Event name for (object, reason, type): "<object name>.<16 hex digits>"."""
    key = "\x00".join(
        (ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid, reason, event_type)
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:_SUFFIX_LEN]
    prefix = ref.name[: _MAX_NAME - _SUFFIX_LEN - 1].rstrip(".-")
    return f"{prefix}.{digest}"


def timestamp(now: datetime | None = None) -> str:
    """An RFC 3339 timestamp in UTC with second precision, as core/v1 Event times are."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_event(
    ref: ObjectRef,
    *,
    reason: str,
    message: str,
    event_type: EventType,
    action: str,
    component: str,
    instance: str,
    now: datetime | None = None,
) -> JsonObject:
    """The body of a first occurrence (count 1)."""
    when = timestamp(now)
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(ref, reason, event_type), "namespace": ref.event_namespace},
        "involvedObject": ref.as_involved_object(),
        "reason": reason,
        "message": message,
        "type": event_type,
        "count": 1,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
    }
    if action:
        body["action"] = action
    return body


def repeat_patch(
    existing: Mapping[str, object], *, message: str, action: str, now: datetime | None = None
) -> JsonObject:
    """A merge patch recording one more occurrence on ``existing`` (guarded by its resourceVersion)."""
    count = existing.get("count")
    previous = count if isinstance(count, int) and count > 0 else 1
    metadata = existing.get("metadata")
    meta = metadata if isinstance(metadata, Mapping) else {}
    patch: JsonObject = {
        "count": previous + 1,
        "lastTimestamp": timestamp(now),
        "message": message,
    }
    if action:
        patch["action"] = action
    resource_version = meta.get("resourceVersion")
    if isinstance(resource_version, str) and resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch
