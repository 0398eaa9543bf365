"""Settings of a simulated cluster, one frozen object validated once at start.

Each part of the simulated control plane can be switched off so that tests can emulate a bare
API server (no scheduler, kubelet or controllers, like a kube-apiserver without
kube-controller-manager). Durations of the simulation are scaled by ``time_scale``: wall-clock
seconds = simulated seconds × ``time_scale`` (1.0 is real time, 0.01 runs 100× faster).
"""

from dataclasses import dataclass, field
from pathlib import Path


class SettingsError(ValueError):
    """A setting with an unusable value; the message names the setting."""


@dataclass(frozen=True, kw_only=True)
class SimSettings:
    """How to run a simulated cluster (see the module docstring and docs/simulator.md)."""

    nodes: str | Path | None = "1x2x4x8gpu"
    """Topology description ("4x8x16x8gpu") or a YAML/CSV file of nodes; None for no nodes."""
    host: str = "127.0.0.1"
    port: int = 0
    """TCP port; 0 picks a free one."""
    scheduler: bool = True
    kubelet: bool = True
    controllers: bool = True
    """Job, Deployment, ReplicaSet, garbage-collection, namespace and node-lifecycle controllers."""
    admission_gate: bool | None = None
    """Emulate tidegate's webhook (gate managed pods); None means "when controllers run".
    Only while no MutatingWebhookConfiguration is stored: then the real webhooks are called."""
    webhook_services: dict[str, str] = field(default_factory=dict)
    """Base URL (``https://127.0.0.1:8443``) of each ``<namespace>/<name>`` Service a
    webhook's ``clientConfig.service`` names (the simulator has no Services or DNS)."""
    time_scale: float = 1.0
    gpu_product: str = "NVIDIA-H200"
    allocatable: dict[str, str] = field(default_factory=dict)
    """Overrides of every generated node's allocatable (e.g. {"cpu": "64"})."""
    install_crds: bool = True
    """Create the tidegate.io and kueue.x-k8s.io CRDs at start."""
    crd_files: tuple[Path, ...] = ()
    """More CRD YAML files to create at start (e.g. deploy/crds/*.yaml)."""
    topology_name: str | None = "default"
    """Name of the Topology object created for the node levels; None for none."""
    history_window: int = 10_000
    """Watch events retained per resource; resuming from older is 410 Gone."""
    bookmark_interval_seconds: float = 5.0
    max_watch_seconds: float = 1800.0
    scheduler_interval_seconds: float = 0.05
    """How long the scheduler batches changes before a scheduling pass."""
    rbac: bool = False
    """Enforce RBAC: authenticate bearer tokens and authorise every request against the stored
    Roles and ClusterRoles (off: any token may do anything)."""

    def validate(self) -> None:
        """Fail fast with a message naming the bad setting."""
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port: {self.port} is not a TCP port")
        if self.time_scale <= 0:
            raise SettingsError(f"time_scale: must be positive, got {self.time_scale}")
        if self.history_window < 1:
            raise SettingsError(f"history_window: must be at least 1, got {self.history_window}")
        if self.bookmark_interval_seconds <= 0:
            raise SettingsError(
                f"bookmark_interval_seconds: must be positive, got {self.bookmark_interval_seconds}"
            )
        if self.max_watch_seconds <= 0:
            raise SettingsError(
                f"max_watch_seconds: must be positive, got {self.max_watch_seconds}"
            )
        for service, url in self.webhook_services.items():
            if service.count("/") != 1 or not url.startswith(("https://", "http://")):
                raise SettingsError(
                    f"webhook_services: {service!r}: {url!r} is not <namespace>/<name>: <URL>"
                )
        if self.scheduler_interval_seconds < 0:
            raise SettingsError("scheduler_interval_seconds: must not be negative")

    @property
    def gates_managed_pods(self) -> bool:
        """Whether new managed pods get the tidegate admission gate."""
        return self.controllers if self.admission_gate is None else self.admission_gate
