"""The watcher service: Kubernetes list+watch in, state snapshots and tombstones out.

Start-up, in order:

1. create (or update) the cluster's streams, then replay the state stream: the last message of
   every node, pod, workload and config subject is what the bus believed before we started;
2. list+watch every kind tidegate reads (one :class:`~tidegate.kube.Informer` each) into the
   :class:`~tidegate.kube.read.index.ClusterIndex`, publishing nothing until every informer has
   delivered its first list (or found its resource type not served: a CRD not installed);
3. reconcile everything once: snapshots that differ from the replayed ones, and tombstones for
   subjects whose object no longer exists (deleted while the watcher was down); then report
   ready;
4. follow: fold each burst of events (up to ``batch_max_events``) into the index and publish
   what changed. A 410 relist inside an informer arrives as DELETED/ADDED/MODIFIED events, so
   vanished objects get tombstones the same way.

A resource type that is not served (JobSet, Kueue, Volcano or KAI CRDs absent) or refused (RBAC) is looked
for again every ``absent_retry_seconds``; the rest keeps flowing. Only a CRD kind that is not
served counts as listed (with nothing in it); any other failure holds back the first
reconciliation (see :data:`OPTIONAL_KINDS`). A failed publish is retried
on the next round; nothing is marked stored before JetStream acknowledged it. This module is
wiring only: recognition is in :mod:`tidegate.kube.read.recognize`, diffing in
:mod:`tidegate.kube.read.mirror`.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidegate.bus import Bus, BusError, Publisher, PublishError, Received, StateFollower, layout
from tidegate.kube import (
    COHORTS,
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    KAI_QUEUES,
    KUEUE_CLUSTER_QUEUES,
    KUEUE_COHORTS,
    KUEUE_LOCAL_QUEUES,
    KUEUE_RESOURCE_FLAVORS,
    KUEUE_TOPOLOGIES,
    NAMESPACES,
    NODES,
    PDBS,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    REPLICASETS,
    TOPOLOGIES,
    VOLCANO_QUEUES,
    Informer,
    InformerItem,
    InformerState,
    KubeClient,
    KubeError,
    KubeEvent,
    NotFound,
    ResourceType,
    Synced,
)
from tidegate.kube import connect as connect_kube
from tidegate.kube.read.index import ClusterIndex, ObjectKind, StateKey
from tidegate.kube.read.mirror import Mirror, Publication
from tidegate.model import PodState, Tombstone, WorkloadState, subjects
from tidegate.placement import PROFILES
from tidegate.runtime import ServiceContext
from tidegate.telemetry import (
    continuing,
    export_workload_root,
    flush_spans,
    newly_bound,
    pods_bound_span,
    workload_trace,
)
from tidegate.watcher.config import WatcherSettings
from tidegate.watcher.handlers import fold

log = logging.getLogger(__name__)

RETRY_PUBLISH_SECONDS = 1.0
"""Delay before retrying publications JetStream did not acknowledge."""


def resource_types(settings: WatcherSettings) -> dict[ObjectKind, ResourceType]:
    """Every resource type the watcher lists and watches."""

    return {
        "Node": NODES,
        "Pod": PODS,
        "Job": JOBS,
        "JobSet": JOBSETS,
        "Deployment": DEPLOYMENTS,
        "ReplicaSet": REPLICASETS,
        "PriorityClass": PRIORITY_CLASSES,
        "PodGroup": PODGROUPS,
        "Topology": TOPOLOGIES,
        "Queue": QUEUES,
        "PodDisruptionBudget": PDBS,
        "Namespace": NAMESPACES,
        "KueueTopology": replace(KUEUE_TOPOLOGIES, version=settings.kueue_topology_version),
        "Cohort": COHORTS,
        "KueueClusterQueue": replace(KUEUE_CLUSTER_QUEUES, version=settings.kueue_queue_version),
        "KueueLocalQueue": replace(KUEUE_LOCAL_QUEUES, version=settings.kueue_queue_version),
        "KueueResourceFlavor": replace(
            KUEUE_RESOURCE_FLAVORS, version=settings.kueue_queue_version
        ),
        "KueueCohort": replace(KUEUE_COHORTS, version=settings.kueue_cohort_version),
        "VolcanoQueue": replace(VOLCANO_QUEUES, version=settings.volcano_queue_version),
        "KaiQueue": replace(KAI_QUEUES, version=settings.kai_queue_version),
    }


OPTIONAL_KINDS: frozenset[ObjectKind] = frozenset(
    {
        "JobSet",
        "PodGroup",
        "Topology",
        "KueueTopology",
        "Queue",
        "Cohort",
        "KueueClusterQueue",
        "KueueLocalQueue",
        "KueueCohort",
        "KueueResourceFlavor",
        "VolcanoQueue",
        "KaiQueue",
    }
)
"""Kinds served by CRDs that may not be installed: "not served" (404) counts as "none exist".
Any other failure, and any failure of a built-in kind, keeps the watcher from reconciling:
publishing a reconciliation without, say, the pods would tombstone every pod on the bus."""


@dataclass(frozen=True)
class _Unavailable:
    """An informer could not list its resource type (not served, or refused)."""

    reason: str
    absent: bool
    """True when the type is simply not served (its CRD is not installed)."""


_Item = tuple[ObjectKind, InformerItem | _Unavailable]


@dataclass
class WatcherStats:
    """Counters since start (exported as metrics by :class:`WatcherCollector`)."""

    events: dict[str, int] = field(default_factory=dict)
    """Kubernetes watch events folded in, by kind."""
    snapshots: int = 0
    tombstones: int = 0
    publish_failures: int = 0
    rounds: int = 0
    relists: dict[str, int] = field(default_factory=dict)
    """Relists after 410 Gone, by kind (their vanished objects arrive as deletions)."""


class Watcher:
    """Mirrors one Kubernetes cluster onto the state subjects of one tidegate cluster id."""

    def __init__(
        self,
        *,
        bus: Bus,
        kube: KubeClient,
        settings: WatcherSettings,
        profiles: frozenset[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the watcher; nothing happens until :meth:`run`."""
        self._bus = bus
        self._kube = kube
        self._settings = settings
        self._clock = clock
        self.index = ClusterIndex(
            owner_kind_service_types=settings.service_type_map, profiles=profiles
        )
        self.mirror = Mirror(settings.cluster, self.index)
        self.resources: Mapping[ObjectKind, ResourceType] = resource_types(settings)
        self.ready = asyncio.Event()
        """Set once the first full reconciliation is published (for /readyz)."""
        self.stats = WatcherStats()
        self.unavailable: dict[ObjectKind, str] = {}
        """Resource types currently not listed, and why."""
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=4 * settings.batch_max_events)
        self._unsynced: set[ObjectKind] = set(self.resources)
        self._retry: set[StateKey] = set()
        self._bound: dict[str, list[PodState]] = {}
        """Pods this batch of publications showed bound, by workload (for its trace)."""
        self._roots = 0
        """Root spans exported by this batch of publications, not flushed yet."""

    async def run(self) -> None:
        """Replay, list+watch, reconcile, then follow until cancelled."""
        cluster = self._settings.cluster
        await self._bus.ensure_layout(cluster)
        await self._replay()
        publisher = Publisher(self._bus)
        try:
            async with asyncio.TaskGroup() as group:
                for kind, resource in self.resources.items():
                    group.create_task(self._follow(kind, resource), name=f"watch {kind}")
                group.create_task(self._process(publisher), name="publish")
        finally:
            with contextlib.suppress(BusError):
                await publisher.close()

    # ------------------------------------------------------------------ replay

    async def _replay(self) -> None:
        cluster = self._settings.cluster

        async def remember(received: Received) -> None:
            self.mirror.seed(received.envelope)

        follower = StateFollower(
            self._bus,
            stream=layout.state_stream(cluster),
            subjects=subjects.state_wildcards(cluster),
            handler=remember,
            name="watcher-replay",
        )
        task = asyncio.create_task(follower.run(), name="replay state")
        replayed = asyncio.create_task(follower.replayed.wait())
        try:
            await asyncio.wait({task, replayed}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # the follower failed: raise its error
        finally:
            for pending in (task, replayed):
                pending.cancel()
            await asyncio.gather(task, replayed, return_exceptions=True)
        log.info(
            "replayed state stream",
            extra={"messages": follower.handled, "subjects": len(self.mirror.stored_keys())},
        )

    # ------------------------------------------------------------------ informers

    async def _follow(self, kind: ObjectKind, resource: ResourceType) -> None:
        state: InformerState | None = None
        while True:
            # The index reads only metadata from a DELETED object: cache no more than that.
            informer = Informer(self._kube, resource, initial_state=state, cache="metadata")
            try:
                async for item in informer:
                    await self._queue.put((kind, item))
                return  # pragma: no cover - an informer iterates forever
            except NotFound as exc:
                reason = f"{resource.api_version} {resource.plural} is not served ({exc})"
                absent = True
            except KubeError as exc:
                reason = f"listing {resource.api_version} {resource.plural} failed: {exc}"
                absent = False
            if informer.resource_version:
                state = informer.state()
            await self._queue.put((kind, _Unavailable(reason, absent and kind in OPTIONAL_KINDS)))
            await asyncio.sleep(self._settings.absent_retry_seconds)

    # ------------------------------------------------------------------ processing

    async def _next_batch(self) -> list[_Item]:
        if self._retry:
            try:
                async with asyncio.timeout(RETRY_PUBLISH_SECONDS):
                    first = await self._queue.get()
            except TimeoutError:
                return []
        else:
            first = await self._queue.get()
        batch = [first]
        while len(batch) < self._settings.batch_max_events:
            try:
                batch.append(self._queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        return batch

    async def _process(self, publisher: Publisher) -> None:
        while True:
            batch = await self._next_batch()
            affected: set[StateKey] = set()
            for kind, item in batch:
                if isinstance(item, KubeEvent):
                    self.stats.events[kind] = self.stats.events.get(kind, 0) + 1
                    affected |= fold(self.index, kind, item.type, item.obj)
                elif isinstance(item, Synced):
                    if item.relist:
                        self.stats.relists[kind] = self.stats.relists.get(kind, 0) + 1
                    self._unsynced.discard(kind)
                    self.unavailable.pop(kind, None)
                    log.info(
                        "%s listed",
                        kind,
                        extra={"kind": kind, "objects": item.count, "relist": item.relist},
                    )
                else:
                    if item.absent:
                        self._unsynced.discard(kind)
                    if self.unavailable.get(kind) != item.reason:
                        log.warning("%s; retrying", item.reason, extra={"kind": kind})
                    self.unavailable[kind] = item.reason
            if not self.ready.is_set():
                if self._unsynced:
                    continue
                keys = self.mirror.all_keys()
            else:
                keys = affected | self._retry
            self._retry = set()
            await self._publish(publisher, keys)
            self.stats.rounds += 1
            if not self.ready.is_set():
                log.info("first reconciliation published; ready", extra={"keys": len(keys)})
                self.ready.set()

    async def _publish(self, publisher: Publisher, keys: set[StateKey]) -> None:
        plan = self.mirror.plan(keys, now=self._clock())
        for problem in plan.problems:
            log.warning("%s", problem)
        if not plan.publications:
            return
        failed: set[str] = set()
        try:
            for publication in plan.publications:
                with continuing(workload_trace(publication.envelope.body)):
                    await publisher.submit(publication.subject, publication.envelope)
            await publisher.flush()
        except PublishError as exc:
            failed = {failure.event_id for failure in exc.failures}
            log.warning("%s; will retry", exc)
        except BusError as exc:
            failed = {p.envelope.event_id for p in plan.publications}
            log.warning("publishing failed: %s; will retry", exc)
            with contextlib.suppress(PublishError):
                await publisher.flush()
        for publication in plan.publications:
            if publication.envelope.event_id in failed:
                self._retry.add(publication.key)
                self.stats.publish_failures += 1
                continue
            self._stored(publication)
        self._trace_bound()
        if self._roots:
            # A root lost in a crash would never be exported again (it is made once): send
            # the roots now rather than within the exporter's batch delay.
            self._roots = 0
            await asyncio.to_thread(flush_spans)

    def _stored(self, publication: Publication) -> None:
        body = publication.envelope.body
        last = self.mirror.last(publication.key)
        if isinstance(body, WorkloadState):
            if not isinstance(last, WorkloadState) or last.uid != body.uid:
                # Its first publication: the trace's root span.
                self._roots += export_workload_root(body)
        elif isinstance(body, PodState) and body.workload and newly_bound(body, last):
            self._bound.setdefault(body.workload, []).append(body)
        self.mirror.stored(publication)
        if isinstance(publication.envelope.body, Tombstone):
            self.stats.tombstones += 1
        else:
            self.stats.snapshots += 1
        for problem in publication.problems:
            log.warning("%s", problem, extra={"subject": publication.subject})

    def _trace_bound(self) -> None:
        """One ``bind pods`` span per workload whose pods this batch showed bound."""
        for key, pods in self._bound.items():
            namespace, _, name = key.partition("/")
            workload = self.mirror.last(StateKey("workload", namespace, name))
            pods_bound_span(key, workload if isinstance(workload, WorkloadState) else None, pods)
        self._bound.clear()


class WatcherCollector(Collector):
    """The watcher's Prometheus metrics, read from its counters at scrape time."""

    def __init__(self, watcher: Watcher) -> None:
        """Report on ``watcher``."""
        self._watcher = watcher

    def collect(self) -> Iterable[Metric]:
        """The metric families (called by the registry on every scrape)."""
        watcher = self._watcher
        stats = watcher.stats
        events = CounterMetricFamily(
            "tidegate_watcher_events",
            "Kubernetes watch events folded into the index, by kind.",
            labels=["kind"],
        )
        for kind, count in sorted(stats.events.items()):
            events.add_metric([kind], count)
        published = CounterMetricFamily(
            "tidegate_watcher_published",
            "State messages stored on the bus, by type (snapshot or tombstone).",
            labels=["type"],
        )
        published.add_metric(["snapshot"], stats.snapshots)
        published.add_metric(["tombstone"], stats.tombstones)
        relists = CounterMetricFamily(
            "tidegate_watcher_relists",
            "Relists after the API server answered 410 Gone, by kind.",
            labels=["kind"],
        )
        for kind, count in sorted(stats.relists.items()):
            relists.add_metric([kind], count)
        failures = CounterMetricFamily(
            "tidegate_watcher_publish_failures",
            "State messages JetStream did not acknowledge (retried).",
        )
        failures.add_metric([], stats.publish_failures)
        objects = GaugeMetricFamily(
            "tidegate_watcher_objects",
            "Objects in the watcher's index, by kind.",
            labels=["kind"],
        )
        index = watcher.index
        for kind, count in (
            ("node", len(index.nodes)),
            ("pod", len(index.pods)),
            ("managed_workload", len(index.managed)),
        ):
            objects.add_metric([kind], count)
        unavailable = GaugeMetricFamily(
            "tidegate_watcher_resource_unavailable",
            "1 for each resource type the watcher cannot list now (CRD not installed, RBAC).",
            labels=["kind"],
        )
        for kind in watcher.resources:
            unavailable.add_metric([kind], 1.0 if kind in watcher.unavailable else 0.0)
        bypassed = GaugeMetricFamily(
            "tidegate_watcher_bypassed_pods",
            "Running pods of managed workloads that started without passing the gate "
            "(created while the webhook was down under failurePolicy Ignore).",
        )
        bypassed.add_metric([], watcher.mirror.bypassed_pods())
        return [events, published, relists, failures, objects, unavailable, bypassed]


async def setup(ctx: ServiceContext[WatcherSettings]) -> None:
    """Wire the watcher into the service runner: metrics, readiness, the supervised task."""
    kube = await connect_kube(ctx.settings.kube_settings())
    watcher = Watcher(bus=ctx.bus, kube=kube, settings=ctx.settings, profiles=frozenset(PROFILES))
    ctx.metrics.registry.register(WatcherCollector(watcher))
    ctx.require("reconciled", watcher.ready.is_set)

    async def run() -> None:
        try:
            await watcher.run()
        finally:
            await kube.close()

    ctx.spawn("watch", run())
