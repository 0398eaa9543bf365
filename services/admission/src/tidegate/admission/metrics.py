"""Admission's queue metrics, under the names of Kueue's that users already alert on.

============================================  ===========================================
tidegate                                      Kueue
============================================  ===========================================
``tidegate_pending_workloads{queue,reason}``  ``kueue_pending_workloads{cluster_queue,status}``
``tidegate_admission_wait_time_seconds``      ``kueue_admission_wait_time_seconds``
``tidegate_queue_resource_usage``             ``kueue_cluster_queue_resource_usage``
``tidegate_queue_resource_quota``             ``kueue_cluster_queue_nominal_quota``
``tidegate_queue_card_usage`` / ``_quota``    (none: Kueue has no card models)
``tidegate_evicted_workloads_total``          ``kueue_evicted_workloads_total``
============================================  ===========================================

The gauges are read from the policy object (:class:`tidegate.policy.admission.Admission`) when
``/metrics`` is scraped, by a collector on the service's registry: no bookkeeping of ours can
drift from what admission decides. They are reported only while this instance leads (after
its takeover); a standby exposes the names with no samples, so a sum over replicas counts
every workload once. The histogram and the counter grow as the leader commits decisions; a
standby commits none. Labels stay few: queue names, the fixed reason tokens, resource and card
model names (from queue quotas and admitted workloads' requests).

Amounts are in the resource's own unit, like Kueue's: cpu in cores (``0.5``), memory in bytes,
devices as counts. This module only observes; it decides nothing.
"""

from collections.abc import Iterable, Sequence
from typing import Final, get_args

from cachetools import LRUCache
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidegate.model import Admitted, PendingReason, Released
from tidegate.model.quantity import MILLI_RESOURCES
from tidegate.policy.admission import Admission, Decision

REASONS: Final[tuple[PendingReason, ...]] = get_args(PendingReason)
"""Every pending reason token: each known queue reports all of them (zeros included)."""

WAIT_BUCKETS: Final = (0.1, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
"""Seconds; Kueue's are powers of two from 1 s, ours start finer for small clusters."""

ADMITTED_REMEMBERED: Final = 65536
"""Workload uids remembered as admitted once, so a re-admission is not a first admission."""

NO_QUEUE: Final = ""
"""The ``queue`` label of workloads that name no queue (and there is no default queue)."""


def pending_counts(admission: Admission) -> dict[tuple[str, PendingReason], int]:
    """Waiting workloads per (queue, reason): every reason of every known queue (zeros
    included), plus the queues named by waiting workloads that do not exist."""
    counts: dict[tuple[str, PendingReason], int] = {
        (queue, reason): 0 for queue in admission.queues() for reason in REASONS
    }
    default = admission.settings.default_queue
    for key, reason in admission.waiting().items():
        workload = admission.workload(key)
        queue = (workload.queue if workload is not None else None) or default or NO_QUEUE
        counts[(queue, reason)] = counts.get((queue, reason), 0) + 1
    return counts


def usage_samples(admission: Admission) -> dict[str, list[tuple[str, str, float]]]:
    """The quota gauges' samples, by metric name, as (queue, resource or card model, value):
    usage of every resource and card model a queue holds or its quota names (zeros included),
    quota of every one its quota names."""
    queues = admission.queues()
    names = sorted(set(queues) | {a.queue for a in admission.admitted().values()})
    samples: dict[str, list[tuple[str, str, float]]] = {
        "resource_usage": [],
        "resource_quota": [],
        "card_usage": [],
        "card_quota": [],
    }
    for name in names:
        config = queues.get(name)
        quota = (config.quota if config is not None else None) or {}
        card_quota = (config.card_quota if config is not None else None) or {}
        usage = admission.quota.usage(name)
        for resource in sorted(set(usage.resources) | set(quota)):
            amount = usage.resources.get(resource, 0)
            samples["resource_usage"].append((name, resource, in_unit(resource, amount)))
        for resource, amount in sorted(quota.items()):
            samples["resource_quota"].append((name, resource, in_unit(resource, amount)))
        for model in sorted(set(usage.cards) | set(card_quota)):
            samples["card_usage"].append((name, model, float(usage.cards.get(model, 0))))
        for model, cards in sorted(card_quota.items()):
            samples["card_quota"].append((name, model, float(cards)))
    return samples


def in_unit(resource: str, amount: int) -> float:
    """An amount in the resource's own unit (cpu: cores), as Kueue reports it."""
    return amount / 1000 if resource in MILLI_RESOURCES else float(amount)


def eviction_reason(released: Released) -> str:
    """The ``reason`` label of an eviction: ``NodeFailure`` (no replacement for slots lost
    with their nodes) or ``Preempted``."""
    return "NodeFailure" if released.evict_pods else "Preempted"


class QueueMetrics:
    """The metrics of the module docstring, registered on one service registry."""

    def __init__(self, registry: CollectorRegistry, admission: Admission) -> None:
        """Register on ``registry``; gauges read ``admission`` at scrape time."""
        self.admission = admission
        self.leading = False
        """Set by the leader once it took over: only then are the gauges reported."""
        self.wait_seconds = Histogram(
            "tidegate_admission_wait_time_seconds",
            "Time from a workload's creation to its first admission, by queue "
            "(kueue_admission_wait_time_seconds).",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.evicted = Counter(
            "tidegate_evicted_workloads_total",
            "Admitted workloads evicted, by queue and reason: Preempted or NodeFailure "
            "(kueue_evicted_workloads_total).",
            ["queue", "reason"],
            registry=registry,
        )
        self._admitted_uids: LRUCache[str, None] = LRUCache(maxsize=ADMITTED_REMEMBERED)
        registry.register(_QueueCollector(self))

    def restored(self, admitted: Iterable[Admitted]) -> None:
        """Admissions a takeover restored from the ledger: their re-admission is not a first."""
        for body in admitted:
            self._admitted_uids[body.uid] = None

    def committed(self, decisions: Sequence[Decision], *, now: float) -> None:
        """Decisions the leader committed at ``now`` (Unix seconds)."""
        for decision in decisions:
            body = decision.body
            if isinstance(body, Admitted) and body.replaces is None:
                first = body.uid not in self._admitted_uids
                self._admitted_uids[body.uid] = None
                workload = decision.workload
                if first and workload is not None and workload.created_at > 0:
                    waited = max(0.0, now - workload.created_at)
                    self.wait_seconds.labels(queue=body.queue).observe(waited)
            elif isinstance(body, Released) and body.reason == "Evicted":
                queue = body.queue or NO_QUEUE
                self.evicted.labels(queue=queue, reason=eviction_reason(body)).inc()


_GAUGES: Final = {
    "resource_usage": (
        "tidegate_queue_resource_usage",
        "What a queue's admitted workloads hold, per resource, in the resource's unit (cpu in "
        "cores) (kueue_cluster_queue_resource_usage).",
        "resource",
    ),
    "resource_quota": (
        "tidegate_queue_resource_quota",
        "A queue's quota (spec.capability) per resource it names, in the resource's unit "
        "(kueue_cluster_queue_nominal_quota).",
        "resource",
    ),
    "card_usage": (
        "tidegate_queue_card_usage",
        "GPU cards a queue's admitted workloads hold, per card model.",
        "card",
    ),
    "card_quota": (
        "tidegate_queue_card_quota",
        "A queue's card quota (spec.cardQuota) per card model it names.",
        "card",
    ),
}


class _QueueCollector(Collector):
    """Reads the gauges from the policy object at scrape time (the event loop's thread)."""

    def __init__(self, metrics: QueueMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return list(self._families()[0])

    def collect(self) -> Iterable[Metric]:
        families, pending, gauges = self._families()
        if self._metrics.leading:
            admission = self._metrics.admission
            for (queue, reason), count in sorted(pending_counts(admission).items()):
                pending.add_metric([queue, reason], count)
            for name, samples in usage_samples(admission).items():
                for queue, label, value in samples:
                    gauges[name].add_metric([queue, label], value)
        return families

    @staticmethod
    def _families() -> tuple[list[Metric], GaugeMetricFamily, dict[str, GaugeMetricFamily]]:
        pending = GaugeMetricFamily(
            "tidegate_pending_workloads",
            "Workloads waiting for admission, by queue and pending reason "
            "(kueue_pending_workloads).",
            labels=["queue", "reason"],
        )
        gauges = {
            name: GaugeMetricFamily(metric, text, labels=["queue", label])
            for name, (metric, text, label) in _GAUGES.items()
        }
        families: list[Metric] = [pending, *gauges.values()]
        return families, pending, gauges
