"""Answering a preempt request: search, commit to the ledger, publish, evict.

One :class:`Preempter` per leading instance. For a ``preempt-requested`` decision it:

1. checks the request is current: the preemptor exists with that UID and is not admitted, and
   the request is newer than the last one answered for it (a record in the ledger); a newer
   request while the preemptor's own preemption is in force (its record not dropped yet) is
   answered ``nominated`` without a search: one preemption per nomination, never further
   victims for room already freed but not yet visible in the capacity view;
2. runs the victim search on the view (:meth:`tidegate.preemption.view.PreemptionView.choose`,
   which calls :func:`tidegate.policy.victims.select_victims`; it skips gangs their
   PodDisruptionBudgets protect), then asks the API server, without evicting (dry run),
   whether every victim pod may be evicted now: if a budget refuses one, nothing is recorded,
   published or evicted (the answer is ``budget-blocked``, with a PreemptionBlocked Event on
   the victims and the preemptor) and admission asks again later;
3. if the answer evicts someone: writes the preemption record (victims, their pods, modes and
   the nominated room) to the ledger, revision-checked, **before** publishing or evicting;
4. publishes the ``preempted`` decision (deterministic event id) and marks the record
   published, **before** the first eviction: the decision ends the victims' admissions for
   the ungater and admission, so the replacement pods a victim's controller creates while its
   old pods are evicted (a Job's, as soon as they are terminating) wait gated for a new
   admission instead of being released into the victim's old slots;
5. evicts every recorded pod of every victim (abort mode: suspends its Job/JobSet first; its
   pods are evicted even when that fails) and marks the record evicted once every victim is
   evicted whole and aborted. What is left (a pod a budget refuses, an abort the API server
   refused) is reported (Warning Events on the victim and the preemptor, metrics) and retried
   by :meth:`Preempter.reconcile` until it succeeds. The record stays while the nomination holds; the nomination
   timeout counts from the end of the evictions.

If the search finds no admissible victim set (or the gang fits without one, or the preemptor
may not preempt), nothing is written and nothing is published: admission keeps the preemptor
waiting (``WaitingForPreemption``, then ``WaitingForCapacity`` semantics after its timeout) and
asks again after ``preemption_timeout_seconds``. The outcome is logged and counted.

:meth:`Preempter.reconcile` runs at takeover and periodically: it finishes records whose
publication or evictions did not complete (a crash, an API server that failed) — a record
whose decision is out is always evicted to the end, whatever became of its preemptor — and
drops records whose nomination is over (preemptor admitted, deleted, or timed out). Every step
is idempotent, so a request redelivered or a record finished twice changes nothing: pods gone
are "gone", the decision's event id is deduplicated by JetStream, a published record is not
republished.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Final

import msgspec
from opentelemetry import context as otel_context
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tidegate.model import Envelope, PreemptRequested, WorkloadKey, subjects
from tidegate.model.events import EventReason, PreemptionOutcome
from tidegate.model.ledger import PodRef, PreemptionRecord, VictimRecord, preemption_event_id
from tidegate.model.names import REQUEUE_KINDS
from tidegate.policy.candidates import evictable_pods, still_live, victim_record
from tidegate.policy.cards import WHOLE_GPU_RESOURCE
from tidegate.policy.elastic import growth_still_wanted
from tidegate.policy.victims import preempted_decision
from tidegate.preemption.evict import AbortFailed, EvictionFailed, EvictionRefused, Evictor
from tidegate.preemption.ledger import PreemptionLedger
from tidegate.preemption.view import PreemptionView, Unanswerable
from tidegate.telemetry import extract, inject, victim_choice_span

log = logging.getLogger(__name__)

SOURCE: Final = "preemption"
"""The ``source`` of every envelope this service publishes."""

Publish = Callable[[str, Envelope], Awaitable[object]]
"""Publishes one envelope on a subject and waits for JetStream's acknowledgement."""

Report = Callable[[WorkloadKey, EventReason, str], Awaitable[None]]
"""Records a Warning Event (reason, message) on a workload's top owner."""


class PreemptionMetrics:
    """The service's own metrics (Kueue's ``preempted_workloads_total`` has a counterpart)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register on ``registry``."""
        self.requests = Counter(
            "tidegate_preemption_requests_total",
            "Preempt requests handled, by outcome (preempts, fits, no-victims, "
            "not-a-reclaimer, exceeds-quota, card-quota-exceeded, invalid, queue-not-found, "
            "unanswerable, unknown, stale, duplicate, nominated, resumed, budget-blocked).",
            ["outcome"],
            registry=registry,
        )
        self.preempted = Counter(
            "tidegate_preempted_workloads_total",
            "Workloads evicted whole as victims, by their queue and mode "
            "(kueue_preempted_workloads_total).",
            ["queue", "mode"],
            registry=registry,
        )
        self.gpu_hours_lost = Counter(
            "tidegate_preemption_gpu_hours_lost_total",
            "GPU-hours of work preemption threw away, by the victim's queue: its admission's "
            "GPUs (nvidia.com/gpu charged) times the time from that admission to its eviction "
            "(an upper bound for a victim that checkpoints).",
            ["queue"],
            registry=registry,
        )
        self.evictions = Counter(
            "tidegate_preemption_pod_evictions_total",
            "Pod evictions, by result (evicted, gone, refused by a PodDisruptionBudget, failed; "
            "requeued: a Job or JobSet victim's pods taken away by suspending its owner).",
            ["result"],
            registry=registry,
        )
        self.budget_blocked = Counter(
            "tidegate_preemption_budget_blocked_total",
            "Preemptions a PodDisruptionBudget held (429): not started (dry run refused), or "
            "finished later, when the budget allows (counted once each by the leader).",
            registry=registry,
        )
        self.abort_failures = Counter(
            "tidegate_preemption_abort_failures_total",
            "Attempts to suspend or mark an aborted victim's owner that failed (its pods are "
            "evicted all the same; the abort is retried).",
            registry=registry,
        )
        self.search_seconds = Histogram(
            "tidegate_preemption_search_duration_seconds",
            "Time of one victim search.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 5),
            registry=registry,
        )
        self.in_flight = Gauge(
            "tidegate_preemptions_in_flight",
            "Preemptions recorded whose evictions are not finished yet.",
            registry=registry,
        )
        self.nominations = Gauge(
            "tidegate_preemption_nominations",
            "Finished preemptions whose freed room is still held for the preemptor.",
            registry=registry,
        )


class Preempter:
    """Answers preempt requests and finishes recorded preemptions (module docstring)."""

    def __init__(
        self,
        *,
        cluster: str,
        view: PreemptionView,
        ledger: PreemptionLedger,
        evictor: Evictor,
        publish: Publish,
        metrics: PreemptionMetrics,
        nomination_timeout_seconds: float,
        report: Report | None = None,
    ) -> None:
        """Wire the parts; nothing happens until :meth:`handle` or :meth:`reconcile`.
        ``report`` records a Warning Event about a workload (key, reason, message)."""
        self._cluster = cluster
        self._view = view
        self._ledger = ledger
        self._evictor = evictor
        self._publish = publish
        self._metrics = metrics
        self._nomination_timeout = nomination_timeout_seconds
        self._report = report
        self._budget_blocked: set[str] = set()
        """Event ids of the unfinished preemptions a budget held, counted once each."""
        self.lock = asyncio.Lock()
        """Held while a request is answered or records are reconciled: one at a time."""

    @property
    def records(self) -> Mapping[WorkloadKey, PreemptionRecord]:
        """The preemption records, by preemptor."""
        return self._ledger.records

    async def handle(self, request: PreemptRequested) -> PreemptionOutcome:
        """Answer one preempt request (idempotent; see the module docstring); its outcome.

        The outcome ``unknown`` says the view does not know the preemptor with the request's
        UID, or for a growth does not know it admitted (yet, or any more): nothing was done,
        and the caller may ask again later. Raises :class:`tidegate.bus.LeaseLost` when
        another instance wrote the ledger, and bus errors when the ledger cannot be written
        (the request is retried). Eviction failures after the record is written are left to
        :meth:`reconcile`.
        """
        async with self.lock:
            outcome = await self._answer(request, now=time.time())
        self._metrics.requests.labels(outcome=outcome).inc()
        self._update_gauges()
        return outcome

    async def _answer(self, request: PreemptRequested, *, now: float) -> PreemptionOutcome:
        key = WorkloadKey(request.workload)
        existing = self._ledger.records.get(key)
        if existing is not None and not existing.evicted:
            # Victims are never left half evicted, whoever the request is from now.
            finished = await self._finish_or_defer(existing)
            if not finished or existing.preemptor_uid == request.uid:
                return "resumed"
            existing = self._ledger.records.get(key)
        if existing is not None and existing.preemptor_uid != request.uid:
            log.info(
                "preemption record of a former %s (uid %s) dropped", key, existing.preemptor_uid
            )
            await self._ledger.delete(key)
            existing = None
        if existing is not None and request.sequence <= existing.request_sequence:
            return "duplicate"
        workload = self._view.replica.workload(key)
        if workload is None or workload.uid != request.uid:
            return "unknown"
        growth = bool(request.podsets)
        admitted = self._view.admission(key, request.uid)
        if not growth and admitted is not None:
            log.info("preempt request for %s ignored: it is admitted already", key)
            return "stale"
        if growth:
            # Admission asks for a growth only of a workload it admitted: without that
            # admission in the view, the view has not seen it yet (or it ended since).
            wanted = (
                growth_still_wanted(request, workload, admitted) if admitted is not None else None
            )
            if wanted is None:
                return "unknown"
            if not wanted:
                # Redelivered or left to a new leader: the growth was admitted, the workload
                # resized or shrank back since. Its room is needed no more.
                log.info(
                    "growth preempt request for %s ignored: admission %s it grows is not in "
                    "force, or the workload no longer grows",
                    key,
                    request.admitted_sequence,
                )
                return "stale"
            # An admitted workload that grew: room for its extra pods only, pinned by
            # admission inside its required domain (docs/workloads.md, "Elastic workloads").
            workload = msgspec.structs.replace(workload, podsets=wanted, min_members=None)
        if existing is not None:
            # A newer request while this preemptor's own preemption is in force (admission
            # asked again before its room showed in the capacity view): searching now would
            # see the freed room still taken and evict more victims for the same room.
            log.info(
                "preempt request for %s: its preemption of %s is in force, its room is held "
                "for it until it is admitted or the nomination times out; no further victims",
                key,
                ", ".join(existing.decision.victims),
                extra={"workload": key, "outcome": "nominated"},
            )
            return "nominated"

        started = time.perf_counter()
        in_flight = list(self._ledger.records.values())
        if request.reclaim and not growth:
            # Its queue's quota, not room on nodes: the gangs that borrow from its cohort.
            choice = self._view.reclaim(
                workload,
                in_flight=in_flight,
                now=now,
                queue=request.queue,
                topology=request.topology,
            )
        else:
            choice = self._view.choose(
                workload,
                in_flight=in_flight,
                now=now,
                queue=request.queue,
                topology=request.topology,
            )
        took = time.perf_counter() - started
        self._metrics.search_seconds.observe(took)
        if not isinstance(choice, Unanswerable):
            traces = {v: self._view.replica.workload(v) for v in choice.victims}
            victim_choice_span(workload, choice, traces, start=time.time() - took)
        if isinstance(choice, Unanswerable):
            log.warning("no victim search for %s: %s", key, choice.reason)
            return "unanswerable"
        if choice.outcome != "preempts":
            log.info(
                "no preemption for %s (%s): %s",
                key,
                choice.outcome,
                choice.reason or "it fits without evicting anyone",
                extra={"workload": key, "outcome": choice.outcome},
            )
            return choice.outcome

        victims = []
        for victim in choice.victims:
            chosen = victim_record(
                self._view.replica, victim, mode=choice.modes.get(victim, "restart")
            )
            if chosen is not None:
                victims.append(chosen)
        refused = await self._evictor.refusals([pod for v in victims for pod in v.pods])
        if refused:
            # Rolled back before anything is committed: no record, no decision, no eviction.
            # The victims keep their admission; admission asks again after its timeout.
            self._metrics.budget_blocked.inc()
            names = ", ".join(sorted(refused))
            why = next(iter(refused.values()))
            log.warning(
                "no preemption for %s: a PodDisruptionBudget refuses evicting %s (%s)",
                key,
                names,
                why,
                extra={"workload": key, "outcome": "budget-blocked"},
            )
            await self._tell_all(
                [*(v.key for v in victims), key],
                f"preemption for {key} not started: a PodDisruptionBudget refuses evicting "
                f"{names} ({why}); asked again later",
            )
            return "budget-blocked"
        trace: dict[str, str] = {}
        inject(trace)
        record = PreemptionRecord(
            preemptor=key,
            preemptor_uid=request.uid,
            request_sequence=request.sequence,
            decision=preempted_decision(workload, choice, request_sequence=request.sequence),
            victims=victims,
            recorded_at=now,
            event_id=preemption_event_id(request.uid, request.sequence),
            trace_context=trace,
        )
        await self._ledger.write(record)
        log.info(
            "preempting for %s: %s",
            key,
            record.decision.message,
            extra={"workload": key, "victims": list(choice.victims), "exact": choice.exact},
        )
        await self._finish_or_defer(record)
        return "preempts"

    async def _finish_or_defer(self, record: PreemptionRecord) -> bool:
        """Finish ``record``; False (logged) when an eviction failed and it must wait."""
        try:
            await self.finish(record)
        except EvictionFailed as exc:
            log.warning(
                "preemption for %s not finished, will be retried: %s", record.preemptor, exc
            )
            return False
        return True

    async def _evict_victim(self, record: PreemptionRecord, victim: VictimRecord) -> bool:
        """Evict one victim of ``record`` whole; False when something is left for a retry
        (reported here: log, Warning Events, metrics)."""
        pods = self._pods_to_evict(record, victim.key, victim.uid, victim.pods)
        if victim.mode == "restart" and victim.owner_kind in REQUEUE_KINDS:
            # Re-queued by suspending its owner: only pods not yet being deleted call for it
            # (a retry after the suspension took effect, or after the victim came back, must
            # not suspend it again).
            pods = still_live(self._view.replica, pods)
            # A dry run checks each pod alone; a budget sparing fewer than the gang's pods it
            # selects must hold the suspension that takes them all at once.
            blocked = self._view.budget_blocked(WorkloadKey(victim.key)) if pods else None
            if blocked is not None:
                held = [pod.name for pod in pods]
                await self._refused(
                    record,
                    victim,
                    EvictionRefused(f"{victim.key}: {blocked}", pods=held, why=blocked),
                )
                return False
        try:
            results = await self._evictor.preempt(victim, pods, preemptor=record.preemptor)
        except AbortFailed as exc:
            self._metrics.abort_failures.inc()
            await self._tell_all(
                [victim.key, record.preemptor],
                f"cannot suspend or mark the {victim.owner_kind} of {victim.key} for "
                f"{record.preemptor} ({exc.why}); its pods are evicted all the same and the "
                "abort is retried until it succeeds",
                reason="PreemptionAbortFailed",
            )
            if isinstance(exc.evictions, EvictionRefused):
                await self._refused(record, victim, exc.evictions)
            return False
        except EvictionRefused as exc:
            await self._refused(record, victim, exc)
            return False
        except EvictionFailed as exc:
            log.warning("eviction of %s for %s failed: %s", victim.key, record.preemptor, exc)
            return False
        log.info(
            "evicted %s (%s) for %s: %d pods evicted, %d already gone",
            victim.key,
            victim.mode,
            record.preemptor,
            sum(1 for r in results.values() if r == "evicted"),
            sum(1 for r in results.values() if r == "gone"),
        )
        return True

    async def _refused(
        self, record: PreemptionRecord, victim: VictimRecord, exc: EvictionRefused
    ) -> None:
        """A budget holds some pods of ``victim``: count the preemption once, tell the victim
        and the preemptor (Warning Events) at every attempt."""
        if record.event_id not in self._budget_blocked:
            self._budget_blocked.add(record.event_id)
            self._metrics.budget_blocked.inc()
        log.warning(
            "preemption for %s waits for a PodDisruptionBudget, will be retried: %s",
            record.preemptor,
            exc,
        )
        await self._tell_all(
            [victim.key, record.preemptor],
            f"eviction of {', '.join(exc.pods)} refused by a PodDisruptionBudget ({exc.why}); "
            f"the preemption for {record.preemptor} is finished once the budget allows",
        )

    async def _tell_all(
        self, keys: list[str], message: str, *, reason: EventReason = "PreemptionBlocked"
    ) -> None:
        """A Warning Event ``reason`` on each workload of ``keys``."""
        if self._report is None:
            return
        for key in keys:
            try:
                await self._report(WorkloadKey(key), reason, message)
            except Exception as error:  # an Event is worth a log line, never a failure
                log.warning("no %s Event on %s: %s", reason, key, error)

    async def finish(self, record: PreemptionRecord) -> None:
        """Publish the decision of ``record`` (unless it is out already) and mark it
        published, then evict every victim whole and mark it evicted.

        Every victim is evicted even when another one's eviction fails. Raises
        :class:`~tidegate.preemption.evict.EvictionFailed` when a pod could not be evicted or
        an abort failed (the record stays published but not evicted, and is finished
        later)."""
        if not record.published:
            await self._publish_decision(record)
            record = msgspec.structs.replace(record, published_at=time.time())
            await self._ledger.write(record)
        unfinished = [
            victim.key for victim in record.victims if not await self._evict_victim(record, victim)
        ]
        if unfinished:
            raise EvictionFailed(f"{', '.join(unfinished)} not evicted whole yet")
        await self._ledger.write(msgspec.structs.replace(record, evicted_at=time.time()))
        self._budget_blocked.discard(record.event_id)
        evicted_at = time.time()
        for victim in record.victims:
            workload = self._view.replica.workload(WorkloadKey(victim.key))
            queue = workload.queue if workload is not None and workload.queue else ""
            self._metrics.preempted.labels(queue=queue, mode=victim.mode).inc()
            lost = self._view.replica.verdict(WorkloadKey(victim.key)).latest
            if lost is not None and lost.body.uid == victim.uid and lost.time > 0:
                gpus = lost.body.charged.get(WHOLE_GPU_RESOURCE, 0)
                hours = gpus * max(0.0, evicted_at - lost.time) / 3600
                self._metrics.gpu_hours_lost.labels(queue=queue).inc(hours)

    async def _publish_decision(self, record: PreemptionRecord) -> None:
        """Publish the ``preempted`` decision of ``record`` under its deterministic event id."""
        namespace, _, name = record.preemptor.partition("/")
        envelope = Envelope(
            event_id=record.event_id,
            cluster=self._cluster,
            source=SOURCE,
            time=time.time(),
            body=record.decision,
            source_uid=record.preemptor_uid,
        )
        subject = subjects.decision(self._cluster, "preempted", namespace, name)
        await self._publish(subject, envelope)

    def _pods_to_evict(
        self, record: PreemptionRecord, key: str, uid: str, recorded: list[PodRef]
    ) -> list[PodRef]:
        """The recorded pods, plus pods of the same victim that were released by the gate
        after the record was written but created before it (never its replacements)."""
        pods = {pod.uid: pod for pod in recorded}
        workload = self._view.replica.workload(WorkloadKey(key))
        if workload is not None and workload.uid == uid:
            for pod in evictable_pods(
                self._view.replica, WorkloadKey(key), created_before=record.recorded_at
            ):
                pods.setdefault(pod.uid, pod)
        return sorted(pods.values(), key=lambda pod: (pod.namespace, pod.name))

    async def reconcile(self) -> None:
        """Finish unfinished records and drop those whose nomination is over."""
        async with self.lock:
            now = time.time()
            for key, record in sorted(self._ledger.records.items()):
                if not record.evicted:
                    with _continuing(record.trace_context):
                        await self._finish_or_defer(record)
                    continue
                workload = self._view.replica.workload(key)
                why = None
                if workload is None or workload.uid != record.preemptor_uid:
                    why = "the preemptor is gone: nomination released"
                elif self._view.is_admitted(key, record.preemptor_uid):
                    why = "the preemptor is admitted: nomination used"
                elif now - (record.evicted_at or now) >= self._nomination_timeout:
                    why = "the nomination timed out"
                if why is not None:
                    log.info("preemption record of %s dropped: %s", key, why)
                    await self._ledger.delete(key)
        self._update_gauges()

    def _update_gauges(self) -> None:
        records = self._ledger.records.values()
        self._metrics.in_flight.set(sum(1 for r in records if not r.evicted))
        self._metrics.nominations.set(sum(1 for r in records if r.evicted))


@contextlib.contextmanager
def _continuing(trace_context: Mapping[str, str]) -> Iterator[None]:
    """Make the recorded trace context current (a resumed preemption continues its trace)."""
    token = otel_context.attach(extract(trace_context))
    try:
        yield
    finally:
        otel_context.detach(token)
