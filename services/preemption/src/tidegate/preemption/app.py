"""Wiring of the preemption service: followers, the leader lease, the request consumer.

Every instance follows the state stream, the capacity stream and the admitted/released
decisions (:mod:`.handlers`), so a standby is current. One instance at a time holds the
``preemption`` lease (taken with :meth:`~tidegate.runtime.ServiceContext.lead`, which also
renews and releases it) and acts, because two instances choosing victims at once could both
count the same freed room for different preemptors:

1. **Take over**: claim the service's fences on the ledger bucket and the decision stream
   (:class:`tidegate.bus.Fence`: from then on JetStream refuses every ledger write and every
   ``preempted`` a deposed instance attempts); wait until every follower has replayed; read the ledger (this service's
   preemption records and admission's admitted workloads); finish every unfinished preemption
   and drop ended nominations (:meth:`~tidegate.preemption.preempter.Preempter.reconcile`).
2. **Act**: consume ``preempt-requested`` decisions with the durable consumer ``preemption``
   and answer each (:class:`~tidegate.preemption.preempter.Preempter`); every
   ``reconcile_interval_seconds``, or sooner when a preemptor was admitted or deleted,
   reconcile again.

Kubernetes writes (evictions, an abort's suspension) cannot be fenced by the API server: each
is sent only while the lease is held with at least ``EVICTION_MARGIN`` of its TTL left
(:meth:`tidegate.bus.Lease.ensure_held`, whose clock starts when a renewal is sent).

A lost lease, a refused fenced write or a ledger conflict stops the process (exit 1); it
restarts as a standby. The
Kubernetes client is opened at setup and closed at stop. Decisions are made by the pure view
and policy; nothing here chooses anything.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from tidegate.bus import (
    ConsumerSettings,
    Fence,
    Lease,
    LeaseLost,
    Ledger,
    StateFollower,
    layout,
)
from tidegate.kube import KubeClient, ObjectRef
from tidegate.kube import connect as connect_kube
from tidegate.model import Envelope, WorkloadKey, subjects
from tidegate.model.events import EventReason
from tidegate.model.ledger import stored_or_superseded
from tidegate.preemption.config import Settings
from tidegate.preemption.evict import Evictor
from tidegate.preemption.handlers import REQUEST_MAX_DELIVER, Handlers
from tidegate.preemption.ledger import PreemptionLedger
from tidegate.preemption.preempter import Preempter, PreemptionMetrics
from tidegate.preemption.view import PreemptionView
from tidegate.runtime import ServiceContext
from tidegate.runtime.leadership import lease_write_guard

log = logging.getLogger(__name__)

LEASE_NAME = "preemption"
"""The lease key of the acting preemption instance."""

CONSUMER_NAME = "preemption"
"""The durable consumer of preempt requests."""

EVICTION_MARGIN = 0.25
"""Fraction of the lease TTL that must be left for an eviction to be sent."""

API_VERSIONS = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "Pod": "v1"}
"""apiVersion of a top owner whose workload message does not say (older writers)."""


async def setup(ctx: ServiceContext[Settings]) -> None:
    """Follow the streams, open the Kubernetes client, wait for the lease, then start acting."""
    settings = ctx.settings
    cluster = ctx.cluster
    view = PreemptionView(
        default_topology=settings.default_topology,
        overlay_grace_seconds=settings.overlay_grace_seconds,
        victim_settings=settings.victims(),
    )
    handlers = Handlers(view)
    followers = [
        await ctx.follow(
            "state",
            stream=layout.state_stream(cluster),
            subjects=subjects.state_wildcards(cluster),
            handler=handlers.on_state,
        ),
        await ctx.follow(
            "capacity",
            stream=layout.capacity_stream(cluster),
            subjects=[subjects.capacity_nodes_wildcard(cluster)],
            handler=handlers.on_capacity,
        ),
        await ctx.follow(
            "admissions",
            stream=layout.decisions_stream(cluster),
            subjects=[
                f"tg.{cluster}.decision.admitted.>",
                f"tg.{cluster}.decision.released.>",
                f"tg.{cluster}.decision.preempted.>",
            ],
            handler=handlers.on_decision,
        ),
    ]
    kube = await connect_kube(settings.kube_settings())
    ctx.spawn("kube", _close_at_stop(kube))
    lease = await ctx.lead(LEASE_NAME, ttl_seconds=settings.lease_ttl_seconds)
    leader = Leader(ctx, handlers, kube, lease, followers=followers)
    ctx.spawn("leader", leader.run(), graceful=True)


async def _close_at_stop(kube: KubeClient) -> None:
    """Hold the Kubernetes client open until the service stops (this task is cancelled)."""
    try:
        await asyncio.Event().wait()
    finally:
        await kube.close()


class Leader:
    """Holds the lease and answers requests (module docstring)."""

    def __init__(
        self,
        ctx: ServiceContext[Settings],
        handlers: Handlers,
        kube: KubeClient,
        lease: Lease,
        *,
        followers: Sequence[StateFollower],
    ) -> None:
        """Lead under ``lease`` with ``handlers``' view once ``followers`` have replayed."""
        self._ctx = ctx
        self._handlers = handlers
        self._kube = kube
        self._followers = followers
        self.lease = lease
        self._metrics = PreemptionMetrics(ctx.metrics.registry)
        self._decisions = Fence.on_decisions(ctx.bus, lease, cluster=ctx.cluster)

    async def run(self) -> None:
        """Take over, act until asked to stop."""
        ctx = self._ctx
        try:
            for follower in self._followers:
                await follower.replayed.wait()
            preempter = await self._take_over()
            await ctx.consume(
                ConsumerSettings(
                    durable=CONSUMER_NAME,
                    stream=layout.decisions_stream(ctx.cluster),
                    subjects=(f"tg.{ctx.cluster}.decision.preempt-requested.>",),
                    batch_size=16,
                    ack_wait_seconds=ctx.settings.ack_wait_seconds,
                    max_deliver=REQUEST_MAX_DELIVER,
                ),
                self._handlers.on_request,
            )
            await self._reconcile_until_stopped(preempter)
        finally:
            self._handlers.preempter = None

    async def _take_over(self) -> Preempter:
        ctx = self._ctx
        view = self._handlers.view
        ledger_fence = Fence.on_ledger(ctx.bus, self.lease, cluster=ctx.cluster)
        await ledger_fence.claim()
        await self._decisions.claim()
        ledger = PreemptionLedger(await Ledger.open(ctx.bus, ctx.cluster), fence=ledger_fence)
        for admitted in await ledger.load():
            view.admitted(admitted, at=None)
        metrics = self._metrics
        evictor = Evictor(
            # Every attempt of a write, retries included, only while the lease is held.
            self._kube.guarded(lease_write_guard(self._ensure_held)),
            ctx.settings.eviction(),
            observe=lambda result: metrics.evictions.labels(result=result).inc(),
            guard=self._ensure_held,
        )
        preempter = Preempter(
            cluster=ctx.cluster,
            view=view,
            ledger=ledger,
            evictor=evictor,
            publish=self._publish,
            metrics=metrics,
            nomination_timeout_seconds=ctx.settings.nomination_timeout_seconds,
            report=self._report,
        )
        self._handlers.preempter = preempter
        await preempter.reconcile()
        log.info(
            "preemption: took over epoch %d with %d preemption records",
            self.lease.epoch,
            len(ledger.records),
        )
        return preempter

    async def _report(self, key: WorkloadKey, reason: EventReason, message: str) -> None:
        """A Warning Event on the top owner of workload ``key`` (if the view knows it)."""
        workload = self._handlers.view.replica.workload(key)
        if workload is None:
            return
        self._ensure_held()
        await self._kube.create_event(
            ObjectRef(
                api_version=workload.owner_api_version
                or API_VERSIONS.get(workload.owner_kind, "v1"),
                kind=workload.owner_kind,
                name=workload.name,
                namespace=workload.namespace,
                uid=workload.uid,
            ),
            reason=reason,
            message=message,
            type="Warning",
            component="tidegate-preemption",
        )

    async def _publish(self, subject: str, envelope: Envelope) -> object:
        """Publish a decision through the fence, unless its subject ends with it or a later
        decision already: a record's decision published again after a takeover would store
        a stale copy last on its subject, which every replay takes for the decision in force.
        The subject is read after our fence claim, so nobody else publishes there meanwhile."""
        stream = layout.decisions_stream(self._ctx.cluster)
        last = await self._ctx.bus.last_on(stream, subject)
        if stored_or_superseded(envelope, last.envelope if last is not None else None):
            log.info("preemption: %s not published again: stored or superseded", subject)
            return None
        return await self._decisions.publish(subject, envelope)

    def _ensure_held(self) -> float:
        return self.lease.ensure_held(EVICTION_MARGIN * self.lease.settings.ttl_seconds)

    async def _reconcile_until_stopped(self, preempter: Preempter) -> None:
        ctx = self._ctx
        handlers = self._handlers
        while not ctx.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ctx.settings.reconcile_interval_seconds):
                    await _first(handlers.wake, ctx.stopping)
            handlers.wake.clear()
            if handlers.lost is not None:
                raise handlers.lost
            if ctx.stopping.is_set():
                return
            if not self.lease.held:
                raise LeaseLost("preemption lease expired")
            await preempter.reconcile()


async def _first(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
