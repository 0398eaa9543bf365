"""Wiring of the ungater: followers into the view, the releaser's rounds, Events, the webhook.

Start-up, in order:

1. connect to Kubernetes (kubeconfig or in-cluster; a bad configuration stops the service);
2. replay then follow the state stream (pods, nodes, workloads) and the decision stream's
   ``admitted``/``released``/``pending`` subjects into one :class:`~tidegate.ungater.view.View`;
3. once both are replayed, run release rounds (:class:`~tidegate.ungater.releaser.Releaser`):
   the first round recounts every admitted workload from its pods' nodeSelectors, so a
   restart continues exactly where the last process stopped;
4. consume decisions durably (``ungater``, new decisions only on first creation) for Events
   and the trace annotation (:class:`~tidegate.ungater.handlers.Reporter`);
5. follow the Queue configs and keep every Queue's status current from the same view
   (:class:`~tidegate.ungater.queue_status.QueueStatusWriter`, once replayed);
6. serve the mutating webhook when configured (:mod:`tidegate.ungater.webhook`).

Several replicas may run: the API server's resourceVersion preconditions and the slot
counting keep them from releasing more than assigned, but each records its own Events, so one
replica is the norm (the chart's default).
"""

import asyncio
import logging
from collections.abc import Iterable

from tidegate.bus import ConsumerSettings, StateFollower, layout
from tidegate.kube import KubeClient
from tidegate.kube import connect as connect_kube
from tidegate.model import WorkloadKey
from tidegate.runtime import ServiceContext
from tidegate.ungater.config import UngaterSettings
from tidegate.ungater.handlers import Reporter
from tidegate.ungater.queue_status import QueueStatusWriter
from tidegate.ungater.releaser import Releaser, ReleaserMetrics
from tidegate.ungater.view import View
from tidegate.ungater.webhook import Certificate, Webhook

log = logging.getLogger(__name__)

DURABLE = "ungater"
"""Name of the ungater's durable consumer of decisions."""


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
) -> tuple[Releaser, QueueStatusWriter]:
    """Everything after the Kubernetes connection (tests call it with their own client)."""
    settings = ctx.settings
    cluster = ctx.cluster
    releaser: Releaser | None = None
    queues: QueueStatusWriter | None = None

    def changed(keys: Iterable[WorkloadKey]) -> None:
        if releaser is not None and queues is not None:
            keys = list(keys)
            releaser.mark(keys)
            queues.mark(keys)

    view = View(on_change=changed)
    metrics = ReleaserMetrics(ctx.metrics.registry)
    queues = QueueStatusWriter(
        view=view,
        kube=kube,
        interval_seconds=settings.queue_status_interval_seconds,
        errors=metrics.errors,
    )
    releaser = Releaser(
        view=view,
        kube=kube,
        bus=ctx.bus,
        cluster=cluster,
        settings=settings,
        metrics=metrics,
    )
    followers = [
        await ctx.follow(
            "state",
            stream=layout.state_stream(cluster),
            subjects=state_subjects(cluster),
            handler=view.on_state,
        ),
        await ctx.follow(
            "decisions",
            stream=layout.decisions_stream(cluster),
            subjects=decision_subjects(cluster),
            handler=view.on_decision,
        ),
        await ctx.follow(
            "queues",
            stream=layout.state_stream(cluster),
            subjects=[f"tg.{cluster}.config.queue.>"],
            handler=queues.on_queue,
        ),
    ]
    ctx.spawn("releaser", _release_after_replay(releaser, followers, ctx.stopping), graceful=True)
    ctx.spawn(
        "queue-status", _queue_status_after_replay(queues, followers, ctx.stopping), graceful=True
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
    return releaser, queues


async def _queue_status_after_replay(
    queues: QueueStatusWriter, followers: list[StateFollower], stopping: asyncio.Event
) -> None:
    try:
        for follower in followers:
            await follower.replayed.wait()
        await queues.run(stopping)
    finally:
        queues.finished.set()


async def _release_after_replay(
    releaser: Releaser, followers: list[StateFollower], stopping: asyncio.Event
) -> None:
    try:
        for follower in followers:
            await follower.replayed.wait()
        releaser.mark(releaser.view.admitted_keys())
        await releaser.run(stopping)
    finally:
        releaser.finished.set()


async def _close_when_done(
    kube: KubeClient, writers: tuple[Releaser, QueueStatusWriter], stopping: asyncio.Event
) -> None:
    """Close the client once the releaser finished its last round and the Queue status writer
    stopped (an Event write still in flight then fails and its decision is redelivered:
    nothing is lost)."""
    try:
        await stopping.wait()
        for writer in writers:
            await writer.finished.wait()
    finally:
        await kube.close()
