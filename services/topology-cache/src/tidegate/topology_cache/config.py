"""Settings of the topology-cache (env ``TIDEGATE_…`` and the optional YAML file).

Only what differs from every other service lives here; the common settings (cluster, NATS,
HTTP port, log level) come from :class:`tidegate.runtime.ServiceSettings`. Loaded once at
start by :func:`tidegate.runtime.load_settings`; a bad value stops the service naming it.
"""

from dataclasses import dataclass

from tidegate.runtime import ServiceSettings, SettingsError


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    """The topology-cache's settings; see docs/topology-cache.md for the table."""

    coalesce_seconds: float = 0.005
    """After a change, wait this long for more before publishing (bursts become one round)."""
    publish_retry_seconds: float = 1.0
    """How long to wait before publishing again records JetStream did not store."""
    max_in_flight: int = 1024
    """Capacity records sent and not yet acknowledged, at most."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.coalesce_seconds < 0:
            raise SettingsError("coalesce_seconds", "must not be negative")
        if self.publish_retry_seconds <= 0:
            raise SettingsError(
                "publish_retry_seconds", f"{self.publish_retry_seconds} must be positive"
            )
        if self.max_in_flight < 1:
            raise SettingsError("max_in_flight", f"{self.max_in_flight} must be at least 1")
