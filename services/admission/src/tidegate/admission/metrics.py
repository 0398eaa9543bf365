"""Admission's queue metrics, under the names of Kueue's that users already alert on.

============================================  ===========================================
tidegate                                      Kueue
============================================  ===========================================
``tidegate_pending_workloads{queue,reason}``  ``kueue_pending_workloads{cluster_queue,status}``
``tidegate_admission_wait_time_seconds``      ``kueue_admission_wait_time_seconds``
``tidegate_queue_resource_usage``             ``kueue_cluster_queue_resource_usage``
``tidegate_queue_resource_quota``             (capability: Kueue has no hard ceiling)
``tidegate_queue_card_usage`` / ``_quota``    (none: Kueue has no card models)
``tidegate_evicted_workloads_total``          ``kueue_evicted_workloads_total``
``tidegate_cluster_queue_nominal_quota``      ``kueue_cluster_queue_nominal_quota``
``tidegate_cluster_queue_borrowing_limit``    ``kueue_cluster_queue_borrowing_limit``
``tidegate_cluster_queue_lending_limit``      ``kueue_cluster_queue_lending_limit``
``tidegate_cluster_queue_weighted_share``     ``kueue_cluster_queue_weighted_share``
``tidegate_cluster_queue_resource_borrowed``  (none: what a queue uses above its quota)
``tidegate_cohort_*``                         the same for cohorts, plus usage and subtree
============================================  ===========================================

The queue-tree gauges (``cluster_queue`` and ``cohort``) are one rule's output:
:meth:`~tidegate.policy.admission.Admission.tree_report`, the same
:func:`~tidegate.policy.queuetree.report` that ``tidegate queues`` shows. Their labels are
Kueue's: ``flavor`` is the card model (``resource`` is then ``cards``), empty for a resource.

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, get_args

from cachetools import LRUCache
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidegate.model import Admitted, PendingReason, Released
from tidegate.model.quantity import MILLI_RESOURCES
from tidegate.policy.admission import Admission, Decision
from tidegate.policy.queuetree import Dim, NodeKind, NodeReport

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


TREE_GAUGES: Final[dict[tuple[NodeKind, str], tuple[str, str]]] = {
    ("queue", "nominal"): (
        "tidegate_cluster_queue_nominal_quota",
        "A queue's nominal (guaranteed) quota per resource and card model it names "
        "(kueue_cluster_queue_nominal_quota).",
    ),
    ("queue", "borrowing_limit"): (
        "tidegate_cluster_queue_borrowing_limit",
        "The most a queue may borrow from its cohort, where a limit is set "
        "(kueue_cluster_queue_borrowing_limit).",
    ),
    ("queue", "lending_limit"): (
        "tidegate_cluster_queue_lending_limit",
        "The most of a queue's unused quota its cohort may lend, where a limit is set "
        "(kueue_cluster_queue_lending_limit).",
    ),
    ("queue", "borrowed"): (
        "tidegate_cluster_queue_resource_borrowed",
        "What a queue uses above its quota, borrowed from its cohort.",
    ),
    ("queue", "share"): (
        "tidegate_cluster_queue_weighted_share",
        "A queue's weighted dominant-resource share, in thousandths; 0 while it borrows "
        "nothing (kueue_cluster_queue_weighted_share).",
    ),
    ("cohort", "nominal"): (
        "tidegate_cohort_nominal_quota",
        "A cohort's own nominal quota per resource and card model it names.",
    ),
    ("cohort", "borrowing_limit"): (
        "tidegate_cohort_borrowing_limit",
        "The most a cohort's subtree may borrow from its parent, where a limit is set.",
    ),
    ("cohort", "lending_limit"): (
        "tidegate_cohort_lending_limit",
        "The most of a cohort's unused quota its parent may lend, where a limit is set.",
    ),
    ("cohort", "borrowed"): (
        "tidegate_cohort_resource_borrowed",
        "What a cohort's subtree uses above its subtree quota, borrowed from its parent.",
    ),
    ("cohort", "share"): (
        "tidegate_cohort_weighted_share",
        "A cohort's weighted dominant-resource share in its parent, in thousandths.",
    ),
    ("cohort", "usage"): (
        "tidegate_cohort_resource_usage",
        "What the admitted workloads of a cohort's subtree hold.",
    ),
    ("cohort", "quota"): (
        "tidegate_cohort_subtree_quota",
        "A cohort's subtree quota: its nominal plus what its children lend to it.",
    ),
}
"""The queue-tree gauges, by (node kind, :class:`NodeReport` quantity): metric name and help.
A queue's usage is ``tidegate_queue_resource_usage`` / ``tidegate_queue_card_usage``."""

TreeSample = tuple[tuple[str, ...], float]
"""A tree gauge's labels (Kueue's, see :func:`tree_samples`) and value."""


def dim_labels(dim: Dim) -> tuple[str, str]:
    """A dimension as Kueue's (``flavor``, ``resource``) labels: a card model is a flavor of
    ``cards``; a resource has no flavor."""
    return (dim.name, "cards") if dim.kind == "card" else ("", dim.name)


def dim_value(dim: Dim, amount: int) -> float:
    """An amount of ``dim`` in its unit (cpu in cores, cards as counts)."""
    return in_unit(dim.name, amount) if dim.kind == "resource" else float(amount)


def tree_samples(reports: Sequence[NodeReport]) -> dict[str, list[TreeSample]]:
    """The queue-tree gauges' samples by metric name, from the tree's report (one rule). A
    queue's labels are (``cohort``, ``cluster_queue``, ``flavor``, ``resource``), its cohort
    the one above it (``""`` at a root); a cohort's are (``cohort``, ``flavor``,
    ``resource``); the weighted shares drop ``flavor`` and ``resource``."""
    samples: dict[str, list[TreeSample]] = {metric: [] for metric, _ in TREE_GAUGES.values()}
    for node in reports:
        kind = node.id.kind
        owner: tuple[str, ...] = (node.id.name,)
        if kind == "queue":
            owner = (node.parent.name if node.parent else "", node.id.name)
        amounts: dict[str, Mapping[Dim, int | None]] = {
            "nominal": node.nominal,
            "borrowing_limit": {d: lim.borrowing_limit for d, lim in node.limits.items()},
            "lending_limit": {d: lim.lending_limit for d, lim in node.limits.items()},
            "borrowed": node.borrowed,
            "usage": node.usage,
            "quota": node.quota,
        }
        for quantity, by_dim in amounts.items():
            if (kind, quantity) not in TREE_GAUGES:
                continue
            rows = samples[TREE_GAUGES[(kind, quantity)][0]]
            for dim, amount in by_dim.items():
                if amount is not None:
                    rows.append(((*owner, *dim_labels(dim)), dim_value(dim, amount)))
        samples[TREE_GAUGES[(kind, "share")][0]].append((owner, float(node.share)))
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
        names = {metric for metric, _ in TREE_GAUGES.values()}
        tree = {
            family.name: family
            for family in families
            if isinstance(family, GaugeMetricFamily) and family.name in names
        }
        if self._metrics.leading:
            admission = self._metrics.admission
            for (queue, reason), count in sorted(pending_counts(admission).items()):
                pending.add_metric([queue, reason], count)
            for name, samples in usage_samples(admission).items():
                for queue, label, value in samples:
                    gauges[name].add_metric([queue, label], value)
            for metric, rows in tree_samples(admission.tree_report()).items():
                for labels, value in rows:
                    tree[metric].add_metric(list(labels), value)
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
        families: list[Metric] = [pending, *gauges.values(), *_tree_families()]
        return families, pending, gauges


def _tree_families() -> list[GaugeMetricFamily]:
    """The queue-tree gauges of :func:`tree_samples`, empty."""
    out: list[GaugeMetricFamily] = []
    for (kind, quantity), (metric, text) in TREE_GAUGES.items():
        labels = ["cohort", "cluster_queue"] if kind == "queue" else ["cohort"]
        if quantity != "share":
            labels += ["flavor", "resource"]
        out.append(GaugeMetricFamily(metric, text, labels=labels))
    return out
