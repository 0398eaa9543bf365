"""What the bus says about workloads and queues, read like any subscriber would.

``tidegate explain`` and ``tidegate queues`` need no access to a service: they replay the
last-value state stream (workloads, queues, cohorts, and the pods of one namespace when asked) and the
last decision of every kind about every workload (the decision stream replayed with
``LAST_PER_SUBJECT``: one message per ``tg.<c>.decision.<kind>.<ns>.<name>`` subject), then
stop. :class:`BusView` holds the result: the decisions in force are the services' own
:class:`~tidegate.model.replica.Replica`, so the commands show what the services act on;
:func:`read_view` fills it. Nothing here writes to the bus.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from tidegate.bus import (
    Bus,
    BusSettings,
    Received,
    StateFollower,
    StateHandler,
    connect,
    layout,
)
from tidegate.model import (
    CohortConfig,
    Message,
    Preempted,
    QueueConfig,
    Tombstone,
    WorkloadKey,
    subjects,
)
from tidegate.model.replica import Replica, Seen


@dataclass
class BusView:
    """Queues, and workloads, pods and decisions in a :class:`Replica`, replayed from the bus."""

    replica: Replica = field(default_factory=Replica)
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    cohorts: dict[str, CohortConfig] = field(default_factory=dict)
    """The queue tree's cohorts (``tidegate queues`` shows the tree)."""
    preemptions: dict[str, Seen[Preempted]] = field(default_factory=dict)
    """Preemptor key → its last ``preempted`` decision."""

    async def on_state(self, received: Received) -> None:
        """Handle one replayed state message."""
        self.apply_state(
            received.envelope.body,
            stream_sequence=received.stream_sequence,
            time=received.envelope.time,
        )

    async def on_decision(self, received: Received) -> None:
        """Handle one replayed decision (the last of its kind for its workload)."""
        self.apply_decision(
            received.envelope.body,
            stream_sequence=received.stream_sequence,
            time=received.envelope.time,
        )

    def apply_state(self, body: Message, *, stream_sequence: int, time: float) -> None:
        """Apply one state message (its stream sequence and envelope time)."""
        if isinstance(body, QueueConfig):
            self.queues[body.name] = body
        elif isinstance(body, Tombstone) and body.object_kind == "queue":
            self.queues.pop(body.name, None)
        elif isinstance(body, CohortConfig):
            self.cohorts[body.name] = body
        elif isinstance(body, Tombstone) and body.object_kind == "cohort":
            self.cohorts.pop(body.name, None)
        else:
            self.replica.apply(body, stream_sequence=stream_sequence, time=time)

    def apply_decision(self, body: Message, *, stream_sequence: int, time: float) -> None:
        """Apply one decision (its stream sequence and envelope time)."""
        if isinstance(body, Preempted):
            self.preemptions[body.preemptor] = Seen(body, stream_sequence, time)
        self.replica.apply(body, stream_sequence=stream_sequence, time=time)

    def known(self, key: str) -> bool:
        """Whether the bus holds the workload ``key`` or a decision about it."""
        return WorkloadKey(key) in self.replica


async def _replay(bus: Bus, stream: str, wanted: Sequence[str], handler: StateHandler) -> None:
    follower = StateFollower(
        bus, stream=stream, subjects=wanted, handler=handler, name=f"cli-{stream}"
    )
    task = asyncio.create_task(follower.run())
    try:
        replayed = asyncio.create_task(follower.replayed.wait())
        done, _ = await asyncio.wait({task, replayed}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises what stopped the follower
            raise RuntimeError(f"reading {stream} stopped before it was replayed")
    finally:
        for pending in (task, replayed):
            pending.cancel()
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(pending, return_exceptions=True)


async def fill_view(bus: Bus, cluster: str, *, pods_of: str | None = None) -> BusView:
    """Replay what the bus holds of ``cluster`` into a new :class:`BusView`; with
    ``pods_of`` (a namespace), the pods of that namespace too."""
    view = BusView()
    state = [
        f"tg.{cluster}.workload.>",
        f"tg.{cluster}.config.queue.>",
        f"tg.{cluster}.config.cohort.>",
    ]
    if pods_of is not None:
        state.append(f"tg.{cluster}.pod.{subjects.token(pods_of)}.>")
    await asyncio.gather(
        _replay(bus, layout.state_stream(cluster), state, view.on_state),
        _replay(
            bus,
            layout.decisions_stream(cluster),
            [subjects.decision_wildcard(cluster)],
            view.on_decision,
        ),
    )
    return view


async def read_view(settings: BusSettings, cluster: str, *, pods_of: str | None = None) -> BusView:
    """Connect with ``settings``, fill a view of ``cluster`` (see :func:`fill_view`), close."""
    bus = await connect(settings)
    try:
        return await fill_view(bus, cluster, pods_of=pods_of)
    finally:
        await bus.close()
