"""Telling users about pods that bypassed the gate: when, and in what words.

A workload whose pods started without passing the gate (``WorkloadState.bypassed_pods``, the
watcher's count: :func:`tidegate.model.pods.bypassed_gate`) gets one Warning Event
``BypassedGate`` on its top owner, naming how many pods and the queue they are charged to
(:func:`bypass_message`). :class:`BypassNotices` says when one is due: when the workload (by
uid) has more bypassing pods than when it was last looked at — the first time, and again only
if more pods get past — not at every change of the workload, nor when its pods finish. It
remembers at most ``remembered`` workloads (the oldest forgotten first), so its memory is
bounded whatever the number of workloads ever seen; one forgotten, or a new leader, reports a
still-bypassing workload once more (the Event's count goes up). Design: docs/ungater.md, Pods
that bypassed the gate.
"""

from collections import OrderedDict
from typing import Final

from tidegate.model import WorkloadState
from tidegate.model.quantity import format_quantity

REMEMBERED: Final = 65536
"""Workloads whose bypassing pods :class:`BypassNotices` remembers by default."""


def bypass_message(workload: WorkloadState, queue: str) -> str:
    """The Event's message: how many pods bypassed the gate, the queue they are charged to,
    what they request, and that nothing evicts them."""
    count = workload.bypassed_pods
    pods = "1 pod" if count == 1 else f"{count} pods"
    requests = ",".join(
        f"{name}={format_quantity(name, amount)}"
        for name, amount in sorted(workload.bypassed_requests.items())
        if amount
    )
    return (
        f"{pods} started without passing the gate (webhook down?), charged to queue {queue}"
        + (f": {requests}" if requests else "")
        + "; they are not evicted"
    )


class BypassNotices:
    """Which workloads' bypassing pods are news (module docstring)."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        """Remember at most ``remembered`` workloads."""
        if remembered < 1:
            raise ValueError(f"remembered must be at least 1, not {remembered}")
        self.remembered = remembered
        self._seen: OrderedDict[str, int] = OrderedDict()
        """Workload uid → bypassing pods when last looked at (only uids with some)."""

    def __len__(self) -> int:
        """How many workloads are remembered."""
        return len(self._seen)

    def due(self, workload: WorkloadState) -> bool:
        """Whether ``workload`` needs an Event now; remembers what it has either way. A
        workload with none (or finished) is forgotten."""
        count = workload.bypassed_pods if workload.finished is None else 0
        before = self._seen.pop(workload.uid, 0)
        if count <= 0:
            return False
        self._seen[workload.uid] = count
        while len(self._seen) > self.remembered:
            self._seen.popitem(last=False)
        return count > before

    def failed(self, workload: WorkloadState) -> None:
        """The Event :meth:`due` asked for was not recorded: it is due again next time."""
        self._seen.pop(workload.uid, None)
