"""Small helpers shared by the contract tests: run an informer in the background, wait."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tidegate.kube import Informer, InformerItem, KubeEvent, Synced
from tidegate.kube.transport import JsonObject
from tidegate.testing import until_async


@dataclass
class Recording:
    """Everything an informer yielded, in order, plus a queue to wait on."""

    informer: Informer
    items: list[InformerItem] = field(default_factory=list)
    queue: "asyncio.Queue[InformerItem]" = field(default_factory=asyncio.Queue)
    failure: BaseException | None = None
    _last: dict[tuple[str, str], JsonObject] = field(default_factory=dict)

    async def next(self, within: float = 10.0) -> InformerItem:
        """The next item, failing the test if none comes within ``within``."""
        if self.failure is not None:
            raise AssertionError(f"informer failed: {self.failure!r}")
        return await asyncio.wait_for(self.queue.get(), within)

    async def next_event(self, within: float = 10.0) -> KubeEvent:
        """The next :class:`KubeEvent`, skipping Synced markers and status-only pod changes.

        On a real cluster the scheduler writes the status of every pod it sees (a gated pod
        gets ``PodScheduled=False, SchedulingGated``), whenever it gets to it; the tests here
        are about what they write themselves.
        """
        while True:
            item = await self.next(within)
            if isinstance(item, KubeEvent) and not self._status_only(item):
                return item

    def _status_only(self, event: KubeEvent) -> bool:
        previous = self._last.get(event.key)
        self._last[event.key] = event.obj
        return (
            event.type == "MODIFIED"
            and event.obj.get("kind") == "Pod"
            and previous is not None
            and _without_status(previous) == _without_status(event.obj)
        )

    async def until_synced(self, within: float = 10.0) -> tuple[list[KubeEvent], Synced]:
        """Events up to and including the next Synced marker."""
        events: list[KubeEvent] = []
        while True:
            item = await self.next(within)
            if isinstance(item, Synced):
                return events, item
            self._last[item.key] = item.obj
            events.append(item)


def _without_status(obj: JsonObject) -> JsonObject:
    metadata = dict(obj.get("metadata") or {})  # type: ignore[call-overload]
    for volatile in ("resourceVersion", "managedFields"):
        metadata.pop(volatile, None)
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


@asynccontextmanager
async def recording(informer: Informer) -> AsyncIterator[Recording]:
    """Iterate ``informer`` in a background task for the duration of the block."""
    rec = Recording(informer)

    async def run() -> None:
        try:
            async for item in informer:
                rec.items.append(item)
                rec.queue.put_nowait(item)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            rec.failure = exc
            raise

    task = asyncio.create_task(run(), name="informer-under-test")
    try:
        yield rec
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:  # already recorded in rec.failure for the test to report
            pass


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float, interval: float = 0.05
) -> None:
    """Poll ``check`` until it is true; fail the test after ``within`` seconds."""
    await until_async(check, within=within, interval=interval)


def names(events: list[KubeEvent], kind: str | None = None) -> list[str]:
    """Object names of ``events`` (only of type ``kind`` when given), in order."""
    return [e.key[1] for e in events if kind is None or e.type == kind]
