"""Wiring of the admission service: followers, the leader lease, the decision loop, commits.

Every instance follows the state and capacity streams (so a standby is current). One instance
at a time holds the ``admission`` lease (taken with
:meth:`~tidegate.runtime.ServiceContext.lead`, which also renews and releases it) and decides:

1. **Take over**: wait until both streams are replayed, claim the lease's fences on the ledger
   and the decision stream (:class:`tidegate.bus.Fence`: from then on JetStream refuses every
   write of a predecessor that still believes it leads), load the ledger (admitted workloads,
   the sequence high-water mark and the outbox), restore them into the policy, release
   admissions of workloads deleted or finished meanwhile, restore the nominations still live
   from the preemption service's ledger records (:mod:`tidegate.admission.nominations`), claim
   the sequence, and publish what the outbox
   holds (the previous leader's committed decisions not known to be stored; same event ids:
   JetStream drops those already stored).
2. **Decide**: on every wake-up (a handler saw a change) or tick, after a short coalescing
   pause, run one :meth:`~tidegate.policy.admission.Admission.cycle` and commit its decisions
   together with releases queued by handlers; publish again what is still unsent.
3. **Commit** a batch: claim the sequence, stage every decision in the ledger's outbox, write
   or delete the workload keys (every write fenced), then publish each decision (fenced, continuing the
   workload's trace) and delete the outbox keys of those JetStream stored. A publish that fails
   leaves its decision in the outbox, sent again on the next tick (:mod:`.ledger`).

4. **Retention**: every ``decisions_sweep_seconds``, purge the decisions of workloads gone for
   ``decisions_kept_after_delete_seconds`` (:mod:`tidegate.admission.retention`).

A lost lease or a ledger conflict raises :class:`tidegate.bus.LeaseLost`: the process exits
(status 1) and restarts as a standby; it never decides without the lease. Decisions are pure
calls into :mod:`tidegate.policy.admission`; nothing here chooses anything.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from prometheus_client import Counter, Gauge, Histogram

from tidegate.admission.config import Settings
from tidegate.admission.handlers import SOURCE, STUCK_AFTER, Handlers
from tidegate.admission.ledger import (
    AdmissionLedger,
    LedgerRecord,
    OutboxEntry,
    deliverable,
)
from tidegate.admission.metrics import QueueMetrics
from tidegate.admission.nominations import restore_nominations
from tidegate.admission.retention import DecisionRetention
from tidegate.bus import (
    BusError,
    ConsumerSettings,
    Fence,
    Lease,
    LeaseLost,
    StateFollower,
    layout,
)
from tidegate.model import (
    Admitted,
    Envelope,
    NodeName,
    Pending,
    PreemptRequested,
    Released,
    ReservationDropped,
    Reserved,
    WorkloadKey,
    subjects,
)
from tidegate.model.ledger import stored_or_superseded
from tidegate.model.subjects import DecisionKind
from tidegate.policy.admission import Admission, Decision, DecisionBody
from tidegate.runtime import ServiceContext
from tidegate.telemetry import decision_span

log = logging.getLogger(__name__)

LEASE_NAME = "admission"
"""The lease key of the admission leader."""


class AdmissionMetrics:
    """Admission's own metrics (names after Kueue's where one exists)."""

    def __init__(self, ctx: ServiceContext[Settings]) -> None:
        """Register on the service's registry."""
        registry = ctx.metrics.registry
        self.cycle_seconds = Histogram(
            "tidegate_admission_cycle_duration_seconds",
            "Time one admission cycle takes (decide and commit).",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
            registry=registry,
        )
        self.cycles_cut = Counter(
            "tidegate_admission_cycles_cut_total",
            "Cycles that ran out of their time budget before trying every waiting workload "
            "(the next cycle went on at once): a backlog larger than one cycle tries.",
            registry=registry,
        )
        self.decisions = Counter(
            "tidegate_admission_decisions_total",
            "Decisions committed (then published from the outbox), by kind and reason.",
            ["kind", "reason"],
            registry=registry,
        )
        self.admitted = Counter(
            "tidegate_admitted_workloads_total",
            "Workloads admitted, by queue (kueue_admitted_workloads_total).",
            ["queue"],
            registry=registry,
        )
        self.leader = Gauge(
            "tidegate_admission_leader",
            "1 while this instance holds the admission lease.",
            registry=registry,
        )
        self.epoch = Gauge(
            "tidegate_admission_epoch", "Fencing epoch of this instance's lease.", registry=registry
        )
        self.unsent = Gauge(
            "tidegate_admission_outbox_unsent",
            "Committed decisions in the outbox whose publish has not been stored yet.",
            registry=registry,
        )
        self.stuck = Gauge(
            "tidegate_admission_stuck_decisions",
            "Preempted, released and replace-requested decisions whose handling failed "
            f"{STUCK_AFTER} times or more and has not succeeded since (still retried).",
            registry=registry,
        )


async def setup(ctx: ServiceContext[Settings]) -> None:
    """Follow the state and capacity streams, wait for the lease, then start deciding."""
    admission = Admission(ctx.settings.policy())
    handlers = Handlers(admission)
    cluster = ctx.cluster
    state = await ctx.follow(
        "state",
        stream=layout.state_stream(cluster),
        subjects=[f"tg.{cluster}.workload.>", f"tg.{cluster}.config.>", f"tg.{cluster}.node.>"],
        handler=handlers.on_state,
    )
    capacity = await ctx.follow(
        "capacity",
        stream=layout.capacity_stream(cluster),
        subjects=[subjects.capacity_nodes_wildcard(cluster)],
        handler=handlers.on_capacity,
    )
    settings = ctx.settings
    queue_metrics = QueueMetrics(ctx.metrics.registry, admission)  # a standby's stay empty
    lease = await ctx.lead(
        LEASE_NAME, ttl_seconds=settings.lease_ttl_seconds, holder=settings.lease_holder
    )
    leader = Leader(ctx, handlers, lease, followers=[state, capacity], queue_metrics=queue_metrics)
    ctx.spawn("leader", leader.run(), graceful=True)


class Leader:
    """Holds the lease and runs the decision loop (module docstring)."""

    def __init__(
        self,
        ctx: ServiceContext[Settings],
        handlers: Handlers,
        lease: Lease,
        *,
        followers: Sequence[StateFollower],
        queue_metrics: QueueMetrics,
    ) -> None:
        """Lead under ``lease`` with ``handlers``' policy object once ``followers`` replayed."""
        self._ctx = ctx
        self._handlers = handlers
        self._admission = handlers.admission
        self._followers = followers
        self._metrics = AdmissionMetrics(ctx)
        self._metrics.stuck.set_function(lambda: float(len(handlers.stuck)))
        self._queue_metrics = queue_metrics
        self.lease = lease
        self._ledger: AdmissionLedger | None = None
        self._fence = Fence.on_decisions(ctx.bus, lease, cluster=ctx.cluster)
        """Every decision is published through this fence (claimed at takeover)."""
        self._unsent: list[OutboxEntry] = []
        """Outbox entries committed and not yet stored on the stream, in decision order."""
        self._retention = DecisionRetention(
            ctx.bus,
            ctx.cluster,
            keep_seconds=ctx.settings.decisions_kept_after_delete_seconds,
            every_seconds=ctx.settings.decisions_sweep_seconds,
        )

    async def run(self) -> None:
        """Take over, decide until asked to stop."""
        self._metrics.leader.set(1)
        self._metrics.epoch.set(self.lease.epoch)
        try:
            for follower in self._followers:
                await follower.replayed.wait()
            # Fence the ledger and the decision stream first: from here on a predecessor that
            # still believes it leads can neither write nor publish (docs/architecture.md).
            ledger_fence = Fence.on_ledger(self._ctx.bus, self.lease, cluster=self._ctx.cluster)
            await ledger_fence.claim()
            await self._fence.claim()
            self._ledger = await AdmissionLedger.open(
                self._ctx.bus, self._ctx.cluster, fence=ledger_fence
            )
            async with self._handlers.lock:
                await self._take_over()
            self._queue_metrics.leading = True
            await self._ctx.consume(
                ConsumerSettings(
                    durable="admission",
                    stream=layout.decisions_stream(self._ctx.cluster),
                    subjects=(
                        f"tg.{self._ctx.cluster}.decision.preempted.>",
                        f"tg.{self._ctx.cluster}.decision.released.>",
                        f"tg.{self._ctx.cluster}.decision.replace-requested.>",
                    ),
                    deliver_new_only=True,
                    # Never dead-lettered: a failed commit is transient, and a decision given
                    # up on would be lost at the next leader change. It comes back at
                    # the pace the decision loop retries the same commit.
                    max_deliver=None,
                    backoff_seconds=tuple(
                        factor * self._ctx.settings.cycle_tick_seconds for factor in (1, 2, 5)
                    ),
                    # A delivery a stopped leader left unsettled comes back to its successor
                    # on the lease's time scale, not after the default 30 s (a handler
                    # slower than that is kept in progress by the consumer meanwhile).
                    ack_wait_seconds=self._ctx.settings.lease_ttl_seconds,
                ),
                self._handlers.decision_handler(self.commit),
            )
            self._handlers.on_workload_deleted = self._retention.deleted
            async with asyncio.TaskGroup() as tasks:
                retaining = tasks.create_task(self._retain(), name="decision retention")
                await self._decide_until_stopped()
                retaining.cancel()
        finally:
            self._metrics.leader.set(0)
            self._queue_metrics.leading = False

    async def _take_over(self) -> None:
        assert self._ledger is not None
        admission = self._admission
        admission.epoch = self.lease.epoch
        high, records = await self._ledger.load()
        by_key = {r.admitted.workload: r for r in records}
        outbox = [e for e in self._ledger.outbox if deliverable(e, by_key)]
        dropped = [e for e in self._ledger.outbox if not deliverable(e, by_key)]
        stored = await self._stored_already(outbox)
        stored_ids = {e.envelope.event_id for e in stored}
        outbox = [e for e in outbox if e.envelope.event_id not in stored_ids]
        now = time.time()
        for record in records:
            usage = {NodeName(n): dict(u) for n, u in record.node_usage.items()}
            admission.restore(record.admitted, usage, now=now, admitted_at=record.admitted_at)
        self._queue_metrics.restored(r.admitted for r in records)
        admission.sequence = max(
            admission.sequence, high.sequence if high else 0, admission.capacity.watermark()
        )
        kept_out = [
            key
            for key, uid in self._ledger.stopped.items()
            if admission.restore_stopped(WorkloadKey(key), uid)
        ]
        released = admission.release_orphans()
        nominated = restore_nominations(admission, self._ledger.preemptions, now=now)
        await self._ledger.claim(sequence=admission.sequence, epoch=admission.epoch)
        await self._ledger.unstage([*dropped, *stored])
        self._unsent = outbox
        await self.commit(released)  # also stores which workloads stay kept out
        await self._send()
        reservations = await self._restore_reservations()
        log.info(
            "admission: took over epoch %d: %d admitted restored, %d outbox decisions "
            "re-published (%d never committed, dropped; %d stored already), %d released, "
            "%d nominations restored, %d kept out, %d reservations restored, sequence %d",
            admission.epoch,
            len(records),
            len(outbox),
            len(dropped),
            len(stored),
            len(released),
            len(nominated),
            len(kept_out),
            reservations,
            admission.sequence,
        )

    async def _restore_reservations(self) -> int:
        """Take over the reservations in force on the decision stream (after the outbox was
        sent, so a predecessor's last ones are there): per workload, the newest ``reserved``
        that no ``reservation-dropped`` ends. The next cycle drops those that no longer stand
        (their gang started, is gone or no longer its queue's head)."""
        bus, cluster = self._ctx.bus, self._ctx.cluster
        stream = layout.decisions_stream(cluster)
        prefix = f"tg.{cluster}.decision."
        found = await bus.subjects_in(stream, f"{prefix}reserved.>")
        restored = 0
        for subject in sorted(found):
            last = await bus.last_on(stream, subject)
            body = last.envelope.body if last is not None else None
            if not isinstance(body, Reserved):
                continue
            dropped_on = (
                prefix + "reservation-dropped." + subject.removeprefix(prefix + "reserved.")
            )
            drop = await bus.last_on(stream, dropped_on)
            ended = drop.envelope.body if drop is not None else None
            if (
                isinstance(ended, ReservationDropped)
                and ended.uid == body.uid
                and ended.reserved_sequence >= body.sequence
            ):
                continue
            self._admission.restore_reservation(body)
            restored += 1
        return restored

    async def _stored_already(self, outbox: Sequence[OutboxEntry]) -> list[OutboxEntry]:
        """The entries of a predecessor's ``outbox`` whose subject ends with them or a later
        decision (read after our fence claim: nobody else publishes there meanwhile)."""
        stream = layout.decisions_stream(self._ctx.cluster)
        stored: list[OutboxEntry] = []
        for entry in outbox:
            last = await self._ctx.bus.last_on(stream, entry.subject)
            if stored_or_superseded(entry.envelope, last.envelope if last is not None else None):
                stored.append(entry)
        return stored

    async def _decide_until_stopped(self) -> None:
        settings = self._ctx.settings
        handlers = self._handlers
        while not self._ctx.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.cycle_tick_seconds):
                    await handlers.wake.wait()
            if settings.cycle_coalesce_seconds:
                await asyncio.sleep(settings.cycle_coalesce_seconds)
            handlers.wake.clear()
            async with handlers.lock:
                started = time.monotonic()
                cycle = self._admission.cycle(
                    now=time.time(), out_of_time=_clock_past(started + settings.cycle_budget)
                )
                if self._admission.cut_short:
                    self._metrics.cycles_cut.inc()
                    handlers.wake.set()  # go on with the rest right after this commit
                decisions = [*handlers.outbox, *cycle]
                handlers.outbox.clear()
                try:
                    await self.commit(decisions)
                except LeaseLost:
                    raise
                except BusError as exc:
                    # Not committed: keep them (the policy state already has them) for the
                    # next try, ahead of anything decided later.
                    handlers.outbox[:0] = decisions
                    log.warning("admission: commit failed, retrying next tick: %s", exc)
                    continue
                if self._unsent:
                    await self._send()
                self._metrics.cycle_seconds.observe(time.monotonic() - started)

    async def _retain(self) -> None:
        """The decision log's retention sweep, beside the decision loop (it holds the lock
        only to read which workloads are known)."""
        retention = self._retention
        try:
            found = await retention.list_all(now=time.time())
            log.info("admission: %d workloads have decisions on the stream", found)
        except BusError as exc:
            log.warning("admission: cannot list the decision stream's workloads: %s", exc)
        while True:
            await asyncio.sleep(retention.every_seconds)
            try:
                up_to = await retention.stored_so_far()
                async with self._handlers.lock:
                    due = retention.due(self._admission.known(), now=time.time())
                await retention.purge(due, up_to=up_to)
            except BusError as exc:
                log.warning("admission: decision retention sweep failed, retrying later: %s", exc)

    async def commit(self, decisions: Sequence[Decision]) -> None:
        """Claim the sequence, stage the decisions in the outbox, record admissions and
        releases in the ledger, then publish (module docstring). Raises LeaseLost when fenced
        off, BusError when the ledger could not be written (nothing is published then); a
        failed publish does not raise: the decision stays in the outbox and is sent again."""
        assert self._ledger is not None
        admission = self._admission
        stopped = {str(key): uid for key, uid in admission.stopped().items()}
        if not decisions and stopped == self._ledger.stopped:
            return
        if not self.lease.held:
            raise LeaseLost("admission lease expired before a commit")
        await self._ledger.claim(sequence=admission.sequence, epoch=admission.epoch)
        entries = [self._entry(d.body, admission.epoch) for d in decisions]
        await self._ledger.stage(entries)
        changes: list[LedgerRecord | str] = []
        for decision in decisions:
            if isinstance(decision.body, Admitted):
                usage = {str(n): u for n, u in decision.node_usage.items()}
                at = admission.admitted_at(decision.key)
                changes.append(
                    LedgerRecord(admitted=decision.body, node_usage=usage, admitted_at=at)
                )
            elif isinstance(decision.body, Released):
                changes.append(decision.key)
        await self._ledger.commit(changes)
        # Kept-out workloads (aborted victims) are durable before the message that made them
        # is acknowledged and before any later cycle could admit them elsewhere.
        await self._ledger.keep_out(stopped)
        if not decisions:
            return
        for decision in decisions:
            kind = _KINDS[type(decision.body)]
            reason = getattr(decision.body, "reason", "")
            self._metrics.decisions.labels(kind=kind, reason=reason).inc()
            if isinstance(decision.body, Admitted):
                self._metrics.admitted.labels(queue=decision.body.queue).inc()
        self._unsent.extend(entries)
        await self._send({e.envelope.event_id: d for e, d in zip(entries, decisions, strict=True)})
        self._queue_metrics.committed(decisions, now=time.time())

    def _entry(self, body: DecisionBody, epoch: int) -> OutboxEntry:
        namespace, _, name = body.workload.partition("/")
        subject = subjects.decision(self._ctx.cluster, _KINDS[type(body)], namespace, name)
        envelope = Envelope(
            event_id=f"{SOURCE}-{epoch}-{body.sequence}",
            cluster=self._ctx.cluster,
            source=SOURCE,
            time=time.time(),
            body=body,
            source_uid=body.uid,
        )
        return OutboxEntry(subject=subject, envelope=envelope)

    async def _send(self, decided: dict[str, Decision] | None = None) -> None:
        """Publish every unsent outbox entry, in order, and unstage those JetStream stored
        (``decided``: event id → the decision of a first send: the workload whose trace it
        continues, the tries it counts)."""
        assert self._ledger is not None
        unsent, self._unsent = self._unsent, []
        failed: set[str] = set()
        # One at a time, each through the fence (a clustered stream refuses concurrent writes
        # fenced on the same marker); a refusal by a successor's claim raises LeaseLost.
        for index, entry in enumerate(unsent):
            decision = (decided or {}).get(entry.envelope.event_id)
            workload = decision.workload if decision is not None else None
            tries = decision.tries if decision is not None else 0
            try:
                with decision_span(entry.envelope.body, workload, self._admission, tries=tries):
                    await self._fence.publish(entry.subject, entry.envelope)
            except LeaseLost:
                raise
            except BusError as exc:
                failed = {e.envelope.event_id for e in unsent[index:]}
                log.warning(
                    "admission: %d decisions not stored, sent again next tick: %s",
                    len(failed),
                    exc,
                )
                break
        self._unsent = [e for e in unsent if e.envelope.event_id in failed] + self._unsent
        self._metrics.unsent.set(len(self._unsent))
        await self._ledger.unstage([e for e in unsent if e.envelope.event_id not in failed])


_KINDS: dict[type, DecisionKind] = {
    Admitted: "admitted",
    Pending: "pending",
    PreemptRequested: "preempt-requested",
    Released: "released",
    Reserved: "reserved",
    ReservationDropped: "reservation-dropped",
}


def _clock_past(deadline: float) -> Callable[[], bool]:
    """Whether the monotonic clock is past ``deadline`` (a cycle's time budget)."""
    return lambda: time.monotonic() > deadline
