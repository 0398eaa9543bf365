"""Releasing gated pods into their slots, batched and concurrency-limited, with expectations.

A *round* takes every workload marked dirty since the last one (a pod, node, workload or
decision changed) and asks :func:`tidegate.policy.release.plan` what to do about each (its
admission in force, per podset the releases into free slots, replacement requests for lost or
unschedulable slots, evictions and re-queues, resuming a Job or JobSet admitted while
suspended for tidegate, PodGroup status: that module's docstring). This module carries the
intents out, at most ``max_concurrent_patches`` Kubernetes writes at a time:

- :class:`~tidegate.policy.release.ReleasePod`: ``KubeClient.ungate_pod`` (only tidegate's
  gate removed, the nodeSelector set), after the *expectation* (uid → domain) was recorded;
  it is dropped once the bus shows the pod released, the pod is gone, the patch failed, or
  ``expectation_timeout_seconds`` passed;
- :class:`~tidegate.policy.release.RequestReplacement`: a ``replace-requested`` through the
  lease's fence on the decision stream;
- :class:`~tidegate.policy.release.EvictPod`, :class:`~tidegate.policy.release.RequeueOwner`:
  an eviction, or suspending a Job or JobSet with ``tidegate.io/requeued`` after dry-run
  evictions (so budgets still apply), since the Job controller counts evicted pods as
  failures and backs off;
- :class:`~tidegate.policy.release.ResumeOwner`: one merge patch sets ``spec.suspend: false``
  and ``tidegate.io/resume: manual`` (so any later suspension is someone else's) and removes
  ``tidegate.io/requeued``, with the object's uid as precondition (a re-created object of the
  same name is not touched);
- :class:`~tidegate.policy.release.WritePodGroupStatus`: a status patch.

A write that fails makes the releaser forget what the plan remembered of it, so the next
round plans it again.

One releaser acts at a time (the ``ungater`` lease, see :mod:`tidegate.ungater.app`): every
Kubernetes write is sent only after ``guard()`` passed (the lease is held with a margin), and
the replacement requests go through the lease's fence on the decision stream. At takeover
(:meth:`Releaser.take_over`) the pods are read from the API server once, and a pod the API
server shows released while the bus still shows it gated (a predecessor's last releases, not
yet on the bus) is counted as an expectation in the slot its selector names.

A release whose answer is lost (a timeout, a 5xx, a dropped connection — the server may have
applied it) re-reads the pod: if the gate is gone the expectation stays (the pod holds its
slot); if the pod is still gated the expectation is dropped and the release retried; if the
pod cannot be read either, the expectation stays until ``expectation_timeout_seconds``.

Rounds start ``batch_window_seconds`` after the first change, so pods created together are
released together (seed 003: the TopologyUngater batches reconciles by one second). Everything
is level-triggered: a restart rebuilds the view from the bus and the next round continues
where the last one stopped. Decisions are pure calls; this module only wires them to I/O.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import assert_never

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tidegate.bus import Bus, BusError, LeaseLost, LeaseUnconfirmed, Published
from tidegate.kube import (
    JOBS,
    JOBSETS,
    PODS,
    Conflict,
    Invalid,
    KnownPod,
    KubeClient,
    KubeError,
    NotFound,
    ResourceType,
)
from tidegate.kube.eventrecord import timestamp
from tidegate.kube.read.objects import ObjectError, Pod, decode, describe_error
from tidegate.model import (
    Envelope,
    PodState,
    ReplaceRequested,
    WorkloadKey,
    WorkloadState,
    subjects,
)
from tidegate.model.names import (
    ADMISSION_GATE,
    REQUEUE_ANNOTATION,
    RESUME_ANNOTATION,
    RESUME_MANUAL,
)
from tidegate.policy import podgroup, release
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.common import gated
from tidegate.telemetry import note_pod_released, release_span
from tidegate.ungater.config import UngaterSettings

log = logging.getLogger(__name__)

RESUMABLE: dict[str, ResourceType] = {"Job": JOBS, "JobSet": JOBSETS}
"""The resources of the owner kinds the ungater unsuspends on admission
(:data:`tidegate.policy.release.RESUMABLE_KINDS`)."""


def _owner_resource(workload: WorkloadState) -> ResourceType:
    """The resource of a Job or JobSet workload's top owner (a JobSet by its apiVersion)."""
    resource = RESUMABLE[workload.owner_kind]
    if workload.owner_kind == "JobSet" and workload.owner_api_version:
        group, _, version = workload.owner_api_version.partition("/")
        resource = ResourceType(
            group=group, version=version, plural=resource.plural, kind=resource.kind
        )
    return resource


SOURCE = release.SOURCE
"""The ``source`` of every envelope this service publishes."""

PODGROUPS = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="podgroups", kind="PodGroup"
)

TICK_SECONDS = 1.0
"""How often timeouts (expectations, replacement requests) are looked at without a change."""
LAG_RETRY_SECONDS = 0.02
"""How soon a view found behind the decision stream is asked again for early releases."""

Guard = Callable[[], object]
"""Called before every Kubernetes write; raises (``LeaseLost``) to stop it (what it returns
is for the client, :meth:`tidegate.kube.KubeClient.guarded`)."""

Publish = Callable[[str, Envelope], Awaitable[Published]]
"""Publishes one envelope (the leader's fenced publish)."""

DecisionsCurrent = Callable[[Collection[WorkloadKey]], Awaitable[set[WorkloadKey]]]
"""The workloads among those given that no stored decision unseen by the view could move
(:meth:`tidegate.ungater.seen.SeenDecisions.current`)."""


class ReleaserMetrics:
    """The ungater's own metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register on ``registry``."""
        self.released = Counter(
            "tidegate_ungater_pods_released_total",
            "Pods released into their slot (gate removed, nodeSelector set).",
            registry=registry,
        )
        self.errors = Counter(
            "tidegate_ungater_write_errors_total",
            "Kubernetes writes that failed, by operation (release, evict, status).",
            ["operation"],
            registry=registry,
        )
        self.evicted = Counter(
            "tidegate_ungater_pods_evicted_total",
            "Pods evicted: admission found no replacement after a node failure, or a replacement "
            "moved the slot of a pod the scheduler could not place.",
            registry=registry,
        )
        self.resumed = Counter(
            "tidegate_ungater_workloads_resumed_total",
            "Jobs and JobSets unsuspended on admission (created suspended for tidegate).",
            registry=registry,
        )
        self.replacements = Counter(
            "tidegate_ungater_replacements_requested_total",
            "Replacement requests sent to admission after node failures or for pods the "
            "scheduler could not place.",
            registry=registry,
        )
        self.waiting = Gauge(
            "tidegate_ungater_waiting_pods",
            "Gated pods of admitted workloads without a free slot after the last round.",
            registry=registry,
        )
        self.expectations = Gauge(
            "tidegate_ungater_releases_in_flight",
            "Releases sent and not yet seen on the bus (expectations).",
            registry=registry,
        )
        self.release_latency = Histogram(
            "tidegate_ungater_release_latency_seconds",
            "Time from the admission decision (its envelope time) to a pod of it released "
            "into its slot, per pod released.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=registry,
        )
        self.round_seconds = Histogram(
            "tidegate_ungater_round_duration_seconds",
            "Time one release round takes (plan and writes).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
            registry=registry,
        )


@dataclass(slots=True)
class _Work:
    """The writes one round decided for one workload."""

    key: WorkloadKey
    workload: WorkloadState | None
    writes: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


class Releaser:
    """Reconciles dirty workloads in rounds (module docstring)."""

    def __init__(
        self,
        *,
        view: ClusterView,
        kube: KubeClient,
        bus: Bus,
        cluster: str,
        settings: UngaterSettings,
        metrics: ReleaserMetrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        guard: Guard | None = None,
        publish: Publish | None = None,
        decisions_current: DecisionsCurrent | None = None,
    ) -> None:
        """Wire the releaser; call :meth:`mark` as the view's ``on_change``. ``guard`` runs
        before every Kubernetes write, ``publish`` (default: ``bus.publish``) sends the
        replacement requests. ``wall_clock`` is compared with the times the scheduler writes
        (how long a released pod has been unschedulable)."""
        self.view = view
        self._guard = guard or (lambda: None)
        self._publish = publish or bus.publish
        self._decisions_current = decisions_current
        """True when the view has every decision the stream holds (see :meth:`round`)."""
        self.kube = kube
        self.bus = bus
        self.cluster = cluster
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.wall_clock = wall_clock
        self.memory: dict[WorkloadKey, release.Memory] = {}
        """Per workload: what planning remembers between rounds (releases in flight,
        evictions sent, requests asked, statuses written, resumes; no entry when nothing)."""
        self._timing = release.Timing(
            expectation_timeout_seconds=settings.expectation_timeout_seconds,
            replace_retry_seconds=settings.replace_retry_seconds,
            unschedulable_seconds=settings.unschedulable_seconds,
        )
        self._dirty: set[WorkloadKey] = set()
        self._wake = asyncio.Event()
        self._fresh: set[WorkloadKey] = set()
        """Keys marked since a batch last looked whether they can be released at once."""
        self._changed = asyncio.Event()
        """Set by every mark (``_wake`` only when a key is new to the round)."""
        self._writes = asyncio.Semaphore(settings.max_concurrent_patches)
        self._released_now: dict[WorkloadKey, int] = {}
        """Pods released per workload by the writes running now (logged once they end)."""
        self._stop = asyncio.Event()
        self._executing: set[asyncio.Task[None]] = set()
        """Rounds' writes still being sent in the background (:meth:`run` does not wait for
        them; what a round planned is remembered as it plans, so the next round does not plan
        it again: :attr:`memory`)."""
        self._failure: BaseException | None = None
        """The first error of a write sent in the background, raised by :meth:`run`."""
        self.rounds = 0
        """Rounds completed (tests wait on it)."""
        self.finished = asyncio.Event()
        """Set by the service once the releaser stopped for good."""

    @property
    def expectations(self) -> dict[WorkloadKey, Mapping[str, release.Expectation]]:
        """Per workload with releases in flight: pod uid → release in flight."""
        return {key: m.expectations for key, m in self.memory.items() if m.expectations}

    def mark(self, keys: Iterable[WorkloadKey]) -> None:
        """Reconcile ``keys`` in the next round. A key the view holds nothing of and the
        releaser remembers nothing of has nothing to reconcile and is dropped, so what waits
        for a round is bounded by the workloads that exist (a standby runs no rounds)."""
        keys = set(keys)
        gone = {k for k in keys if k not in self.view.replica and k not in self.memory}
        if gone:
            keys -= gone
            self._dirty.difference_update(gone)
            self._fresh.difference_update(gone)
        if not keys:
            return
        before = len(self._dirty)
        self._dirty.update(keys)
        self._fresh.update(keys)
        self._changed.set()
        if len(self._dirty) != before:
            self._wake.set()

    async def take_over(self) -> int:
        """Count the releases the bus does not show yet (module docstring); returns how many.

        Reads every pod once from the API server. Call after the followers replayed and
        before the first round."""
        listed = await self.kube.list_objects(PODS)
        read = (_read_pod(item) for item in listed.items)
        by_uid = {actual.metadata.uid: actual for actual in read if actual is not None}
        seeded = 0
        now = self.clock()
        for key in self.view.admitted_keys():
            admitted = self.view.verdict(key).admitted
            if admitted is None:
                continue
            for pod in self.view.members(key):
                if not gated(pod):
                    continue
                actual = by_uid.get(pod.uid)
                if actual is None:
                    continue
                if actual.gated():
                    continue
                expectation = release.taken_over(admitted, pod, actual.spec.node_selector, now=now)
                if expectation is None:
                    continue
                memory = self.memory.get(key, release.EMPTY)
                self._remember(key, memory.with_expectation(pod.uid, expectation))
                seeded += 1
        if seeded:
            log.info("ungater: took over with %d releases not yet on the bus", seeded)
        return seeded

    async def run(self, stop: asyncio.Event) -> None:
        """Run rounds until ``stop`` is set; writes of the round in hand that have not started
        yet are dropped then (the next process plans them again)."""
        self._stop = stop
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK_SECONDS):
                        await self._wake.wait()
                self._raise_background_failure()
                if stop.is_set():
                    return
                self._mark_timeouts()
                if not self._dirty:
                    # Woken for workloads deleted before their round (``mark`` dropped them):
                    # a wake-up left set would make every wait return at once, for ever.
                    self._wake.clear()
                    continue
                await self._batch(stop)
                self._raise_background_failure()
                if self._dirty:
                    await self.round(background=True)
        finally:
            if self._executing:
                await asyncio.wait(set(self._executing))
        self._raise_background_failure()

    def _raise_background_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _batch(self, stop: asyncio.Event) -> None:
        """Wait ``batch_window_seconds`` for more changes before the round, so pods created
        together are released together and failures are coalesced; meanwhile release at once
        each marked workload that is :meth:`_fresh_gang`: waiting for the window would be most of
        a Job's time from its creation to its pods' release."""
        deadline = time.monotonic() + self.settings.batch_window_seconds
        done: set[WorkloadKey] = set()
        while not stop.is_set():
            self._changed.clear()
            fresh, self._fresh = self._fresh, set()
            ready = {k for k in fresh - done if k in self._dirty and self._fresh_gang(k)}
            if ready and await self.round(only=ready, background=True):
                done |= ready
            elif ready:
                # A view behind the decision stream released nothing and marked them again:
                # ask again once it had time to catch up, not at every change (waiting
                # for the window's round instead would be most of the release p99).
                left = self._left(deadline)
                if left <= 0:
                    return
                await _first_set(stop, within=min(LAG_RETRY_SECONDS, left))
                continue
            if not self._dirty:
                # Everything was released early: nothing wakes the next wait until a new mark
                # (a set event would make it return at once, for ever).
                self._wake.clear()
                return
            left = self._left(deadline)
            if left <= 0:
                return
            await _first_set(self._changed, stop, within=left)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _fresh_gang(self, key: WorkloadKey) -> bool:
        """Nothing to wait for (:func:`tidegate.policy.release.fresh_gang`)."""
        return release.fresh_gang(self.view, key, self.memory.get(key, release.EMPTY))

    async def round(
        self, only: set[WorkloadKey] | None = None, *, background: bool = False
    ) -> bool:
        """Reconcile every dirty workload once (``only``: those of them); whether the view was
        current enough to release all of them. The round's writes are sent before it returns, or with
        ``background`` while the next rounds are planned (a 256-pod gang's releases take
        about 0.7 s, which every Job planned after it would otherwise wait for)."""
        started = time.perf_counter()
        if only is None:
            self._wake.clear()
        keys = sorted(self._dirty if only is None else only & self._dirty)
        self._dirty.difference_update(keys)
        # Releases only from a view holding every stored decision that could move the
        # workload's pods (tidegate.ungater.seen). No await between this check and the
        # planning below.
        admitted = [key for key in keys if self.view.verdict(key).admitted is not None]
        current = await self._decisions_are_current(admitted)
        waiting = 0
        work: list[_Work] = []
        held: list[WorkloadKey] = []
        for key in keys:
            releasing = key in current
            item, left = self._plan(key, releasing=releasing)
            if not releasing and self.view.verdict(key).admitted is not None:
                held.append(key)
            waiting += left
            if item.writes:
                work.append(item)
        self.metrics.waiting.set(waiting)
        self.metrics.expectations.set(sum(len(m.expectations) for m in self.memory.values()))
        if held:
            self.mark(held)
        if background and work:
            task = asyncio.create_task(self._execute_round(work, started))
            self._executing.add(task)
            task.add_done_callback(self._executed)
        else:
            await self._execute_round(work, started)
        return not held

    async def _execute_round(self, work: list[_Work], started: float) -> None:
        async with asyncio.TaskGroup() as tasks:
            for item in work:
                tasks.create_task(self._execute(item))
        self.rounds += 1
        self.metrics.round_seconds.observe(time.perf_counter() - started)

    def _executed(self, task: asyncio.Task[None]) -> None:
        self._executing.discard(task)
        if task.cancelled() or self._failure is not None:
            return
        self._failure = task.exception()
        if self._failure is not None:
            self._wake.set()

    async def _decisions_are_current(self, keys: list[WorkloadKey]) -> set[WorkloadKey]:
        if self._decisions_current is None or not keys:
            return set(keys)
        try:
            current = await self._decisions_current(keys)
        except BusError as exc:
            log.warning("ungater: cannot tell whether the decisions are current: %s", exc)
            return set()
        if len(current) < len(keys):
            log.info(
                "ungater: the decision stream holds decisions the view has not seen about %d "
                "of %d workloads; their releases wait",
                len(keys) - len(current),
                len(keys),
            )
        return current

    # ------------------------------------------------------------------ planning (no awaits)

    def _plan(self, key: WorkloadKey, *, releasing: bool = True) -> tuple[_Work, int]:
        """Plan ``key`` (:func:`tidegate.policy.release.plan`), remember what the plan
        remembers, and turn its intents into writes."""
        planned = release.plan(
            self.view,
            key,
            self.memory.get(key, release.EMPTY),
            releasing=releasing,
            now=self.clock(),
            wall_now=self.wall_clock(),
            timing=self._timing,
            stamp=timestamp(),
        )
        self._remember(key, planned.memory)
        item = _Work(key=key, workload=self.view.replica.workload(key))
        for intent in planned.intents:
            match intent:
                case release.ReleasePod(pod=pod, selector=selector):
                    item.writes.append(_bind(self._release, pod, dict(selector)))
                case release.RequestReplacement(request=request, event_id=event_id):
                    item.writes.append(_bind(self._ask_replacement, request, event_id))
                case release.EvictPod(pod=pod, why=why):
                    item.writes.append(_bind(self._evict, pod, why))
                case release.RequeueOwner(workload=workload, pods=pods, why=why):
                    item.writes.append(_bind(self._requeue, workload, list(pods), why))
                case release.ResumeOwner(workload=workload):
                    item.writes.append(_bind(self._resume, workload, _owner_resource(workload)))
                case release.WritePodGroupStatus(workload=workload, status=desired, first=first):
                    item.writes.append(_bind(self._write_status, workload, desired, first))
                case release.Notice(message=message):
                    log.warning("ungater: %s", message)
                case _:
                    assert_never(intent)
        return item, planned.waiting

    def _remember(self, key: WorkloadKey, memory: release.Memory) -> None:
        if memory.is_empty():
            self.memory.pop(key, None)
        else:
            self.memory[key] = memory

    def _amend(self, key: WorkloadKey, change: Callable[[release.Memory], release.Memory]) -> None:
        """Change what is remembered about ``key`` (a write failed: the next plan makes it
        again)."""
        self._remember(key, change(self.memory.get(key, release.EMPTY)))

    def _mark_timeouts(self) -> None:
        now, wall_now = self.clock(), self.wall_clock()
        self.mark(
            key
            for key, memory in self.memory.items()
            if memory.due(now=now, wall_now=wall_now, timing=self._timing)
        )

    # ------------------------------------------------------------------ writes

    async def _execute(self, item: _Work) -> None:
        # One workload uses at most half the concurrent writes, so a big gang's releases do
        # not hold back every small one planned after it.
        share = asyncio.Semaphore(max(1, self.settings.max_concurrent_patches // 2))
        with release_span(item.key, item.workload):
            try:
                async with asyncio.TaskGroup() as tasks:
                    for write in item.writes:
                        tasks.create_task(self._limited(write, share))
            finally:
                # One line per workload and round, not per pod (a 1,000-pod gang's lines
                # were 5 % of the service's CPU); each pod's line is at debug level.
                released = self._released_now.pop(item.key, 0)
                if released:
                    log.info(
                        "ungater: released %d pod%s of %s",
                        released,
                        "" if released == 1 else "s",
                        item.key,
                        extra={"workload": item.key, "pods": released},
                    )

    async def _limited(
        self, write: Callable[[], Awaitable[None]], share: asyncio.Semaphore
    ) -> None:
        async with share, self._writes:
            if not self._stop.is_set():
                await write()

    def _may_write(self, key: WorkloadKey, what: str) -> bool:
        """The guard before a Kubernetes write: False (the write is planned again soon) while
        the lease is not confirmed long enough; LeaseLost (the service stops) once it is
        lost."""
        try:
            self._guard()
        except LeaseUnconfirmed as exc:
            log.info("ungater: %s held back: %s", what, exc)
            self.mark([key])
            return False
        return True

    async def _release(self, pod: PodState, selector: dict[str, str]) -> None:
        key = WorkloadKey(pod.workload or "")
        if not self._may_write(key, f"release of pod {pod.namespace}/{pod.name}"):
            self._amend(key, lambda m: m.without_expectation(pod.uid))
            return
        try:
            await self.kube.ungate_pod(
                pod.namespace,
                pod.name,
                gate=ADMISSION_GATE,
                node_selector=selector,
                known=KnownPod(pod.uid, pod.scheduling_gates, pod.node_selector),
            )
        except NotFound:
            self._amend(key, lambda m: m.without_expectation(pod.uid))
        except Invalid as exc:
            # The pod was released meanwhile with another selector (by a user, or by an
            # earlier ungater whose patch we never saw): the bus will show where it went.
            self._amend(key, lambda m: m.without_expectation(pod.uid))
            self.metrics.errors.labels(operation="release").inc()
            log.warning("ungater: pod %s/%s not released: %s", pod.namespace, pod.name, exc)
        except KubeError as exc:
            applied = await self._applied(pod)
            if applied:
                # The answer was lost, not the write: the pod holds its slot.
                log.warning(
                    "ungater: releasing pod %s/%s failed (%s) but the API server applied it",
                    pod.namespace,
                    pod.name,
                    exc,
                )
                self.metrics.released.inc()
                return
            if applied is False:
                self._amend(key, lambda m: m.without_expectation(pod.uid))
            # applied is None: unknown; the expectation holds the slot until it times out.
            self.metrics.errors.labels(operation="release").inc()
            log.warning(
                "ungater: releasing pod %s/%s failed, will retry: %s", pod.namespace, pod.name, exc
            )
            self.mark([key])
        else:
            note_pod_released(pod, selector)
            self.metrics.released.inc()
            in_force = self.view.verdict(key).in_force
            if in_force is not None and in_force.time > 0:
                latency = max(0.0, self.wall_clock() - in_force.time)
                self.metrics.release_latency.observe(latency)
            self._released_now[key] = self._released_now.get(key, 0) + 1
            log.debug(
                "ungater: released pod %s/%s into %s",
                pod.namespace,
                pod.name,
                ",".join(f"{k}={v}" for k, v in selector.items()),
                extra={"workload": key, "pod": pod.name},
            )

    async def _applied(self, pod: PodState) -> bool | None:
        """After an ambiguous failure: True if the pod (this uid) is no longer gated, False if
        it still is or is gone, None if it cannot be read."""
        try:
            current = await self.kube.get(PODS, pod.name, namespace=pod.namespace)
        except NotFound:
            return False
        except KubeError as exc:
            log.warning("ungater: cannot re-read pod %s/%s: %s", pod.namespace, pod.name, exc)
            return None
        actual = _read_pod(current)
        if actual is None:
            return None
        if actual.metadata.uid != pod.uid:
            return False
        return not actual.gated()

    async def _evict(self, pod: PodState, why: str) -> None:
        key = WorkloadKey(pod.workload or "")
        if not self._may_write(key, f"eviction of pod {pod.namespace}/{pod.name}"):
            self._amend(key, lambda m: m.without_eviction(pod.uid))
            return
        try:
            await self.kube.evict_pod(pod.namespace, pod.name, uid=pod.uid)
        except NotFound:
            pass
        except KubeError as exc:
            self._amend(key, lambda m: m.without_eviction(pod.uid))
            self.metrics.errors.labels(operation="evict").inc()
            log.warning(
                "ungater: evicting pod %s/%s failed, will retry: %s", pod.namespace, pod.name, exc
            )
            self.mark([key])
        else:
            self.metrics.evicted.inc()
            log.info("ungater: evicted pod %s/%s (%s)", pod.namespace, pod.name, why)

    async def _requeue(self, workload: WorkloadState, pods: list[PodState], why: str) -> None:
        """Take a Job's or JobSet's pods away by suspending it (evicted after a node failure,
        or pods whose slots were moved): once no PodDisruptionBudget refuses evicting any of
        ``pods`` (dry run); retried later when one does or the write fails. It is resumed as
        soon as an admission is in force and its old pods are gone (planning's
        :class:`~tidegate.policy.release.ResumeOwner`)."""
        key = WorkloadKey(f"{workload.namespace}/{workload.name}")
        if not self._may_write(key, f"re-queue of {key}"):
            self._amend(key, lambda m: replace(m, requeuing=None))
            return
        try:
            for pod in pods:
                try:
                    await self.kube.evict_pod(pod.namespace, pod.name, uid=pod.uid, dry_run=True)
                except (NotFound, Conflict):
                    continue
            self._guard()
            await self.kube.requeue_owner(
                _owner_resource(workload),
                workload.namespace,
                workload.name,
                uid=workload.uid,
                why=why,
            )
        except (NotFound, Conflict):
            log.info("ungater: %s is gone or was re-created; not re-queued", key)
        except KubeError as exc:
            self._amend(key, lambda m: replace(m, requeuing=None))
            self.metrics.errors.labels(operation="evict").inc()
            log.warning(
                "ungater: re-queuing %s (suspending it) refused or failed, will retry in %.0f s: "
                "%s",
                key,
                self.settings.replace_retry_seconds,
                exc,
            )
            asyncio.get_running_loop().call_later(
                self.settings.replace_retry_seconds, self.mark, [key]
            )
        else:
            self.metrics.evicted.inc(len(pods))
            log.info(
                "ungater: suspended %s %s to take its %d pods away (%s)",
                workload.owner_kind,
                key,
                len(pods),
                why,
                extra={"workload": key},
            )

    async def _resume(self, workload: WorkloadState, resource: ResourceType) -> None:
        key = WorkloadKey(f"{workload.namespace}/{workload.name}")
        patch = {
            "metadata": {
                "annotations": {RESUME_ANNOTATION: RESUME_MANUAL, REQUEUE_ANNOTATION: None},
            },
            "spec": {"suspend": False},
        }
        self._guard()
        try:
            await self.kube.patch(
                resource, workload.name, patch, namespace=workload.namespace, uid=workload.uid
            )
        except (NotFound, Conflict):
            log.info("ungater: %s %s is gone or was re-created; not resumed", resource.kind, key)
        except KubeError as exc:
            self._amend(key, lambda m: replace(m, resumed=None))
            self.metrics.errors.labels(operation="resume").inc()
            log.warning("ungater: resuming %s %s failed, will retry: %s", resource.kind, key, exc)
            self.mark([key])
        else:
            self.metrics.resumed.inc()
            log.info(
                "ungater: unsuspended %s %s on its admission",
                resource.kind,
                key,
                extra={"workload": key},
            )

    async def _ask_replacement(self, request: ReplaceRequested, event_id: str) -> None:
        namespace, _, name = request.workload.partition("/")
        envelope = Envelope(
            event_id=event_id,
            cluster=self.cluster,
            source=SOURCE,
            time=time.time(),
            body=request,
            source_uid=request.uid,
        )
        try:
            await self._publish(
                subjects.decision(self.cluster, "replace-requested", namespace, name), envelope
            )
        except LeaseLost:
            raise
        except BusError as exc:
            key = WorkloadKey(request.workload)
            self._amend(key, lambda m: m.without_request(give_back=request.give_back))
            log.warning(
                "ungater: %s request for %s not sent, will retry: %s",
                "give-back" if request.give_back else "replacement",
                request.workload,
                exc,
            )
            self.mark([key])
            return
        if request.give_back:
            log.info("ungater: %s: %s; giving them back", request.workload, request.message)
            return
        self.metrics.replacements.inc()
        log.warning(
            "ungater: %s: %s; asked admission for replacements", request.workload, request.message
        )

    async def _write_status(
        self, workload: WorkloadState, desired: dict[str, object], first: bool
    ) -> None:
        key = WorkloadKey(f"{workload.namespace}/{workload.name}")
        if not self._may_write(key, f"status of PodGroup {key}"):
            self._amend(key, lambda m: replace(m, status=None))
            return
        try:
            if first:
                desired = await self._carry_over(workload, desired)
                self._amend(key, lambda m: replace(m, status=desired))
            await self.kube.patch(
                PODGROUPS,
                workload.name,
                {"status": desired},
                namespace=workload.namespace,
                subresource="status",
            )
        except NotFound:
            return
        except KubeError as exc:
            self._amend(key, lambda m: replace(m, status=None))
            self.metrics.errors.labels(operation="status").inc()
            log.warning("ungater: status of PodGroup %s not written, will retry: %s", key, exc)
            self.mark([key])

    async def _carry_over(
        self, workload: WorkloadState, desired: dict[str, object]
    ) -> dict[str, object]:
        """Keep condition times the PodGroup already shows (first write after a start)."""
        current = await self.kube.get(PODGROUPS, workload.name, namespace=workload.namespace)
        return podgroup.with_shown_times(desired, current.get("status"))


def _read_pod(item: object) -> Pod | None:
    """A pod as the API server sent it, read through the typed layer; None (and a warning
    naming the field) when it cannot be read."""
    try:
        return decode(item, Pod)
    except ObjectError as exc:
        log.warning("ungater: a pod the API server sent cannot be read: %s", describe_error(exc))
        return None


async def _first_set(*events: asyncio.Event, within: float) -> None:
    """Return when one of ``events`` is set, or after ``within`` seconds."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _bind(function: Callable[..., Awaitable[None]], *args: object) -> Callable[[], Awaitable[None]]:
    return lambda: function(*args)
