"""Which asyncio event loop a process runs on: uvloop's (the default) or the standard library's.

uvloop implements the event loop, its sockets and its timers on libuv, in C; the services and
the simulated cluster spend a good part of their CPU in the loop's own bookkeeping and socket
handling, and uvloop does that with less (docs/benchmarks.md, "The event loop"). The standard
loop stays one setting away (``TIDEGATE_EVENT_LOOP=asyncio``) for platforms uvloop does not
support and for ruling the loop out when debugging.
"""

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Literal, TypeVar, get_args

EventLoopKind = Literal["uvloop", "asyncio"]
"""``uvloop`` (libuv, the default) or ``asyncio`` (the standard library's selector loop)."""

EVENT_LOOP_KINDS: tuple[str, ...] = get_args(EventLoopKind)
"""Every :data:`EventLoopKind`, in the order the docs list them."""

EVENT_LOOP_ENV = "TIDEGATE_EVENT_LOOP"
"""The variable that chooses the loop; services also take it from their settings file."""

T = TypeVar("T")


class EventLoopError(ValueError):
    """The event loop asked for is not one tidegate knows, or cannot be made here (uvloop not
    installed); the message names the setting."""


def loop_factory(kind: EventLoopKind) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes a loop of ``kind``; None for the standard library's default.

    Raises :class:`EventLoopError` naming the setting when uvloop is asked for and is
    not installed.
    """
    if kind == "asyncio":
        return None
    try:
        import uvloop  # only when asked for, so "asyncio" works without it
    except ImportError as exc:
        raise EventLoopError(
            "event loop 'uvloop' is not installed here; install uvloop or set "
            "TIDEGATE_EVENT_LOOP=asyncio"
        ) from exc
    return uvloop.new_event_loop


def configured_kind(environ: Mapping[str, str] = os.environ) -> EventLoopKind:
    """The loop ``TIDEGATE_EVENT_LOOP`` asks for (uvloop when unset), for the command-line
    tools and benchmarks; a service reads the same setting with the rest of its settings, and
    both accept the same values (surrounding spaces ignored, the name as written here; set
    but empty is refused).

    Raises :class:`EventLoopError` naming the variable and the accepted values.
    """
    raw = environ.get(EVENT_LOOP_ENV)
    if raw is None:
        return "uvloop"
    value = raw.strip()
    if value == "uvloop":
        return "uvloop"
    if value == "asyncio":
        return "asyncio"
    raise EventLoopError(
        f"{EVENT_LOOP_ENV}={value!r}: expected one of {', '.join(EVENT_LOOP_KINDS)}"
    )


def run(main: Coroutine[Any, Any, T], kind: EventLoopKind | None = None) -> T:
    """Run ``main`` to completion on a new event loop of ``kind`` (by default the one
    :func:`configured_kind` names), as :func:`asyncio.run` does: the loop's async generators
    and default executor are shut down and the loop closed.

    Raises :class:`EventLoopError` (``main`` closed, never run) when that loop cannot be made.
    """
    try:
        factory = loop_factory(configured_kind() if kind is None else kind)
    except EventLoopError:
        main.close()  # never awaited: close it so Python does not warn about it
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_kind() -> EventLoopKind:
    """The kind of the loop running the caller (for logs and tests)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
