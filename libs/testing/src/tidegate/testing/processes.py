"""A tidegate service run as the real thing: ``python -m tidegate.<module>`` in a child process.

Process tests check what only a process shows: settings read from the environment, /readyz and
/metrics over HTTP, exit codes, SIGTERM and SIGKILL. :class:`ServiceProcess` starts one service
with a free health port and its standard error in a log file (the tail is quoted when the
process dies too early), waits until it is ready, reads its metrics, and stops it — SIGTERM,
then SIGKILL if it does not exit in time. :func:`run_to_exit` runs one that is expected to stop
by itself (a bad setting). This module runs processes; what they must do is the tests' business.
"""

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import BinaryIO

import aiohttp

from tidegate.bus.server import free_port
from tidegate.testing.waiting import until_async

LOG_TAIL_CHARS = 2000
"""How much of a dead process's log an error quotes."""

DUMP_CHARS = 12000
"""How much of a hung process's log a timeout quotes (its task dump comes last)."""


class ServiceProcess:
    """One service process; see the module docstring."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        *,
        name: str,
        port: int,
        log_path: Path,
        log: BinaryIO,
    ) -> None:
        """Use :meth:`start`."""
        self.process = process
        self.name = name
        """The module under ``tidegate`` (``watcher``, ``topology_cache``, …)."""
        self.port = port
        """The port /healthz, /readyz and /metrics are served on."""
        self.log_path = log_path
        """The process's standard error."""
        self._log = log

    @classmethod
    async def start(
        cls,
        name: str,
        settings: Mapping[str, str],
        *,
        logs: Path,
        port: int | None = None,
    ) -> "ServiceProcess":
        """Start ``python -m tidegate.<name>`` with this environment plus ``settings``
        (``TIDEGATE_…`` variables) and ``TIDEGATE_HTTP_PORT``; standard error goes to
        ``logs/<name>.log``."""
        port = port or free_port()
        log_path = logs / f"{name}.log"
        log = log_path.open("ab")
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"tidegate.{name}",
                env={**os.environ, **settings, "TIDEGATE_HTTP_PORT": str(port)},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
        except BaseException:
            log.close()
            raise
        return cls(process, name=name, port=port, log_path=log_path, log=log)

    def log_tail(self) -> str:
        """The end of the process's standard error."""
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]

    def check(self) -> None:
        """Raise ``AssertionError`` (quoting the log) if the process has exited."""
        code = self.process.returncode
        if code is not None:
            raise AssertionError(f"{self.name} exited with {code}:\n{self.log_tail()}")

    async def get(self, http: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        """Status and body of ``GET <path>`` on the health port."""
        async with http.get(f"http://127.0.0.1:{self.port}{path}") as response:
            return response.status, await response.text()

    async def metrics(self, http: aiohttp.ClientSession) -> str:
        """The Prometheus text of /metrics."""
        _, text = await self.get(http, "/metrics")
        return text

    async def ready(
        self, http: aiohttp.ClientSession, *, within: float = 30.0, interval: float = 0.1
    ) -> None:
        """Wait until /readyz answers 200; fail at once if the process exits."""

        async def answered_ready() -> bool:
            try:
                status, _ = await self.get(http, "/readyz")
            except aiohttp.ClientError:
                return False
            return status == 200

        await until_async(
            answered_ready,
            within=within,
            interval=interval,
            what=f"{self.name} on :{self.port} to become ready",
            alive=self.check,
        )

    def signal(self, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to the process if it is still running."""
        if self.process.returncode is None:
            self.process.send_signal(signum)

    async def wait(self, *, within: float = 20.0) -> int:
        """Wait until the process exits; its exit code. A process still running after
        ``within`` seconds is asked (SIGUSR1) to log its asyncio tasks; the TimeoutError then
        quotes them (the end of its log)."""
        try:
            return await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError as exc:
            self.signal(signal.SIGUSR1)
            await asyncio.sleep(1)
            raise TimeoutError(
                f"{self.name} still running after {within:.0f}s; the end of its log "
                f"({self.log_path}):\n{self.log_path.read_text(errors='replace')[-DUMP_CHARS:]}"
            ) from exc

    async def close(self, *, within: float = 20.0) -> None:
        """Stop the process if it still runs (SIGTERM, then SIGKILL after ``within`` seconds)
        and close its log."""
        self.signal(signal.SIGTERM)
        try:
            await self.wait(within=within)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        finally:
            self._log.close()


@contextlib.asynccontextmanager
async def service_process(
    name: str, settings: Mapping[str, str], *, logs: Path, port: int | None = None
) -> AsyncIterator[ServiceProcess]:
    """:meth:`ServiceProcess.start`, closed (stopped) when the block ends."""
    started = await ServiceProcess.start(name, settings, logs=logs, port=port)
    try:
        yield started
    finally:
        await started.close()


async def run_to_exit(
    name: str, settings: Mapping[str, str], *, within: float = 30.0
) -> tuple[int, str]:
    """Run ``python -m tidegate.<name>`` with ``settings`` until it exits by itself; its exit
    code and standard error."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"tidegate.{name}",
        env={**os.environ, **settings},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), within)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stderr.decode(errors="replace")
