"""An HTTP proxy in front of a plain-HTTP API server (the simulator) that applies chosen writes
and then loses their answers.

Why: the hardest failure of a write is the ambiguous one — the server applied it, but the
client saw a timeout or a 5xx. A healthy API server never does that on demand; this proxy
forwards every request, and for those matching an armed rule forwards it too but answers
``504 Gateway Timeout`` (or drops the connection) instead of the server's answer. What it saw
is recorded, so a test can count requests.
"""

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "upgrade",
    "host",
}


@dataclass
class LoseAnswer:
    """Apply, then lose the answer of, the next ``times`` requests with ``method`` whose path
    contains ``path``."""

    method: str
    path: str
    times: int
    drop: bool = False
    """Close the connection instead of answering 504."""


@dataclass
class LostAnswersProxy:
    """The running proxy: ``url`` to point a client at, ``arm`` rules, ``seen`` (method, path,
    status sent back; 0 for a dropped connection)."""

    url: str
    rules: list[LoseAnswer] = field(default_factory=list)
    seen: list[tuple[str, str, int]] = field(default_factory=list)

    def arm(self, method: str, path: str, *, times: int, drop: bool = False) -> None:
        """Lose the answers of the next ``times`` matching requests (after applying them)."""
        self.rules.append(LoseAnswer(method, path, times, drop))

    def count(self, method: str, path: str) -> int:
        """Matching requests seen (whatever was answered)."""
        return sum(1 for m, p, _ in self.seen if m == method and path in p)

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig pointing at this proxy."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {"token": "tidegate-sim"}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    def _take(self, request: web.Request) -> LoseAnswer | None:
        for rule in self.rules:
            if rule.times > 0 and rule.method == request.method and rule.path in request.path:
                rule.times -= 1
                return rule
        return None


@asynccontextmanager
async def lost_answers_proxy(upstream: str) -> AsyncIterator[LostAnswersProxy]:
    """Run a :class:`LostAnswersProxy` on a free loopback port in front of ``upstream``
    (a base URL such as ``SimCluster.url``)."""
    proxy = LostAnswersProxy(url="")
    session = aiohttp.ClientSession()

    async def handle(request: web.Request) -> web.StreamResponse:
        rule = proxy._take(request)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        data = await request.read()
        async with session.request(
            request.method,
            upstream + request.path_qs,
            headers=headers,
            data=data or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as answer:
            if rule is not None:
                await answer.read()  # the server has applied it; its answer is lost
                if rule.drop:
                    proxy.seen.append((request.method, request.path, 0))
                    assert request.transport is not None
                    request.transport.close()
                    raise asyncio.CancelledError
                proxy.seen.append((request.method, request.path, 504))
                body = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": "injected: the write was applied, its answer lost",
                    "reason": "Timeout",
                    "code": 504,
                }
                return web.json_response(body, status=504)
            proxy.seen.append((request.method, request.path, answer.status))
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
