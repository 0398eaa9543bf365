"""The watcher's settings: the common service settings plus its own, validated once at start.

Besides what every service has (cluster id, NATS, HTTP port; see
:class:`tidegate.runtime.ServiceSettings`), the watcher needs the Kubernetes connection, the
owner-kind → service-type map (Volcano's ``podOwnerReferenceToServiceType``), the API versions
of Kueue's Topology and of the foreign queue kinds it reads, how often to look again for a resource type whose CRD is not installed, and
how many Kubernetes events to fold into one round of publications.

Loaded by :func:`tidegate.runtime.load_settings`: each field from ``TIDEGATE_<FIELD>`` or the
YAML file named by ``TIDEGATE_CONFIG`` (e.g. ``TIDEGATE_OWNER_KIND_SERVICE_TYPES=
"Deployment=inference,Job=training"``); a bad value stops the watcher at start with a message
naming it. This module connects to nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidegate.kube import KubeConfigError, KubeSettings
from tidegate.model.events import ServiceType
from tidegate.policy.service_type import ServiceTypeError, validate_owner_kind_map
from tidegate.runtime import ServiceSettings, SettingsError

DEFAULT_SERVICE_TYPES: Final = (
    "ReplicaSet=inference",
    "Deployment=inference",
    "Job=training",
    "JobSet=training",
)
"""Volcano's default map, plus JobSet → training (a JobSet is a set of training Jobs)."""


def parse_service_type_map(
    pairs: tuple[str, ...], *, setting: str = "owner_kind_service_types"
) -> dict[str, ServiceType]:
    """Parse ("Kind=type", …) into a validated map; :class:`SettingsError` names ``setting``."""
    raw: dict[str, str] = {}
    for pair in pairs:
        kind, sep, value = pair.partition("=")
        if not sep:
            raise SettingsError(setting, f"{pair!r} is not Kind=service-type")
        raw[kind.strip()] = value.strip()
    try:
        return validate_owner_kind_map(raw, field=setting)
    except ServiceTypeError as exc:
        raise SettingsError(setting, str(exc).removeprefix(f"{setting}")) from exc


@dataclass(frozen=True, kw_only=True)
class WatcherSettings(ServiceSettings):
    """Everything the watcher is configured with."""

    owner_kind_service_types: tuple[str, ...] = DEFAULT_SERVICE_TYPES
    """Service type of a workload without ``volcano.sh/service.type``, by its owner's kind, as
    ``Kind=inference|training|unknown`` pairs."""
    kueue_topology_version: str = "v1beta1"
    """API version of kueue.x-k8s.io Topology objects to read."""
    kueue_queue_version: str = "v1beta1"
    """API version of kueue.x-k8s.io ClusterQueue, LocalQueue and ResourceFlavor objects to read."""
    kueue_cohort_version: str = "v1beta1"
    """API version of kueue.x-k8s.io Cohort objects to read."""
    volcano_queue_version: str = "v1beta1"
    """API version of scheduling.volcano.sh Queue objects to read."""
    kai_queue_version: str = "v2"
    """API version of scheduling.run.ai Queue objects (KAI-Scheduler) to read."""
    absent_retry_seconds: float = 30.0
    """How often to look again for a resource type that is not served (CRD not installed)
    or that failed with a permanent error (e.g. RBAC)."""
    batch_max_events: int = 2000
    """Kubernetes events folded into one round of publications at most."""
    kubeconfig: Path | None = None
    """Kubeconfig file; absent means in-cluster credentials when running in a pod, else
    $KUBECONFIG or ~/.kube/config."""
    kube_context: str | None = None
    """Kubeconfig context; absent means the file's current-context."""
    kube_qps: float = 50.0
    """Sustained request rate to the API server (0 disables the client-side limiter)."""
    kube_burst: int = 100
    """Requests allowed at once above the sustained rate."""

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_service_type_map(self.owner_kind_service_types)
        for name in (
            "kueue_topology_version",
            "kueue_queue_version",
            "kueue_cohort_version",
            "volcano_queue_version",
            "kai_queue_version",
        ):
            if not str(getattr(self, name)).strip():
                raise SettingsError(name, "must not be empty")
        if self.absent_retry_seconds <= 0:
            raise SettingsError("absent_retry_seconds", "must be positive")
        if self.batch_max_events < 1:
            raise SettingsError("batch_max_events", "must be at least 1")
        try:
            self.kube_settings()
        except KubeConfigError as exc:
            field, _, problem = str(exc).partition(": ")
            raise SettingsError(f"kube_{field}", problem or str(exc)) from None

    @property
    def service_type_map(self) -> Mapping[str, ServiceType]:
        """``owner_kind_service_types`` as a map."""
        return parse_service_type_map(self.owner_kind_service_types)

    def kube_settings(self) -> KubeSettings:
        """How the watcher connects to the Kubernetes API."""
        return KubeSettings(
            kubeconfig=self.kubeconfig,
            context=self.kube_context,
            qps=self.kube_qps,
            burst=self.kube_burst,
            user_agent="tidegate-watcher",
        )
