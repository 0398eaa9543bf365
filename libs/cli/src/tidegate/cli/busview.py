"""What the bus says about workloads and queues, read like any subscriber would.

``tidegate explain`` and ``tidegate queues`` need no access to a service: they replay the
last-value state stream (workloads, queues, and the pods of one namespace when asked) and the
last decision of every kind about every workload (the decision stream replayed with
``LAST_PER_SUBJECT``: one message per ``tg.<c>.decision.<kind>.<ns>.<name>`` subject), then
stop. :class:`BusView` holds the result and answers the questions both commands ask;
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
    Admitted,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    Tombstone,
    WorkloadState,
    subjects,
    workload_key,
)

DecisionBody = Admitted | Pending | PreemptRequested | Released

_KINDS: dict[type, str] = {
    Admitted: "admitted",
    Pending: "pending",
    PreemptRequested: "preempt-requested",
    Released: "released",
}


@dataclass(frozen=True)
class Seen:
    """One decision as the bus holds it: its stream sequence, its time and its body."""

    sequence: int
    time: float
    body: DecisionBody


@dataclass(frozen=True)
class Preemption:
    """One ``preempted`` decision: the preemptor evicted ``victims``."""

    sequence: int
    time: float
    body: Preempted


@dataclass
class BusView:
    """Workloads, queues, pods and the last decisions, as replayed from the bus."""

    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    pods: dict[str, list[PodState]] = field(default_factory=dict)
    """Pods by workload key (only the namespace that was read)."""
    decisions: dict[str, dict[str, Seen]] = field(default_factory=dict)
    """Workload key → decision kind → the last decision of that kind."""
    preemptions: dict[str, Preemption] = field(default_factory=dict)
    """Preemptor key → its last ``preempted`` decision."""

    async def on_state(self, received: Received) -> None:
        """Handle one replayed state message."""
        body = received.envelope.body
        if isinstance(body, WorkloadState):
            self.workloads[workload_key(body.namespace, body.name)] = body
        elif isinstance(body, QueueConfig):
            self.queues[body.name] = body
        elif isinstance(body, PodState) and body.workload:
            self.pods.setdefault(body.workload, []).append(body)
        elif isinstance(body, Tombstone) and body.object_kind == "workload" and body.namespace:
            self.workloads.pop(workload_key(body.namespace, body.name), None)
        elif isinstance(body, Tombstone) and body.object_kind == "queue":
            self.queues.pop(body.name, None)

    async def on_decision(self, received: Received) -> None:
        """Handle one replayed decision (the last of its kind for its workload)."""
        body = received.envelope.body
        seq, at = received.stream_sequence, received.envelope.time
        if isinstance(body, Preempted):
            self.preemptions[body.preemptor] = Preemption(seq, at, body)
        elif isinstance(body, Admitted | Pending | PreemptRequested | Released):
            kind = _KINDS[type(body)]
            self.decisions.setdefault(body.workload, {})[kind] = Seen(seq, at, body)

    def current(self, key: str) -> list[Seen]:
        """The last decisions about the current incarnation (UID) of ``key``, oldest first."""
        workload = self.workloads.get(key)
        seen = list(self.decisions.get(key, {}).values())
        if workload is not None:
            seen = [s for s in seen if s.body.uid == workload.uid]
        return sorted(seen, key=lambda s: s.sequence)

    def last(self, key: str) -> Seen | None:
        """The newest decision about the current ``key`` (preempt requests aside: they are
        followed by a pending decision that says the same)."""
        seen = [s for s in self.current(key) if not isinstance(s.body, PreemptRequested)]
        return seen[-1] if seen else None

    def admitted(self, key: str) -> Admitted | None:
        """The admission ``key`` holds now, if its newest decision is one."""
        last = self.last(key)
        return last.body if last is not None and isinstance(last.body, Admitted) else None

    def preempted_by(self, key: str) -> list[Preemption]:
        """Preemptions that evicted ``key`` (any incarnation), oldest first."""
        return sorted(
            (p for p in self.preemptions.values() if key in p.body.victims),
            key=lambda p: p.sequence,
        )


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
    state = [f"tg.{cluster}.workload.>", f"tg.{cluster}.config.queue.>"]
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
