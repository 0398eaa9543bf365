"""Services under test run in the test's own process, as their processes would run them.

A test that needs a service's internals (its metrics registry, its readiness) or several
instances at once runs :class:`~tidegate.runtime.Service` objects here, on the test's event
loop, without signal handlers. :class:`RunningServices` starts them, waits until they are ready,
notices one that stopped by itself, and stops them gracefully (as SIGTERM would) at the end.
To run a service as a real child process instead, see :mod:`tidegate.testing.processes`.
"""

import asyncio
from typing import Any

from tidegate.runtime import Service
from tidegate.testing.waiting import until


class RunningServices:
    """The services a test started in this process, in start order."""

    def __init__(self, *, ready_within: float = 20.0, stop_within: float = 15.0) -> None:
        """``ready_within``: how long :meth:`start` waits; ``stop_within``: how long each
        graceful stop may take."""
        self.running: list[tuple[Service[Any], asyncio.Task[int]]] = []
        """Each service with the task running it; :meth:`stop` removes it."""
        self._ready_within = ready_within
        self._stop_within = stop_within

    async def start(self, service: Service[Any]) -> None:
        """Run ``service`` until stopped; return once it reports ready (a standby counts)."""
        task = asyncio.create_task(service.run(handle_signals=False))
        self.running.append((service, task))
        await until(
            lambda: service.started.is_set() and service.readiness.ready,
            within=self._ready_within,
            what=f"{service.name} ready",
            alive=self.check,
        )

    def check(self) -> None:
        """Raise ``AssertionError`` if a service stopped without being asked to."""
        for service, task in self.running:
            if task.done():
                raise AssertionError(f"{service.name} stopped with exit code {task.result()}")

    async def stop(self, service: Service[Any]) -> int:
        """Stop ``service`` gracefully (as SIGTERM would); its exit code."""
        for entry in self.running:
            if entry[0] is service:
                self.running.remove(entry)
                service.request_stop()
                return await asyncio.wait_for(entry[1], self._stop_within)
        raise AssertionError(f"{service.name} is not running")

    async def exited(self, service: Service[Any], *, within: float = 30.0) -> int:
        """Wait for ``service`` to stop by itself (no longer a failure for :meth:`check`);
        its exit code."""
        for entry in self.running:
            if entry[0] is service:
                self.running.remove(entry)
                return await asyncio.wait_for(entry[1], within)
        raise AssertionError(f"{service.name} is not running")

    async def stop_all(self) -> None:
        """Stop every service still running, the last started first; then raise the first
        failure to stop (a timeout, or an exception out of a service), if there was one."""
        failures: list[Exception] = []
        for service, _ in reversed(list(self.running)):
            try:
                await self.stop(service)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
