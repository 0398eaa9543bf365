"""``tidegate explain NAMESPACE/NAME``: why a workload waits, where it went, who evicted it.

Reads the bus only (:mod:`tidegate.cli.busview`): the workload's state and podsets, its queue
and position among the workloads waiting in it, the last decision with its reason and the
numbers the reason states, the placement, the preemptions it made or suffered, its pods
(released, bound, still gated) and the trace id to open in a trace viewer. ``--json`` prints
the same as one JSON object for tools. Exit status 0, 1 when the workload is not on the bus,
2 when the bus cannot be read.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tidegate.model import (
    Admitted,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.pods import gated
from tidegate.model.quantity import format_quantity
from tidegate.model.replica import Seen
from tidegate.policy.ordering import order_workloads
from tidegate.policy.queuetree import borrowing_summary, in_tree
from tidegate.policy.reservation import reserved_for_you

if TYPE_CHECKING:  # the bus (and nats) is imported only when a command runs
    from tidegate.bus import BusSettings
    from tidegate.cli.busview import BusView

HELP: Final = "Explain one workload from what the bus holds: state, reason, placement, trace."


BYPASSED_MESSAGE: Final = "pods started without passing the gate (webhook down?)"
"""What ``tidegate explain`` says of a workload's pods that bypassed the gate."""


def add_bus_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every command that reads the bus (defaults from the services' env)."""
    parser.add_argument(
        "--nats-url",
        default=os.environ.get("TIDEGATE_NATS_URL", "nats://127.0.0.1:4222"),
        help="NATS server URL(s), comma-separated (default: $TIDEGATE_NATS_URL or local)",
    )
    parser.add_argument(
        "--nats-creds",
        default=os.environ.get("TIDEGATE_NATS_CREDS") or None,
        help="NATS credentials file (default: $TIDEGATE_NATS_CREDS)",
    )
    parser.add_argument(
        "--cluster",
        default=os.environ.get("TIDEGATE_CLUSTER", "default"),
        help="cluster id on the bus (default: $TIDEGATE_CLUSTER or 'default')",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``NAMESPACE/NAME`` and the bus options."""
    parser.add_argument("workload", metavar="NAMESPACE/NAME", help="the workload to explain")
    add_bus_arguments(parser)


def resources_text(resources: Mapping[str, int]) -> str:
    """``cpu=8,nvidia.com/gpu=8`` in Kubernetes notation, names sorted."""
    return ",".join(f"{n}={format_quantity(n, v)}" for n, v in sorted(resources.items())) or "-"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def _trace_id(workload: WorkloadState) -> str | None:
    parts = workload.trace_context.get("traceparent", "").split("-")
    return parts[1] if len(parts) == 4 else None


def state_of(view: "BusView", key: str) -> tuple[str, str | None, str]:
    """(state, reason token, message) of ``key`` by the decisions in force
    (:class:`~tidegate.model.replica.Verdict`): ``Admitted``, ``Pending``, ``Preempted``,
    ``Released``, ``Finished``, ``Deleted``, or ``Submitted`` when nothing was decided yet."""
    verdict = view.replica.verdict(WorkloadKey(key))
    workload = verdict.workload
    match verdict.state:
        case "Finished" if workload is not None and workload.finished is not None:
            return "Finished", workload.finished, f"the workload {workload.finished.lower()}"
        case "Pending":
            waiting = verdict.waiting
            if isinstance(waiting, Pending):
                return "Pending", waiting.reason, waiting.message
            if waiting is not None:
                return "Pending", "WaitingForPreemption", waiting.message
        case "Released" if verdict.released is not None:
            released = verdict.released.body
            return "Released", released.reason, released.message
        case "Preempted" if verdict.ended_by is not None:
            return "Preempted", None, eviction_text(verdict.ended_by.body, key)
        case "Submitted":
            return "Submitted", None, "no decision yet"
    return verdict.state, None, ""


RECLAIM_WORDS: Final = {
    "InCohortReclamation": "quota lent by {cohort} reclaimed",
    "InCohortReclaimWhileBorrowing": "quota of {cohort} taken by a higher-priority borrower",
    "InCohortFairSharing": "its queue held more than its fair share of {cohort}",
    "InClusterQueue": "its own queue's quota taken within the queue",
}
"""What each of Kueue's preemption reasons means for the victim, in ``tidegate explain``."""


def eviction_text(preempted: Preempted, victim: str) -> str:
    """Why ``victim`` was evicted by ``preempted``: "evicted by ns/p", and when it was preempted
    for quota, what happened to which quota under which of Kueue's reasons."""
    why = preempted.reclaimed.get(victim)
    if why is None:
        return f"evicted by {preempted.preemptor}"
    cohort = f"cohort {preempted.cohort}" if preempted.cohort else "its cohort"
    words = RECLAIM_WORDS.get(why, "quota lent by {cohort} reclaimed").format(cohort=cohort)
    return f"evicted by {preempted.preemptor}: {words} ({why})"


def waiting_to_borrow(
    view: "BusView", queue: str, reason: str | None, waiting: object
) -> str | None:
    """When a workload of ``queue`` waits for quota its cohort could lend, in words: reclaim
    requested (a ``preempt-requested`` with ``reclaim``), or waiting for borrowable capacity
    (``ExceedsQuota`` / ``CardQuotaExceeded`` in a queue of a tree that is not lasting); None
    otherwise."""
    config = view.queues.get(queue)
    if config is None or not in_tree(config) or config.parent is None:
        return None
    if isinstance(waiting, PreemptRequested) and waiting.reclaim:
        return (
            f"waits for cohort {config.parent} to give back quota it lent: reclaim of "
            "borrowing gangs requested"
        )
    if reason in ("ExceedsQuota", "CardQuotaExceeded") and isinstance(waiting, Pending):
        if "can ever give" in waiting.message:
            return None  # lasting: no borrowing cures it
        return f"waits for borrowable capacity in cohort {config.parent}"
    return None


def last_decision(view: "BusView", key: str) -> Seen[Any] | None:
    """The decision ``key``'s state comes from (its admission in force, else the newest)."""
    verdict = view.replica.verdict(WorkloadKey(key))
    if verdict.in_force is not None:
        return verdict.in_force
    seen: list[Seen[Any]] = [
        s
        for s in (verdict.latest, verdict.released, verdict.pending, verdict.requested)
        if s is not None
    ]
    return max(seen, key=lambda s: (s.body.sequence, s.stream_sequence)) if seen else None


def queue_in(view: "BusView", key: str) -> str:
    """The queue ``key`` is in: the one admission admitted it to or says it waits in (its
    default queue included), else the one it names ("" for none)."""
    verdict = view.replica.verdict(WorkloadKey(key))
    if verdict.admitted is not None:
        return verdict.admitted.queue
    waiting = verdict.waiting
    if waiting is not None and waiting.queue is not None:
        return waiting.queue
    workload = verdict.workload or view.replica.workload(WorkloadKey(key))
    return (workload.queue if workload is not None else None) or ""


NOT_COMPETING: Final = frozenset({"Invalid", "QueueNotFound"})
"""Pending reasons of workloads that wait for a fix, not for their turn (not counted ahead)."""


def waiting_in(view: "BusView", queue: str) -> list[WorkloadState]:
    """The workloads of ``queue`` waiting for their turn, in admission order."""
    waiting = []
    for key, w in view.replica.workloads():
        if queue_in(view, key) != queue:
            continue
        state, reason, _ = state_of(view, key)
        if state in ("Pending", "Submitted") and reason not in NOT_COMPETING:
            waiting.append(w)
    return order_workloads(waiting)


def placement_lines(admitted: Admitted) -> list[str]:
    """Per podset, the domains one level above the node and how many pods each holds."""
    lines = []
    for podset, assignment in sorted(admitted.assignments.items()):
        above = max(len(assignment.levels) - 1, 1)
        level = assignment.levels[above - 1] if assignment.levels else "node"
        counts: dict[str, int] = {}
        for domain in assignment.domains:
            if domain.count > 0:
                name = "/".join(domain.values[:above])
                counts[name] = counts.get(name, 0) + domain.count
        listed = ", ".join(f"{name} x{count}" for name, count in counts.items())
        lines.append(f"{podset}: {sum(counts.values())} pods in {level} {listed}")
    return lines


def pods_summary(pods: list[PodState]) -> dict[str, object]:
    """How many pods exist, are still gated by tidegate, released, bound to a node, running."""
    live = [p for p in pods if not p.terminating]
    still_gated = [p for p in live if gated(p)]
    return {
        "total": len(live),
        "gated": len(still_gated),
        "released": len(live) - len(still_gated),
        "bound": sum(1 for p in live if p.node_name),
        "running": sum(1 for p in live if p.phase == "Running"),
        "terminating": len(pods) - len(live),
        "nodes": sorted({p.node_name for p in live if p.node_name}),
    }


def explain(view: "BusView", key: str) -> dict[str, Any] | None:
    """Everything the bus says about ``key``, as a JSON-ready dict; None if it is unknown."""
    workload = view.replica.workload(WorkloadKey(key))
    if workload is None and not view.known(key):
        return None
    state, reason, message = state_of(view, key)
    out: dict[str, Any] = {"workload": key, "state": state}
    if reason is not None:
        out["reason"] = reason
    if message:
        out["message"] = message
    last = last_decision(view, key)
    if last is not None:
        out["last_decision"] = {
            "kind": type(last.body).__name__.lower(),
            "sequence": last.body.sequence,
            "at": _when(last.time),
        }
    out["queue"] = queue_in(view, key) or None
    if workload is not None:
        out["uid"] = workload.uid
        out["kind"] = workload.owner_kind
        out["priority"] = workload.priority
        out["priority_class"] = workload.priority_class
        out["service_type"] = workload.service_type
        out["created_at"] = _when(workload.created_at) if workload.created_at else None
        out["podsets"] = [
            {
                "name": p.name,
                "count": p.count,
                "requests": resources_text(p.requests),
                "topology": {
                    k: v
                    for k, v in (
                        ("required", p.topology.required),
                        ("preferred", p.topology.preferred),
                        ("slice_required", p.topology.slice_required),
                        ("slice_size", p.topology.slice_size),
                    )
                    if v is not None
                },
            }
            for p in workload.podsets
        ]
        if workload.card_request:
            out["cards"] = dict(workload.card_request)
        if workload.invalid_reason:
            out["invalid_reason"] = workload.invalid_reason
        if workload.bypassed_pods:
            out["bypassed"] = {
                "pods": workload.bypassed_pods,
                "requests": resources_text(workload.bypassed_requests),
                "message": BYPASSED_MESSAGE,
            }
        out["trace_id"] = _trace_id(workload)
    if state == "Pending":
        borrow = waiting_to_borrow(
            view, queue_in(view, key), reason, view.replica.verdict(WorkloadKey(key)).waiting
        )
        if borrow is not None:
            out["borrowing"] = borrow
    if state in ("Pending", "Submitted") and reason not in NOT_COMPETING and workload:
        waiting = waiting_in(view, queue_in(view, key))
        position = next((i for i, w in enumerate(waiting) if w.uid == workload.uid), None)
        if position is not None:
            out["position"] = {"place": position + 1, "waiting": len(waiting)}
            out["ahead"] = [f"{w.namespace}/{w.name}" for w in waiting[:position][:5]]
    reservation = view.replica.reservation(WorkloadKey(key))
    if reservation is not None:
        out["reservation"] = {
            "message": reserved_for_you(reservation),
            "level": reservation.level,
            "domain": list(reservation.domain),
            "nodes": list(reservation.nodes),
            "expected_start": _when(reservation.expected_start),
            "waits_for": [w.workload for w in reservation.waits_for],
            "sequence": reservation.sequence,
        }
    admitted = view.replica.in_force(WorkloadKey(key))
    if admitted is not None:
        out["placement"] = placement_lines(admitted)
        out["charged"] = resources_text(admitted.charged)
        if admitted.charged_cards:
            out["charged_cards"] = dict(admitted.charged_cards)
        if admitted.nominated_by:
            out["nominated_by"] = admitted.nominated_by
        borrowing = borrowing_summary(admitted)
        if borrowing is not None:
            out["borrowing"] = borrowing
        if admitted.replaces is not None and admitted.replace_cause is not None:
            out["moved"] = {"replaces": admitted.replaces, "cause": admitted.replace_cause}
        if admitted.unschedulable_moves:
            out["unschedulable_moves"] = admitted.unschedulable_moves
    mine = view.preemptions.get(key)
    if mine is not None and (workload is None or mine.body.preemptor_uid == workload.uid):
        out["preempted"] = {
            "victims": list(mine.body.victims),
            "modes": dict(mine.body.mode),
            "at": _when(mine.time),
            "message": mine.body.message,
        }
        if mine.body.reclaimed:
            out["preempted"]["reclaimed"] = dict(mine.body.reclaimed)
            out["preempted"]["cohort"] = mine.body.cohort
    suffered = view.replica.preemptions_of(WorkloadKey(key))
    if suffered:
        out["preempted_by"] = [
            {
                "preemptor": p.body.preemptor,
                "at": _when(p.time),
                "message": p.body.message,
                "why": eviction_text(p.body, key),
                **(
                    {"reclaimed": p.body.reclaimed[key], "cohort": p.body.cohort}
                    if key in p.body.reclaimed
                    else {}
                ),
            }
            for p in suffered
        ]
    out["pods"] = pods_summary(view.replica.members(WorkloadKey(key)))
    return out


def render(answer: Mapping[str, Any]) -> str:
    """The human form of :func:`explain`'s answer."""
    lines = [
        f"workload   {answer['workload']}  ({answer.get('kind', '?')}, uid {answer.get('uid')})"
    ]
    state = str(answer["state"])
    if "reason" in answer:
        state += f" ({answer['reason']})"
    last = answer.get("last_decision")
    if isinstance(last, dict):
        state += f"  since {last['at']}, decision #{last['sequence']}"
    lines.append(f"state      {state}")
    if answer.get("message"):
        lines.append(f"why        {answer['message']}")
    if answer.get("invalid_reason"):
        lines.append(f"invalid    {answer['invalid_reason']}")
    lines.append(
        f"queue      {answer.get('queue') or '-'}  priority {answer.get('priority')}"
        f" ({answer.get('priority_class') or 'no class'}), service type"
        f" {answer.get('service_type')}"
    )
    position = answer.get("position")
    if isinstance(position, dict):
        ahead = answer.get("ahead") or []
        behind = f"; ahead: {', '.join(map(str, ahead))}" if ahead else ""
        lines.append(f"position   {position['place']} of {position['waiting']} waiting{behind}")
    reservation = answer.get("reservation")
    if isinstance(reservation, dict):
        lines.append(f"reserved   {reservation['message']}")
    for podset in answer.get("podsets") or []:
        topology = " ".join(f"{k}={v}" for k, v in podset["topology"].items()) or "no topology"
        lines.append(
            f"podset     {podset['name']}: {podset['count']} x {podset['requests']}, {topology}"
        )
    if answer.get("cards"):
        lines.append(f"cards      {answer['cards']}")
    bypassed = answer.get("bypassed")
    if isinstance(bypassed, dict):
        queue = answer.get("queue") or "its queue"
        lines.append(
            f"bypassed   {bypassed['pods']} {bypassed['message']}: {bypassed['requests']}"
            f" charged to {queue} until admitted or finished"
        )
    lines.extend(f"placement  {line}" for line in answer.get("placement") or [])
    if answer.get("charged"):
        lines.append(f"charged    {answer['charged']}")
    if answer.get("borrowing"):
        lines.append(f"quota      {answer['borrowing']}")
    moved = answer.get("moved")
    if isinstance(moved, dict):
        lines.append(f"moved      replacing decision #{moved['replaces']} ({moved['cause']})")
    moves = answer.get("unschedulable_moves")
    if moves:
        lines.append(
            f"unplaced   slots moved {moves} time{'s' if moves != 1 else ''} because the"
            " scheduler found no room; each further move waits twice as long"
        )
    preempted = answer.get("preempted")
    if isinstance(preempted, dict):
        victims = ", ".join(
            f"{v} ({preempted['modes'].get(v, 'restart')})" for v in preempted["victims"]
        )
        lines.append(f"preempted  {victims} at {preempted['at']}")
        if preempted.get("reclaimed"):
            lines.append(
                f"reclaimed  quota lent by cohort {preempted.get('cohort') or '?'}: "
                + ", ".join(f"{v} ({why})" for v, why in preempted["reclaimed"].items())
            )
    lines.extend(
        f"{by.get('why') or 'evicted by ' + str(by['preemptor'])} at {by['at']}"
        for by in answer.get("preempted_by") or []
    )
    pods = answer.get("pods")
    if isinstance(pods, dict):
        lines.append(
            f"pods       {pods['total']}: {pods['released']} released ({pods['bound']} bound,"
            f" {pods['running']} running), {pods['gated']} still gated"
            + (f", {pods['terminating']} terminating" if pods["terminating"] else "")
        )
    if answer.get("trace_id"):
        lines.append(f"trace      {answer['trace_id']}")
    return "\n".join(lines)


def bus_settings(args: argparse.Namespace, name: str) -> "BusSettings":
    """The bus settings the options name (connection ``name``; gives up after 5 s)."""
    from tidegate.bus import BusSettings, servers_from_url

    return BusSettings(
        servers=tuple(servers_from_url(args.nats_url)),
        name=name,
        creds_file=Path(args.nats_creds) if args.nats_creds else None,
        wait_for_server_seconds=5,
    )


@contextlib.contextmanager
def quiet_bus() -> Iterator[None]:
    """Silence the connection's own warnings (one per failed attempt) inside the block: the
    command says once why it could not read the bus."""
    logger = logging.getLogger("tidegate.bus")
    saved = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(saved)


def run(args: argparse.Namespace) -> int:
    """Read the bus, explain the workload, print."""
    from tidegate.bus import BusError
    from tidegate.cli.busview import read_view

    key = str(args.workload)
    namespace, slash, name = key.partition("/")
    if not slash or not namespace or not name:
        print(f"tidegate explain: expected NAMESPACE/NAME, got {key!r}", file=sys.stderr)
        return 2
    try:
        settings = bus_settings(args, "tidegate-explain")
        with quiet_bus():
            view = asyncio.run(read_view(settings, args.cluster, pods_of=namespace))
    except (BusError, OSError) as exc:
        print(f"tidegate explain: cannot read the bus: {exc}", file=sys.stderr)
        return 2
    answer = explain(view, key)
    if answer is None:
        print(
            f"tidegate explain: no workload {key} on the bus of cluster {args.cluster}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0
