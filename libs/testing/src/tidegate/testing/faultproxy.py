"""Loopback proxies that fail requests on purpose, for fault-injection tests.

Why: the hardest failures at the seams between services are the ambiguous ones (a publish
the server stored although the client never got its ack, a Kubernetes write the API server
applied although the client saw a timeout), and a healthy server fails on no one's demand.
These proxies sit between the clients and the real servers and fail what a test arms:

- :class:`NatsFaultProxy`, a TCP proxy in front of nats-server: armed with a subject prefix,
  it forwards the next ``PUB``/``HPUB`` to a matching subject, waits until the server answered
  (the JetStream ack, or anything else it sends on that connection), and then drops both
  halves of the connection. The message is stored; the client's publish fails, it reconnects.
- :class:`KubeFaultProxy`, an HTTP proxy in front of an API server (the simulator, or a real
  one through an :class:`Upstream` with its TLS and credentials): it pipes every request
  through, watches included, except those an armed rule matches, which get the rule's
  :class:`HttpFault`: :class:`Refuse` (a status such as 429 or 503, the server never sees the
  request), :class:`Cut` (the connection closed unanswered), :class:`LoseAnswer` (the server
  applies it; the client gets a 504 or a closed connection), :class:`Hold` (the request held
  on its way for a while: it reaches the server then only if its client still waits for it).
  It records every request in ``seen``, so a test can count attempts.

They do not decide what to arm or when (the tests do) and parse no more of a protocol than
they must.
"""

import asyncio
import contextlib
import json
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Protocol

import aiohttp
from aiohttp import web

READ_BYTES: Final = 65536
ANSWER_WAIT_SECONDS: Final = 2.0
"""How long the NATS proxy waits for the server's answer to a doomed publish before it drops
the connection anyway."""
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "upgrade",
        "host",
    }
)


@dataclass
class NatsFaultProxy:
    """A TCP proxy in front of ``upstream_host:upstream_port``; see the module docstring.

    Start it with :meth:`start` (or :func:`nats_fault_proxy`), point clients at :attr:`url`,
    arm faults with :meth:`drop_after_publish`. Connections that fail to reach the server
    (it is restarting) are closed at once, so clients retry as they would against it.
    """

    upstream_host: str
    upstream_port: int
    host: str = "127.0.0.1"
    port: int = 0
    injected: int = 0
    """Publishes forwarded and then cut off before their answer."""
    note: Callable[[str], None] = lambda text: None
    """Told of every fault as it is injected."""
    _armed: list[bytes] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        """The nats:// URL clients connect to."""
        return f"nats://{self.host}:{self.port}"

    def drop_after_publish(self, subject_prefix: str) -> None:
        """Arm one fault: the next publish to a subject starting with ``subject_prefix`` is
        forwarded and its connection dropped before the answer comes back."""
        self._armed.append(b"PUB " + subject_prefix.encode())

    @property
    def armed(self) -> int:
        """Faults armed and not yet injected."""
        return len(self._armed)

    def disarm(self) -> None:
        """Forget faults not yet injected."""
        self._armed.clear()

    async def start(self) -> None:
        """Listen (on a free port unless :attr:`port` is set)."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close every proxied connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.upstream_host, self.upstream_port
                )
            except OSError:
                return
            self._writers.add(up_writer)
            doomed = asyncio.Event()
            try:
                await asyncio.gather(
                    self._to_server(reader, up_writer, doomed),
                    self._to_client(up_reader, writer, doomed),
                )
            finally:
                self._writers.discard(up_writer)
                up_writer.close()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            self._tasks.discard(task)

    async def _to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, doomed: asyncio.Event
    ) -> None:
        tail = b""
        while not doomed.is_set():
            chunk = await reader.read(READ_BYTES)
            if not chunk:
                break
            seen = tail + chunk
            hit = next((p for p in self._armed if p in seen), None)
            writer.write(chunk)
            await writer.drain()
            if hit is not None:
                self._armed.remove(hit)
                self.injected += 1
                line = seen[seen.index(hit) :].split(b"\r\n", 1)[0]
                self.note(f"INJECTED: {line.decode(errors='replace')} stored, ack dropped")
                doomed.set()
                return  # the other half drops the connection once the server answered
            tail = seen[-256:]
        writer.close()

    async def _to_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, doomed: asyncio.Event
    ) -> None:
        while True:
            read = asyncio.ensure_future(reader.read(READ_BYTES))
            dooming = asyncio.ensure_future(doomed.wait())
            done, _ = await asyncio.wait({read, dooming}, return_when=asyncio.FIRST_COMPLETED)
            if read not in done:
                # The doomed publish is on its way: wait for the server's answer, drop it.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(read, ANSWER_WAIT_SECONDS)
                read.cancel()
                writer.close()
                return
            dooming.cancel()
            chunk = read.result()
            if not chunk or doomed.is_set():
                writer.close()
                return
            writer.write(chunk)
            await writer.drain()


@contextlib.asynccontextmanager
async def nats_fault_proxy(upstream_host: str, upstream_port: int) -> AsyncIterator[NatsFaultProxy]:
    """Run a :class:`NatsFaultProxy` for the length of the block."""
    proxy = NatsFaultProxy(upstream_host, upstream_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@dataclass(frozen=True)
class Answer:
    """The API server's whole answer to a forwarded request."""

    status: int
    body: bytes
    headers: Mapping[str, str]

    def response(self) -> web.Response:
        """The same answer, to send to the client."""
        return web.Response(status=self.status, body=self.body, headers=self.headers)


Forward = Callable[[], Awaitable[Answer]]
"""Sends the request on to the API server and reads its whole answer."""


class HttpFault(Protocol):
    """What :class:`KubeFaultProxy` does to a request an armed rule matched: the response to
    send, or None to close the connection without one. ``forward`` lets the server see it."""

    async def __call__(
        self, request: web.Request, forward: Forward
    ) -> web.StreamResponse | None: ...


@dataclass(frozen=True)
class Refuse:
    """Answer ``status`` (with ``Retry-After`` if given) before the server sees the request."""

    status: int = 503
    retry_after: str | None = None

    async def __call__(self, request: web.Request, forward: Forward) -> web.StreamResponse:
        """The refusal."""
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        return status_response(self.status, "injected by a fault proxy: refused", headers)


@dataclass(frozen=True)
class Cut:
    """Close the connection before the server sees the request."""

    async def __call__(self, request: web.Request, forward: Forward) -> None:
        """Nothing to send."""


@dataclass(frozen=True)
class LoseAnswer:
    """Let the server apply the request, read its answer, then answer ``504`` instead (or,
    with ``drop``, close the connection without an answer)."""

    drop: bool = False

    async def __call__(self, request: web.Request, forward: Forward) -> web.StreamResponse | None:
        """Forward, then lose the answer."""
        await forward()
        if self.drop:
            return None
        return status_response(504, "injected by a fault proxy: applied, its answer lost")


@dataclass(frozen=True)
class Hold:
    """Hold the request on its way for ``seconds`` (its body read, the server not told), then
    forward it and relay the answer — but only if its client still waits: a client that gave
    up meanwhile (closed its connection, as a client-side timeout does) never has it applied,
    as with a request still queued on the client's side of the network. Both outcomes are in
    :attr:`KubeFaultProxy.seen` (``upstream`` None: it never reached the server)."""

    seconds: float

    async def __call__(self, request: web.Request, forward: Forward) -> web.StreamResponse | None:
        """Wait, then forward or drop."""
        await request.read()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        while not _client_gone(request):
            left = deadline - loop.time()
            if left <= 0:
                return (await forward()).response()
            await asyncio.sleep(min(HOLD_POLL_SECONDS, left))
        return None


HOLD_POLL_SECONDS: Final = 0.02
"""How often :class:`Hold` looks whether the client gave up."""


def _client_gone(request: web.Request) -> bool:
    """Whether the client closed the connection a request came on."""
    return request.transport is None or request.transport.is_closing()


_REASONS: Final = {
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_response(
    code: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A Kubernetes ``Status`` failure answer with ``code``."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"{message} ({code})",
        "reason": _REASONS.get(code, "InternalError"),
        "code": code,
    }
    return web.json_response(body, status=code, headers=headers)


@dataclass(frozen=True)
class Upstream:
    """The API server a :class:`KubeFaultProxy` forwards to."""

    url: str
    """Its base URL (``https://host:port``)."""
    session: aiohttp.ClientSession | None = None
    """A session that speaks its TLS (client certificates included); None: plain HTTP, the
    proxy makes its own."""
    credentials: Callable[[], Awaitable[Mapping[str, str]]] | None = None
    """Headers that authenticate each request; they replace the client's Authorization."""
    server_hostname: str | None = None
    """The name its certificate is checked against, when not the URL's host."""


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it."""

    method: str
    path: str
    query: str
    status: int
    """The status sent back; 0 when the connection was closed without an answer."""
    fault: HttpFault | None = None
    """The fault that answered it, if any."""
    upstream: int | None = None
    """The server's status, None when the server never saw the request."""
    seconds: float = 0.0
    """How long the proxy took over it, from its arrival to its answer (or to closing it)."""


@dataclass
class _Rule:
    method: str
    path: str
    query: str
    fault: HttpFault
    times: int


@dataclass
class KubeFaultProxy:
    """An HTTP proxy in front of an API server; see the module docstring.

    Run it with :func:`kube_fault_proxy`, point clients at :meth:`kubeconfig`, :meth:`arm`
    faults, read :attr:`seen`.
    """

    upstream: Upstream
    session: aiohttp.ClientSession
    url: str = ""
    """The proxy's base URL, once started."""
    note: Callable[[str], None] = lambda text: None
    """Told of every fault as it is injected."""
    seen: list[Seen] = field(default_factory=list)
    """Every request answered, in order (a watch when its headers came)."""
    _rules: list[_Rule] = field(default_factory=list)

    def arm(
        self, method: str, path: str, fault: HttpFault, *, times: int = 1, query: str = ""
    ) -> None:
        """Apply ``fault`` to the next ``times`` ``method`` requests whose path contains
        ``path`` and whose query string contains ``query``; rules are used in the order armed."""
        self._rules.append(_Rule(method.upper(), path, query, fault, times))

    @property
    def armed(self) -> int:
        """Faults armed and not yet injected."""
        return sum(rule.times for rule in self._rules)

    def disarm(self) -> None:
        """Forget faults not yet injected."""
        self._rules.clear()

    def count(self, method: str, path: str, *, query: str = "") -> int:
        """Matching requests seen, faults included."""
        return sum(
            1 for s in self.seen if s.method == method and path in s.path and query in s.query
        )

    @property
    def injected(self) -> int:
        """Requests a fault answered."""
        return sum(1 for s in self.seen if s.fault is not None)

    @property
    def requests(self) -> Counter[str]:
        """``METHOD path`` (names and namespaces left out) → requests seen."""
        return Counter(f"{s.method} {_shape(s.path)}" for s in self.seen)

    def kubeconfig(self) -> str:
        """A kubeconfig (JSON, which is YAML) that points at this proxy, without credentials."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        }
        return json.dumps(config)

    def write_kubeconfig(self, path: Path) -> Path:
        """:meth:`kubeconfig` written to ``path``."""
        path.write_text(self.kubeconfig())
        return path

    def _take(self, request: web.Request) -> _Rule | None:
        for rule in self._rules:
            if (
                rule.times > 0
                and rule.method == request.method
                and rule.path in request.path
                and rule.query in request.query_string
            ):
                rule.times -= 1
                return rule
        return None

    async def _send(self, request: web.Request) -> aiohttp.ClientResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self.upstream.credentials is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers.update(await self.upstream.credentials())
        data = await request.read()
        return await self.session.request(
            request.method,
            self.upstream.url + request.path_qs,
            headers=headers,
            data=data or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            server_hostname=self.upstream.server_hostname,
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request: by the first armed rule that matches it, else from upstream."""
        rule = self._take(request)
        if rule is None:
            return await self._pipe(request)
        upstream: int | None = None
        began = time.monotonic()

        async def forward() -> Answer:
            nonlocal upstream
            async with await self._send(request) as answer:
                body = await answer.read()
                upstream = answer.status
                headers = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
            return Answer(answer.status, body, headers)

        response = await rule.fault(request, forward)
        status = 0 if response is None else response.status
        seen = Seen(
            request.method,
            request.path,
            request.query_string,
            status,
            rule.fault,
            upstream,
            seconds=time.monotonic() - began,
        )
        self.seen.append(seen)
        self.note(
            f"INJECTED: {rule.fault} on {seen.method} {request.path_qs}"
            f" (server: {upstream or 'not reached'}; sent: {status or 'no answer'};"
            f" after {seen.seconds:.2f}s)"
        )
        if response is None:
            if request.transport is not None:  # None: the client went away first (Hold)
                request.transport.close()
            raise asyncio.CancelledError  # aiohttp ends the handler without a response
        return response

    async def _pipe(self, request: web.Request) -> web.StreamResponse:
        async with await self._send(request) as answer:
            self.seen.append(
                Seen(
                    request.method,
                    request.path,
                    request.query_string,
                    answer.status,
                    upstream=answer.status,
                )
            )
            response = web.StreamResponse(status=answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers[key] = value
            try:
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                pass  # the client went away (a watch it closed, a service killed)
            return response


def _shape(path: str) -> str:
    """A request path with namespaces and object names left out (``/api/v1/pods/*/status``)."""
    parts = path.strip("/").split("/")
    out = []
    skip = False
    for part in parts:
        if skip:
            out.append("*")
            skip = False
            continue
        out.append(part)
        skip = part in ("namespaces", "pods", "jobs", "deployments", "nodes", "events")
    return "/" + "/".join(out)


@contextlib.asynccontextmanager
async def kube_fault_proxy(upstream: str | Upstream) -> AsyncIterator[KubeFaultProxy]:
    """Run a :class:`KubeFaultProxy` on a free loopback port in front of ``upstream`` (a
    plain-HTTP base URL such as ``SimCluster.url``, or an :class:`Upstream`)."""
    if isinstance(upstream, str):
        upstream = Upstream(upstream)
    upstream = replace(upstream, url=upstream.url.rstrip("/"))
    owned = upstream.session is None
    session = upstream.session or aiohttp.ClientSession()
    proxy = KubeFaultProxy(upstream, session)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    # Open watches are cut when the proxy stops (a real server may stay silent for a minute).
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, listener)
    await site.start()
    proxy.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        yield proxy
    finally:
        await runner.cleanup()
        if owned:
            await session.close()
