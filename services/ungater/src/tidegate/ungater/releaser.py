"""Releasing gated pods into their slots, batched and concurrency-limited, with expectations.

A *round* takes every workload marked dirty since the last one (a pod, node, workload or
decision changed), and for each:

1. finds the admission in force (:meth:`tidegate.model.replica.Replica.verdict`);
2. per podset, plans releases with :func:`tidegate.policy.slots.plan_podset`: released pods
   are counted from their nodeSelectors, releases in flight from the *expectations* (uid →
   domain, recorded before the patch is sent, dropped once the bus shows the pod released, the
   pod is gone, the patch failed, or ``expectation_timeout_seconds`` passed), pods on
   NotReady or vanished nodes hold no slot;
3. sends the releases (``KubeClient.ungate_pod``: the nodeSelector of the domain — every
   level label down to it, plus ``nvidia.com/gpu.product`` of the admitted card model — and
   only tidegate's gate removed), at most ``max_concurrent_patches`` Kubernetes writes at a time;
4. asks admission for replacement slots when whole domains of the assignment lost their nodes
   (:class:`~tidegate.model.ReplaceRequested`), and evicts the remaining pods when admission
   answered that there is no room (``Released.evict_pods``) — a Job's or JobSet's by
   suspending it with ``tidegate.io/requeued`` instead (after dry-run evictions, so budgets
   still apply), since the Job controller counts evicted pods as failures and backs off;
5. writes PodGroup status when it changed;
6. unsuspends a Job or JobSet admitted while suspended for tidegate (``resume_on_admission``,
   Kueue's way): one merge patch sets ``spec.suspend: false`` and the annotation
   ``tidegate.io/resume: manual`` (so any later suspension is someone else's), with the
   object's uid as precondition (a re-created object of the same name is not touched). Its
   controller then creates the pods, the webhook gates them, and step 2 releases them. A Job
   tidegate re-queued (``tidegate.io/requeued``, removed by the same patch) is unsuspended only
   once none of its old pods is live any more, so the suspension has taken effect.

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
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
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
from tidegate.kube.ungate import has_gate
from tidegate.model import (
    Admitted,
    DomainCount,
    Envelope,
    PodState,
    ReplaceCause,
    ReplaceRequested,
    TopologyAssignment,
    WorkloadKey,
    WorkloadState,
    subjects,
)
from tidegate.model.names import (
    ADMISSION_GATE,
    REQUEUE_ANNOTATION,
    REQUEUE_KINDS,
    RESUME_ANNOTATION,
    RESUME_MANUAL,
)
from tidegate.policy import elastic, slots
from tidegate.policy.cards import GPU_PRODUCT_LABEL, CardError, parse_card_name
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.common import active, gated
from tidegate.telemetry import note_pod_released, release_span
from tidegate.ungater import status
from tidegate.ungater.config import UngaterSettings

log = logging.getLogger(__name__)

RESUMABLE: dict[str, ResourceType] = {"Job": JOBS, "JobSet": JOBSETS}
"""Owner kinds the ungater unsuspends on admission."""


def _owner_resource(workload: WorkloadState) -> ResourceType:
    """The resource of a Job or JobSet workload's top owner (a JobSet by its apiVersion)."""
    resource = RESUMABLE[workload.owner_kind]
    if workload.owner_kind == "JobSet" and workload.owner_api_version:
        group, _, version = workload.owner_api_version.partition("/")
        resource = ResourceType(
            group=group, version=version, plural=resource.plural, kind=resource.kind
        )
    return resource


SOURCE = "ungater"
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
class Expectation:
    """A release sent and not yet seen on the bus."""

    workload: WorkloadKey
    podset: str
    domain: slots.Domain
    at: float


@dataclass(slots=True)
class _Asked:
    sequence: int
    signature: str
    at: float
    attempt: int


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
        self.expectations: dict[WorkloadKey, dict[str, Expectation]] = {}
        """Per workload: pod uid → release in flight."""
        self._dirty: set[WorkloadKey] = set()
        self._wake = asyncio.Event()
        self._fresh: set[WorkloadKey] = set()
        """Keys marked since a batch last looked whether they can be released at once."""
        self._changed = asyncio.Event()
        """Set by every mark (``_wake`` only when a key is new to the round)."""
        self._writes = asyncio.Semaphore(settings.max_concurrent_patches)
        self._asked: dict[WorkloadKey, _Asked] = {}
        self._giving: dict[WorkloadKey, _Asked] = {}
        """Per workload: the last give-back request sent (slots of a workload that shrank)."""
        self._unschedulable_due: dict[WorkloadKey, float] = {}
        """Per workload: the wall-clock time its next released pod the scheduler cannot place
        will have waited ``unschedulable_seconds`` (it is looked at again then)."""
        self._evicting: dict[WorkloadKey, set[str]] = {}
        """Per workload: uids of pods whose eviction was sent."""
        self._released_under: dict[WorkloadKey, dict[str, int]] = {}
        """Per workload: pod uid → sequence of the admission this process released it under."""
        self._status: dict[WorkloadKey, dict[str, object]] = {}
        self._resumed: dict[WorkloadKey, tuple[str, int]] = {}
        """Per workload: (uid, admission sequence) this process unsuspended it for."""
        self._requeuing: dict[WorkloadKey, tuple[str, int]] = {}
        """Per workload: (uid, eviction decision sequence) this process suspended it for."""
        self._stop = asyncio.Event()
        self._executing: set[asyncio.Task[None]] = set()
        """Rounds' writes still being sent in the background (:meth:`run` does not wait for
        them; what a round planned is remembered as it plans, so the next round does not plan
        it again: expectations, evictions sent, requests asked, statuses, resumes)."""
        self._failure: BaseException | None = None
        """The first error of a write sent in the background, raised by :meth:`run`."""
        self.rounds = 0
        """Rounds completed (tests wait on it)."""
        self.finished = asyncio.Event()
        """Set by the service once the releaser stopped for good."""

    def mark(self, keys: Iterable[WorkloadKey]) -> None:
        """Reconcile ``keys`` in the next round."""
        keys = set(keys)
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
        by_uid = {_uid(item): item for item in listed.items}
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
                if has_gate(actual, ADMISSION_GATE):
                    continue
                podset = pod.podset or ""
                assignment = admitted.assignments.get(podset)
                if assignment is None:
                    continue
                domain = slots.domain_of(
                    assignment.levels, _selector(actual), list(slots.assigned(assignment))
                )
                if domain is None:
                    continue
                self.expectations.setdefault(key, {})[pod.uid] = Expectation(
                    workload=key, podset=podset, domain=domain, at=now
                )
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
        each marked workload that is :meth:`_fresh_gang` (issue 14: the window had been most
        of a Job's time from its creation to its pods' release)."""
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
                # ask again once it had time to catch up, not at every change (issue 14:
                # waiting for the window's round instead was most of the p99).
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
        """A first admission (not a replacement) none of whose pods is released or expected
        yet, with a gated pod in the view for each of its slots: nothing to wait for."""
        admitted = self.view.verdict(key).admitted
        if admitted is None or admitted.replaces is not None or self.expectations.get(key):
            return False
        wanted = sum(
            sum(slots.assigned(assignment).values()) for assignment in admitted.assignments.values()
        )
        if self.view.member_count(key) < wanted:
            return False
        return all(gated(pod) for pod in self.view.members(key))

    async def round(
        self, only: set[WorkloadKey] | None = None, *, background: bool = False
    ) -> bool:
        """Reconcile every dirty workload once (``only``: those of them); whether the view was
        current enough to release all of them. The round's writes are sent before it returns, or with
        ``background`` while the next rounds are planned (a 256-pod gang's releases took
        0.7 s, which every Job after it waited for: issue 14's p99)."""
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
        self.metrics.expectations.set(sum(len(e) for e in self.expectations.values()))
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
        view = self.view
        workload = view.replica.workload(key)
        verdict = view.verdict(key)
        members = view.members(key)
        self._settle_expectations(key, members)
        self._forget_gone(key, workload, members)
        item = _Work(key=key, workload=workload)
        waiting = 0
        admitted = verdict.admitted
        if admitted is not None:
            if releasing:
                waiting = self._plan_releases(item, admitted, members)
            self._plan_replacement(item, admitted, members)
            if admitted.replaces is not None:
                self._plan_stranded(item, admitted, members)
            if releasing:
                self._plan_resume(item, workload, admitted)
        else:
            self._asked.pop(key, None)
            self._giving.pop(key, None)
            self._unschedulable_due.pop(key, None)
        released = verdict.released.body if verdict.released is not None else None
        if released is not None and released.evict_pods:
            # Even when admitted again meanwhile: the pods released before the eviction go.
            self._plan_evictions(item, members, released.sequence, admitted)
        if workload is not None and workload.owner_kind == "PodGroup":
            self._plan_status(item, workload, members)
        return item, waiting

    def _forget_expectation(self, key: WorkloadKey, uid: str) -> None:
        expected = self.expectations.get(key)
        if expected is not None:
            expected.pop(uid, None)
            if not expected:
                del self.expectations[key]

    def _forget_gone(
        self, key: WorkloadKey, workload: WorkloadState | None, members: list[PodState]
    ) -> None:
        """Drop what this process remembers about pods (and workloads) that are gone."""
        present = {pod.uid for pod in members}
        for memory in (self._released_under, self._evicting):
            known = memory.get(key)
            if known is None:
                continue
            for uid in [uid for uid in known if uid not in present]:
                if isinstance(known, dict):
                    del known[uid]
                else:
                    known.discard(uid)
            if not known:
                del memory[key]
        if workload is None:
            self._status.pop(key, None)
            self._resumed.pop(key, None)

    def _settle_expectations(self, key: WorkloadKey, members: list[PodState]) -> None:
        by_uid = {pod.uid: pod for pod in members}
        deadline = self.clock() - self.settings.expectation_timeout_seconds
        expected = self.expectations.get(key, {})
        for uid, expectation in list(expected.items()):
            pod = by_uid.get(uid)
            if pod is None or not gated(pod):
                del expected[uid]  # gone, or seen released: its selector counts now
            elif expectation.at < deadline:
                log.warning(
                    "ungater: release of pod %s/%s not seen within %.0fs; judging it by the bus",
                    pod.namespace,
                    pod.name,
                    self.settings.expectation_timeout_seconds,
                )
                del expected[uid]
        if not expected:
            self.expectations.pop(key, None)

    def _plan_releases(self, item: _Work, admitted: Admitted, members: list[PodState]) -> int:
        by_podset = _by_podset(members)
        extra = self._card_selector(admitted)
        waiting = 0
        workload = item.workload
        surplus = (
            elastic.surplus(workload, admitted)
            if workload is not None
            and workload.uid == admitted.uid
            and elastic.gives_back(workload)
            else {}
        )
        giving: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            pods = by_podset.get(podset, [])
            lost = {tuple(d.values) for d in self._failed(assignment)}
            expected = {
                uid: e.domain
                for uid, e in self.expectations.get(item.key, {}).items()
                if e.podset == podset
            }
            plan = slots.plan_podset(
                assignment,
                slots.members(pods, self.view.node_ready),
                expected=expected,
                lost=lost,
            )
            waiting += plan.waiting
            if plan.waiting == 0 and surplus.get(podset, 0) > 0:
                spare = slots.spare_slots(
                    assignment, plan.occupied, surplus=surplus[podset], lost=lost
                )
                if spare:
                    giving[podset] = spare
            by_uid = {pod.uid: pod for pod in pods}
            for release in plan.releases:
                pod = by_uid[release.uid]
                selector = {**slots.selector_for(assignment.levels, release.domain), **extra}
                self.expectations.setdefault(item.key, {})[pod.uid] = Expectation(
                    workload=item.key, podset=podset, domain=release.domain, at=self.clock()
                )
                self._released_under.setdefault(item.key, {})[pod.uid] = admitted.sequence
                item.writes.append(_bind(self._release, pod, selector))
        self._plan_give_back(item, admitted, giving)
        return waiting

    def _plan_give_back(
        self, item: _Work, admitted: Admitted, giving: dict[str, list[DomainCount]]
    ) -> None:
        """Ask admission to take back slots no pod holds of a workload that shrank (a
        ``replace-requested`` with ``give_back``), once per admission and set of slots, again
        after ``replace_retry_seconds`` without an answer."""
        if not giving:
            self._giving.pop(item.key, None)
            return
        record = self._ask(self._giving, item.key, admitted.sequence, giving)
        if record is None:
            return
        signature, attempt = record.signature, record.attempt
        freed = sum(d.count for domains in giving.values() for d in domains)
        request = ReplaceRequested(
            workload=admitted.workload,
            uid=admitted.uid,
            admitted_sequence=admitted.sequence,
            lost=giving,
            give_back=True,
            message=f"the workload shrank: {freed} slot{'s' if freed != 1 else ''} no pod holds",
        )
        event_id = f"{SOURCE}-giveback-{admitted.uid}-{admitted.sequence}-{signature}-{attempt}"
        item.writes.append(_bind(self._ask_replacement, request, event_id))

    def _failed(self, assignment: TopologyAssignment) -> list[DomainCount]:
        levels = assignment.levels

        def alive(domain: slots.Domain) -> bool:
            return any(node.ready for node in self.view.nodes_matching(levels, domain))

        return slots.failed_domains(assignment, alive)

    def _card_selector(self, admitted: Admitted) -> dict[str, str]:
        if not admitted.card_model:
            return {}
        try:
            return {GPU_PRODUCT_LABEL: parse_card_name(admitted.card_model).product}
        except CardError as exc:
            log.warning(
                "ungater: %s: card model not used in the selector: %s", admitted.workload, exc
            )
            return {}

    def _plan_replacement(self, item: _Work, admitted: Admitted, members: list[PodState]) -> None:
        lost: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            failed = self._failed(assignment)
            if failed:
                lost[podset] = failed
        if not lost:
            self._plan_unschedulable(item, admitted, members)
            return
        nodes = sorted(
            self._domain_nodes(admitted, lost, departed=True)
            | {
                pod.node_name
                for pod in self.view.members(item.key)
                if pod.node_name is not None and not self.view.node_ready(pod.node_name)
            }
        )
        slots_lost = sum(d.count for domains in lost.values() for d in domains)
        message = (
            f"{slots_lost} slot{'s' if slots_lost != 1 else ''} of "
            f"{', '.join(sorted(lost))} lost with node{'s' if len(nodes) != 1 else ''} "
            f"{', '.join(nodes) or '(gone)'}"
        )
        self._request_replacement(item, admitted, lost, nodes, message, "NodeFailed")

    def _plan_unschedulable(self, item: _Work, admitted: Admitted, members: list[PodState]) -> None:
        """Ask admission to place again the slots whose released pods the scheduler has found
        no room for during ``unschedulable_seconds``, doubled for every such move the workload
        had already (a ``replace-requested`` of cause ``Unschedulable`` naming those domains'
        nodes), and note when the next such pod is due."""
        self._unschedulable_due.pop(item.key, None)
        wait = slots.unschedulable_wait(
            self.settings.unschedulable_seconds, admitted.unschedulable_moves
        )
        marked = [since for pod in members if (since := slots.stuck_since(pod)) is not None]
        if wait <= 0 or not marked:
            self._asked.pop(item.key, None)
            return
        now = self.wall_clock()
        later = [since + wait for since in marked if since + wait > now]
        if later:
            self._unschedulable_due[item.key] = min(later)
        by_podset = _by_podset(members)
        stuck: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            found = slots.stuck_slots(
                assignment, by_podset.get(podset, []), self.view.node_ready, before=now - wait
            )
            if found:
                stuck[podset] = found
        if not stuck:
            self._asked.pop(item.key, None)
            return
        nodes = sorted(self._domain_nodes(admitted, stuck))
        count = sum(d.count for domains in stuck.values() for d in domains)
        message = (
            f"{count} released pod{'s' if count != 1 else ''} of {', '.join(sorted(stuck))} "
            f"unschedulable for {wait:.0f}s or more on node{'s' if len(nodes) != 1 else ''} "
            f"{', '.join(nodes) or '(none)'}"
        )
        self._request_replacement(item, admitted, stuck, nodes, message, "Unschedulable")

    def _domain_nodes(
        self, admitted: Admitted, lost: Mapping[str, list[DomainCount]], *, departed: bool = False
    ) -> set[str]:
        """The nodes of the domains ``lost`` names (with ``departed``, deleted ones too)."""
        return {
            node.name
            for podset, domains in lost.items()
            for domain in domains
            for node in self.view.nodes_matching(
                admitted.assignments[podset].levels, domain.values, departed=departed
            )
        }

    def _request_replacement(
        self,
        item: _Work,
        admitted: Admitted,
        lost: dict[str, list[DomainCount]],
        nodes: list[str],
        message: str,
        cause: ReplaceCause,
    ) -> None:
        """Plan a ``replace-requested`` for ``lost``, unless the same one was sent less than
        ``replace_retry_seconds`` ago (:meth:`_ask`)."""
        payload: list[object] = [lost, nodes] if cause == "NodeFailed" else [lost, nodes, cause]
        record = self._ask(self._asked, item.key, admitted.sequence, payload)
        if record is None:
            return
        request = ReplaceRequested(
            workload=admitted.workload,
            uid=admitted.uid,
            admitted_sequence=admitted.sequence,
            lost=lost,
            nodes=nodes,
            message=message,
            cause=cause,
        )
        kind = "replace" if cause == "NodeFailed" else "unschedulable"
        event_id = f"{SOURCE}-{kind}-{admitted.uid}-{admitted.sequence}-{record.signature}-{record.attempt}"
        item.writes.append(_bind(self._ask_replacement, request, event_id))

    def _plan_stranded(self, item: _Work, admitted: Admitted, members: list[PodState]) -> None:
        """Evict the released pods the scheduler found no room for whose slots a replacement
        moved elsewhere (:func:`slots.stranded`): their controller re-creates them gated, and
        they are released into the new slots."""
        if not any(slots.stuck_since(pod) for pod in members):
            return  # the usual case: nothing to look for, so no grouping per round
        by_podset = _by_podset(members)
        stranded = [
            pod
            for podset, assignment in sorted(admitted.assignments.items())
            for pod in slots.stranded(assignment, by_podset.get(podset, []), self.view.node_ready)
        ]
        moved = "moved: the scheduler found no room for its pods"
        if stranded and self._requeues(item, admitted.sequence, stranded, moved):
            return
        for pod in stranded:
            self._plan_eviction(item, pod, "its slot was moved elsewhere")

    def _requeues(self, item: _Work, sequence: int, pods: list[PodState], why: str) -> bool:
        """For a Job or JobSet, plan taking ``pods`` away by suspending the owner (once per
        decision ``sequence``), not by evicting them: an evicted pod is a failure to the Job
        controller. False for other kinds (their pods are evicted)."""
        workload = item.workload
        if workload is None or workload.owner_kind not in REQUEUE_KINDS:
            return False
        marker = (workload.uid, sequence)
        if self._requeuing.get(item.key) != marker:
            self._requeuing[item.key] = marker
            item.writes.append(_bind(self._requeue, workload, pods, why))
        return True

    def _plan_evictions(
        self, item: _Work, members: list[PodState], sequence: int, admitted: Admitted | None
    ) -> None:
        """Evict the pods released before the eviction decision ``sequence``: those this
        process released under an older admission; after a restart, when it cannot know,
        every released pod unless the workload was admitted again and the pod sits in a slot
        domain of the new admission (a valid place: it keeps it); :func:`slots.must_evict`."""
        released_under = self._released_under.get(item.key, {})
        pods = slots.must_evict(
            members, sequence=sequence, released_under=released_under, admitted=admitted
        )
        evicted = "evicted: no room for its replacement pods"
        if pods and self._requeues(item, sequence, pods, evicted):
            return
        for pod in pods:
            self._plan_eviction(item, pod, "no replacement after a node failure")

    def _plan_eviction(self, item: _Work, pod: PodState, why: str) -> None:
        """Evict ``pod`` (``why`` goes to the log), unless its eviction was sent already."""
        evicting = self._evicting.setdefault(item.key, set())
        if pod.uid not in evicting:
            evicting.add(pod.uid)
            item.writes.append(_bind(self._evict, pod, why))

    def _plan_resume(self, item: _Work, workload: WorkloadState | None, admitted: Admitted) -> None:
        """Unsuspend a workload admitted while suspended for tidegate (module docstring), once
        per admission in this process."""
        if workload is None or workload.uid != admitted.uid:
            return
        if not workload.suspended:
            if self._resumed.get(item.key, ("", 0))[0] == workload.uid:
                # Seen unsuspended: a later suspension by tidegate is resumed again.
                del self._resumed[item.key]
            return
        if not workload.resume_on_admission:
            return
        if any(active(pod) for pod in self.view.members(item.key)):
            return  # re-queued: its controller is still deleting the old pods
        resource = RESUMABLE.get(workload.owner_kind)
        if resource is None:
            return
        marker = (workload.uid, admitted.sequence)
        if self._resumed.get(item.key) == marker:
            return
        self._resumed[item.key] = marker
        item.writes.append(_bind(self._resume, workload, _owner_resource(workload)))

    def _plan_status(self, item: _Work, workload: WorkloadState, members: list[PodState]) -> None:
        verdict = self.view.verdict(item.key)
        previous = self._status.get(item.key)
        conditions = previous.get("conditions") if previous else None
        desired = status.podgroup_status(
            workload,
            members,
            admitted=verdict.admitted,
            released=verdict.released.body if verdict.released is not None else None,
            pending=verdict.pending.body if verdict.pending is not None else None,
            now=timestamp(),
            previous=conditions if isinstance(conditions, list) else (),
        )
        if previous is not None and status.same_status(previous, desired):
            return
        self._status[item.key] = desired
        item.writes.append(_bind(self._write_status, workload, desired, previous is None))

    def _ask(
        self, table: dict[WorkloadKey, _Asked], key: WorkloadKey, sequence: int, payload: object
    ) -> _Asked | None:
        """Record a request about ``key``'s admission ``sequence`` carrying ``payload``, or None
        when the same one was sent less than ``replace_retry_seconds`` ago (the next attempt
        of the same request gets a new number, so its event id differs)."""
        signature = hashlib.sha256(msgspec.json.encode(payload, order="deterministic")).hexdigest()
        signature = signature[:16]
        asked = table.get(key)
        now = self.clock()
        same = asked is not None and asked.sequence == sequence
        if (
            same
            and asked is not None
            and asked.signature == signature
            and now - asked.at < self.settings.replace_retry_seconds
        ):
            return None
        attempt = asked.attempt + 1 if same and asked is not None else 1
        table[key] = record = _Asked(sequence, signature, now, attempt)
        return record

    def _mark_timeouts(self) -> None:
        now = self.clock()
        deadline = now - self.settings.expectation_timeout_seconds
        self.mark(
            key
            for key, expected in self.expectations.items()
            if any(e.at < deadline for e in expected.values())
        )
        retry = now - self.settings.replace_retry_seconds
        self.mark(key for key, asked in self._asked.items() if asked.at < retry)
        wall = self.wall_clock()
        self.mark(key for key, due in self._unschedulable_due.items() if due <= wall)
        self.mark(key for key, asked in self._giving.items() if asked.at < retry)

    # ------------------------------------------------------------------ writes

    async def _execute(self, item: _Work) -> None:
        # One workload uses at most half the concurrent writes, so a big gang's releases do
        # not hold back every small one planned after it.
        share = asyncio.Semaphore(max(1, self.settings.max_concurrent_patches // 2))
        with release_span(item.key, item.workload):
            async with asyncio.TaskGroup() as tasks:
                for write in item.writes:
                    tasks.create_task(self._limited(write, share))

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
            self._forget_expectation(key, pod.uid)
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
            self._forget_expectation(key, pod.uid)
        except Invalid as exc:
            # The pod was released meanwhile with another selector (by a user, or by an
            # earlier ungater whose patch we never saw): the bus will show where it went.
            self._forget_expectation(key, pod.uid)
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
                self._forget_expectation(key, pod.uid)
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
            log.info(
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
        if _uid(current) != pod.uid:
            return False
        return not has_gate(current, ADMISSION_GATE)

    async def _evict(self, pod: PodState, why: str) -> None:
        key = WorkloadKey(pod.workload or "")
        if not self._may_write(key, f"eviction of pod {pod.namespace}/{pod.name}"):
            self._evicting.get(key, set()).discard(pod.uid)
            return
        try:
            await self.kube.evict_pod(pod.namespace, pod.name, uid=pod.uid)
        except NotFound:
            pass
        except KubeError as exc:
            self._evicting.get(WorkloadKey(pod.workload or ""), set()).discard(pod.uid)
            self.metrics.errors.labels(operation="evict").inc()
            log.warning(
                "ungater: evicting pod %s/%s failed, will retry: %s", pod.namespace, pod.name, exc
            )
            self.mark([WorkloadKey(pod.workload or "")])
        else:
            self.metrics.evicted.inc()
            log.info("ungater: evicted pod %s/%s (%s)", pod.namespace, pod.name, why)

    async def _requeue(self, workload: WorkloadState, pods: list[PodState], why: str) -> None:
        """Take a Job's or JobSet's pods away by suspending it (evicted after a node failure,
        or pods whose slots were moved): once no PodDisruptionBudget refuses evicting any of
        ``pods`` (dry run); retried later when one does or the write fails. It is resumed as
        soon as an admission is in force and its old pods are gone (:meth:`_plan_resume`)."""
        key = WorkloadKey(f"{workload.namespace}/{workload.name}")
        if not self._may_write(key, f"re-queue of {key}"):
            self._requeuing.pop(key, None)
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
            self._requeuing.pop(key, None)
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
            self._resumed.pop(key, None)
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
            tracker = self._giving if request.give_back else self._asked
            tracker.pop(WorkloadKey(request.workload), None)
            log.warning(
                "ungater: %s request for %s not sent, will retry: %s",
                "give-back" if request.give_back else "replacement",
                request.workload,
                exc,
            )
            self.mark([WorkloadKey(request.workload)])
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
            self._status.pop(key, None)
            return
        try:
            if first:
                desired = await self._carry_over(workload, desired)
                self._status[key] = desired
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
            self._status.pop(key, None)
            self.metrics.errors.labels(operation="status").inc()
            log.warning("ungater: status of PodGroup %s not written, will retry: %s", key, exc)
            self.mark([key])

    async def _carry_over(
        self, workload: WorkloadState, desired: dict[str, object]
    ) -> dict[str, object]:
        """Keep condition times the PodGroup already shows (first write after a start)."""
        current = await self.kube.get(PODGROUPS, workload.name, namespace=workload.namespace)
        shown = current.get("status")
        before = shown.get("conditions") if isinstance(shown, dict) else None
        if not isinstance(before, list):
            return desired
        times = {
            (c.get("type"), c.get("status")): c.get("lastTransitionTime")
            for c in before
            if isinstance(c, dict)
        }
        conditions = desired.get("conditions")
        if isinstance(conditions, list):
            for condition in conditions:
                time_ = times.get((condition.get("type"), condition.get("status")))
                if isinstance(time_, str) and time_:
                    condition["lastTransitionTime"] = time_
        return desired


def _by_podset(pods: Iterable[PodState]) -> dict[str, list[PodState]]:
    """``pods`` grouped by podset name (an unnamed podset is "")."""
    out: dict[str, list[PodState]] = {}
    for pod in pods:
        out.setdefault(pod.podset or "", []).append(pod)
    return out


def _uid(obj: Mapping[str, object]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("uid", "")) if isinstance(metadata, dict) else ""


def _spec(obj: Mapping[str, object]) -> dict[str, object]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _selector(obj: Mapping[str, object]) -> dict[str, str]:
    selector = _spec(obj).get("nodeSelector")
    if not isinstance(selector, dict):
        return {}
    return {str(k): str(v) for k, v in selector.items()}


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
