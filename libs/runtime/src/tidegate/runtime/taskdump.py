"""Every asyncio task's await chain, for a process that seems stuck (``kill -USR1 PID``).

``Task.print_stack`` shows one frame of a suspended task; a hang is understood from the whole
chain of awaits down to the future it waits for, which this module walks.
"""

import asyncio
import logging
from types import CoroutineType, FrameType, GeneratorType
from typing import Any

log = logging.getLogger(__name__)


def await_chain(coroutine: Any) -> list[str]:
    """``file:line in function`` of each coroutine or generator awaited in turn from
    ``coroutine`` (outermost first), then what the innermost one waits for."""
    lines: list[str] = []
    current = coroutine
    for _ in range(200):  # an await chain is finite; the bound only guards against a cycle
        frame: FrameType | None
        if isinstance(current, CoroutineType):
            frame, following = current.cr_frame, current.cr_await
        elif isinstance(current, GeneratorType):
            frame, following = current.gi_frame, current.gi_yieldfrom
        else:
            frame, following = None, getattr(current, "cr_await", None)
            if following is None:
                if current is not None:
                    lines.append(f"waiting on {current!r:.200}")
                break
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        current = following
        if current is None:
            break
    return lines


def describe_tasks() -> str:
    """Every task of the running loop with its await chain, one block per task."""
    blocks = []
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        chain = "\n    ".join(await_chain(task.get_coro())) or "(no frames)"
        state = " (cancelling)" if task.cancelling() else ""
        blocks.append(f"task {task.get_name()}{state}:\n    {chain}")
    return "\n".join(blocks)


def log_tasks(why: str = "on request (SIGUSR1)") -> None:
    """Log :func:`describe_tasks` at WARNING (the SIGUSR1 handler of every service)."""
    log.warning("asyncio tasks %s:\n%s", why, describe_tasks())
