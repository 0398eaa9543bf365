"""Waiting in tests: poll a condition until it holds, or fail naming what never happened.

Integration tests watch real processes and real streams, so they cannot know when something
will be true, only how long is too long. Every harness waits the same way: poll every few
milliseconds, treat an ``AssertionError`` from the check as "not yet" (its last one becomes the
cause of the timeout), and fail at once when something the test depends on has died (the
``alive`` callback raises). This module does not decide how long is too long: callers do.
"""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TypeVar

T = TypeVar("T")


async def until(
    check: Callable[[], T],
    *,
    within: float,
    what: str = "condition",
    interval: float = 0.02,
    alive: Callable[[], None] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """Wait until ``check()`` is truthy, at most ``within`` seconds; its first truthy result.

    ``alive()`` runs before every poll and raises to fail at once. On timeout an
    ``AssertionError("timed out waiting for <what><describe()>")`` is raised, caused by the
    last ``AssertionError`` the check raised, if any.
    """

    async def checked() -> T:
        return check()

    return await until_async(
        checked, within=within, what=what, interval=interval, alive=alive, describe=describe
    )


async def until_async(
    check: Callable[[], Awaitable[T]],
    *,
    within: float,
    what: str = "condition",
    interval: float = 0.02,
    alive: Callable[[], None] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """Like :func:`until` for a coroutine function; returns its first truthy result."""
    deadline = time.monotonic() + within
    last_error: AssertionError | None = None
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            result = await check()
        except AssertionError as exc:
            last_error = exc
        else:
            if result:
                return result
        await asyncio.sleep(interval)
    detail = describe() if describe is not None else ""
    raise AssertionError(f"timed out waiting for {what}{detail}") from last_error


async def start_until(
    work: Coroutine[None, None, None], ready: asyncio.Event, *, within: float, what: str
) -> "asyncio.Task[None]":
    """Run ``work`` as a task and return the task once ``ready`` is set.

    If ``work`` ends first, its exception is raised (an ``AssertionError`` naming ``what`` when
    it ended without one); if ``within`` seconds pass first, it is cancelled and an
    ``AssertionError`` names ``what``.
    """
    task = asyncio.create_task(work)
    waiting = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait({task, waiting}, timeout=within, return_when="FIRST_COMPLETED")
    if waiting in done:
        return task
    waiting.cancel()
    if task in done:
        task.result()
    else:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    raise AssertionError(f"{what} did not become ready")
