"""Client-side token bucket, so one tidegate process never floods the API server.

client-go gives every client a QPS/burst limiter; kubernetes-asyncio has none. The bucket
holds up to ``burst`` tokens and refills at ``qps`` tokens per second; each request takes one,
waiting when the bucket is empty. Waiters are served first come, first served. This module
limits only the request rate; server-side throttling (429) is handled by the retry loop.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """An asyncio token bucket: ``await bucket.acquire()`` before each request.

    ``qps`` of 0 disables limiting. ``clock`` and ``sleep`` are injectable so the pacing can
    be tested without waiting.
    """

    def __init__(
        self,
        *,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    @property
    def qps(self) -> float:
        """Sustained rate in requests per second (0: unlimited)."""
        return self._qps

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._stamp) * self._qps)
        self._stamp = now

    def delay_for_next(self) -> float:
        """Seconds until a token is available (0 when one is available now); takes nothing."""
        if self._qps <= 0:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self._qps

    async def acquire(self) -> None:
        """Take one token, sleeping until one is available."""
        if self._qps <= 0:
            return
        # The lock makes waiters queue in arrival order instead of racing for each new token.
        async with self._lock:
            delay = self.delay_for_next()
            if delay > 0:
                await self._sleep(delay)
                self._refill()
            # May dip a hair below zero after the sleep; the next refill pays it back.
            self._tokens -= 1
