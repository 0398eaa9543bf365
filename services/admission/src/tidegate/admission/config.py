"""Settings of the admission service (env ``TIDEGATE_…`` and the optional YAML file).

Only what differs from every other service lives here; the common settings (cluster, NATS,
HTTP port, log level) come from :class:`tidegate.runtime.ServiceSettings`. The policy knobs are
handed to :class:`tidegate.policy.admission.AdmissionSettings` unchanged.
"""

from dataclasses import dataclass

from tidegate.policy.admission import AdmissionSettings
from tidegate.policy.reservation import (
    DEFAULT_MAX_RESERVATIONS_PER_CLUSTER,
    DEFAULT_OVERRUN_SECONDS,
    ReservationSettings,
)
from tidegate.runtime import ServiceSettings, SettingsError


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    """Admission's settings; see docs/admission.md for the table."""

    default_queue: str | None = None
    """Queue of workloads that name none (None: they wait with QueueNotFound)."""
    default_topology: str = "default"
    """Topology used when neither queue nor workload names one and there are several."""
    lease_ttl_seconds: float = 10.0
    """Leader lease TTL: a standby takes over at most this long after the leader stops."""
    lease_holder: str | None = None
    """This instance's id on the lease (default: host, pid and a random suffix)."""
    cycle_coalesce_seconds: float = 0.002
    """After an event, wait this long for more before running a cycle (bursts coalesce)."""
    cycle_tick_seconds: float = 1.0
    """Run a cycle at least this often, so timeouts (preemption, nomination) take effect."""
    cycle_budget_seconds: float | None = None
    """Longest a cycle tries workloads before it commits what it decided and yields; the
    next cycle goes on at once. Keeps the lease renewed under a long backlog; at most a
    third of ``lease_ttl_seconds`` (None: a quarter of it)."""
    preemption_timeout_seconds: float = 30.0
    """How long a preemption request is awaited before it is asked again."""
    nomination_timeout_seconds: float = 120.0
    """How long capacity freed by preemption stays reserved for its preemptor."""
    overlay_grace_seconds: float = 30.0
    """How long an applied decision may wait for its node's capacity report (see docs)."""
    decisions_kept_after_delete_seconds: float = 3600.0
    """How long the decisions of a deleted workload stay on the decision stream before the
    leader purges them (:mod:`tidegate.admission.retention`)."""
    decisions_sweep_seconds: float = 60.0
    """How often the leader looks for decisions to purge."""
    reservations_max_per_cluster: int = DEFAULT_MAX_RESERVATIONS_PER_CLUSTER
    """Most reservations in force in the cluster at once; 0 turns reservations off
    (docs/reservations.md)."""
    reservation_overrun_seconds: float = DEFAULT_OVERRUN_SECONDS
    """How far past now a gang that outlived its declared runtime is expected to end."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = {
            "lease_ttl_seconds": self.lease_ttl_seconds,
            "cycle_tick_seconds": self.cycle_tick_seconds,
            "preemption_timeout_seconds": self.preemption_timeout_seconds,
            "nomination_timeout_seconds": self.nomination_timeout_seconds,
            "overlay_grace_seconds": self.overlay_grace_seconds,
            "decisions_sweep_seconds": self.decisions_sweep_seconds,
            "reservation_overrun_seconds": self.reservation_overrun_seconds,
        }
        for name, value in positive.items():
            if value <= 0:
                raise SettingsError(name, f"{value} must be positive")
        if self.lease_ttl_seconds < 1:
            raise SettingsError(
                "lease_ttl_seconds", "must be at least 1 (JetStream TTLs are whole seconds)"
            )
        if self.cycle_budget_seconds is not None and not (
            0 < self.cycle_budget_seconds * 3 <= self.lease_ttl_seconds
        ):
            raise SettingsError(
                "cycle_budget_seconds",
                f"{self.cycle_budget_seconds} must be positive and at most a third of "
                f"lease_ttl_seconds {self.lease_ttl_seconds} (a cycle must not outlast the "
                "lease)",
            )
        if self.decisions_kept_after_delete_seconds < 0:
            raise SettingsError("decisions_kept_after_delete_seconds", "must not be negative")
        if self.reservations_max_per_cluster < 0:
            raise SettingsError("reservations_max_per_cluster", "must not be negative")
        if self.cycle_coalesce_seconds < 0:
            raise SettingsError("cycle_coalesce_seconds", "must not be negative")
        if self.default_queue is not None and not self.default_queue.strip():
            raise SettingsError("default_queue", "must not be blank")

    @property
    def cycle_budget(self) -> float:
        """``cycle_budget_seconds``, or a quarter of the lease's TTL when unset."""
        if self.cycle_budget_seconds is not None:
            return self.cycle_budget_seconds
        return self.lease_ttl_seconds / 4

    def policy(self) -> AdmissionSettings:
        """The policy part of these settings."""
        return AdmissionSettings(
            default_queue=self.default_queue,
            default_topology=self.default_topology,
            preemption_timeout_seconds=self.preemption_timeout_seconds,
            nomination_timeout_seconds=self.nomination_timeout_seconds,
            overlay_grace_seconds=self.overlay_grace_seconds,
            reservations=ReservationSettings(
                overrun_seconds=self.reservation_overrun_seconds,
                max_per_cluster=self.reservations_max_per_cluster,
            ),
        )
