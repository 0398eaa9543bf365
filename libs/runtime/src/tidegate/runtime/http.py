"""The health and metrics endpoints every service serves.

* ``GET /healthz`` — 200 while the process's event loop runs (liveness).
* ``GET /readyz`` — 200 once the service is ready: setup done and every state stream
  replayed; 503 with a JSON body naming what it still waits for, and 503 while stopping.
* ``GET /metrics`` — Prometheus text format.

Served with aiohttp's AppRunner/TCPSite beside the service's other asyncio work. This module
does not decide readiness; :class:`Readiness` only collects what the service reports.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from tidegate.runtime.metrics import CONTENT_TYPE, Metrics


@dataclass
class Readiness:
    """Named conditions that must all hold before the service reports ready."""

    _checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    stopping: bool = False

    def add(self, name: str, check: Callable[[], bool]) -> None:
        """Require ``check()`` to be true; ``name`` appears in /readyz while it is not."""
        self._checks[name] = check

    def waiting_for(self) -> list[str]:
        """Names of the conditions that do not hold yet."""
        return [name for name, check in self._checks.items() if not check()]

    @property
    def ready(self) -> bool:
        """True when not stopping and every condition holds."""
        return not self.stopping and not self.waiting_for()


READINESS = web.AppKey("readiness", Readiness)
METRICS = web.AppKey("metrics", Metrics)
SERVICE_NAME = web.AppKey("service_name", str)


async def healthz(request: web.Request) -> web.Response:
    """Liveness: answering at all is the proof."""
    return web.json_response({"status": "ok", "service": request.app[SERVICE_NAME]})


async def readyz(request: web.Request) -> web.Response:
    """Readiness, with what is missing when not ready."""
    readiness = request.app[READINESS]
    ready = readiness.ready
    request.app[METRICS].ready.set(1 if ready else 0)
    if ready:
        return web.json_response({"status": "ready"})
    body = {"status": "stopping" if readiness.stopping else "waiting"}
    return web.json_response(body | {"waiting_for": readiness.waiting_for()}, status=503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus scrape endpoint."""
    registry = request.app[METRICS]
    registry.ready.set(1 if request.app[READINESS].ready else 0)
    response = web.Response(body=registry.exposition())
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


def make_app(service: str, readiness: Readiness, service_metrics: Metrics) -> web.Application:
    """The aiohttp application with the three endpoints."""
    app = web.Application()
    app[SERVICE_NAME] = service
    app[READINESS] = readiness
    app[METRICS] = service_metrics
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def serve(
    app: web.Application, port: int, host: str = "0.0.0.0"
) -> tuple[web.AppRunner, int]:
    """Start serving ``app``; returns the runner (``await runner.cleanup()`` to stop) and the
    port actually bound (useful with port 0)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return runner, bound
