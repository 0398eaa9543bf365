"""Wiring of the topology-cache: followers, the read-back of its own output, the publishing loop.

1. Follow the state stream (nodes, pods, workloads, Topologies) and the decision stream
   (admitted, released, preempted), replaying both, and read the capacity stream back once.
2. When all three are replayed, publish every record that differs from what the capacity stream
   holds (after a restart with nothing changed meanwhile: nothing), then report ready.
3. From then on, after every change and a short coalescing pause, publish the records that
   changed: deltas, sent asynchronously with a bounded number in flight. Records JetStream did
   not store are planned again after ``publish_retry_seconds``.

On stop, one last round is published before the connection drains. The arithmetic is
:class:`tidegate.placement.accounting.CapacityAccounting`; what to publish is decided by
:class:`tidegate.policy.capacity_stream.PublishedView`; nothing here computes capacity.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidegate.bus import BusError, Publisher, PublishError, StateFollower, layout
from tidegate.model import CapacityDomain, CapacityNode, subjects
from tidegate.placement.accounting import CapacityAccounting, CapacityKey, domain_gpus
from tidegate.policy.capacity_stream import Outgoing, PublishedView
from tidegate.runtime import ServiceContext
from tidegate.topology_cache.config import Settings
from tidegate.topology_cache.handlers import Handlers

log = logging.getLogger(__name__)


class CacheMetrics:
    """The topology-cache's own metrics."""

    def __init__(self, ctx: ServiceContext[Settings], handlers: Handlers) -> None:
        """Register on the service's registry; gauges read ``handlers``' state at scrape time."""
        registry = ctx.metrics.registry
        accounting = handlers.accounting
        self.published = Counter(
            "tidegate_capacity_records_published_total",
            "Capacity records stored on the capacity stream, by kind (node, domain, tombstone).",
            ["kind"],
            registry=registry,
        )
        self.failed = Counter(
            "tidegate_capacity_publish_failures_total",
            "Capacity records JetStream did not store (they are published again).",
            registry=registry,
        )
        self.round_seconds = Histogram(
            "tidegate_capacity_publish_round_duration_seconds",
            "Time to plan, send and confirm one round of capacity records.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=registry,
        )
        Gauge(
            "tidegate_capacity_applied_sequence",
            "The highest admitted or released decision sequence applied.",
            registry=registry,
        ).set_function(lambda: float(accounting.applied_sequence))
        Gauge(
            "tidegate_capacity_nodes",
            "Nodes the cache knows.",
            registry=registry,
        ).set_function(lambda: float(len(accounting.node_names())))
        Gauge(
            "tidegate_capacity_admissions",
            "Admitted workloads whose admission the cache holds (reserving until pods bind).",
            registry=registry,
        ).set_function(lambda: float(len(accounting.admitted())))
        Gauge(
            "tidegate_capacity_input_problems",
            "Inputs with a problem (a bad assignment or Topology) since start; see the logs.",
            registry=registry,
        ).set_function(lambda: float(handlers.problems))
        registry.register(_DomainGpus(accounting))


class _DomainGpus(Collector):
    """``tidegate_topology_gpus``, read from the accounting when ``/metrics`` is scraped."""

    def __init__(self, accounting: CapacityAccounting) -> None:
        self._accounting = accounting

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        for labels, amount in sorted(domain_gpus(self._accounting).items()):
            family.add_metric(list(labels), float(amount))
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "tidegate_topology_gpus",
            "GPUs (nvidia.com/gpu) per topology domain above the node, by state: allocatable, "
            "used by bound pods, reserved for admitted pods not bound yet, free on its "
            "schedulable nodes.",
            labels=["topology", "level", "domain", "state"],
        )


async def setup(ctx: ServiceContext[Settings]) -> None:
    """Follow the inputs, read back the capacity stream, start the publishing loop."""
    cluster = ctx.cluster
    handlers = Handlers(CapacityAccounting(), PublishedView(cluster))
    metrics = CacheMetrics(ctx, handlers)
    state = await ctx.follow(
        "state",
        stream=layout.state_stream(cluster),
        subjects=[
            f"tg.{cluster}.node.>",
            f"tg.{cluster}.pod.>",
            f"tg.{cluster}.workload.>",
            f"tg.{cluster}.config.topology.>",
        ],
        handler=handlers.on_input,
    )
    decisions = await ctx.follow(
        "decisions",
        stream=layout.decisions_stream(cluster),
        subjects=[
            f"tg.{cluster}.decision.admitted.>",
            f"tg.{cluster}.decision.released.>",
            f"tg.{cluster}.decision.preempted.>",
        ],
        handler=handlers.on_input,
    )
    capacity = StateFollower(
        ctx.bus,
        stream=layout.capacity_stream(cluster),
        subjects=[subjects.capacity_wildcard(cluster)],
        handler=handlers.on_capacity,
        name="capacity",
    )
    ctx.require("replay:capacity", capacity.replayed.is_set)
    ctx.spawn("replay:capacity", read_back(capacity))
    emitter = Emitter(
        ctx, handlers, metrics, replays=[state, decisions, capacity], inputs=[state, decisions]
    )
    ctx.require("published", lambda: emitter.ready)
    ctx.spawn("publish", emitter.run(), graceful=True)


async def read_back(follower: StateFollower) -> None:
    """Replay ``follower``'s stream once, then stop following it."""
    task = asyncio.create_task(follower.run())
    replayed = asyncio.create_task(follower.replayed.wait())
    try:
        await asyncio.wait({task, replayed}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # it ended before the replay did: raise what it raised
            raise BusError(f"following {follower.name} ended before its replay did")
    finally:
        for pending in (task, replayed):
            pending.cancel()
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(pending, return_exceptions=True)


class Emitter:
    """The publishing loop (module docstring, steps 2 and 3)."""

    def __init__(
        self,
        ctx: ServiceContext[Settings],
        handlers: Handlers,
        metrics: CacheMetrics,
        *,
        replays: Sequence[StateFollower],
        inputs: Sequence[StateFollower],
    ) -> None:
        """Publish ``handlers``' accounting once every follower in ``replays`` has replayed;
        the positions of ``inputs`` (the followers feeding the accounting) go into event ids."""
        self._ctx = ctx
        self._accounting = handlers.accounting
        self._published = handlers.published
        self._wake = handlers.wake
        self._metrics = metrics
        self._replays = replays
        self._inputs = tuple(inputs)
        self._publisher = Publisher(ctx.bus, max_in_flight=ctx.settings.max_in_flight)
        self._retry: set[CapacityKey] = set()
        self._retry_touched: set[CapacityKey] = set()
        self.ready = False
        """True once the view after replay is published."""

    async def run(self) -> None:
        """Publish the replayed view, then every change, until the service stops."""
        try:
            if not await self._until_replayed():
                return
            self._accounting.take_changes()
            everything = set(self._accounting.keys()) | self._published.keys()
            await self._round(everything, ())
            self.ready = True
            log.info(
                "topology-cache: view published after replay (%d records held, sequence %d)",
                len(self._published),
                self._accounting.applied_sequence,
            )
            await self._follow()
        finally:
            with contextlib.suppress(BusError):
                await self._publisher.close()

    async def _until_replayed(self) -> bool:
        stopping = self._ctx.stopping
        for follower in self._replays:
            await _first(follower.replayed, stopping)
            if stopping.is_set():
                return False
        return True

    async def _follow(self) -> None:
        settings = self._ctx.settings
        stopping = self._ctx.stopping
        while True:
            last_round = stopping.is_set()
            if not last_round:
                timeout = settings.publish_retry_seconds if self._retry else None
                await _first(self._wake, stopping, within=timeout)
                if settings.coalesce_seconds and not stopping.is_set():
                    await asyncio.sleep(settings.coalesce_seconds)
            self._wake.clear()
            changes = self._accounting.take_changes()
            keys = changes.keys | self._retry
            touched = changes.touched | self._retry_touched
            self._retry, self._retry_touched = set(), set()
            if keys:
                await self._round(keys, touched)
            if last_round:
                return

    async def _round(self, keys: Iterable[CapacityKey], touched: Iterable[CapacityKey]) -> None:
        started = time.monotonic()
        touched = set(touched)
        batch = self._published.plan(
            self._accounting, keys, touched=touched, position=self._position(), now=time.time()
        )
        failed: set[str] = set()
        for i, item in enumerate(batch):
            try:
                await self._publisher.submit(item.subject, item.envelope)
            except BusError as exc:
                log.warning("topology-cache: publishing stopped at %s: %s", item.subject, exc)
                failed.update(later.subject for later in batch[i:])
                break
        try:
            await self._publisher.flush()
        except PublishError as exc:
            failed.update(failure.subject for failure in exc.failures)
            log.warning("topology-cache: %s; will publish them again", exc)
        for item in batch:
            if item.subject in failed:
                self._retry.add(item.key)
                if item.key in touched:
                    self._retry_touched.add(item.key)
                self._metrics.failed.inc()
            else:
                self._published.stored(item)
                self._metrics.published.labels(kind=_kind(item)).inc()
        if self._retry:
            self._wake.set()
        self._metrics.round_seconds.observe(time.monotonic() - started)

    def _position(self) -> str:
        return ".".join(str(follower.last_sequence) for follower in self._inputs)


def _kind(item: Outgoing) -> str:
    body = item.envelope.body
    if isinstance(body, CapacityNode):
        return "node"
    if isinstance(body, CapacityDomain):
        return "domain"
    return "tombstone"


async def _first(*events: asyncio.Event, within: float | None = None) -> None:
    """Wait until any of ``events`` is set, or ``within`` seconds pass."""
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
