"""What users see: PodGroup status (counters, phase, conditions) and Event messages.

The coscheduling KEP (seed 001) gives a PodGroup the counters ``admitted``, ``running``,
``succeeded`` and ``failed``; tidegate adds a ``phase`` and standard conditions, all computed
here from the ungater's view of the group's pods and of admission's newest decisions:

phase (``status.phase``)
    ``Pending`` — not admitted (waiting, or evicted and back in its queue);
    ``Admitted`` — admitted, fewer than its minimum of pods running yet;
    ``Running`` — at least its minimum running or finished, some still running;
    ``Succeeded`` — nothing left to run and at least its minimum succeeded;
    ``Failed`` — nothing left to run, and fewer than its minimum succeeded.

conditions (``status.conditions``, metav1.Condition)
    ``Admitted`` — True (reason ``Admitted``) while an admission is in force, else False with
    the pending reason token (``WaitingForCapacity``, …) or the release reason (``Evicted``,
    ``Completed``, …); ``PodsReady`` — True once the minimum runs or ran; ``Evicted`` —
    present once the group was evicted, True until it is admitted again.

A condition keeps its ``lastTransitionTime`` while its status does not change. Pure: the
caller passes the time and the previous conditions.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from tidegate.model import Admitted, Pending, PodState, Released, WorkloadState
from tidegate.policy.common import active as is_active
from tidegate.policy.common import gated

Phase = Literal["Pending", "Admitted", "Running", "Succeeded", "Failed"]
"""PodGroup ``status.phase`` values (the CRD's enum)."""

PHASES: Final[tuple[Phase, ...]] = ("Pending", "Admitted", "Running", "Succeeded", "Failed")

_MAX_DOMAINS_LISTED = 4


@dataclass(frozen=True, slots=True)
class Counts:
    """Member pods by state."""

    admitted: int = 0
    """Released (gate removed) and not terminating, whatever their phase."""
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    waiting: int = 0
    """Still gated."""
    active: int = 0
    """Not finished (Pending or Running), gated or not."""


def count(pods: Sequence[PodState]) -> Counts:
    """Count a workload's member pods."""
    admitted = running = succeeded = failed = waiting = active = 0
    for pod in pods:
        if gated(pod) and not pod.terminating:
            waiting += 1
        if not gated(pod) and not pod.terminating:
            admitted += 1
        if pod.phase == "Running":
            running += 1
        elif pod.phase == "Succeeded":
            succeeded += 1
        elif pod.phase == "Failed":
            failed += 1
        if is_active(pod):
            active += 1
    return Counts(
        admitted=admitted,
        running=running,
        succeeded=succeeded,
        failed=failed,
        waiting=waiting,
        active=active,
    )


def minimum(workload: WorkloadState) -> int:
    """Pods that must run for the group to run: minMember, else every pod."""
    if workload.min_members is not None:
        return workload.min_members
    return sum(max(p.count, 0) for p in workload.podsets)


def phase(counts: Counts, *, admitted: bool, least: int, completed: bool = False) -> Phase:
    """The group's phase (module docstring)."""
    if counts.active == 0 and (counts.succeeded or counts.failed or completed):
        if completed or counts.succeeded >= max(least, 1):
            return "Succeeded"
        if counts.waiting == 0:
            return "Failed"
    if not admitted:
        return "Pending"
    if counts.running and counts.running + counts.succeeded >= least:
        return "Running"
    return "Admitted"


def conditions(
    *,
    admitted: Admitted | None,
    released: Released | None,
    pending: Pending | None,
    counts: Counts,
    least: int,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> list[dict[str, object]]:
    """The group's conditions (module docstring); ``now`` is an RFC 3339 time."""
    out: list[dict[str, object]] = []
    if admitted is not None:
        out.append(_condition("Admitted", True, "Admitted", placement_summary(admitted)))
    elif released is not None and (pending is None or released.sequence > pending.sequence):
        message = released.message or f"released: {released.reason}"
        out.append(_condition("Admitted", False, released.reason, message))
    elif pending is not None:
        out.append(_condition("Admitted", False, pending.reason, pending.message))
    else:
        out.append(_condition("Admitted", False, "Pending", "waiting for admission"))
    started = counts.running + counts.succeeded
    if started >= least and started > 0:
        out.append(_condition("PodsReady", True, "PodsReady", f"{started} of {least} pods started"))
    else:
        message = f"{counts.running} of {least} pods running"
        out.append(_condition("PodsReady", False, "WaitingForPods", message))
    if released is not None and released.reason == "Evicted":
        if admitted is not None and admitted.sequence > released.sequence:
            out.append(_condition("Evicted", False, "Readmitted", "admitted again after eviction"))
        else:
            reason = "NodeFailure" if released.evict_pods else "Preempted"
            out.append(_condition("Evicted", True, reason, released.message or reason))
    before = {str(c.get("type")): c for c in previous}
    for condition in out:
        old = before.get(str(condition["type"]))
        kept = old is not None and old.get("status") == condition["status"]
        time = old.get("lastTransitionTime") if kept and old is not None else None
        condition["lastTransitionTime"] = time if isinstance(time, str) and time else now
    return out


def podgroup_status(
    workload: WorkloadState,
    pods: Sequence[PodState],
    *,
    admitted: Admitted | None,
    released: Released | None,
    pending: Pending | None,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> dict[str, object]:
    """The whole ``status`` of a PodGroup."""
    counts = count(pods)
    least = minimum(workload)
    completed = admitted is None and released is not None and released.reason == "Completed"
    return {
        "phase": phase(counts, admitted=admitted is not None, least=least, completed=completed),
        "admitted": counts.admitted,
        "running": counts.running,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "conditions": conditions(
            admitted=admitted,
            released=released,
            pending=pending,
            counts=counts,
            least=least,
            now=now,
            previous=previous,
        ),
    }


def same_status(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two statuses say the same, ignoring condition times."""
    return _comparable(a) == _comparable(b)


def with_shown_times(desired: dict[str, object], shown: object) -> dict[str, object]:
    """``desired`` with the ``lastTransitionTime`` of each condition the object already shows
    (``shown``: its ``status``) with the same type and status (the first write after a start
    keeps the times it shows)."""
    before = shown.get("conditions") if isinstance(shown, Mapping) else None
    if not isinstance(before, list):
        return desired
    times = {
        (c.get("type"), c.get("status")): c.get("lastTransitionTime")
        for c in before
        if isinstance(c, Mapping)
    }
    conditions = desired.get("conditions")
    if isinstance(conditions, list):
        for condition in conditions:
            time = times.get((condition.get("type"), condition.get("status")))
            if isinstance(time, str) and time:
                condition["lastTransitionTime"] = time
    return desired


def placement_summary(admitted: Admitted) -> str:
    """A short sentence: queue, and per podset how many pods go to which domains."""
    parts = []
    for name, assignment in sorted(admitted.assignments.items()):
        domains = [d for d in assignment.domains if d.count > 0]
        total = sum(d.count for d in domains)
        listed = ", ".join(
            f"{'/'.join(d.values)} ×{d.count}" for d in domains[:_MAX_DOMAINS_LISTED]
        )
        more = len(domains) - _MAX_DOMAINS_LISTED
        if more > 0:
            listed += f" and {more} more"
        noun = "domain" if len(domains) == 1 else "domains"
        parts.append(f"{name}: {total} pods in {len(domains)} {noun} ({listed})")
    card = f" on {admitted.card_model}" if admitted.card_model else ""
    return f"queue {admitted.queue}{card}; " + "; ".join(parts)


def _condition(kind: str, status: bool, reason: str, message: str) -> dict[str, object]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
    }


def _comparable(status: Mapping[str, object]) -> object:
    conditions_ = status.get("conditions")
    stripped = [
        {k: v for k, v in condition.items() if k != "lastTransitionTime"}
        for condition in (conditions_ if isinstance(conditions_, list) else [])
        if isinstance(condition, Mapping)
    ]
    return ({k: v for k, v in status.items() if k != "conditions"}, stripped)
