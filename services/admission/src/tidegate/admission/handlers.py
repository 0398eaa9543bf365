"""Bus messages in, calls into the admission policy out: short handlers, no decisions here.

Three streams feed :class:`tidegate.policy.admission.Admission`:

- the state stream (workloads, queues, topologies, nodes; tombstones for deletions), followed
  by leader and standby alike so a standby's picture is current when it takes over;
- the capacity stream (free capacity per node and topology from the topology-cache);
- the decision stream's ``preempted`` and ``released`` decisions (leader only, durable), which
  give quota back, and the ungater's ``replace-requested`` (slots lost to failed nodes, or
  whose pods the scheduler found no room for, placed again or the workload evicted:
  :meth:`~tidegate.policy.admission.Admission.replace`).

A handler updates the policy object, queues any decision it produced (a release: of a
workload deleted, re-created, or whose state says it finished) in :attr:`Handlers.outbox` (in
memory; the decision loop stages it in the ledger's durable outbox when it commits), and wakes
the decision loop (:mod:`tidegate.admission.app`), which runs the cycle and commits. Malformed
messages never reach here (the bus decodes and validates them); a message of a kind a stream
should not carry is logged and ignored.

A ``preempted``, ``released`` or ``replace-requested`` decision is never given up on (its
loss would leak quota): a handling that fails is retried with the
consumer's backoff for as long as it takes. One that failed :data:`STUCK_AFTER` times is not
retried silently: it is logged as an error naming its workload, once, and counted in
:attr:`Handlers.stuck` (the ``tidegate_admission_stuck_decisions`` gauge) until it succeeds.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from tidegate.bus import LeaseLost, Received
from tidegate.model import (
    CapacityDomain,
    CapacityNode,
    CohortConfig,
    NodeState,
    Preempted,
    QueueConfig,
    Released,
    ReplaceRequested,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.subjects import untoken
from tidegate.policy.admission import Admission, Decision

log = logging.getLogger(__name__)

SOURCE: Final = "admission"
"""The ``source`` of every envelope this service publishes."""

STUCK_AFTER: Final = 5
"""Failed deliveries after which a decision is reported stuck (it is still retried)."""

Commit = Callable[[Sequence[Decision]], Awaitable[None]]
"""Writes decisions to the ledger and publishes them (the decision loop's commit)."""


class Handlers:
    """The message handlers of one admission instance, sharing one policy object."""

    def __init__(self, admission: Admission) -> None:
        """Handlers feeding ``admission``."""
        self.admission = admission
        self.outbox: list[Decision] = []
        """Decisions produced by events (releases) waiting for the next commit."""
        self.wake = asyncio.Event()
        """Set when something happened that may change a decision."""
        self.lock = asyncio.Lock()
        """Held while the policy state is changed and its decisions committed."""
        self.on_workload_deleted: Callable[[WorkloadKey, float], None] | None = None
        """Told each workload deleted and when (the leader's decision retention)."""
        self.stuck: dict[str, str] = {}
        """Decisions whose handling failed :data:`STUCK_AFTER` times or more and has not
        succeeded since, by event id: the workload they are about."""

    async def on_state(self, received: Received) -> None:
        """A workload, queue, topology or node snapshot, or a tombstone of one."""
        body = received.envelope.body
        admission = self.admission
        match body:
            case WorkloadState():
                self.outbox.extend(admission.set_workload(body))
            case QueueConfig():
                admission.set_queue(body)
            case CohortConfig():
                admission.set_cohort(body)
            case TopologyConfig():
                admission.capacity.set_topology(body)
            case NodeState():
                admission.capacity.set_node(body)
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name):
                key = workload_key(namespace, name)
                self.outbox.extend(admission.remove_workload(key))
                if self.on_workload_deleted is not None:
                    self.on_workload_deleted(key, time.time())
            case Tombstone(object_kind="queue", name=name):
                admission.remove_queue(name)
            case Tombstone(object_kind="cohort", name=name):
                admission.remove_cohort(name)
            case Tombstone(object_kind="topology", name=name):
                admission.capacity.remove_topology(name)
            case Tombstone(object_kind="node", name=name):
                admission.capacity.remove_node(name)
            case _:
                log.debug("state: ignored %s on %s", type(body).__name__, received.subject)
                return
        self.wake.set()

    async def on_capacity(self, received: Received) -> None:
        """Free capacity of a node in a topology (domain aggregates are not needed here)."""
        body = received.envelope.body
        match body:
            case CapacityNode():
                self.admission.capacity.update(body)
            case Tombstone(name=name):
                topology = _capacity_topology(received.subject)
                if topology is None:
                    log.warning("capacity: tombstone on unexpected subject %s", received.subject)
                    return
                self.admission.capacity.remove(topology, name)
            case CapacityDomain():
                return
            case _:
                log.debug("capacity: ignored %s on %s", type(body).__name__, received.subject)
                return
        self.wake.set()

    def decision_handler(self, commit: Commit) -> Callable[[Received], Awaitable[None]]:
        """The handler of preempted / released decisions (acked once committed)."""

        async def handle(received: Received) -> None:
            event_id = received.envelope.event_id
            try:
                await apply(received)
            except LeaseLost:
                raise
            except Exception as exc:
                if received.delivered >= STUCK_AFTER and event_id not in self.stuck:
                    workload = str(getattr(received.envelope.body, "workload", "")) or str(
                        getattr(received.envelope.body, "preemptor", "")
                    )
                    self.stuck[event_id] = workload
                    log.error(
                        "decision %s about %s failed %d times, retried until it succeeds: %s",
                        received.subject,
                        workload,
                        received.delivered,
                        exc,
                        extra={"workload": workload, "event_id": event_id},
                    )
                raise
            if self.stuck.pop(event_id, None) is not None:
                log.info(
                    "decision %s handled after %d deliveries", received.subject, received.delivered
                )

        async def apply(received: Received) -> None:
            body = received.envelope.body
            if received.envelope.source == SOURCE:
                return  # our own releases are applied already
            async with self.lock:
                match body:
                    case Preempted():
                        decisions = self.admission.preempted(body, now=time.time())
                    case ReplaceRequested():
                        decisions = self.admission.replace(body, now=time.time())
                    case Released(workload=key, uid=uid, sequence=sequence):
                        found = self.admission.release_if(
                            WorkloadKey(key), uid=uid, before=sequence, reason=body.reason
                        )
                        decisions = [found] if found is not None else []
                    case _:
                        return
                # Decisions an earlier commit failed to write go first. If this commit fails
                # too, the policy state has changed already: keep the decisions for the next
                # commit (a redelivery of this message then finds nothing left to decide and
                # commits them before it is acked), never drop them with the nak.
                pending = [*self.outbox, *decisions]
                self.outbox.clear()
                try:
                    await commit(pending)
                except BaseException:
                    self.outbox[:0] = pending
                    raise
            self.wake.set()

        return handle


def _capacity_topology(subject: str) -> str | None:
    """The topology named by ``tg.<c>.capacity.<topology>.node.<name>``."""
    parts = subject.split(".")
    if len(parts) >= 6 and parts[2] == "capacity" and parts[4] == "node":
        return untoken(parts[3])
    return None
