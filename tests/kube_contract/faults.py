"""A loopback HTTP proxy in front of the API server that fails chosen requests on purpose.

The retry contract (429 with Retry-After, 5xx, dropped connections) must be tested against a
server that really answers over HTTP, and a healthy API server does not fail on demand. This
proxy forwards every request to the real target (the simulator, or a real API server using the
kubeconfig's TLS and credentials) except those matching a :class:`Fault` rule, which get the
rule's status or a dropped connection instead. It records what it saw, so a test can count the
attempts the client made. Streaming responses (watches) are piped through chunk by chunk.
"""

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from kubernetes_asyncio.config import load_kube_config

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "upgrade",
    "host",
    "authorization",
}


_REASONS = {410: "Expired", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass
class Fault:
    """Fail the next ``times`` requests whose method matches and whose path contains ``path``."""

    method: str
    path: str
    times: int
    status: int = 503
    retry_after: str | None = None
    drop: bool = False
    """Close the connection without any response instead of answering ``status``."""
    query: str = ""
    """Only requests whose query string contains this (e.g. "watch=true")."""


@dataclass
class Seen:
    """One request as the proxy saw it, with what it answered."""

    method: str
    path: str
    query: str
    status: int
    """The status sent back; 0 when the connection was dropped."""


@dataclass
class FaultProxy:
    """The running proxy: ``url`` to point a client at, ``faults`` to arm, ``seen`` to read."""

    url: str
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def fail(
        self,
        method: str,
        path: str,
        *,
        times: int,
        status: int = 503,
        retry_after: str | None = None,
        drop: bool = False,
        query: str = "",
    ) -> None:
        """Arm a fault rule (rules are consumed in the order armed)."""
        self.faults.append(Fault(method, path, times, status, retry_after, drop, query))

    def count(self, method: str, path: str, *, query: str = "") -> int:
        """How many matching requests reached the proxy (failed ones included)."""
        return sum(
            1 for s in self.seen if s.method == method and path in s.path and query in s.query
        )

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points at this proxy (plain HTTP on loopback, no credentials)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _take(self, request: web.Request) -> Fault | None:
        for fault in self.faults:
            if (
                fault.times > 0
                and fault.method == request.method
                and fault.path in request.path
                and fault.query in request.query_string
            ):
                fault.times -= 1
                return fault
        return None


@asynccontextmanager
async def fault_proxy(kubeconfig: Path) -> AsyncIterator[FaultProxy]:
    """Run a :class:`FaultProxy` on a free loopback port in front of ``kubeconfig``'s server."""
    upstream = Configuration()
    await load_kube_config(
        config_file=str(kubeconfig), client_configuration=upstream, persist_config=False
    )
    rest = RESTClientObject(upstream)
    session: aiohttp.ClientSession = rest.pool_manager
    proxy = FaultProxy(url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        fault = proxy._take(request)
        if fault is not None and fault.drop:
            proxy.seen.append(Seen(request.method, request.path, request.query_string, 0))
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # aiohttp ends the handler without a response
        if fault is not None:
            proxy.seen.append(
                Seen(request.method, request.path, request.query_string, fault.status)
            )
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f"injected by the contract suite's fault proxy ({fault.status})",
                "reason": _REASONS.get(fault.status, "InternalError"),
                "code": fault.status,
            }
            return web.json_response(body, status=fault.status, headers=headers)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        auth = await upstream.auth_settings()
        if "BearerToken" in auth:
            headers["Authorization"] = str(auth["BearerToken"]["value"])
        data = await request.read()
        async with session.request(
            request.method,
            upstream.host + request.path_qs,
            headers=headers,
            data=data or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            server_hostname=upstream.tls_server_name,
        ) as answer:
            proxy.seen.append(
                Seen(request.method, request.path, request.query_string, answer.status)
            )
            response = web.StreamResponse(status=answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers[key] = value
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
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
        await rest.close()
