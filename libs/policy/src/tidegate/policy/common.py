"""What admission, preemption and the ungater must agree on, written once.

Each rule here used to exist in more than one service, and the copies diverged (preemption
ignored admission's default queue, so queue-less inference never reclaimed and queue-less
training was never a victim). The services call these functions; none keeps a copy.

- **Which queue a workload is in** (:func:`queue_of`): the one it names, else the configured
  default queue. Only admission is configured with the default; the other services take the
  queue from admission's decisions (``admitted.queue``, ``preempt-requested.queue``), which
  carry what this function answered there.
- **Which Topology it is placed on** (:func:`choose_topology`): its queue's, else its own, else
  the only one known, else the configured default; a workload naming another Topology than
  its queue is invalid. Admission carries its answer in ``preempt-requested.topology``.
- **Which pods hold capacity** (:func:`holds_capacity`), **which run** as members of a
  running gang (:func:`runs`) and which are **active** (:func:`active`): defined in
  :mod:`tidegate.model.pods` (placement, below policy, needs them) and re-exported here.
- **Which pods an eviction removes** (:func:`evictable`): the ungater's evictions and
  preemption's victims alike.
- **What a queue holds** is the replica's (:class:`tidegate.model.replica.QueueTally`): what
  admission charged for the admissions in force, per resource and per card model.

Pure: no I/O.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidegate.model import PendingReason, PodState, QueueConfig, WorkloadState
from tidegate.model.pods import TERMINAL_PHASES, active, gated, holds_capacity, runs
from tidegate.placement import PlacementRequest

__all__ = [
    "TERMINAL_PHASES",
    "Failure",
    "TopologyProblem",
    "active",
    "choose_topology",
    "evictable",
    "gated",
    "holds_capacity",
    "queue_of",
    "runs",
    "stopped",
]


def stopped(workload: WorkloadState) -> bool:
    """Whether ``workload`` is suspended by someone else than tidegate (docs/workloads.md,
    "Suspended Jobs and JobSets"), or its namespace is being deleted: never admitted, reserves
    nothing, until it is resumed (or gone)."""
    return workload.namespace_deleting or (workload.suspended and not workload.resume_on_admission)


def queue_of(workload: WorkloadState, default_queue: str | None) -> str | None:
    """The queue ``workload`` is in: the one it names, else ``default_queue`` (None: none)."""
    return workload.queue or default_queue


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a workload, or part of it, is not admitted now: a pending reason and a sentence."""

    reason: PendingReason
    message: str
    request: PlacementRequest | None = None
    """For a placement failure: the request, to try on an empty cluster (or to preempt for)."""


@dataclass(frozen=True, slots=True)
class TopologyProblem:
    """Why no Topology can be chosen for a workload (a pending reason and a sentence)."""

    reason: PendingReason
    message: str


def choose_topology(
    workload: WorkloadState,
    queue: QueueConfig | None,
    *,
    known: Sequence[str],
    default: str,
    exists: Callable[[str], bool] | None = None,
) -> str | TopologyProblem:
    """The Topology ``workload`` (in ``queue``) is placed on, or why there is none.

    Its queue's Topology, else its own, else the only one ``known``, else ``default`` if
    known. A workload asking for another Topology than its queue places on is ``Invalid``; a
    named Topology that does not exist (``exists``, default: is in ``known``) is
    ``TopologyPlacementFailed``.
    """
    queue_topology = queue.topology if queue is not None else None
    if queue_topology and workload.topology and queue_topology != workload.topology:
        assert queue is not None
        return TopologyProblem(
            "Invalid",
            f"the workload asks for topology {workload.topology} but queue {queue.name} "
            f"places on topology {queue_topology}",
        )
    name = queue_topology or workload.topology
    if name is None:
        if len(known) == 1:
            name = known[0]
        elif default in known:
            name = default
        else:
            listed = ", ".join(known) if known else "none exists"
            queue_name = queue.name if queue is not None else "(none)"
            return TopologyProblem(
                "TopologyPlacementFailed",
                f"no topology chosen: queue {queue_name} names none, the workload names "
                f"none and there is no single or '{default}' topology ({listed})",
            )
    found = exists(name) if exists is not None else name in known
    if not found:
        return TopologyProblem("TopologyPlacementFailed", f"topology {name} does not exist")
    return name


def evictable(pod: PodState) -> bool:
    """Whether an eviction must remove ``pod``: active and released (a gated pod holds no
    capacity and never runs without admission)."""
    return active(pod) and not gated(pod)
