"""Entry point: ``python -m tidegate.watcher`` (or the ``tidegate-watcher`` script).

Reads settings from the environment (``TIDEGATE_*``, ``TIDEGATE_KUBE_*``), connects to NATS and
the Kubernetes API, and runs the :class:`~tidegate.watcher.app.Watcher` until SIGTERM/SIGINT,
then drains the NATS connection. A bad setting exits 2 with one line naming it.
"""

import asyncio
import contextlib
import logging
import os
import signal
import sys

from tidegate.bus import BusSettings, connect, servers_from_url
from tidegate.kube import KubeConfigError, KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.placement import PROFILES
from tidegate.telemetry import setup_logging, setup_tracing, shutdown_tracing
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import SettingsError, WatcherSettings, load

log = logging.getLogger("tidegate.watcher")


async def serve(settings: WatcherSettings, kube_settings: KubeSettings) -> None:
    """Run the watcher until cancelled or signalled."""
    bus = await connect(
        BusSettings(servers=tuple(servers_from_url(settings.nats_url)), name="tidegate-watcher")
    )
    kube = await connect_kube(kube_settings)
    watcher = Watcher(bus=bus, kube=kube, settings=settings, profiles=frozenset(PROFILES))
    task = asyncio.create_task(watcher.run(), name="watcher")
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await kube.close()
        await bus.drain()


def main() -> None:
    """Load settings, set up logs and traces, and serve."""
    try:
        settings = load()
        kube_settings = KubeSettings.from_env()
    except (SettingsError, KubeConfigError) as exc:
        print(f"tidegate-watcher: {exc}", file=sys.stderr)
        sys.exit(2)
    setup_logging(os.environ.get("TIDEGATE_LOG_LEVEL", "INFO"))
    setup_tracing("tidegate-watcher")
    try:
        asyncio.run(serve(settings, kube_settings))
    finally:
        shutdown_tracing()


if __name__ == "__main__":
    main()
