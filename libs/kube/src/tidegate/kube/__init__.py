"""Kubernetes adapter: the only importer of kubernetes_asyncio.

Everything tidegate reads from or writes to a Kubernetes API server goes through here:
:func:`connect` and :class:`KubeClient` for requests (rate-limited, retried, errors mapped to
:class:`KubeError` subclasses), :class:`Informer` for list-then-watch streams. Objects are plain
JSON dicts as the server sends them; turning them into tidegate's model is the watcher's job,
not this package's.
"""

from tidegate.kube.client import CONFLICT_ATTEMPTS, KubeClient, ObjectList, PatchType, connect
from tidegate.kube.errors import (
    TRANSIENT,
    AlreadyExists,
    BadRequest,
    Cause,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeConfigError,
    KubeError,
    MethodNotAllowed,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
    Unsupported,
)
from tidegate.kube.eventrecord import EventType, ObjectRef
from tidegate.kube.informer import (
    Informer,
    InformerItem,
    InformerState,
    KubeEvent,
    ObjectKey,
    Synced,
    object_key,
)
from tidegate.kube.resources import (
    CRDS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    ResourceType,
    resource_for_kind,
)
from tidegate.kube.settings import KubeSettings
from tidegate.kube.transport import JsonObject

__all__ = [
    "CONFLICT_ATTEMPTS",
    "CRDS",
    "DEPLOYMENTS",
    "EVENTS",
    "JOBS",
    "JOBSETS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REPLICASETS",
    "TRANSIENT",
    "AlreadyExists",
    "BadRequest",
    "Cause",
    "Conflict",
    "EventType",
    "Forbidden",
    "Gone",
    "Informer",
    "InformerItem",
    "InformerState",
    "Invalid",
    "JsonObject",
    "KubeClient",
    "KubeConfigError",
    "KubeError",
    "KubeEvent",
    "KubeSettings",
    "MethodNotAllowed",
    "NotFound",
    "ObjectKey",
    "ObjectList",
    "ObjectRef",
    "PatchType",
    "ResourceType",
    "ServerError",
    "Synced",
    "TooManyRequests",
    "Unauthorized",
    "UnexpectedResponse",
    "Unreachable",
    "Unsupported",
    "connect",
    "object_key",
    "resource_for_kind",
]
