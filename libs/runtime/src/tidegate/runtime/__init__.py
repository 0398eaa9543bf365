"""Service lifecycle: settings, supervised tasks, health and metrics.

Why: five services share one way to start, be observed and stop, so each service's own code
is only its settings and a setup coroutine (see :mod:`.service`). Settings come from env and
YAML (:mod:`.settings`); /healthz, /readyz and /metrics are in :mod:`.http` and
:mod:`.metrics`. This package decides nothing about workloads.
"""

from tidegate.runtime.http import Readiness
from tidegate.runtime.metrics import Metrics
from tidegate.runtime.service import Service, ServiceContext, Setup, run_service
from tidegate.runtime.settings import (
    CONFIG_ENV,
    ServiceSettings,
    SettingsError,
    describe,
    env_name,
    load_settings,
)

__all__ = [
    "CONFIG_ENV",
    "Metrics",
    "Readiness",
    "Service",
    "ServiceContext",
    "ServiceSettings",
    "SettingsError",
    "Setup",
    "describe",
    "env_name",
    "load_settings",
    "run_service",
]
