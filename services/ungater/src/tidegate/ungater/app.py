"""Wiring of the ungater: followers into the view, the releaser's rounds, Events, the webhook.

Start-up, in order:

1. connect to Kubernetes (kubeconfig or in-cluster; a bad configuration stops the service);
2. replay then follow the state stream (pods, nodes, workloads) and the decision stream's
   ``admitted``/``released``/``pending`` subjects into one :class:`~tidegate.policy.clusterview.ClusterView`;
3. once both are replayed, wait for the ``ungater`` lease (standby meanwhile), claim its fence
   on the decision stream, count the releases the bus does not show yet from the API server
   (:meth:`~tidegate.ungater.releaser.Releaser.take_over`), then run release rounds
   (:class:`~tidegate.ungater.releaser.Releaser`): the first round recounts every admitted
   workload from its pods' nodeSelectors, so a new leader continues exactly where the last
   one stopped;
4. consume decisions durably (``ungater``, new decisions only on first creation) for Events
   and the trace annotation (:class:`~tidegate.ungater.handlers.Reporter`); on the leader,
   a Warning Event for workloads whose pods bypassed the gate, from the view
   (:class:`~tidegate.ungater.handlers.BypassReporter`);
5. follow the Queue configs and, on the leader, keep every Queue's status current from the
   same view (:class:`~tidegate.ungater.queue_status.QueueStatusWriter`);
6. serve the mutating webhook when configured (:mod:`tidegate.ungater.webhook`).

Several replicas may run, and exactly one releases: two releasers with different views could
each fill the same slot (per-pod preconditions do not stop that), so the releaser, PodGroup
status, evictions and Queue status run only on the holder of the ``ungater`` lease. Every
Kubernetes write of the leader is sent only while the lease is held with at least
``GUARD_MARGIN`` of its TTL left, and its replacement requests are fenced on the decision
stream; a leader that loses the lease exits (1) and restarts as a standby. Standbys follow the
streams (a takeover starts from a current view), share the durable consumer that records Events
(each decision's Event is recorded once, by whichever replica gets it), and serve the webhook.
"""

import asyncio
import logging
from collections.abc import Iterable

from tidegate.bus import (
    ConsumerSettings,
    Fence,
    Lease,
    LeaseLost,
    Published,
    StateFollower,
    layout,
)
from tidegate.kube import KubeClient
from tidegate.kube import connect as connect_kube
from tidegate.model import Envelope, WorkloadKey
from tidegate.policy.clusterview import ClusterView
from tidegate.runtime import ServiceContext
from tidegate.runtime.leadership import lease_write_guard
from tidegate.ungater.config import UngaterSettings
from tidegate.ungater.handlers import BypassReporter, Feed, Reporter
from tidegate.ungater.queue_status import QueueStatusWriter
from tidegate.ungater.releaser import Releaser, ReleaserMetrics
from tidegate.ungater.seen import SeenDecisions
from tidegate.ungater.webhook import Certificate, Webhook

log = logging.getLogger(__name__)

DURABLE = "ungater"
"""Name of the ungater's durable consumer of decisions."""

LEASE_NAME = "ungater"
"""The lease of the releasing replica."""

GUARD_MARGIN = 0.25
"""Fraction of the lease TTL that must be left for a Kubernetes write to be sent."""


def decision_subjects(cluster: str) -> list[str]:
    """The decisions the view follows (newest per workload)."""
    return [
        f"tg.{cluster}.decision.{kind}.>"
        for kind in ("admitted", "released", "pending", "preempted")
    ]


def state_subjects(cluster: str) -> list[str]:
    """The state the view follows."""
    return [f"tg.{cluster}.{kind}.>" for kind in ("pod", "node", "workload")]


async def setup(ctx: ServiceContext[UngaterSettings]) -> None:
    """The ungater's setup (module docstring)."""
    settings = ctx.settings
    kube = await connect_kube(settings.kube_settings())
    try:
        writers = await start(ctx, kube)
    except BaseException:
        await kube.close()
        raise
    ctx.spawn("kube-client", _close_when_done(kube, writers, ctx.stopping), graceful=True)


async def start(
    ctx: ServiceContext[UngaterSettings], kube: KubeClient
) -> tuple[Releaser, QueueStatusWriter, BypassReporter]:
    """Everything after the Kubernetes connection (tests call it with their own client)."""
    settings = ctx.settings
    cluster = ctx.cluster
    releaser: Releaser | None = None
    queues: QueueStatusWriter | None = None
    bypass: BypassReporter | None = None

    def changed(keys: Iterable[WorkloadKey]) -> None:
        if releaser is not None and queues is not None and bypass is not None:
            keys = list(keys)
            releaser.mark(keys)
            queues.mark(keys)
            bypass.mark(keys)

    view = ClusterView()
    feed = Feed(view, on_change=changed)
    metrics = ReleaserMetrics(ctx.metrics.registry)
    leader = _Leadership()
    # The leader's writes: every attempt, retries included, only while the lease is held.
    leading_kube = kube.guarded(lease_write_guard(leader.guard))
    handled = SeenDecisions(cluster, decision_subjects(cluster))
    queues = QueueStatusWriter(
        view=view,
        kube=leading_kube,
        interval_seconds=settings.queue_status_interval_seconds,
        errors=metrics.errors,
        guard=leader.guard,
    )
    bypass = BypassReporter(view, leading_kube)
    releaser = Releaser(
        view=view,
        kube=leading_kube,
        bus=ctx.bus,
        cluster=cluster,
        settings=settings,
        metrics=metrics,
        guard=leader.guard,
        publish=leader.publish,
        decisions_current=lambda keys: handled.current(ctx.bus, keys),
    )
    followers = [
        await ctx.follow(
            "state",
            stream=layout.state_stream(cluster),
            subjects=state_subjects(cluster),
            handler=feed.on_state,
        ),
        await ctx.follow(
            "decisions",
            stream=layout.decisions_stream(cluster),
            subjects=decision_subjects(cluster),
            handler=handled.wrap(feed.on_decision),
        ),
        await ctx.follow(
            "queues",
            stream=layout.state_stream(cluster),
            subjects=[f"tg.{cluster}.config.queue.>"],
            handler=queues.on_queue,
        ),
    ]
    ctx.spawn(
        "releaser",
        _lead_then_release(ctx, leader, releaser, (queues, bypass), followers),
        graceful=True,
    )
    reporter = Reporter(view, kube)
    await ctx.consume(
        ConsumerSettings(
            durable=DURABLE,
            stream=layout.decisions_stream(cluster),
            subjects=tuple(
                f"tg.{cluster}.decision.{kind}.>"
                for kind in ("admitted", "pending", "preempted", "released")
            ),
            deliver_new_only=True,
            max_deliver=30,
            backoff_seconds=(1.0, 2.0, 5.0),
        ),
        reporter.handle,
    )
    if settings.serves_webhook:
        certificate = Certificate(settings.webhook_cert_dir)
        webhook = Webhook(settings.gate_rules, certificate, ctx.metrics.registry)
        ctx.require("webhook", lambda: webhook.port is not None)
        ctx.spawn(
            "webhook",
            webhook.serve(
                settings.webhook_port,
                stop=ctx.stopping,
                reload_seconds=settings.webhook_cert_reload_seconds,
            ),
            graceful=True,
        )
    else:
        log.info(
            "ungater: webhook not served (webhook=%s, no certificate in %s)",
            settings.webhook,
            settings.webhook_cert_dir,
        )
    return releaser, queues, bypass


class _Leadership:
    """The lease and fence of the releasing replica, once it leads."""

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self.fence: Fence | None = None

    def guard(self) -> float:
        """Before a Kubernetes write (each attempt): LeaseLost unless the lease is held with
        margin; the seconds it is held beyond that."""
        if self.lease is None:
            raise LeaseLost("the ungater lease is not held: a standby writes nothing")
        return self.lease.ensure_held(GUARD_MARGIN * self.lease.settings.ttl_seconds)

    async def publish(self, subject: str, envelope: Envelope) -> Published:
        """A fenced publish on the decision stream."""
        if self.fence is None:
            raise LeaseLost("the ungater lease is not held: a standby publishes nothing")
        return await self.fence.publish(subject, envelope)


async def _lead_then_release(
    ctx: ServiceContext[UngaterSettings],
    leader: _Leadership,
    releaser: Releaser,
    reporters: tuple[QueueStatusWriter, BypassReporter],
    followers: list[StateFollower],
) -> None:
    """Wait for the replay and the lease, take over, then release, write Queue status and
    report bypassing pods until the service stops."""
    queues, bypass = reporters
    stopping = ctx.stopping
    try:
        for follower in followers:
            await follower.replayed.wait()
        leading = asyncio.ensure_future(
            ctx.lead(LEASE_NAME, ttl_seconds=ctx.settings.lease_ttl_seconds)
        )
        stopped = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({leading, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not leading.done():
            leading.cancel()  # a standby asked to stop: nothing to hand over
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(leading, return_exceptions=True)
            return
        lease = leading.result()
        fence = Fence.on_decisions(ctx.bus, lease, cluster=ctx.cluster)
        await fence.claim()
        leader.lease, leader.fence = lease, fence
        await releaser.take_over()
        releaser.mark(releaser.view.admitted_keys())
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(releaser.run(stopping))
            tasks.create_task(queues.run(stopping))
            tasks.create_task(bypass.run(stopping))
    finally:
        releaser.finished.set()
        queues.finished.set()
        bypass.finished.set()


async def _close_when_done(
    kube: KubeClient,
    writers: tuple[Releaser, QueueStatusWriter, BypassReporter],
    stopping: asyncio.Event,
) -> None:
    """Close the client once the releaser finished its last round and the Queue status writer
    and the bypass reporter stopped (an Event write still in flight then fails and its decision is redelivered:
    nothing is lost)."""
    try:
        await stopping.wait()
        for writer in writers:
            await writer.finished.wait()
    finally:
        await kube.close()
