"""How a command-line tool or benchmark runs its main coroutine: on the event loop
``TIDEGATE_EVENT_LOOP`` names, with the garbage-collector threshold ``TIDEGATE_GC_THRESHOLD``
names (a service reads both with its settings instead, :mod:`tidegate.runtime.service`)."""

from collections.abc import Coroutine
from typing import Any, TypeVar

from tidegate.runtime import collector, eventloop

T = TypeVar("T")


class ToolSettingError(ValueError):
    """``TIDEGATE_EVENT_LOOP`` or ``TIDEGATE_GC_THRESHOLD`` cannot be used; the message names
    the variable."""


def run_tool(main: Coroutine[Any, Any, T]) -> T:
    """Apply the configured threshold, then run ``main`` to completion on the configured loop.

    Raises :class:`ToolSettingError` (``main`` closed, never run) when either setting is bad.
    """
    try:
        collector.apply(collector.configured_threshold())
    except collector.GcThresholdError as exc:
        main.close()  # never awaited: close it so Python does not warn about it
        raise ToolSettingError(str(exc)) from exc
    try:
        return eventloop.run(main)
    except eventloop.EventLoopError as exc:
        raise ToolSettingError(str(exc)) from exc
