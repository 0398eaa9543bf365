"""Bus messages in, calls into the pure accounting out: short handlers, no arithmetic here.

Three streams feed :class:`tidegate.placement.accounting.CapacityAccounting` and the
:class:`~tidegate.policy.capacity_stream.PublishedView`:

- the state stream (nodes, pods, workloads, Topologies and their tombstones), replayed then
  followed;
- the decision stream's admitted, released and preempted decisions, replayed (the last one per
  subject, in stream order: a release can come before a copy of the admission it ended stored
  again after it, which the accounting ignores, since it learns which admissions ended from
  every release whether it holds the admission or not) then followed;
- the capacity stream (this service's own output), replayed once at start so only records
  that differ from what it holds are published again.

A handler applies the message, logs any problem the accounting reports (naming the field;
the rest of the message is applied and nothing stops), and wakes the publishing loop.
Malformed messages never reach here: the bus decodes and validates them.
"""

import asyncio
import logging

from tidegate.bus import Received
from tidegate.placement.accounting import CapacityAccounting
from tidegate.policy.capacity_stream import PublishedView

log = logging.getLogger(__name__)


class Handlers:
    """The message handlers of one topology-cache, sharing one accounting."""

    def __init__(self, accounting: CapacityAccounting, published: PublishedView) -> None:
        """Handlers feeding ``accounting`` and ``published``."""
        self.accounting = accounting
        self.published = published
        self.wake = asyncio.Event()
        """Set when the accounting changed and the publishing loop should look."""
        self.problems = 0
        """Inputs the accounting reported problems with, since start."""

    async def on_input(self, received: Received) -> None:
        """A state message or a decision: apply it to the accounting."""
        envelope = received.envelope
        problems = self.accounting.apply(envelope.body, time=envelope.time)
        for problem in problems:
            log.warning(
                "topology-cache: %s (on %s, event %s)",
                problem,
                received.subject,
                received.envelope.event_id,
                extra={"subject": received.subject, "problem": problem},
            )
        self.problems += bool(problems)
        self.wake.set()

    async def on_capacity(self, received: Received) -> None:
        """A record read back from the capacity stream at start."""
        if not self.published.replayed(received.subject, received.envelope.body):
            log.debug(
                "capacity: ignored %s on %s",
                type(received.envelope.body).__name__,
                received.subject,
            )
