"""Bus messages in, calls into the view and the preempter out: short handlers, no decisions.

Four inputs, all in stream order:

- the state stream (workloads, pods, queues, topologies, nodes; tombstones for deletions),
- the capacity stream (free capacity per node and topology, from the topology-cache),
- the decision stream's ``admitted`` and ``released`` decisions, followed as last value per
  subject: the newest admission and release of every workload say whether it is admitted,
- the decision stream's ``preempt-requested`` decisions (durable consumer, leader only).

Every instance follows the first three, so a standby's view is current when it takes over.
A change that may end a nomination (the preemptor admitted or deleted) wakes the reconcile
loop. Messages that do not decode never reach here (the bus logs them with their JSON path);
a message of a kind a stream should not carry is logged and ignored.
"""

import asyncio
import logging
import math
import time
from typing import Final

from tidegate.bus import Ack, LeaseLost, Outcome, Received, Retry
from tidegate.model import (
    Admitted,
    CapacityDomain,
    CapacityNode,
    CohortConfig,
    DisruptionBudgetState,
    NodeState,
    PodState,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    workload_key,
)
from tidegate.model.subjects import untoken
from tidegate.preemption.preempter import Preempter
from tidegate.preemption.view import PreemptionView

log = logging.getLogger(__name__)

UNKNOWN_PREEMPTOR_PATIENCE_SECONDS: Final = 10.0
"""How long a preempt request whose preemptor the view does not know (with that UID; for a
growth, as admitted) is asked again, once a second: the view's streams may lag the request,
e.g. while a NATS cluster elects a new stream leader. An older one is dropped as stale."""

UNKNOWN_PREEMPTOR_RETRY_SECONDS: Final = 1.0
"""The delay between two deliveries of such a request."""

REQUEST_MAX_DELIVER: Final = 2 * math.ceil(
    UNKNOWN_PREEMPTOR_PATIENCE_SECONDS / UNKNOWN_PREEMPTOR_RETRY_SECONDS
)
"""Deliveries of a preempt request before it is dead-lettered: twice those of a request asked
again through the whole patience (20)."""


class Handlers:
    """The message handlers of one preemption instance, sharing one view."""

    def __init__(self, view: PreemptionView) -> None:
        """Handlers feeding ``view``."""
        self.view = view
        self.preempter: Preempter | None = None
        """Set once this instance leads; requests are only consumed then."""
        self.wake = asyncio.Event()
        """Set when a nomination may have ended: the reconcile loop runs soon."""
        self.lost: LeaseLost | None = None
        """Set when a handler found that another instance leads: the leader loop stops."""

    async def on_state(self, received: Received) -> None:
        """A workload, pod, queue, topology or node snapshot, or a tombstone of one."""
        body = received.envelope.body
        view = self.view
        match body:
            case WorkloadState():
                view.replica.apply(body)
                self._touch(workload_key(body.namespace, body.name))
            case PodState():
                view.replica.apply(body)
            case QueueConfig():
                view.set_queue(body)
            case TopologyConfig():
                view.set_topology(body)
            case NodeState():
                view.set_node(body)
            case DisruptionBudgetState():
                view.set_budget(body)
            case Tombstone(object_kind="pdb", namespace=str(namespace), name=name):
                view.remove_budget(namespace, name)
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name):
                view.replica.apply(body)
                view.replica.forget(workload_key(namespace, name))
                self._touch(workload_key(namespace, name))
            case Tombstone(object_kind="pod"):
                view.replica.apply(body)
            case CohortConfig():
                view.set_cohort(body)
            case Tombstone(object_kind="cohort", name=name):
                view.remove_cohort(name)
            case Tombstone(object_kind="queue", name=name):
                view.remove_queue(name)
            case Tombstone(object_kind="topology", name=name):
                view.remove_topology(name)
            case Tombstone(object_kind="node", name=name):
                view.remove_node(name)
            case _:
                log.debug("state: ignored %s on %s", type(body).__name__, received.subject)

    async def on_capacity(self, received: Received) -> None:
        """Free capacity of a node in a topology (domain aggregates are not needed here)."""
        body = received.envelope.body
        match body:
            case CapacityNode():
                self.view.update_capacity(body)
            case Tombstone(name=name):
                topology = capacity_topology(received.subject)
                if topology is None:
                    log.warning("capacity: tombstone on unexpected subject %s", received.subject)
                    return
                self.view.remove_capacity(topology, name)
            case CapacityDomain():
                return
            case _:
                log.debug("capacity: ignored %s on %s", type(body).__name__, received.subject)

    async def on_decision(self, received: Received) -> None:
        """An admission, a release or a preemption: who holds an admission in force (running
        gangs, nominations)."""
        body = received.envelope.body
        match body:
            case Admitted():
                self.view.admitted(body, at=received.envelope.time)
                self._touch(WorkloadKey(body.workload))
            case Released() | Preempted():
                self.view.replica.apply(body)
            case _:
                log.debug("decisions: ignored %s on %s", type(body).__name__, received.subject)

    async def on_request(self, received: Received) -> Outcome:
        """A preempt request (durable consumer): answered by the preempter; asked again later
        while the view does not know its preemptor and the request is young."""
        body = received.envelope.body
        if not isinstance(body, PreemptRequested):
            log.warning("requests: ignored %s on %s", type(body).__name__, received.subject)
            return Ack()
        if self.preempter is None:
            raise RuntimeError("a preempt request arrived before this instance leads")
        try:
            outcome = await self.preempter.handle(body)
        except LeaseLost as exc:
            self.lost = exc
            self.wake.set()
            raise
        if outcome != "unknown":
            return Ack()
        age = time.time() - received.envelope.time
        if age < UNKNOWN_PREEMPTOR_PATIENCE_SECONDS:
            return Retry(
                f"preemptor {body.workload} (uid {body.uid}) not in the view yet"
                + (" as admitted (a growth)" if body.podsets else ""),
                delay_seconds=UNKNOWN_PREEMPTOR_RETRY_SECONDS,
            )
        log.info(
            "preempt request for %s ignored: the workload is gone or replaced%s (%.0f s old)",
            body.workload,
            ", or no longer admitted (a growth)" if body.podsets else "",
            age,
        )
        return Ack()

    def _touch(self, key: WorkloadKey) -> None:
        if self.preempter is not None and key in self.preempter.records:
            self.wake.set()


def capacity_topology(subject: str) -> str | None:
    """The topology named by ``tg.<c>.capacity.<topology>.node.<name>``."""
    parts = subject.split(".")
    if len(parts) >= 6 and parts[2] == "capacity" and parts[4] == "node":
        return untoken(parts[3])
    return None
