"""Queue status: what ``kubectl get tq`` and ``kubectl describe tq <name>`` show.

A Queue's ``status`` (``deploy/crds/tidegate.io_queues.yaml``) says how many of its workloads
are admitted and how many wait, what the admitted ones hold together (``usage`` per resource
in Kubernetes quantities, ``cardUsage`` per GPU card model) and one condition, ``Active``. The
ungater writes it because it owns what users see of workloads (status and Events); no other
service writes it.

Everything comes from the ungater's :class:`~tidegate.ungater.view.View` (admission's newest
decisions per workload, and the workloads themselves) plus the queue configs:

- a workload is **admitted** in queue Q while an admission of Q is in force for it (the rule
  the releaser follows: not released since, not named a victim by a later preemption, the
  workload still exists with that uid). It adds the admission's ``charged`` resources and
  ``charged_cards``: exactly what admission charged against Q's quota;
- it is **pending** in Q when no admission is in force, it has not finished, and its newest
  pending decision names Q and is newer than its newest admission (an evicted workload is
  counted again once admission says why it waits; one aborted by preemption is not);
- ``Active`` is ``True`` (reason ``Ready``) for a usable queue, ``False`` with reason
  ``Invalid`` and the problem for one admission refuses (its ``invalid_reason``, or a
  negative quota: :func:`tidegate.policy.admission.queue_problem`, admission's own test).

Each workload's share is kept and summed per queue as it changes, so a change costs the
workloads it touched, not a recount. Status is written by a JSON merge patch of the status
subresource, at most once per queue per ``queue_status_interval_seconds`` and only when what
it shows changed; a resource that drops out of ``usage`` is removed with ``null``.
Resources the queue's quota names are always listed (``0`` when unused), so ``kubectl describe``
shows usage beside ``spec.capability``.

What this module does not do: decide anything, or count quota itself. Between a decision and
its follow-up (a victim named by preemption and admission's ``released``) a workload may be
counted in neither column for a moment.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import Counter

from tidegate.bus import LeaseUnconfirmed, Received
from tidegate.kube import Invalid, KubeClient, KubeError, NotFound
from tidegate.kube.eventrecord import timestamp
from tidegate.model import QueueConfig, Tombstone, WorkloadKey, WorkloadState, format_quantity
from tidegate.model import resources as res
from tidegate.policy.admission import queue_problem
from tidegate.ungater.status import same_status
from tidegate.ungater.view import Verdict, View

log = logging.getLogger(__name__)

GROUP: Final = "tidegate.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "queues"

TICK_SECONDS: Final = 1.0
"""How often the loop looks for work without being woken (a retry after a failed write)."""


@dataclass(frozen=True, slots=True)
class Share:
    """What one workload adds to its queue's status."""

    queue: str
    admitted: bool
    """Admitted (counted in ``admitted``, holding ``resources`` and ``cards``), else pending."""
    resources: Mapping[str, int] = field(default_factory=dict)
    cards: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Tally:
    """A queue's totals: workloads admitted and pending, and what the admitted ones hold."""

    admitted: int = 0
    pending: int = 0
    usage: Mapping[str, int] = field(default_factory=dict)
    cards: Mapping[str, int] = field(default_factory=dict)


def share_of(workload: WorkloadState | None, verdict: Verdict) -> Share | None:
    """The workload's share of its queue's status (module docstring), None if it has none."""
    if workload is None:
        return None
    admitted = verdict.admitted
    if admitted is not None:
        return Share(
            queue=admitted.queue,
            admitted=True,
            resources=res.non_zero(admitted.charged),
            cards=res.non_zero(admitted.charged_cards),
        )
    pending = verdict.pending
    if workload.finished is not None or pending is None or pending.queue is None:
        return None
    if verdict.latest is not None and verdict.latest.sequence > pending.sequence:
        return None
    return Share(queue=pending.queue, admitted=False)


class QueueBook:
    """Every workload's :class:`Share` and their sums per queue, kept incrementally."""

    def __init__(self) -> None:
        """Start with no shares."""
        self._shares: dict[WorkloadKey, Share] = {}
        self._admitted: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._usage: dict[str, dict[str, int]] = {}
        self._cards: dict[str, dict[str, int]] = {}

    def update(self, key: WorkloadKey, share: Share | None) -> set[str]:
        """Record ``key``'s share (None: it has none now); return the queues whose totals
        changed."""
        old = self._shares.get(key)
        if old == share:
            return set()
        changed: set[str] = set()
        if old is not None:
            del self._shares[key]
            self._add(old, -1)
            changed.add(old.queue)
        if share is not None:
            self._shares[key] = share
            self._add(share, 1)
            changed.add(share.queue)
        return changed

    def tally(self, queue: str) -> Tally:
        """The totals of ``queue`` (zeros for a queue nobody is in)."""
        return Tally(
            admitted=self._admitted.get(queue, 0),
            pending=self._pending.get(queue, 0),
            usage=dict(self._usage.get(queue, {})),
            cards=dict(self._cards.get(queue, {})),
        )

    def queues(self) -> list[str]:
        """Queues some workload is counted in."""
        return sorted(set(self._admitted) | set(self._pending))

    def _add(self, share: Share, sign: int) -> None:
        name = share.queue
        counts = self._admitted if share.admitted else self._pending
        counts[name] = counts.get(name, 0) + sign
        if not counts[name]:
            del counts[name]
        if not share.admitted:
            return  # only admitted workloads hold anything
        if share.resources:
            usage = res.non_zero(
                res.add(self._usage.get(name, {}), res.scale(share.resources, sign))
            )
            _store(self._usage, name, usage)
        if share.cards:
            cards = res.non_zero(res.add(self._cards.get(name, {}), res.scale(share.cards, sign)))
            _store(self._cards, name, cards)


def _store(table: dict[str, dict[str, int]], name: str, value: dict[str, int]) -> None:
    if value:
        table[name] = value
    else:
        table.pop(name, None)


def active_condition(
    config: QueueConfig, *, now: str, previous: Sequence[Mapping[str, object]] = ()
) -> dict[str, object]:
    """The ``Active`` condition (module docstring); ``lastTransitionTime`` is kept from
    ``previous`` while the status is the same, else ``now`` (RFC 3339)."""
    problem = queue_problem(config)
    if problem is None:
        condition: dict[str, object] = {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "can admit workloads",
        }
    else:
        condition = {"type": "Active", "status": "False", "reason": "Invalid", "message": problem}
    old = next((c for c in previous if c.get("type") == "Active"), None)
    kept = (
        old.get("lastTransitionTime") if old and old.get("status") == condition["status"] else None
    )
    condition["lastTransitionTime"] = kept if isinstance(kept, str) and kept else now
    return condition


def queue_status(
    config: QueueConfig,
    tally: Tally,
    *,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> dict[str, object]:
    """The whole ``status`` of a Queue: counts, usage in Kubernetes notation (every resource
    its quota names, used or not), card usage, and the ``Active`` condition."""
    resources = sorted(set(tally.usage) | set(config.quota or {}))
    models = sorted(set(tally.cards) | set(config.card_quota or {}))
    return {
        "admitted": tally.admitted,
        "pending": tally.pending,
        "usage": {name: format_quantity(name, tally.usage.get(name, 0)) for name in resources},
        "cardUsage": {model: tally.cards.get(model, 0) for model in models},
        "conditions": [active_condition(config, now=now, previous=previous)],
    }


def status_patch(desired: Mapping[str, object], shown: Mapping[str, object]) -> dict[str, object]:
    """The merge patch that turns ``shown`` into ``desired``: ``desired`` itself, with ``null``
    for keys of ``usage`` and ``cardUsage`` that ``shown`` has and ``desired`` has not (a merge
    patch merges maps, so a key left out would stay)."""
    patch = dict(desired)
    for name in ("usage", "cardUsage"):
        wanted, before = desired.get(name), shown.get(name)
        if isinstance(wanted, Mapping) and isinstance(before, Mapping):
            removed = {str(key): None for key in before if key not in wanted}
            if removed:
                patch[name] = {**wanted, **removed}
    return patch


class QueueStatusWriter:
    """Keeps every Queue's status current (module docstring).

    Wire :meth:`mark` into the view's ``on_change`` and :meth:`on_queue` as the handler of a
    follower of ``tg.<cluster>.config.queue.>``; run :meth:`run` once the view is replayed.
    """

    def __init__(
        self,
        *,
        view: View,
        kube: KubeClient,
        interval_seconds: float,
        errors: Counter | None = None,
        guard: Callable[[], object] | None = None,
    ) -> None:
        """Write through ``kube`` at most once per queue per ``interval_seconds``; failed
        writes count in ``errors`` (labelled ``operation="queue-status"``); ``guard`` runs
        before each write (the ungater's lease: LeaseUnconfirmed holds it back, LeaseLost
        stops the service)."""
        self._guard = guard or (lambda: None)
        self.view = view
        self.kube = kube
        self.interval_seconds = interval_seconds
        self.errors = errors
        self.book = QueueBook()
        self.configs: dict[str, QueueConfig] = {}
        self._marked: set[WorkloadKey] = set()
        self._dirty: set[str] = set()
        self._shown: dict[str, dict[str, object]] = {}
        """Per queue: the status the Queue shows, as last read or written."""
        self._wake = asyncio.Event()
        self.writes = 0
        """Status patches accepted since start."""
        self.finished = asyncio.Event()
        """Set once :meth:`run` returned."""

    def mark(self, keys: Iterable[WorkloadKey]) -> None:
        """Workloads whose share may have changed (the view's ``on_change``)."""
        self._marked.update(keys)
        self._wake.set()

    async def on_queue(self, received: Received) -> None:
        """A Queue config or its tombstone (the queue follower's handler)."""
        body = received.envelope.body
        match body:
            case QueueConfig():
                if self.configs.get(body.name) != body:
                    self.configs[body.name] = body
                    self._dirty.add(body.name)
                    self._wake.set()
            case Tombstone(object_kind="queue", name=name):
                self.configs.pop(name, None)
                self._shown.pop(name, None)
                self._dirty.discard(name)
            case _:
                return

    async def run(self, stop: asyncio.Event) -> None:
        """Write rounds until ``stop`` is set, each followed by ``interval_seconds`` of pause,
        so a queue is written at most once per interval whatever the rate of change."""
        try:
            self._dirty.update(self.configs)
            self._wake.set()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK_SECONDS):
                        await self._wake.wait()
                if stop.is_set():
                    return
                if not self._wake.is_set():
                    continue
                await self.round()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_seconds):
                        await stop.wait()
        finally:
            self.finished.set()

    async def round(self) -> None:
        """Recount the marked workloads, then write every queue whose status may differ."""
        self._wake.clear()
        marked, self._marked = self._marked, set()
        for key in marked:
            self._dirty |= self.book.update(
                key, share_of(self.view.workloads.get(key), self.view.verdict(key))
            )
        names = sorted(name for name in self._dirty if name in self.configs)
        self._dirty.clear()
        for name in names:
            await self._write(name)

    async def _write(self, name: str) -> None:
        config = self.configs.get(name)
        if config is None:
            return
        try:
            shown = self._shown.get(name)
            if shown is None:
                # An empty merge patch changes nothing and returns the stored object: the
                # ungater may patch queues/status but not read Queues (least privilege).
                current = await self.kube.patch_custom_status(GROUP, VERSION, PLURAL, name, {})
                found = current.get("status")
                shown = dict(found) if isinstance(found, Mapping) else {}
                self._shown[name] = shown
            before = shown.get("conditions")
            desired = queue_status(
                config,  # as of the round: a Queue deleted meanwhile answers 404
                self.book.tally(name),
                now=timestamp(),
                previous=[c for c in before if isinstance(c, Mapping)]
                if isinstance(before, list)
                else (),
            )
            if same_status(shown, desired):
                return
            try:
                self._guard()
            except LeaseUnconfirmed:
                self._dirty.add(name)  # written once the lease is confirmed again
                return
            await self.kube.patch_custom_status(
                GROUP, VERSION, PLURAL, name, status_patch(desired, shown)
            )
        except NotFound:
            self._shown.pop(name, None)  # no such Queue object (yet): written when it changes
            return
        except Invalid as exc:
            # The API server refused what we computed: retrying the same would fail the same.
            self._count_error()
            log.error("ungater: status of Queue %s refused: %s", name, exc)
            return
        except KubeError as exc:
            self._shown.pop(name, None)
            self._count_error()
            log.warning("ungater: status of Queue %s not written, will retry: %s", name, exc)
            self._dirty.add(name)
            self._wake.set()
            return
        self._shown[name] = desired
        self.writes += 1

    def _count_error(self) -> None:
        if self.errors is not None:
            self.errors.labels(operation="queue-status").inc()
