"""Retry delays: capped exponential backoff with jitter, overridden by the server's Retry-After.

Pure arithmetic, no sleeping and no I/O, so the schedule is testable on its own. The retry loop
in :mod:`tidegate.kube.client` decides *whether* to retry; this decides *how long* to wait.
"""

import random
from dataclasses import dataclass

_RNG = random.Random()


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Delay schedule: ``initial_seconds * 2**attempt`` with full jitter, at most ``max_seconds``."""

    initial_seconds: float
    """Base delay before the first retry."""
    max_seconds: float
    """Cap on any delay, including a server-requested Retry-After."""

    def delay(
        self,
        attempt: int,
        *,
        retry_after_seconds: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry).

        A server-given Retry-After wins (capped at ``max_seconds``); otherwise the exponential
        delay is jittered to between half and all of its value, so many clients that failed
        together do not retry together.
        """
        if retry_after_seconds is not None:
            return min(max(retry_after_seconds, 0.0), self.max_seconds)
        ceiling = min(self.initial_seconds * (2.0 ** min(attempt, 30)), self.max_seconds)
        fraction = (rng or _RNG).uniform(0.5, 1.0)
        return ceiling * fraction
