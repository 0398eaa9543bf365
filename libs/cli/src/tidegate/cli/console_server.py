"""The server of ``tidegate console``: follows the bus into a view and serves the page.

What the page shows and the options are described in :mod:`tidegate.cli.console`; the view
is :class:`~tidegate.cli.console_view.ConsoleView`. Routes:

* ``/`` the page (plain HTML, CSS and JavaScript shipped in this package: works offline);
* ``/events`` Server-Sent Events: ``decisions`` (the recent ones, first), ``snapshot`` (the
  whole state, at most twice a second while something changes) and ``decision`` (each
  decision as it is followed);
* ``/api/snapshot``, ``/api/explain?workload=NS/NAME``, ``/api/domain?path=A&path=B``;
* ``/healthz``; ``/readyz`` (200 once the bus has been replayed).

Read-only: it never writes to the bus. :class:`Access` says who may read (bearer token, given
once by a browser as ``/?token=…`` and then kept in an HttpOnly cookie, never written into the
page; or basic auth; or nobody's business on loopback).
"""

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Final

from aiohttp import web

from tidegate.cli.console_view import ConsoleView

if TYPE_CHECKING:
    from tidegate.bus import BusSettings, Received

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_SECONDS: Final = 0.5
"""How often a changed view is sent to the pages again, at most."""
HEARTBEAT_SECONDS: Final = 15.0
"""A comment line on every event stream this often, so proxies keep it open."""
COOKIE: Final = "tidegate_console_token"
STATIC: Final = "console_static"
"""The page's files, in this package."""


class ConsoleError(Exception):
    """The console cannot start as asked; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Access:
    """Who may read the page: everyone (both None), a bearer token, or a basic-auth pair."""

    token: str | None = None
    basic: str | None = None
    """``USER:PASSWORD``."""

    def allows(self, request: web.Request) -> bool:
        """Whether ``request`` carries the token (header or cookie) or the basic-auth pair."""
        if self.token is None and self.basic is None:
            return True
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            given = value if scheme.lower() == "bearer" else request.cookies.get(COOKIE, "")
            if given and hmac.compare_digest(given.encode(), self.token.encode()):
                return True
        if self.basic is not None and scheme.lower() == "basic":
            with contextlib.suppress(ValueError):
                pair = base64.b64decode(value, validate=True)
                if hmac.compare_digest(pair, self.basic.encode()):
                    return True
        return False


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8480`` for IPv6) → (host, port); ConsoleError when it is not."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ConsoleError(f"--listen: expected HOST:PORT, got {text!r}")
    return host, int(port)


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def access_for(host: str, *, token: str | None, basic: str | None, no_auth: bool) -> Access:
    """The access rule for serving on ``host``; ConsoleError when it would be open to a network."""
    if basic is not None and ":" not in basic:
        raise ConsoleError("--basic-auth: expected USER:PASSWORD")
    if token is None and basic is None and not no_auth and not loopback(host):
        raise ConsoleError(
            f"--listen {host}: a non-loopback address needs --token or --basic-auth "
            "(or --no-auth behind a proxy that authenticates)"
        )
    return Access(token=token, basic=basic)


class Console:
    """The view, the bus followers that feed it, and the pages listening for changes."""

    def __init__(self, view: ConsoleView) -> None:
        """Serve ``view`` (fed by :meth:`follow`)."""
        self.view = view
        self.replayed = asyncio.Event()
        """Set once both streams have been replayed."""
        self.following: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """The task following the bus (set by :func:`serving`)."""
        self._listeners: set[asyncio.Queue[tuple[str, str]]] = set()
        self._snapshot = ""
        self._snapshot_version = -1

    # ------------------------------------------------------------------ the bus

    async def follow(self, settings: "BusSettings") -> None:
        """Connect, replay the state and decision streams into the view, then follow them
        until cancelled."""
        from tidegate.bus import StateFollower, connect, layout
        from tidegate.model import subjects

        cluster = self.view.cluster
        bus = await connect(settings)
        try:
            state = StateFollower(
                bus,
                stream=layout.state_stream(cluster),
                subjects=subjects.state_wildcards(cluster),
                handler=self._on_state,
                name="console-state",
            )
            decisions = StateFollower(
                bus,
                stream=layout.decisions_stream(cluster),
                subjects=[subjects.decision_wildcard(cluster)],
                handler=self._on_decision,
                name="console-decisions",
            )
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(state.run())
                tasks.create_task(decisions.run())
                await state.replayed.wait()
                await decisions.replayed.wait()
                self.replayed.set()
                self._send("decisions", self.backlog())
                self.publish_snapshot()
                tasks.create_task(self._snapshots())
        finally:
            await bus.close()

    async def _on_state(self, received: "Received") -> None:
        self.view.apply_state(
            received.envelope.body,
            stream_sequence=received.stream_sequence,
            time=received.envelope.time,
        )

    async def _on_decision(self, received: "Received") -> None:
        shown = self.view.apply_decision(
            received.envelope.body,
            stream_sequence=received.stream_sequence,
            time=received.envelope.time,
        )
        if shown is not None and self.replayed.is_set():
            self._send("decision", json.dumps(shown))

    async def _snapshots(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_SECONDS)
            if self.view.version != self._snapshot_version:
                self.publish_snapshot()

    # ------------------------------------------------------------------ the pages

    def backlog(self) -> str:
        """The recent decisions as a JSON list, oldest first."""
        return json.dumps(list(self.view.decisions))

    def snapshot(self) -> str:
        """The view as JSON (computed again only when it changed)."""
        if self.view.version != self._snapshot_version:
            self._snapshot_version = self.view.version
            self._snapshot = json.dumps(self.view.snapshot())
        return self._snapshot

    def publish_snapshot(self) -> None:
        """Send every listening page the current snapshot."""
        if self._listeners:
            self._send("snapshot", self.snapshot())
        else:
            self._snapshot_version = -1  # computed when a page asks

    def _send(self, event: str, data: str) -> None:
        for queue in list(self._listeners):
            if queue.full():  # a page that stopped reading: it reloads on reconnect
                self._listeners.discard(queue)
                continue
            queue.put_nowait((event, data))

    @contextlib.contextmanager
    def listening(self) -> Iterator[asyncio.Queue[tuple[str, str]]]:
        """A queue of (event, data) for one page, for the length of the block."""
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(maxsize=1000)
        self._listeners.add(queue)
        try:
            yield queue
        finally:
            self._listeners.discard(queue)


CONSOLE: Final = web.AppKey("console", Console)
ACCESS: Final = web.AppKey("access", Access)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in ("/healthz", "/readyz"):
        return await handler(request)
    access = request.app[ACCESS]
    token = request.query.get("token")
    expected = access.token
    if (
        token
        and expected
        and request.path == "/"
        and hmac.compare_digest(token.encode(), expected.encode())
    ):
        found = web.HTTPFound("/")
        found.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        raise found
    if not access.allows(request):
        headers = {"WWW-Authenticate": 'Basic realm="tidegate console"'} if access.basic else {}
        raise web.HTTPUnauthorized(text="tidegate console: not authorised\n", headers=headers)
    response = await handler(request)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def _static(name: str) -> bytes:
    return resources.files("tidegate.cli").joinpath(STATIC, name).read_bytes()


_TYPES: Final = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


async def _index(request: web.Request) -> web.Response:
    return web.Response(body=_static("index.html"), content_type="text/html", charset="utf-8")


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = next((t for suffix, t in _TYPES.items() if name.endswith(suffix)), None)
    if kind is None or "/" in name or name.startswith("."):
        raise web.HTTPNotFound
    try:
        body = _static(name)
    except FileNotFoundError:
        raise web.HTTPNotFound from None
    return web.Response(body=body, content_type=kind, charset="utf-8")


async def _snapshot(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    if not console.replayed.is_set():
        raise web.HTTPServiceUnavailable(text="the bus is still being replayed\n")
    body = f'{{"snapshot": {console.snapshot()}, "decisions": {console.backlog()}}}'
    return web.Response(text=body, content_type="application/json")


async def _explain(request: web.Request) -> web.Response:
    key = request.query.get("workload", "")
    namespace, slash, name = key.partition("/")
    if not slash or not namespace or not name:
        raise web.HTTPBadRequest(text=f"workload: expected NAMESPACE/NAME, got {key!r}\n")
    answer = request.app[CONSOLE].view.explain(key)
    if answer is None:
        raise web.HTTPNotFound(text=f"no workload {key} on the bus\n")
    return web.json_response(answer)


async def _domain(request: web.Request) -> web.Response:
    path = request.query.getall("path", [])
    return web.json_response({"path": path, "gangs": request.app[CONSOLE].view.gangs_in(path)})


async def _events(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError), console.listening() as queue:
        if console.replayed.is_set():
            await response.write(_event("decisions", console.backlog()))
            await response.write(_event("snapshot", console.snapshot()))
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_SECONDS):
                    event, data = await queue.get()
            except TimeoutError:
                await response.write(b": heartbeat\n\n")
                continue
            await response.write(_event(event, data))
    return response  # the page went away


def _event(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if not request.app[CONSOLE].replayed.is_set():
        raise web.HTTPServiceUnavailable(text="replaying the bus\n")
    return web.Response(text="ready\n")


def make_app(console: Console, access: Access) -> web.Application:
    """The console's aiohttp application (routes in the module docstring)."""
    app = web.Application(middlewares=[_authenticate])
    app[CONSOLE] = console
    app[ACCESS] = access
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _asset)
    app.router.add_get("/api/snapshot", _snapshot)
    app.router.add_get("/api/explain", _explain)
    app.router.add_get("/api/domain", _domain)
    app.router.add_get("/events", _events)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


@contextlib.asynccontextmanager
async def serving(
    settings: "BusSettings",
    view: ConsoleView,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    access: Access | None = None,
) -> AsyncIterator[tuple[Console, str]]:
    """Follow the bus into ``view`` and serve the page on ``host:port`` for the length of the
    block; yields the console and the page's URL (the real port when ``port`` is 0)."""
    console = Console(view)
    runner = web.AppRunner(make_app(console, access or Access()), shutdown_timeout=1.0)
    await runner.setup()
    follower = console.following = asyncio.create_task(console.follow(settings))
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server  # aiohttp keeps the bound socket here
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        yield console, f"http://{shown}:{bound}/"
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await runner.cleanup()
