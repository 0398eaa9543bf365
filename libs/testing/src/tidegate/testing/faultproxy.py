"""Loopback proxies that make a write fail *after* it took effect, for fault-injection tests.

Why: the hardest failures at the seams between services are the ambiguous ones — a publish
the server stored although the client never got its ack, a Kubernetes write the API server
applied although the client saw the connection drop. A healthy server never does that on
demand, so these proxies sit between the services and the real servers and do it when armed:

- :class:`NatsFaultProxy`, a TCP proxy in front of nats-server: armed with a subject prefix,
  it forwards the next ``PUB``/``HPUB`` to a matching subject to the server, waits until the
  server answered (the JetStream ack, or anything else it sends on that connection), and then
  drops both halves of the connection instead of passing the answer on. The message is
  stored; the client's publish fails and it reconnects.
- :class:`KubeFaultProxy`, an HTTP proxy in front of a plain-HTTP API server (the simulator,
  or ``kubectl proxy`` in front of a real one, which adds the credentials): armed with a method
  and a path fragment, it forwards the next matching request, reads the server's whole answer,
  and drops the connection without answering. The write is applied; the client sees a
  connection error (the same ambiguity as a timeout). Everything else, watches included, is
  piped through.

Both count what they injected in ``injected`` so a test can report it. They do not decide what
to arm or when (the tests do) and they do not parse more of a protocol than they must.
"""

import asyncio
import contextlib
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

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


@dataclass
class _WriteFault:
    method: str
    path: str


@dataclass
class KubeFaultProxy:
    """An HTTP proxy in front of a plain-HTTP API server; see the module docstring."""

    upstream: str
    """The API server's base URL (``http://host:port``)."""
    url: str = ""
    """The proxy's base URL, once started."""
    injected: int = 0
    """Writes applied upstream whose answer was dropped."""
    note: Callable[[str], None] = lambda text: None
    """Told of every fault as it is injected."""
    applied: list[str] = field(default_factory=list)
    """``METHOD path -> status`` of each write whose answer was dropped."""
    requests: Counter[str] = field(default_factory=Counter)
    """``METHOD path`` (names and namespaces left out) → requests seen."""
    _armed: list[_WriteFault] = field(default_factory=list)

    def drop_after_apply(self, method: str, path: str) -> None:
        """Arm one fault: the next ``method`` request whose path contains ``path`` is applied
        upstream and its answer dropped."""
        self._armed.append(_WriteFault(method.upper(), path))

    @property
    def armed(self) -> int:
        """Faults armed and not yet injected."""
        return len(self._armed)

    def disarm(self) -> None:
        """Forget faults not yet injected."""
        self._armed.clear()

    def kubeconfig(self) -> str:
        """A kubeconfig (YAML text) that points at this proxy, without credentials."""
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: proxy\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: proxy\n  user: {}\n"
            "contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\n"
            "current-context: proxy\n"
        )

    def _take(self, request: web.Request) -> _WriteFault | None:
        for fault in self._armed:
            if fault.method == request.method and fault.path in request.path:
                self._armed.remove(fault)
                return fault
        return None


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
async def kube_fault_proxy(upstream: str) -> AsyncIterator[KubeFaultProxy]:
    """Run a :class:`KubeFaultProxy` in front of ``upstream`` on a free loopback port."""
    proxy = KubeFaultProxy(upstream=upstream.rstrip("/"))
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None))

    async def handle(request: web.Request) -> web.StreamResponse:
        fault = proxy._take(request)
        proxy.requests[f"{request.method} {_shape(request.path)}"] += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        data = await request.read()
        async with session.request(
            request.method, proxy.upstream + request.path_qs, headers=headers, data=data or None
        ) as answer:
            if fault is not None:
                await answer.read()
                proxy.injected += 1
                proxy.applied.append(f"{request.method} {request.path} -> {answer.status}")
                proxy.note(f"INJECTED: {proxy.applied[-1]} applied, answer dropped")
                assert request.transport is not None
                request.transport.close()
                raise asyncio.CancelledError  # aiohttp ends the handler without a response
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

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
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
        await session.close()
