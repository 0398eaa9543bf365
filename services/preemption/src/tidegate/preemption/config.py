"""Settings of the preemption service (env ``TIDEGATE_…`` and the optional YAML file).

Beside the common settings (cluster, NATS, HTTP port, log level; see
:class:`tidegate.runtime.ServiceSettings`), preemption needs the Kubernetes connection (it is
one of the two writers), how fast and how persistently it evicts, how long a nomination is
kept, and the limits of the victim search. Validated once at start; a bad value stops the
service with a message naming the setting. The table is in docs/preemption-service.md.
"""

from dataclasses import dataclass
from pathlib import Path

from tidegate.kube import KubeConfigError, KubeSettings
from tidegate.policy.preempt_search import DEFAULT_ORACLE_BUDGET, DEFAULT_STEP_BUDGET
from tidegate.policy.victims import VictimSettings
from tidegate.preemption.evict import EvictionSettings
from tidegate.runtime import ServiceSettings, SettingsError


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    """Everything the preemption service is configured with."""

    kubeconfig: Path | None = None
    """Kubeconfig file; absent means in-cluster credentials in a pod, else $KUBECONFIG or
    ~/.kube/config."""
    kube_context: str | None = None
    """Kubeconfig context; absent means the file's current-context."""
    kube_qps: float = 50.0
    """Sustained request rate to the API server (0 disables the client-side limiter)."""
    kube_burst: int = 100
    """Requests allowed at once above the sustained rate."""
    kube_max_attempts: int = 6
    """Attempts of one API request before its error is reported (the first one included)."""
    evictions_per_second: float = 20.0
    """Evictions per second, sustained (0: unlimited); a gang larger than ``eviction_burst``
    is evicted at this pace."""
    eviction_burst: int = 50
    """Evictions allowed at once above the sustained rate."""
    eviction_concurrency: int = 8
    """Eviction requests in flight at once."""
    eviction_grace_seconds: int | None = None
    """Termination grace period asked for evicted pods; absent: each pod's own."""
    eviction_retry_seconds: float = 30.0
    """How long transient eviction failures of one pod are retried before the whole
    preemption is retried later (it is never abandoned half done)."""
    nomination_timeout_seconds: float = 120.0
    """How long room freed for a preemptor is kept out of other preemptors' searches (use
    admission's setting of the same name)."""
    reconcile_interval_seconds: float = 5.0
    """How often unfinished preemptions are resumed and expired nominations dropped."""
    default_topology: str = "default"
    """Topology of workloads whose queue and spec name none, when there are several (use
    admission's setting of the same name)."""
    overlay_grace_seconds: float = 30.0
    """How long an admission the capacity view has applied may still be counted as pending."""
    lease_ttl_seconds: float = 10.0
    """Leader lease TTL: one instance preempts at a time; a standby takes over after this."""
    ack_wait_seconds: float = 120.0
    """A request whose preemption is still running after this is redelivered (it is
    reported in progress while evicting, so this only matters after a crash)."""
    search_step_budget: int = DEFAULT_STEP_BUDGET
    """Branch-and-bound steps of the victim search before it settles (still minimal)."""
    search_oracle_budget: int = DEFAULT_ORACLE_BUDGET
    """Placement calls of the general victim search (gangs of several podsets, slices)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = {
            "evictions_per_second": self.evictions_per_second >= 0,
            "eviction_burst": self.eviction_burst >= 1,
            "eviction_concurrency": self.eviction_concurrency >= 1,
            "eviction_retry_seconds": self.eviction_retry_seconds > 0,
            "nomination_timeout_seconds": self.nomination_timeout_seconds > 0,
            "reconcile_interval_seconds": self.reconcile_interval_seconds > 0,
            "overlay_grace_seconds": self.overlay_grace_seconds > 0,
            "ack_wait_seconds": self.ack_wait_seconds > 0,
            "search_step_budget": self.search_step_budget >= 1,
            "search_oracle_budget": self.search_oracle_budget >= 1,
        }
        for name, ok in positive.items():
            if not ok:
                value = getattr(self, name)
                raise SettingsError(name, f"{value} is out of range (see docs)")
        if self.eviction_grace_seconds is not None and self.eviction_grace_seconds < 0:
            raise SettingsError("eviction_grace_seconds", "must not be negative")
        if self.lease_ttl_seconds < 1:
            raise SettingsError(
                "lease_ttl_seconds", "must be at least 1 (JetStream TTLs are whole seconds)"
            )
        if not self.default_topology.strip():
            raise SettingsError("default_topology", "must not be blank")
        try:
            self.kube_settings()
        except KubeConfigError as exc:
            field, _, problem = str(exc).partition(": ")
            raise SettingsError(f"kube_{field}", problem or str(exc)) from None

    def kube_settings(self) -> KubeSettings:
        """How the service connects to the Kubernetes API."""
        return KubeSettings(
            kubeconfig=self.kubeconfig,
            context=self.kube_context,
            qps=self.kube_qps,
            burst=self.kube_burst,
            max_attempts=self.kube_max_attempts,
            user_agent="tidegate-preemption",
        )

    def eviction(self) -> EvictionSettings:
        """How victims are evicted."""
        return EvictionSettings(
            rate_per_second=self.evictions_per_second,
            burst=self.eviction_burst,
            concurrency=self.eviction_concurrency,
            grace_seconds=self.eviction_grace_seconds,
            retry_seconds=self.eviction_retry_seconds,
        )

    def victims(self) -> VictimSettings:
        """Limits of the victim search."""
        return VictimSettings(
            step_budget=self.search_step_budget, oracle_budget=self.search_oracle_budget
        )
