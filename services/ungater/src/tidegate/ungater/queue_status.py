"""Queue status writer: keeps what ``kubectl get tq`` and ``kubectl describe tq <name>`` show.

The ungater writes a Queue's ``status`` because it owns what users see of workloads (status
and Events); no other service writes it. What the status says is
:func:`tidegate.policy.queue_status.queue_status` of the queue's config and its
:class:`~tidegate.model.replica.QueueTally` in the replica of the decisions in force (the rule
every service reads, docs/architecture.md "The decisions in force"); this module only wires it
to the view and to Kubernetes.

Status is written by a JSON merge patch of the status subresource
(:func:`~tidegate.policy.queue_status.status_patch`), at most once per queue per
``queue_status_interval_seconds`` and only when what it shows changed. The replica keeps each
workload's share summed per queue as it changes, so a change costs the workloads it touched,
not a recount.

What this module does not do: decide anything, or count quota itself. Between a decision and
its follow-up (a victim named by preemption and admission's ``released``) a workload may be
counted in neither column for a moment.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from prometheus_client import Counter

from tidegate.bus import LeaseUnconfirmed, Received
from tidegate.kube import Invalid, KubeClient, KubeError, NotFound
from tidegate.kube.eventrecord import timestamp
from tidegate.model import QueueConfig, Tombstone, WorkloadKey
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.podgroup import same_status
from tidegate.policy.queue_status import queue_status, status_patch

log = logging.getLogger(__name__)

GROUP: Final = "tidegate.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "queues"

TICK_SECONDS: Final = 1.0
"""How often the loop looks for work without being woken (a retry after a failed write)."""


class QueueStatusWriter:
    """Keeps every Queue's status current (module docstring).

    Wire :meth:`mark` into the view's ``on_change`` and :meth:`on_queue` as the handler of a
    follower of ``tg.<cluster>.config.queue.>``; run :meth:`run` once the view is replayed.
    """

    def __init__(
        self,
        *,
        view: ClusterView,
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
        self._queue_of: dict[WorkloadKey, str] = {}
        """The queue each workload was last counted in."""
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
        """Workloads whose share may have changed (the view's ``on_change``). One that adds
        nothing to a queue and was not counted in one has nothing to recount and is dropped,
        so what waits for a round is bounded by the workloads that exist (a standby runs no
        rounds)."""
        for key in keys:
            if key in self._queue_of or self.view.replica.share(key) is not None:
                self._marked.add(key)
            else:
                self._marked.discard(key)
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
            share = self.view.replica.share(key)
            before = self._queue_of.pop(key, None)
            if before is not None:
                self._dirty.add(before)
            if share is not None:
                self._queue_of[key] = share.queue
                self._dirty.add(share.queue)
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
                self.view.replica.tally(name),
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
