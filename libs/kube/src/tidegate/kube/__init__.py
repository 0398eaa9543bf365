"""Kubernetes adapter: the only importer of kubernetes_asyncio.

Everything tidegate reads from or writes to a Kubernetes API server goes through here:
:func:`connect` and :class:`KubeClient` for requests (rate-limited, retried, errors mapped to
:class:`KubeError` subclasses), :class:`Informer` for list-then-watch streams. Objects travel
as the plain JSON dicts the server sends; :mod:`tidegate.kube.read` is the one typed layer that
reads them (msgspec views, label and annotation rules, the cluster index), as pure code.
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
    HeldBack,
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
    PDBS,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    REPLICASETS,
    TOPOLOGIES,
    ResourceType,
    resource_for_kind,
)
from tidegate.kube.settings import KubeSettings
from tidegate.kube.transport import JsonObject, WriteGuard
from tidegate.kube.ungate import KnownPod

__all__ = [
    "CONFLICT_ATTEMPTS",
    "CRDS",
    "DEPLOYMENTS",
    "EVENTS",
    "JOBS",
    "JOBSETS",
    "NAMESPACES",
    "NODES",
    "PDBS",
    "PODGROUPS",
    "PODS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "REPLICASETS",
    "TOPOLOGIES",
    "TRANSIENT",
    "AlreadyExists",
    "BadRequest",
    "Cause",
    "Conflict",
    "EventType",
    "Forbidden",
    "Gone",
    "HeldBack",
    "Informer",
    "InformerItem",
    "InformerState",
    "Invalid",
    "JsonObject",
    "KnownPod",
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
    "WriteGuard",
    "connect",
    "object_key",
    "resource_for_kind",
]
