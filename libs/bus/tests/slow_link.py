"""A TCP relay to the nats-server whose server-to-client direction can be slowed down.

Why: to show what a client does when the server has acted on a request but the answer is late
(a slow network), with the real server and the real client, nothing patched.
"""

import asyncio
import contextlib
import time
from types import TracebackType
from typing import Self
from urllib.parse import urlparse


class SlowLink:
    """``async with SlowLink(nats_url) as link:`` connect to ``link.url``; set
    ``link.delay_seconds`` to hold every byte from the server that long before passing it on."""

    def __init__(self, upstream_url: str) -> None:
        parsed = urlparse(upstream_url)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 4222)
        self.delay_seconds = 0.0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"nats://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)
        up = asyncio.create_task(self._pipe(client_r, server_w, slow=False))
        down = asyncio.create_task(self._pipe(server_r, client_w, slow=True))
        self._tasks |= {up, down}
        with contextlib.suppress(Exception):
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for writer in (client_w, server_w):
            writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, slow: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(65536):
                delay = self.delay_seconds if slow else 0.0
                queue.put_nowait((time.monotonic() + delay, data))
        finally:
            sender.cancel()
