"""The SIGUSR1 task dump names where each task waits, down the whole await chain."""

import asyncio

from tidegate.runtime.taskdump import await_chain, describe_tasks


async def _innermost(event: asyncio.Event) -> None:
    await event.wait()


async def _middle(event: asyncio.Event) -> None:
    await _innermost(event)


async def test_the_chain_reaches_the_innermost_await() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_middle(event), name="stuck-one")
    await asyncio.sleep(0)
    try:
        chain = await_chain(task.get_coro())
        functions = [line.rsplit(" in ", 1)[-1] for line in chain if " in " in line]
        assert functions[:3] == ["_middle", "_innermost", "wait"]
        assert "task stuck-one:" in describe_tasks()
    finally:
        event.set()
        await task


async def test_a_finished_coroutine_has_no_frames() -> None:
    async def done() -> None:
        return None

    coroutine = done()
    await coroutine
    assert await_chain(coroutine) == []
