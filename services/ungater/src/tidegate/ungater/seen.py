"""Which workloads the view knows every decision of that could change their releases.

The releaser releases a workload's pods only from a view holding every decision stored so far
that could move them: a ``preempted`` is stored before its victims' pods are evicted, so before
their replacements exist, and a view that lags the decision stream must not let those
replacements into the victim's old slots. What can move a workload's pods is a decision on its
own subjects (``admitted``, ``released``) or any ``preempted`` (it names its victims in the
preemptor's decision). Decisions about other workloads cannot, so they do not hold it back:
under load some decision is nearly always in flight, and asking for a view that holds *every*
decision would hold early releases back until the flood passed, and that wait would set
the p99 of release latency.
"""

import asyncio
from collections.abc import Collection, Sequence

from tidegate.bus import Bus, Received, StateHandler, layout
from tidegate.model import WorkloadKey, subjects
from tidegate.model.subjects import DecisionKind

FEW = 4
"""Up to this many workloads, their own decisions are asked for at once; above it, first one
check of every followed decision (a quiet stream answers for all in a few reads)."""

PER_WORKLOAD_LIMIT = 64
"""Above this many workloads, only that one check: all are current or none is."""

RELEASE_KINDS: tuple[DecisionKind, ...] = ("admitted", "released")
"""Decisions on a workload's own subjects that change where its pods may go."""


class SeenDecisions:
    """The newest decision-stream sequence the view has handled, and the checks above."""

    def __init__(self, cluster: str, followed: Sequence[str]) -> None:
        """For the view of ``cluster`` following the decision subjects ``followed``."""
        self.cluster = cluster
        self.followed = list(followed)
        self.sequence = 0
        """Stream sequence of the newest decision the view handled."""

    def wrap(self, handler: StateHandler) -> StateHandler:
        """``handler``, remembering the sequence of every message it handled."""

        async def handle(received: Received) -> None:
            await handler(received)
            self.sequence = max(self.sequence, received.stream_sequence)

        return handle

    async def current(self, bus: Bus, keys: Collection[WorkloadKey]) -> set[WorkloadKey]:
        """The workloads of ``keys`` no stored and unseen decision could move (module doc)."""
        if not keys:
            return set()
        stream = layout.decisions_stream(self.cluster)
        seen = self.sequence
        if len(keys) > FEW:
            if not await bus.stored_after(stream, seen, self.followed):
                return set(keys)
            if len(keys) > PER_WORKLOAD_LIMIT:
                return set()
        ordered = list(keys)
        preempted, *behind = await asyncio.gather(
            bus.stored_after(stream, seen, [f"tg.{self.cluster}.decision.preempted.>"]),
            *(bus.stored_after(stream, seen, self._own(key)) for key in ordered),
        )
        if preempted:
            return set()
        return {key for key, late in zip(ordered, behind, strict=True) if not late}

    def _own(self, key: WorkloadKey) -> list[str]:
        namespace, _, name = key.partition("/")
        return [subjects.decision(self.cluster, kind, namespace, name) for kind in RELEASE_KINDS]
