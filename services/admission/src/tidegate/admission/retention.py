"""The decision log's retention: the leader purges the decisions of workloads long gone.

The decision stream has no age limit (an admission is in force as long as its workload runs,
which may be months) and keeps the newest decisions per subject
(:attr:`tidegate.bus.layout.LayoutSettings.decisions_per_subject`). What keeps it proportional
to live workloads is this sweep: every ``decisions_sweep_seconds`` the admission leader lists
the workloads the stream holds decisions about, and purges those of a workload it has not
known (no state, no admission, not kept out) for ``decisions_kept_after_delete_seconds`` in a
row. Only absence seen by this leader counts, so a new leader starts every clock again: it
keeps decisions longer, never shorter. A workload created again under the same name before
its clock runs out is known again and keeps its subjects.
"""

import logging
from collections.abc import Iterable

from tidegate.bus import Bus, layout
from tidegate.model import WorkloadKey, subjects, workload_key

log = logging.getLogger(__name__)

MAX_PURGES_PER_SWEEP = 500
"""Purges one sweep makes at most (each is a request to the server); the rest wait for the
next sweep."""


def expired(
    listed: Iterable[WorkloadKey],
    known: set[WorkloadKey],
    absent_since: dict[WorkloadKey, float],
    *,
    now: float,
    keep_seconds: float,
) -> list[WorkloadKey]:
    """The listed workloads unknown for ``keep_seconds`` in a row, oldest absence first.

    ``absent_since`` (updated) remembers when each listed workload was first seen unknown;
    one known again, or no longer listed, is forgotten."""
    listed = set(listed)
    for key in list(absent_since):
        if key in known or key not in listed:
            del absent_since[key]
    for key in listed - known:
        absent_since.setdefault(key, now)
    due = [k for k, since in absent_since.items() if now - since >= keep_seconds]
    return sorted(due, key=lambda k: (absent_since[k], k))


class DecisionRetention:
    """The admission leader's sweep of the decision stream (module docstring)."""

    def __init__(self, bus: Bus, cluster: str, *, keep_seconds: float, every_seconds: float):
        """Purge decisions of workloads unknown for ``keep_seconds``, looking every
        ``every_seconds``."""
        self._bus = bus
        self._cluster = cluster
        self._keep_seconds = keep_seconds
        self._every_seconds = every_seconds
        self._absent_since: dict[WorkloadKey, float] = {}
        self._next_sweep = 0.0
        self.purged = 0
        """Workloads whose decisions this instance purged."""

    def due(self, now: float) -> bool:
        """Whether a sweep is due at ``now``."""
        return now >= self._next_sweep

    async def sweep(self, known: set[WorkloadKey], *, now: float) -> list[WorkloadKey]:
        """List the stream's workloads, purge those expired (see :func:`expired`); the
        workloads purged. Raises BusError when NATS cannot be asked (the next sweep retries)."""
        self._next_sweep = now + self._every_seconds
        stream = layout.decisions_stream(self._cluster)
        listed = await self._bus.subjects_in(stream, subjects.decision_wildcard(self._cluster))
        workloads = {
            workload_key(*found)
            for subject in listed
            if (found := subjects.decision_workload(subject)) is not None
        }
        due = expired(
            workloads, known, self._absent_since, now=now, keep_seconds=self._keep_seconds
        )[:MAX_PURGES_PER_SWEEP]
        for key in due:
            namespace, _, name = key.partition("/")
            await self._bus.purge(stream, subjects.decisions_of(self._cluster, namespace, name))
            del self._absent_since[key]
        if due:
            self.purged += len(due)
            log.info(
                "admission: purged the decisions of %d workloads gone for %.0f s or more",
                len(due),
                self._keep_seconds,
            )
        return due
