"""The watcher's settings: one frozen object, validated once at start.

Besides the settings every service has (cluster id, NATS, Kubernetes connection), the watcher
needs the owner-kind → service-type map (Volcano's ``podOwnerReferenceToServiceType``), the
API version of Kueue's Topology, how often to retry a resource type whose CRD is not installed,
and how many Kubernetes events to fold into one round of publications.

Each field is read from ``TIDEGATE_<FIELD>`` (e.g. ``TIDEGATE_OWNER_KIND_SERVICE_TYPES=
"Deployment=inference,Job=training"``); a bad value fails fast naming the variable. This module
reads the environment only in :func:`load`; it connects to nothing.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidegate.model import subjects
from tidegate.model.events import ServiceType
from tidegate.policy.service_type import ServiceTypeError, validate_owner_kind_map

DEFAULT_SERVICE_TYPES: Final[Mapping[str, ServiceType]] = {
    "ReplicaSet": "inference",
    "Deployment": "inference",
    "Job": "training",
    "JobSet": "training",
}
"""Volcano's default map, plus JobSet → training (a JobSet is a set of training Jobs)."""


class SettingsError(ValueError):
    """A setting with a bad value; the message names the variable."""


@dataclass(frozen=True, kw_only=True)
class WatcherSettings:
    """Everything the watcher is configured with."""

    cluster: str = "default"
    """Cluster id: the ``<cluster>`` of every subject."""
    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server URL(s), comma separated."""
    owner_kind_service_types: Mapping[str, ServiceType] = field(
        default_factory=lambda: dict(DEFAULT_SERVICE_TYPES)
    )
    """Service type of a workload without ``volcano.sh/service.type``, by its owner's kind."""
    kueue_topology_version: str = "v1beta1"
    """API version of kueue.x-k8s.io Topology objects to read."""
    absent_retry_seconds: float = 30.0
    """How often to look again for a resource type that is not served (CRD not installed)
    or that failed with a permanent error (e.g. RBAC)."""
    batch_max_events: int = 2000
    """Kubernetes events folded into one round of publications at most."""
    http_port: int = 8080
    """Port of /healthz, /readyz and /metrics (0 picks a free one)."""

    def __post_init__(self) -> None:
        try:
            subjects.validate_cluster(self.cluster)
        except ValueError as exc:
            raise SettingsError(f"TIDEGATE_CLUSTER: {exc}") from exc
        try:
            validate_owner_kind_map(
                self.owner_kind_service_types, field="TIDEGATE_OWNER_KIND_SERVICE_TYPES"
            )
        except ServiceTypeError as exc:
            raise SettingsError(str(exc)) from exc
        if self.absent_retry_seconds <= 0:
            raise SettingsError("TIDEGATE_ABSENT_RETRY_SECONDS: must be positive")
        if self.batch_max_events < 1:
            raise SettingsError("TIDEGATE_BATCH_MAX_EVENTS: must be at least 1")
        if not 0 <= self.http_port <= 65535:
            raise SettingsError(f"TIDEGATE_HTTP_PORT: {self.http_port} is not a TCP port")


def parse_service_type_map(text: str) -> dict[str, ServiceType]:
    """Parse "Kind=type,Kind=type" into a validated map; SettingsError names the variable."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        kind, sep, value = part.partition("=")
        if not sep:
            raise SettingsError(
                f"TIDEGATE_OWNER_KIND_SERVICE_TYPES: {part.strip()!r} is not Kind=service-type"
            )
        pairs[kind.strip()] = value.strip()
    try:
        return validate_owner_kind_map(pairs, field="TIDEGATE_OWNER_KIND_SERVICE_TYPES")
    except ServiceTypeError as exc:
        raise SettingsError(str(exc)) from exc


def load(environ: Mapping[str, str] | None = None) -> WatcherSettings:
    """Settings from ``TIDEGATE_*`` environment variables; unset ones keep their defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    if env.get("TIDEGATE_CLUSTER"):
        values["cluster"] = env["TIDEGATE_CLUSTER"]
    if env.get("TIDEGATE_NATS_URL"):
        values["nats_url"] = env["TIDEGATE_NATS_URL"]
    if env.get("TIDEGATE_OWNER_KIND_SERVICE_TYPES"):
        values["owner_kind_service_types"] = parse_service_type_map(
            env["TIDEGATE_OWNER_KIND_SERVICE_TYPES"]
        )
    if env.get("TIDEGATE_KUEUE_TOPOLOGY_VERSION"):
        values["kueue_topology_version"] = env["TIDEGATE_KUEUE_TOPOLOGY_VERSION"]
    for name, kind in (
        ("absent_retry_seconds", float),
        ("batch_max_events", int),
        ("http_port", int),
    ):
        variable = f"TIDEGATE_{name.upper()}"
        raw = env.get(variable)
        if raw:
            try:
                values[name] = kind(raw)
            except ValueError:
                raise SettingsError(f"{variable}: {raw!r} is not a number") from None
    return WatcherSettings(**values)  # type: ignore[arg-type]
