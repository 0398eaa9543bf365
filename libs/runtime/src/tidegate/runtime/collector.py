"""How often Python's cyclic garbage collector runs in a tidegate process.

CPython collects its youngest generation once 700 more container objects have been made than
freed. A service keeps thousands of decoded objects alive for a few seconds each (a pod's last
state until its next change), so at that threshold most of them outlive two young collections
and land in the oldest generation, whose collections walk every object the process holds. A
higher first threshold lets them die young instead (docs/benchmarks.md, "The garbage
collector"). The two older generations keep CPython's thresholds.
"""

import gc
import os
from collections.abc import Mapping

GC_THRESHOLD_ENV = "TIDEGATE_GC_THRESHOLD"
"""The variable that sets the threshold; services also take it from their settings file."""

DEFAULT_GC_THRESHOLD = 20_000
"""Container objects made (net of those freed) between two collections of the youngest
generation; CPython's own default is 700."""


class GcThresholdError(ValueError):
    """The threshold asked for is not a positive whole number; the message names the
    setting."""


def check(threshold: int) -> int:
    """``threshold`` if it can be one (a whole number ≥ 1), else :class:`GcThresholdError`.

    0 would switch the cyclic collector off, and a process that makes reference cycles
    (tracebacks, asyncio's futures) would then grow without bound: not offered.
    """
    if threshold < 1:
        raise GcThresholdError(f"{GC_THRESHOLD_ENV}={threshold}: must be a whole number ≥ 1")
    return threshold


def configured_threshold(environ: Mapping[str, str] = os.environ) -> int:
    """The threshold ``TIDEGATE_GC_THRESHOLD`` asks for (:data:`DEFAULT_GC_THRESHOLD` when
    unset), for the command-line tools and benchmarks; a service reads the same setting with
    the rest of its settings, and both accept the same values (set but empty is refused).

    Raises :class:`GcThresholdError` naming the variable.
    """
    raw = environ.get(GC_THRESHOLD_ENV)
    if raw is None:
        return DEFAULT_GC_THRESHOLD
    value = raw.strip()
    try:
        threshold = int(value)
    except ValueError:
        raise GcThresholdError(
            f"{GC_THRESHOLD_ENV}={value!r}: must be a whole number ≥ 1"
        ) from None
    return check(threshold)


def apply(threshold: int) -> None:
    """Collect the youngest generation every ``threshold`` container objects; the older
    generations keep their thresholds."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(check(threshold), middle, oldest)
