"""The ungater's settings: the common service settings plus its own, validated once at start.

Besides what every service has (:class:`tidegate.runtime.ServiceSettings`: cluster id, NATS,
HTTP port), the ungater needs the Kubernetes connection (named like the watcher's:
``TIDEGATE_KUBECONFIG``, ``TIDEGATE_KUBE_CONTEXT``, ``TIDEGATE_KUBE_QPS``,
``TIDEGATE_KUBE_BURST``), how it batches and limits its patches, and its webhook. Loaded by
:func:`tidegate.runtime.load_settings` from ``TIDEGATE_<FIELD>`` or the YAML file named by
``TIDEGATE_CONFIG``; a bad value stops the ungater at start naming it. Connects to nothing.

The webhook is served when ``webhook`` is ``on``, or ``auto`` (the default) and the
certificate files are present in ``webhook_cert_dir``: the Helm chart mounts them only when
the webhook is enabled, so an ungater without one simply runs without the webhook.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from tidegate.kube import KubeConfigError, KubeSettings
from tidegate.kube.read.gate import FailurePolicy, GateRules
from tidegate.runtime import ServiceSettings, SettingsError

CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"

WebhookMode = Literal["auto", "on", "off"]
"""Serve the webhook: when its certificate is mounted (auto), always (on), never (off)."""


@dataclass(frozen=True, kw_only=True)
class UngaterSettings(ServiceSettings):
    """Everything the ungater is configured with (docs/ungater.md has the table)."""

    kubeconfig: Path | None = None
    """Kubeconfig file; absent means in-cluster credentials when running in a pod, else
    $KUBECONFIG or ~/.kube/config."""
    kube_context: str | None = None
    """Kubeconfig context; absent means the file's current-context."""
    kube_qps: float = 200.0
    """Sustained request rate to the API server (0 disables the client-side limiter); one
    PATCH per released pod, so this bounds the release rate (bench/realk8s.py: 50 doubled a
    1,000-pod Job's time to Running, 200 added 12%)."""
    kube_burst: int = 400
    """Requests allowed at once above the sustained rate."""
    batch_window_seconds: float = 1.0
    """After a change, wait this long for more before releasing (pods created together are
    released in one round)."""
    max_concurrent_patches: int = 32
    """Kubernetes writes (releases, status, Events, evictions) in flight at once, at most; one
    workload's at most half of them (16 by default, what one gang had before the share)."""
    expectation_timeout_seconds: float = 60.0
    """A release not seen on the bus within this long is forgotten, and the pod is judged by
    what the bus shows (a lost watch event must not hold a slot for ever)."""
    replace_retry_seconds: float = 30.0
    """Ask admission again for replacement slots when it has not answered within this long."""
    unschedulable_seconds: float = 120.0
    """A released pod the scheduler has found no room for this long (``PodScheduled=False``,
    reason ``Unschedulable``) has its slot placed again elsewhere (docs/ungater.md, "Pods the
    scheduler cannot place"); 0 never does."""
    lease_ttl_seconds: float = 10.0
    """TTL of the ``ungater`` lease: one replica releases, the others stand by and take over
    within this long after it stops renewing (at once after a graceful stop)."""
    queue_status_interval_seconds: float = 1.0
    """Write a Queue's status at most once per this long (changes in between are coalesced)."""
    webhook: WebhookMode = "auto"
    """Serve the mutating webhook: auto (when its certificate is mounted), on, off."""
    webhook_port: int = 8443
    """Port of the webhook (HTTPS, path /mutate-pods)."""
    webhook_cert_dir: Path = Path("/etc/tidegate/webhook-tls")
    """Directory holding tls.crt and tls.key (the chart mounts the Secret here); re-read
    when the files change."""
    webhook_cert_reload_seconds: float = 10.0
    """How often the certificate files are checked for changes."""
    webhook_failure_policy: FailurePolicy = "Ignore"
    """For a pod the webhook cannot read: Ignore (admit it ungated, with a warning) or Fail
    (refuse it). Set it like the chart's webhook.failurePolicy."""
    webhook_gate_all: bool = True
    """Gate every pod the API server sends (the chart's selectors chose them); false: only
    pods naming a queue (label or annotation)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = {
            "batch_window_seconds": self.batch_window_seconds >= 0,
            "unschedulable_seconds": self.unschedulable_seconds >= 0,
            "expectation_timeout_seconds": self.expectation_timeout_seconds > 0,
            "replace_retry_seconds": self.replace_retry_seconds > 0,
            "queue_status_interval_seconds": self.queue_status_interval_seconds > 0,
            "webhook_cert_reload_seconds": self.webhook_cert_reload_seconds > 0,
        }
        for name, ok in positive.items():
            if not ok:
                raise SettingsError(name, f"{getattr(self, name)} must be positive")
        if self.lease_ttl_seconds < 1:
            raise SettingsError("lease_ttl_seconds", f"{self.lease_ttl_seconds} must be at least 1")
        if self.max_concurrent_patches < 1:
            raise SettingsError("max_concurrent_patches", "must be at least 1")
        if not 0 <= self.webhook_port <= 65535:
            raise SettingsError("webhook_port", f"{self.webhook_port} is not a port (0-65535)")
        if self.webhook == "on":
            for name in (CERT_FILE, KEY_FILE):
                if not (self.webhook_cert_dir / name).is_file():
                    raise SettingsError(
                        "webhook_cert_dir",
                        f"{self.webhook_cert_dir / name} does not exist (webhook is on)",
                    )
        try:
            self.kube_settings()
        except KubeConfigError as exc:
            field, _, problem = str(exc).partition(": ")
            raise SettingsError(f"kube_{field}", problem or str(exc)) from None

    @property
    def serves_webhook(self) -> bool:
        """Whether the webhook is served (module docstring)."""
        if self.webhook == "off":
            return False
        if self.webhook == "on":
            return True
        return all((self.webhook_cert_dir / name).is_file() for name in (CERT_FILE, KEY_FILE))

    @property
    def gate_rules(self) -> GateRules:
        """How the webhook decides."""
        return GateRules(gate_all=self.webhook_gate_all, failure_policy=self.webhook_failure_policy)

    def kube_settings(self) -> KubeSettings:
        """How the ungater connects to the Kubernetes API."""
        return KubeSettings(
            kubeconfig=self.kubeconfig,
            context=self.kube_context,
            qps=self.kube_qps,
            burst=self.kube_burst,
            user_agent="tidegate-ungater",
        )
