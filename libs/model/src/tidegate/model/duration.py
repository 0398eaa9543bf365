"""Durations users write ("2h30m", "90m", "45s", "3600") as seconds, and back.

One parser for every duration tidegate reads from a workload or a Queue
(``tidegate.io/max-runtime``, ``spec.defaultMaxRuntime``, ``spec.aging.step``), so they all
accept the same forms: a number of seconds (``3600``, ``"3600"``, ``"90.5"``), or Go's
duration syntax restricted to hours, minutes and seconds (``"2h30m"``, ``"1.5h"``,
``"1h0m0s"``). Pure code.
"""

import math
import re
from typing import Final

_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([hms])")
_UNITS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0}


class DurationError(ValueError):
    """A value that is not a positive duration; the message says why."""


def parse_duration(value: object) -> float:
    """Seconds of ``value``: a positive number of seconds or a string like ``"2h30m"``.

    Raises :class:`DurationError` for anything else (zero, negative, a bool, an unknown unit,
    garbage)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"{value!r} is not a duration (write e.g. 2h30m or 9000)")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _go_duration(text, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise DurationError(f"{value!r} is not a positive duration")
    return seconds


def _go_duration(text: str, original: object) -> float:
    position = 0
    seconds = 0.0
    seen: set[str] = set()
    while position < len(text):
        match = _PART.match(text, position)
        if match is None or match.group(2) in seen:
            raise DurationError(
                f"{original!r} is not a duration (write e.g. 2h30m, 90m, 45s or 9000)"
            )
        seen.add(match.group(2))
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not text:
        raise DurationError(f"{original!r} is not a duration (it is empty)")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as ``"2h30m"``, ``"1h"``, ``"45s"``, ``"1h0m5s"`` (whole seconds)."""
    total = max(round(seconds), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return (
            f"{hours}h" + (f"{minutes}m" if minutes or secs else "") + (f"{secs}s" if secs else "")
        )
    if minutes:
        return f"{minutes}m" + (f"{secs}s" if secs else "")
    return f"{secs}s"
