"""How tidegate connects to a Kubernetes API server: one frozen settings object.

Every knob of the adapter (where the credentials come from, how fast it may talk, how long it
waits, how it retries, how it watches) lives here so it is validated once at start and passed
down explicitly, never read from globals. This module does no I/O except reading environment
variables in :meth:`KubeSettings.from_env`; it does not load the kubeconfig (``connect`` does).
"""

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from tidegate.kube.errors import KubeConfigError

ConfigSource = Literal["auto", "kubeconfig", "in-cluster"]
"""Where credentials come from. "auto": in-cluster when running in a pod, else the kubeconfig."""

ENV_PREFIX = "TIDEGATE_KUBE_"


@dataclass(frozen=True, kw_only=True)
class KubeSettings:
    """Connection, rate limit, timeout, retry and watch settings for :func:`tidegate.kube.connect`.

    Field names carry their unit. Validation happens on construction and raises
    :class:`~tidegate.kube.errors.KubeConfigError` naming the offending field.
    """

    source: ConfigSource = "auto"
    """Where credentials come from (see :data:`ConfigSource`)."""
    kubeconfig: Path | None = None
    """Kubeconfig file; None means $KUBECONFIG or ~/.kube/config."""
    context: str | None = None
    """Kubeconfig context; None means the file's current-context."""
    qps: float = 50.0
    """Sustained client-side request rate (requests per second); 0 disables the limiter."""
    burst: int = 100
    """Requests allowed at once above the sustained rate (the token bucket's size)."""
    connect_timeout_seconds: float = 10.0
    """Time to open a TCP/TLS connection to the API server."""
    request_timeout_seconds: float = 60.0
    """Total time for one non-watch request, including reading the body."""
    max_attempts: int = 6
    """Attempts for one retryable request (the first one included)."""
    backoff_initial_seconds: float = 0.2
    """First retry delay; it doubles per attempt (with jitter) up to backoff_max_seconds."""
    backoff_max_seconds: float = 10.0
    """Upper bound of one retry delay, Retry-After included."""
    watch_timeout_seconds: int = 300
    """Server-side timeout of one watch request; the informer reconnects when it ends."""
    list_page_size: int = 500
    """Objects per page when listing (limit/continue); 0 lists in one response."""
    user_agent: str = "tidegate"
    """User-Agent header sent with every request."""
    trust_env: bool = False
    """Whether HTTP(S)_PROXY, NO_PROXY and ~/.netrc from the environment apply to the API
    server's requests (aiohttp's ``trust_env``). Off: with it aiohttp looks ~/.netrc up in a
    worker thread for every request (about a tenth of the services' CPU in
    ``bench/kueue_scenario.py``); a kubeconfig's ``proxy-url`` works either way."""

    def __post_init__(self) -> None:
        if self.source not in ("auto", "kubeconfig", "in-cluster"):
            raise KubeConfigError(
                f"source: must be auto, kubeconfig or in-cluster, got {self.source!r}"
            )
        _require(self.qps >= 0 and math.isfinite(self.qps), "qps", "a finite number >= 0")
        _require(self.burst >= 1, "burst", "an integer >= 1")
        for name in (
            "connect_timeout_seconds",
            "request_timeout_seconds",
            "backoff_initial_seconds",
            "backoff_max_seconds",
        ):
            value = getattr(self, name)
            _require(value > 0 and math.isfinite(value), name, "a finite number > 0")
        _require(self.max_attempts >= 1, "max_attempts", "an integer >= 1")
        _require(self.watch_timeout_seconds >= 1, "watch_timeout_seconds", "an integer >= 1")
        _require(self.list_page_size >= 0, "list_page_size", "an integer >= 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "KubeSettings":
        """Settings from ``TIDEGATE_KUBE_<FIELD>`` variables (e.g. TIDEGATE_KUBE_QPS=20).

        Unset variables keep their defaults; a value that does not parse raises
        :class:`~tidegate.kube.errors.KubeConfigError` naming the variable.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in fields(cls):
            key = ENV_PREFIX + field.name.upper()
            raw = env.get(key)
            if raw is None or raw == "":
                continue
            default = field.default
            try:
                if field.name == "kubeconfig":
                    values[field.name] = Path(raw)
                elif isinstance(default, bool):
                    values[field.name] = raw.lower() in ("1", "true", "yes")
                elif isinstance(default, int):
                    values[field.name] = int(raw)
                elif isinstance(default, float):
                    values[field.name] = float(raw)
                else:
                    values[field.name] = raw
            except ValueError as exc:
                raise KubeConfigError(f"{key}: cannot parse {raw!r}: {exc}") from exc
        return cls(**values)  # type: ignore[arg-type]


def _require(ok: bool, name: str, what: str) -> None:
    if not ok:
        raise KubeConfigError(f"{name}: must be {what}")
