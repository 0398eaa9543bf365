"""The work loop every simulated controller shares: a set of dirty keys plus timers.

Store listeners run synchronously inside a write, so they must not write themselves; they
only mark keys dirty (or set a timer). :class:`Reconciler.run` then reconciles the dirty keys
in batches, yielding to the event loop between keys so the API server stays responsive, and
wakes for timers (a pod that finishes, a grace period that ends). A reconcile that fails with
an :class:`~tidegate.sim.errors.ApiError` (a conflict with a concurrent client write, say) is
retried a little later; any other exception is logged and retried after a few seconds; neither
stops the loop.
"""

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Hashable
from typing import Final

from tidegate.sim.errors import ApiError

_LOG: Final = logging.getLogger(__name__)
_RETRY_SECONDS: Final = 0.2
_FAILURE_RETRY_SECONDS: Final = 5.0
_YIELD_EVERY: Final = 200


class Reconciler:
    """Base class: subclasses implement :meth:`reconcile` and call :meth:`mark`/:meth:`at`."""

    name = "controller"

    def __init__(self, *, debounce_seconds: float = 0.0) -> None:
        self._dirty: dict[Hashable, None] = {}
        self._timers: list[tuple[float, int, Hashable]] = []
        self._sequence = 0
        self._wake = asyncio.Event()
        self._debounce = debounce_seconds

    def mark(self, key: Hashable) -> None:
        """Reconcile ``key`` soon."""
        self._dirty[key] = None
        self._wake.set()

    def at(self, when: float, key: Hashable) -> None:
        """Reconcile ``key`` at monotonic time ``when``."""
        self._sequence += 1
        heapq.heappush(self._timers, (when, self._sequence, key))
        self._wake.set()

    def reconcile(self, key: Hashable) -> None:
        """Bring the world in line for one key (synchronous, no awaits)."""
        raise NotImplementedError

    def start(self) -> None:
        """Subscribe to the store and mark initial work (called once before :meth:`run`)."""

    def stop(self) -> None:
        """Unsubscribe (called when the cluster stops)."""

    def _due(self) -> float | None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, key = heapq.heappop(self._timers)
            self._dirty[key] = None
        if self._timers:
            return max(self._timers[0][0] - now, 0.0)
        return None

    async def run(self) -> None:
        """Reconcile until cancelled."""
        self.start()
        try:
            while True:
                wait = self._due()
                if not self._dirty:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                    continue
                if self._debounce:
                    await asyncio.sleep(self._debounce)
                    self._due()
                batch = list(self._dirty)
                self._dirty.clear()
                self.before_batch()
                for count, key in enumerate(batch, start=1):
                    try:
                        self.reconcile(key)
                    except ApiError as exc:
                        _LOG.debug("%s: %s: %s, retrying", self.name, key, exc.message)
                        self.at(time.monotonic() + _RETRY_SECONDS, key)
                    except Exception:
                        # A bug or an object shape we did not foresee must not stop the
                        # simulated control plane: log it and try that key again later.
                        _LOG.exception("%s: reconciling %s failed", self.name, key)
                        self.at(time.monotonic() + _FAILURE_RETRY_SECONDS, key)
                    if count % _YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                self.after_batch()
                await asyncio.sleep(0)
        finally:
            self.stop()

    def before_batch(self) -> None:
        """Hook run before each batch of reconciles."""

    def after_batch(self) -> None:
        """Hook run after each batch of reconciles."""
