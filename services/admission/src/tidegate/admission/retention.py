"""The decision log's retention: the leader purges the decisions of workloads long gone.

The decision stream has no age limit (an admission is in force as long as its workload runs,
which may be months) and keeps the newest decisions per subject
(:attr:`tidegate.bus.layout.LayoutSettings.decisions_per_subject`). What keeps it proportional
to live workloads is this sweep, in a task of its own beside the decision loop: every
``decisions_sweep_seconds`` it purges every decision of each workload admission has not known
(no state, no admission, not kept out) for ``decisions_kept_after_delete_seconds`` since it
was deleted. The candidates are the workloads whose tombstones the leader saw, plus, once at
takeover, every workload the stream holds decisions about (deletions no leader saw: their
clocks start then, so a takeover keeps decisions longer, never shorter). A purge removes only
messages stored before the sweep looked (``seq``), so a decision about a workload created
again under the same name meanwhile stays.
"""

import logging

from tidegate.bus import Bus, layout
from tidegate.model import WorkloadKey, subjects, workload_key

log = logging.getLogger(__name__)

MAX_PURGES_PER_SWEEP = 500
"""Purges one sweep makes at most (each is a request to the server); the rest wait for the
next sweep."""


def expired(
    absent_since: dict[WorkloadKey, float],
    known: set[WorkloadKey],
    *,
    now: float,
    keep_seconds: float,
) -> list[WorkloadKey]:
    """The workloads of ``absent_since`` (workload → when it was last seen deleted, or first
    seen unknown) unknown for ``keep_seconds`` since, oldest first; those ``known`` again are
    dropped from it."""
    for key in [k for k in absent_since if k in known]:
        del absent_since[key]
    due = [k for k, since in absent_since.items() if now - since >= keep_seconds]
    return sorted(due, key=lambda k: (absent_since[k], k))


class DecisionRetention:
    """The admission leader's sweep of the decision stream (module docstring)."""

    def __init__(self, bus: Bus, cluster: str, *, keep_seconds: float, every_seconds: float):
        """Purge decisions of workloads gone for ``keep_seconds``, looking every
        ``every_seconds``."""
        self._bus = bus
        self._cluster = cluster
        self.keep_seconds = keep_seconds
        self.every_seconds = every_seconds
        self._absent_since: dict[WorkloadKey, float] = {}
        """The candidates: workload → when its clock started."""

    def deleted(self, key: WorkloadKey, now: float) -> None:
        """``key``'s workload was deleted at ``now`` (its clock starts again)."""
        self._absent_since[key] = now

    async def list_all(self, *, now: float) -> int:
        """Take every workload the stream holds decisions about as a candidate whose clock
        starts ``now`` unless it runs already (at takeover); how many. Raises BusError when
        NATS cannot be asked."""
        stream = layout.decisions_stream(self._cluster)
        listed = await self._bus.subjects_in(stream, subjects.decision_wildcard(self._cluster))
        found = {
            workload_key(*workload)
            for subject in listed
            if (workload := subjects.decision_workload(subject)) is not None
        }
        for key in found:
            self._absent_since.setdefault(key, now)
        return len(found)

    async def stored_so_far(self) -> int:
        """The stream's newest sequence: read it before :meth:`due`, purge up to it."""
        return await self._bus.last_sequence(layout.decisions_stream(self._cluster))

    def due(self, known: set[WorkloadKey], *, now: float) -> list[WorkloadKey]:
        """The candidates to purge now (at most :data:`MAX_PURGES_PER_SWEEP`); candidates
        ``known`` again are dropped."""
        return expired(self._absent_since, known, now=now, keep_seconds=self.keep_seconds)[
            :MAX_PURGES_PER_SWEEP
        ]

    async def purge(self, keys: list[WorkloadKey], *, up_to: int) -> None:
        """Remove the decisions about ``keys`` stored at sequence ``up_to`` or before. Raises
        BusError when NATS cannot be asked (the keys stay candidates)."""
        stream = layout.decisions_stream(self._cluster)
        for key in keys:
            namespace, _, name = key.partition("/")
            subject = subjects.decisions_of(self._cluster, namespace, name)
            await self._bus.purge(stream, subject, before=up_to + 1)
            self._absent_since.pop(key, None)
        if keys:
            log.info(
                "admission: purged the decisions of %d workloads gone for %.0f s or more",
                len(keys),
                self.keep_seconds,
            )
