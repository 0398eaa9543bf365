"""Decisions in, Kubernetes Events and the trace annotation out: what users see happen.

A durable consumer (``ungater``) hands every ``admitted``, ``pending``, ``preempted`` and
``released`` decision to :meth:`Reporter.handle`, which records an Event on the workload's top
owner (the Job, JobSet, Deployment, PodGroup or bare Pod), like Kueue does on its Workloads:

=============  ========  ==============================================================
reason         type      when
=============  ========  ==============================================================
Admitted       Normal    admitted; the message summarises the placement
Replaced       Normal    slots lost to failed nodes, or that the scheduler found no room in,
                         were moved (``Admitted.replaces``)
Pending        Normal    waiting; message ``<reason token>: <admission's message>``
Invalid        Warning   the workload (or its queue) is malformed; admission's message
Preempted      Warning   evicted for an inference workload (by whom, restart or abort)
Evicted        Warning   no replacement after a node failure (or for pods the scheduler
                         could not place): evicted whole, re-queued
Suspended      Normal    suspended by someone else: its admission released, nothing reserved
BypassedGate   Warning   pods of it started without passing the gate; they are charged to its
                         queue (:class:`BypassReporter`, from the view, not from a decision)
=============  ========  ==============================================================

Admission publishes a pending decision only when the reason changes; a redelivered decision
(at-least-once) with the same reason and message is not recorded twice. On an admission the
workload's trace context is written to its top owner as the annotation
``tidegate.io/trace-context`` (JSON of the W3C headers), so later steps join the same trace;
an admitted Job or JobSet also gets ``tidegate.io/resume: manual`` there, so a later
suspension of it is known to be someone else's (docs/workloads.md, "Suspended Jobs and
JobSets"; one admitted while suspended for tidegate gets it when the releaser unsuspends it).
The annotations are written with the workload's uid as precondition: a top owner deleted and
created again under its name is left alone.

Releasing pods is not done here (:mod:`tidegate.ungater.releaser` does it from the view);
this module only reports.
"""

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Final

from cachetools import LRUCache

from tidegate.bus import Ack, LeaseUnconfirmed, Outcome, Received, Retry
from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    Conflict,
    EventType,
    KubeClient,
    KubeError,
    NotFound,
    ObjectRef,
    ResourceType,
)
from tidegate.model import Admitted, Pending, Preempted, Released, WorkloadKey, WorkloadState
from tidegate.model.events import EventReason
from tidegate.model.names import RESUME_ANNOTATION, RESUME_MANUAL
from tidegate.policy.bypass import BypassNotices, bypass_message
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.podgroup import placement_summary
from tidegate.policy.queuetree import borrowing_summary
from tidegate.telemetry import inject

log = logging.getLogger(__name__)

TRACE_ANNOTATION: Final = "tidegate.io/trace-context"
"""Annotation on the top owner holding the workload's W3C trace context as JSON."""

COMPONENT: Final = "tidegate-ungater"
"""The Event source component."""

UNKNOWN_WORKLOAD_PATIENCE_SECONDS: Final = 30.0
"""How long a decision about a workload the view does not know yet is retried (the state
stream may lag the decision stream); older ones are dropped with a log line."""

PENDING_REMEMBERED: Final = 65536
"""Workloads whose last reported pending reason is remembered (to skip redeliveries)."""

_DEFAULT_API_VERSIONS: Final = {
    "Pod": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "PodGroup": "tidegate.io/v1alpha1",
}

_PLURALS: Final = {
    "Pod": "pods",
    "Job": "jobs",
    "Deployment": "deployments",
    "JobSet": "jobsets",
    "PodGroup": "podgroups",
}
"""Top-owner kinds the ungater may annotate (its RBAC covers these)."""


def owner_ref(workload: WorkloadState) -> ObjectRef:
    """The workload's top owner as the ``involvedObject`` of an Event."""
    api_version = workload.owner_api_version or _DEFAULT_API_VERSIONS.get(workload.owner_kind, "v1")
    return ObjectRef(
        api_version=api_version,
        kind=workload.owner_kind,
        name=workload.name,
        namespace=workload.namespace,
        uid=workload.uid,
    )


def owner_resource(workload: WorkloadState) -> ResourceType | None:
    """The resource type of the top owner, for kinds the ungater may annotate; else None."""
    plural = _PLURALS.get(workload.owner_kind)
    if plural is None:
        return None
    for known in (PODS, JOBS, DEPLOYMENTS):
        if known.kind == workload.owner_kind:
            return known
    api_version = workload.owner_api_version or _DEFAULT_API_VERSIONS[workload.owner_kind]
    group, _, version = api_version.rpartition("/")
    return ResourceType(group=group, version=version, plural=plural, kind=workload.owner_kind)


class Feed:
    """The followers' handlers: each message into the view, and the workloads it may affect
    to ``on_change`` (the releaser and the Queue status writer mark them dirty)."""

    def __init__(
        self, view: ClusterView, on_change: Callable[[Iterable[WorkloadKey]], None] | None = None
    ) -> None:
        """Feed ``view``; tell ``on_change`` what each message may affect."""
        self.view = view
        self._on_change = on_change or (lambda keys: None)

    async def on_state(self, received: Received) -> None:
        """A pod, node or workload snapshot, or a tombstone (the state follower's handler)."""
        self._apply(received)

    async def on_decision(self, received: Received) -> None:
        """A decision (the decision follower's handler)."""
        self._apply(received)

    def _apply(self, received: Received) -> None:
        envelope = received.envelope
        touched = self.view.apply(
            envelope.body, stream_sequence=received.stream_sequence, time=envelope.time
        )
        if touched:
            self._on_change(sorted(touched))


class Reporter:
    """Records Events and the trace annotation for decisions (module docstring)."""

    def __init__(self, view: ClusterView, kube: KubeClient) -> None:
        """Report about workloads of ``view`` through ``kube``."""
        self.view = view
        self.kube = kube
        self._last_pending: LRUCache[str, tuple[str, str]] = LRUCache(maxsize=PENDING_REMEMBERED)

    async def handle(self, received: Received) -> Outcome | None:
        """The durable consumer's handler."""
        body = received.envelope.body
        log.debug("ungater: reporting %s on %s", type(body).__name__, received.subject)
        try:
            match body:
                case Admitted():
                    return await self._admitted(body, received)
                case Pending():
                    return await self._pending(body, received)
                case Preempted():
                    return await self._preempted(body, received)
                case Released(evict_pods=True):
                    return await self._evicted(body, received)
                case Released(reason="Suspended"):
                    return await self._suspended(body, received)
                case _:
                    return Ack()
        except KubeError as exc:
            if isinstance(exc, NotFound):
                return Ack()
            return Retry(f"Kubernetes write failed: {exc}")

    async def _admitted(self, body: Admitted, received: Received) -> Outcome:
        workload = self._workload(body.workload, body.uid)
        if workload is None:
            return self._unknown(body.workload, received)
        summary = placement_summary(body)
        if body.resized:
            pods = sum(d.count for a in body.assignments.values() for d in a.domains)
            await self._event(workload, "Resized", f"now {pods} pods admitted; {summary}")
        elif body.replaces is not None:
            lost = (
                f"slots the scheduler found no room in moved (move {body.unschedulable_moves})"
                if body.replace_cause == "Unschedulable"
                else "slots lost to failed nodes moved"
            )
            await self._event(workload, "Replaced", f"{lost}; now {summary}")
        else:
            await self._event(workload, "Admitted", f"admitted to {summary}")
        borrowing = borrowing_summary(body)
        if borrowing is not None:
            await self._event(workload, "Borrowing", f"admitted to queue {body.queue} {borrowing}")
        resource = owner_resource(workload)
        if resource is not None:
            carrier: dict[str, str] = {}
            inject(carrier)  # the decision's context: the workload's trace, continued
            carrier = carrier or dict(workload.trace_context)
            annotations: dict[str, str] = {}
            if carrier:
                annotations[TRACE_ANNOTATION] = json.dumps(carrier, sort_keys=True)
            if workload.owner_kind in ("Job", "JobSet") and not workload.resume_on_admission:
                # Admitted and running: a later suspension is someone else's (the one admitted
                # while suspended for tidegate gets it with its unsuspension, by the releaser).
                annotations[RESUME_ANNOTATION] = RESUME_MANUAL
            if annotations:
                # By uid: the view may lag a Job deleted and submitted again under its name,
                # which a mark meant for the old one would take for handed back. Gone or
                # re-created: nothing to mark.
                with contextlib.suppress(NotFound, Conflict):
                    await self.kube.annotate(
                        resource, workload.namespace, workload.name, annotations, uid=workload.uid
                    )
        return Ack()

    async def _pending(self, body: Pending, received: Received) -> Outcome:
        workload = self._workload(body.workload, body.uid)
        if workload is None:
            return self._unknown(body.workload, received)
        said = (body.reason, body.message)
        if self._last_pending.get(body.uid) == said:
            return Ack()
        if body.reason == "Invalid":
            await self._event(workload, "Invalid", body.message, "Warning")
        else:
            await self._event(workload, "Pending", f"{body.reason}: {body.message}")
        self._last_pending[body.uid] = said
        return Ack()

    async def _preempted(self, body: Preempted, received: Received) -> Outcome:
        for victim in body.victims:
            workload = self.view.replica.workload(WorkloadKey(victim))
            if workload is None:
                log.info("ungater: preempted workload %s is gone; no Event", victim)
                continue
            mode = body.mode.get(victim, "restart")
            then = "re-queued" if mode == "restart" else "aborted"
            message = f"preempted by {body.preemptor} and {then}" + (
                f": {body.message}" if body.message else ""
            )
            await self._event(workload, "Preempted", message, "Warning")
        return Ack()

    async def _evicted(self, body: Released, received: Received) -> Outcome:
        workload = self._workload(body.workload, body.uid)
        if workload is None:
            return self._unknown(body.workload, received)
        message = body.message or "no replacement for slots lost to failed nodes"
        await self._event(workload, "Evicted", f"evicted whole and re-queued: {message}", "Warning")
        return Ack()

    async def _suspended(self, body: Released, received: Received) -> Outcome:
        workload = self._workload(body.workload, body.uid)
        if workload is None:
            return self._unknown(body.workload, received)
        await self._event(workload, "Suspended", f"admission released: {body.message}")
        return Ack()

    def _workload(self, key: str, uid: str) -> WorkloadState | None:
        workload = self.view.replica.workload(WorkloadKey(key))
        if workload is None or workload.uid != uid:
            return None
        return workload

    def _unknown(self, key: str, received: Received) -> Outcome:
        age = time.time() - received.envelope.time
        if age < UNKNOWN_WORKLOAD_PATIENCE_SECONDS:
            return Retry(f"workload {key} not known yet", delay_seconds=1.0)
        log.info("ungater: decision about unknown workload %s (%.0fs old) not reported", key, age)
        return Ack()

    async def _event(
        self, workload: WorkloadState, reason: EventReason, message: str, kind: EventType = "Normal"
    ) -> None:
        await self.kube.create_event(
            owner_ref(workload), reason=reason, message=message, type=kind, component=COMPONENT
        )


BYPASS_RETRY_SECONDS: Final = 1.0
"""How long :class:`BypassReporter` waits before trying a failed Event again."""


class BypassReporter:
    """Records the ``BypassedGate`` Warning on the top owner of each workload whose pods
    started without passing the gate, once (:class:`tidegate.policy.bypass.BypassNotices`:
    again only if more pods get past), naming the queue that is charged for them.

    It reads the workload messages, not decisions, so it runs on the leader only (every
    replica sees the same workloads): wire :meth:`mark` into the view's ``on_change`` and run
    :meth:`run` once the lease is held, through the leader's guarded client. What it keeps is
    bounded: the workloads marked that have bypassing pods now, and the notices' memory.
    """

    def __init__(self, view: ClusterView, kube: KubeClient, notices: BypassNotices | None = None):
        """Report about workloads of ``view`` through ``kube`` (the leader's)."""
        self.view = view
        self.kube = kube
        self.notices = notices or BypassNotices()
        self._marked: set[WorkloadKey] = set()
        self._wake = asyncio.Event()
        self.finished = asyncio.Event()
        """Set once :meth:`run` returned."""

    def mark(self, keys: Iterable[WorkloadKey]) -> None:
        """Workloads that may have changed (the view's ``on_change``): kept only while they
        have bypassing pods."""
        for key in keys:
            workload = self.view.replica.workload(key)
            if workload is not None and workload.bypassed_pods and workload.finished is None:
                self._marked.add(key)
                self._wake.set()
            else:
                self._marked.discard(key)
                if workload is not None:
                    self.notices.due(workload)  # none now: a later bypass is news again

    async def run(self, stop: asyncio.Event) -> None:
        """Report marked workloads until ``stop`` is set."""
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(BYPASS_RETRY_SECONDS):
                        await self._wake.wait()
                if stop.is_set():
                    return
                await self.round()
        finally:
            self.finished.set()

    async def round(self) -> None:
        """One Event per marked workload that has news; failed ones are tried again."""
        self._wake.clear()
        marked, self._marked = self._marked, set()
        for key in sorted(marked):
            workload = self.view.replica.workload(key)
            if workload is None or not self.notices.due(workload):
                continue
            share = self.view.replica.share(key)
            queue = share.queue if share is not None else workload.queue
            try:
                await self.kube.create_event(
                    owner_ref(workload),
                    reason="BypassedGate",
                    message=bypass_message(workload, queue or "(none)"),
                    type="Warning",
                    component=COMPONENT,
                )
            except NotFound:
                continue  # its owner is gone
            except (KubeError, LeaseUnconfirmed) as exc:
                log.warning("ungater: BypassedGate Event on %s not recorded yet: %s", key, exc)
                self.notices.failed(workload)
                self._marked.add(key)
