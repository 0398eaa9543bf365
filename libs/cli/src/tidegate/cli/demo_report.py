"""What ``tidegate demo`` saw, and the report it prints: placements, waits, preemptions, use.

The demo feeds a :class:`DemoRecord` with every decision from the bus, every submission, every
GPU-usage sample (by service type, read from the API server's pods), every replica change of
its HPA-like driver and every finished Job; :func:`render_text`, :func:`render_markdown` and
:func:`to_json` turn it into the report, whose figures (:func:`usage_series`,
:func:`waits_per_queue`, :func:`preemption_losses`, :func:`gang_locality`) are plain functions
of the record. Pure: no I/O, so the report can be tested on a hand-made record; the charts are
drawn from :func:`to_json`'s data by :mod:`tidegate.cli.demo_charts`.
"""

import dataclasses
import itertools
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidegate.cli.schedule_figures import Gang, Snapshot, Timeline, schedule_figures
from tidegate.model import (
    Admitted,
    Message,
    Pending,
    Preempted,
    PreemptRequested,
    Released,
    ReservationDropped,
    Reserved,
    TopologyAssignment,
)
from tidegate.policy.cards import WHOLE_GPU_RESOURCE
from tidegate.policy.queuetree import Dim, NodeReport, lent

JsonObject = dict[str, object]

PERMANENT_REASONS = frozenset(
    {"Invalid", "QueueNotFound", "ExceedsQuota", "CardQuotaExceeded", "TopologyPlacementFailed"}
)
"""Pending reasons that may not change by waiting; the demo does not wait for such workloads
(a quota reason only when nothing else holds the quota: see :func:`permanent`)."""

QUOTA_REASONS = frozenset({"ExceedsQuota", "CardQuotaExceeded"})

_NOTHING_IN_USE = re.compile(r" 0 in use \+ ")


def permanent(reason: str, message: str) -> bool:
    """Whether waiting cannot cure a Pending reason. A quota reason is permanent only when the
    request alone is over the quota ("... 0 in use + 32 requested > card quota 16", the
    message format of docs/queues.md); with something in use, it waits for that to go."""
    if reason in QUOTA_REASONS:
        return _NOTHING_IN_USE.search(message) is not None
    return reason in PERMANENT_REASONS


_SPARK = " ▁▂▃▄▅▆▇█"

SERVICE_TYPES = ("inference", "training")
"""The service types of the tidal design (seed 002), in the order the report shows them."""

DAY_SECONDS = 86400.0


@dataclass(frozen=True)
class UsageSample:
    """GPUs held by the trace's pods at one moment, by service type, as the API server listed
    them: ``running`` pods are bound and Running, ``gated`` ones still carry tidegate's gate."""

    at: float
    running: dict[str, int]
    gated: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GangPlacement:
    """One admission: how many pods, and how many domains of each topology level they span."""

    at: float
    workload: str
    pods: int
    domains: dict[str, int]


@dataclass(frozen=True)
class Scaling:
    """One change of a Deployment's replicas by the demo's HPA-like driver."""

    at: float
    workload: str
    before: int
    after: int
    load: float


@dataclass(frozen=True)
class TeamShare:
    """One queue of a cohort at one moment, in GPUs (``nvidia.com/gpu``): its nominal quota,
    what its admitted workloads hold, what of that it borrows from its cohort, and what of its
    unused nominal the other queues of the cohort use (lent)."""

    cohort: str
    nominal: int
    usage: int
    borrowed: int
    lent: int


@dataclass(frozen=True)
class TeamSample:
    """The queues of every cohort at one moment (queue name → :class:`TeamShare`)."""

    at: float
    queues: dict[str, TeamShare]


@dataclass(frozen=True)
class Reclaim:
    """One preemption that gave lent quota back: the preemptor, the cohort, and per victim
    the Kueue reason (``InCohortReclamation``, …)."""

    at: float
    preemptor: str
    cohort: str | None
    victims: dict[str, str]


@dataclass
class WorkloadRecord:
    """Everything the demo knows about one submitted workload."""

    key: str
    kind: str
    queue: str | None
    pods: int
    gpus_per_pod: int
    submitted_at: float
    admitted_at: list[float] = field(default_factory=list)
    placements: list[str] = field(default_factory=list)
    pending: list[tuple[float, str, str]] = field(default_factory=list)
    preempted_by: list[tuple[float, str]] = field(default_factory=list)
    released: list[tuple[float, str]] = field(default_factory=list)
    finished_at: float | None = None
    service_type: str = "training"
    required_level: str | None = None
    """The topology level its pods must share one domain of, if any."""

    @property
    def state(self) -> str:
        """A one-word summary: Completed, Running, Pending(<reason>), Preempted, Released."""
        if self.finished_at is not None:
            return "Completed"
        last_admit = self.admitted_at[-1] if self.admitted_at else None
        last_preempt = self.preempted_by[-1][0] if self.preempted_by else None
        if last_admit is not None and (last_preempt is None or last_admit > last_preempt):
            return "Admitted"
        if self.pending:
            return f"Pending({self.pending[-1][1]})"
        if last_preempt is not None:
            return "Preempted"
        return "Submitted"

    @property
    def waiting_permanently(self) -> bool:
        """Pending for a reason that waiting will not cure."""
        return (
            not self.admitted_at
            and bool(self.pending)
            and permanent(self.pending[-1][1], self.pending[-1][2])
        )

    @property
    def first_wait(self) -> float | None:
        """Seconds from submission to first admission."""
        return None if not self.admitted_at else self.admitted_at[0] - self.submitted_at


@dataclass
class DemoRecord:
    """The demo's observations, in simulated seconds since its start."""

    total_gpus: int = 0
    workloads: dict[str, WorkloadRecord] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[float, int]] = field(default_factory=list)
    preemptions: list[tuple[float, str, list[str]]] = field(default_factory=list)
    usage: list[UsageSample] = field(default_factory=list)
    gangs: list[GangPlacement] = field(default_factory=list)
    scalings: list[Scaling] = field(default_factory=list)
    day_length: float | None = None
    """Simulated seconds standing for 24 hours, when the trace is a compressed day."""
    teams: list[TeamSample] = field(default_factory=list)
    """The queues of cohorts over time (sampled with GPU use; empty without cohorts)."""
    reclaims: list[Reclaim] = field(default_factory=list)
    """Preemptions that gave a queue its lent quota back."""

    reservations: bool | None = None
    """Whether admission could reserve domains for big gangs (``--reservations``)."""
    levels: list[str] = field(default_factory=list)
    """The topology levels, widest first."""
    node_gpus: dict[str, int] = field(default_factory=dict)
    node_paths: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per node, level -> domain value."""
    free: list[Snapshot] = field(default_factory=list)
    """Free GPUs per node and the Jobs waiting, at each sample."""

    def decision(self, at: float, body: Message) -> str | None:
        """Record one decision; returns the line to print live (None for uninteresting ones)."""
        match body:
            case Admitted():
                self.decisions["admitted"] += 1
                summary = placement_summary(body.assignments)
                if body.replaces is not None:
                    # The same admission placed anew (slots moved off failed nodes, or the
                    # workload resized): neither a new admission nor a new gang placement.
                    return (
                        f"admitted  {body.workload:<28} queue {body.queue:<8} {summary} "
                        f"(re-placed, replaces #{body.replaces})"
                    )
                record = self.workloads.get(body.workload)
                if record is not None:
                    record.admitted_at.append(at)
                    record.placements.append(summary)
                self.gangs.append(
                    GangPlacement(
                        at=at,
                        workload=body.workload,
                        pods=sum(d.count for a in body.assignments.values() for d in a.domains),
                        domains=domains_per_level(body.assignments),
                    )
                )
                return f"admitted  {body.workload:<28} queue {body.queue:<8} {summary}"
            case Pending():
                self.decisions["pending"] += 1
                record = self.workloads.get(body.workload)
                if record is not None:
                    record.pending.append((at, body.reason, body.message))
                return f"pending   {body.workload:<28} {body.reason}: {body.message}"
            case PreemptRequested():
                self.decisions["preempt-requested"] += 1
                return f"preempt?  {body.workload:<28} {body.message}"
            case Preempted():
                self.decisions["preempted"] += 1
                self.preemptions.append((at, body.preemptor, list(body.victims)))
                if body.reclaimed:
                    self.reclaims.append(
                        Reclaim(
                            at=at,
                            preemptor=body.preemptor,
                            cohort=body.cohort,
                            victims=dict(body.reclaimed),
                        )
                    )
                for victim in body.victims:
                    record = self.workloads.get(victim)
                    if record is not None:
                        record.preempted_by.append((at, body.preemptor))
                victims = ", ".join(f"{v} ({body.mode.get(v, 'restart')})" for v in body.victims)
                why = f" - lent quota of cohort {body.cohort} reclaimed" if body.reclaimed else ""
                return f"preempted {body.preemptor:<28} evicted whole: {victims}{why}"
            case Released():
                self.decisions["released"] += 1
                record = self.workloads.get(body.workload)
                if record is not None:
                    record.released.append((at, body.reason))
                return f"released  {body.workload:<28} {body.reason}"
            case Reserved():
                self.decisions["reserved"] += 1
                return f"reserved  {body.workload:<28} {body.message}"
            case ReservationDropped():
                self.decisions["reservation-dropped"] += 1
                return f"unreserve {body.workload:<28} {body.reason}"
            case _:
                return None

    def sample(self, at: float, gpus_in_use: int) -> None:
        """Record how many GPUs running pods hold at ``at``."""
        self.samples.append((at, gpus_in_use))

    def sample_usage(self, sample: UsageSample) -> None:
        """Record GPU use by service type (and the total, for the utilization line)."""
        self.usage.append(sample)
        self.sample(sample.at, sum(sample.running.values()))

    def sample_free(self, at: float, allocated: dict[str, int]) -> None:
        """Record the free GPUs per node (from the GPUs held per node) and the Jobs waiting."""
        waiting = tuple(
            w.key
            for w in self.workloads.values()
            if w.kind == "Job"
            and w.finished_at is None
            and w.state != "Admitted"
            and not w.waiting_permanently
        )
        free = {node: gpus - allocated.get(node, 0) for node, gpus in self.node_gpus.items()}
        self.free.append(Snapshot(at=at, free=free, waiting=waiting))

    @property
    def clock(self) -> float:
        """Day-clock seconds per simulated second (1 unless the trace is a compressed day)."""
        return DAY_SECONDS / self.day_length if self.day_length else 1.0

    def utilization(self) -> tuple[float, float]:
        """Mean and peak share of GPUs held by running pods over the samples."""
        if not self.samples or self.total_gpus == 0:
            return 0.0, 0.0
        shares = [used / self.total_gpus for _, used in self.samples]
        return sum(shares) / len(shares), max(shares)

    def done(self) -> bool:
        """Every Job finished or is waiting for a reason that waiting will not cure."""
        jobs = [w for w in self.workloads.values() if w.kind == "Job"]
        return bool(jobs) and all(w.finished_at is not None or w.waiting_permanently for w in jobs)


def placement_summary(assignments: dict[str, TopologyAssignment]) -> str:
    """'16 pods in tidegate.io/rack b0/r1 x8, b0/r2 x8' — counts per domain one level above the
    narrowest, which is where "close together" shows."""
    parts: list[str] = []
    for assignment in assignments.values():
        total = sum(d.count for d in assignment.domains)
        depth = max(1, len(assignment.levels) - 1)
        per_domain: Counter[str] = Counter()
        for domain in assignment.domains:
            per_domain["/".join(domain.values[:depth])] += domain.count
        level = assignment.levels[depth - 1] if assignment.levels else "?"
        shown = ", ".join(f"{path} x{count}" for path, count in sorted(per_domain.items()))
        parts.append(f"{total} pods in {len(per_domain)} {level} [{shown}]")
    return "; ".join(parts)


def domains_per_level(assignments: dict[str, TopologyAssignment]) -> dict[str, int]:
    """For each topology level, how many distinct domains the pods of all pod sets occupy
    (a domain is its full path from the widest level, so equal rack names in two blocks
    differ)."""
    paths: dict[str, set[tuple[str, ...]]] = {}
    for assignment in assignments.values():
        for domain in assignment.domains:
            if domain.count <= 0:
                continue
            for depth, level in enumerate(assignment.levels, start=1):
                paths.setdefault(level, set()).add(tuple(domain.values[:depth]))
    return {level: len(found) for level, found in paths.items()}


@dataclass(frozen=True)
class Locality:
    """Of ``gangs`` placements of 2 or more pods, ``inside_one`` stayed in one domain."""

    gangs: int
    inside_one: int

    @property
    def share(self) -> float:
        """The share of gangs inside one domain (0 when there were none)."""
        return self.inside_one / self.gangs if self.gangs else 0.0


def gang_locality(record: DemoRecord) -> dict[str, Locality]:
    """Per topology level, how many gang placements (admissions of 2 or more pods) stayed
    inside one domain of that level."""
    gangs = [g for g in record.gangs if g.pods >= 2]
    levels: list[str] = []
    for gang in gangs:
        levels.extend(level for level in gang.domains if level not in levels)
    return {
        level: Locality(
            gangs=len(gangs), inside_one=sum(1 for g in gangs if g.domains.get(level) == 1)
        )
        for level in levels
    }


def usage_series(record: DemoRecord) -> JsonObject:
    """GPU use over time by service type: columns ``at`` (simulated seconds), ``hour`` (of the
    compressed day, or None), ``running`` and ``gated`` (per service type, GPUs)."""
    types = _types(record.usage)
    at = [s.at for s in record.usage]
    return {
        "at": at,
        "hour": [t * 24 / record.day_length for t in at] if record.day_length else None,
        "running": {t: [s.running.get(t, 0) for s in record.usage] for t in types},
        "gated": {t: [s.gated.get(t, 0) for s in record.usage] for t in types},
    }


@dataclass(frozen=True)
class PeriodUsage:
    """Mean GPUs per service type over the samples of one slice ``[start, end)`` of the run."""

    start: float
    end: float
    samples: int
    running: dict[str, float]
    gated: dict[str, float]


def usage_by_period(record: DemoRecord, periods: int = 4) -> list[PeriodUsage]:
    """Mean GPUs per service type in each of ``periods`` equal slices of the run (of the day
    when the trace is a compressed day: 4 slices are 6 hours each)."""
    if not record.usage:
        return []
    span = record.day_length or max(s.at for s in record.usage) or 1.0
    types = _types(record.usage)
    rows: list[PeriodUsage] = []
    for index in range(periods):
        start, end = span * index / periods, span * (index + 1) / periods
        inside = [s for s in record.usage if start <= s.at < end]
        rows.append(
            PeriodUsage(
                start=start,
                end=end,
                samples=len(inside),
                running={t: _mean([s.running.get(t, 0) for s in inside]) for t in types},
                gated={t: _mean([s.gated.get(t, 0) for s in inside]) for t in types},
            )
        )
    return rows


@dataclass(frozen=True)
class QueueWaits:
    """A queue's waits until first admission, in simulated seconds."""

    waits: list[float]
    waiting: int
    """Never admitted, for a reason waiting could cure."""
    refused: int
    """Never admitted, for a reason waiting will not cure (Invalid, QueueNotFound, ...)."""

    @property
    def admitted(self) -> int:
        """Workloads admitted at least once."""
        return len(self.waits)

    @property
    def mean(self) -> float | None:
        """Mean wait of the admitted ones."""
        return statistics.fmean(self.waits) if self.waits else None

    @property
    def median(self) -> float | None:
        """Median wait of the admitted ones."""
        return statistics.median(self.waits) if self.waits else None

    @property
    def max(self) -> float | None:
        """Longest wait of the admitted ones."""
        return max(self.waits) if self.waits else None


def waits_per_queue(record: DemoRecord) -> dict[str, QueueWaits]:
    """Per queue (``-`` for none): the waits until first admission, and how many workloads
    were never admitted."""
    queues: dict[str, list[WorkloadRecord]] = {}
    for workload in record.workloads.values():
        queues.setdefault(workload.queue or "-", []).append(workload)
    return {
        queue: QueueWaits(
            waits=[w.first_wait for w in members if w.first_wait is not None],
            waiting=sum(1 for w in members if not w.admitted_at and not w.waiting_permanently),
            refused=sum(1 for w in members if w.waiting_permanently),
        )
        for queue, members in sorted(queues.items())
    }


@dataclass(frozen=True)
class Loss:
    """One victim of one preemption: its GPUs and how long it had run since its admission."""

    at: float
    preemptor: str
    victim: str
    gpus: int
    ran_seconds: float

    @property
    def gpu_seconds(self) -> float:
        """The work thrown away, in simulated GPU-seconds (an evicted gang starts over)."""
        return self.gpus * self.ran_seconds


def preemption_losses(record: DemoRecord) -> list[Loss]:
    """The work preemption threw away: per victim of each preemption, the GPUs of its last
    placement and the time it had run since its last admission."""
    losses: list[Loss] = []
    for at, preemptor, victims in record.preemptions:
        for victim in victims:
            workload = record.workloads.get(victim)
            if workload is None:
                losses.append(
                    Loss(at=at, preemptor=preemptor, victim=victim, gpus=0, ran_seconds=0)
                )
                continue
            before = [t for t in workload.admitted_at if t <= at]
            placed = [g.pods for g in record.gangs if g.workload == victim and g.at <= at]
            pods = placed[-1] if placed else workload.pods
            losses.append(
                Loss(
                    at=at,
                    preemptor=preemptor,
                    victim=victim,
                    gpus=pods * workload.gpus_per_pod,
                    ran_seconds=at - before[-1] if before else 0.0,
                )
            )
    return losses


def gpu_hours_lost(record: DemoRecord) -> float:
    """GPU-hours preemption threw away, on the day clock when the trace is a compressed day."""
    return sum(loss.gpu_seconds for loss in preemption_losses(record)) * record.clock / 3600


GPU_DIM = Dim("resource", WHOLE_GPU_RESOURCE)


def team_sample(at: float, nodes: Sequence[NodeReport]) -> TeamSample:
    """The queues of cohorts in a :func:`~tidegate.policy.queuetree.report` of the queue tree,
    in GPUs (queues without a cohort are left out)."""
    lent_now = lent(nodes)
    return TeamSample(
        at=at,
        queues={
            node.id.name: TeamShare(
                cohort=node.parent.name,
                nominal=node.nominal.get(GPU_DIM, 0),
                usage=node.usage.get(GPU_DIM, 0),
                borrowed=node.borrowed.get(GPU_DIM, 0),
                lent=lent_now.get(node.id, {}).get(GPU_DIM, 0),
            )
            for node in nodes
            if node.id.kind == "queue" and node.parent is not None
        },
    )


@dataclass(frozen=True)
class TeamPeriod:
    """A cohort queue's mean GPUs used, borrowed and lent over one slice of the run."""

    start: float
    end: float
    usage: float
    borrowed: float
    lent: float


@dataclass(frozen=True)
class TeamSummary:
    """A cohort queue over the run: its nominal, its means per period, its peak borrowing,
    the GPU-hours it borrowed and lent (day clock for a compressed day), and its reclaims:
    ``took_back`` preemptions it made to get lent GPUs back, ``gave_back`` gangs of it taken."""

    cohort: str
    nominal: int
    periods: list[TeamPeriod]
    peak_borrowed: int
    peak_lent: int
    borrowed_gpu_hours: float
    lent_gpu_hours: float
    took_back: int
    gave_back: int


def team_summaries(record: DemoRecord, periods: int = 4) -> dict[str, TeamSummary]:
    """Per queue of a cohort, by name: :class:`TeamSummary` from the record's samples (each
    sample's value held until the next) and its reclaims."""
    if not record.teams:
        return {}
    span = record.day_length or max(t.at for t in record.teams) or 1.0
    names = sorted({name for sample in record.teams for name in sample.queues})
    keyed = {w.key: w.queue for w in record.workloads.values()}
    out: dict[str, TeamSummary] = {}
    for name in names:
        seen = [(t.at, t.queues[name]) for t in record.teams if name in t.queues]
        rows = []
        for index in range(periods):
            start, end = span * index / periods, span * (index + 1) / periods
            inside = [share for at, share in seen if start <= at < end]
            rows.append(
                TeamPeriod(
                    start=start,
                    end=end,
                    usage=_mean([s.usage for s in inside]),
                    borrowed=_mean([s.borrowed for s in inside]),
                    lent=_mean([s.lent for s in inside]),
                )
            )
        borrowed = lent_total = 0.0
        for (at, share), (later, _) in itertools.pairwise(seen):
            borrowed += share.borrowed * (later - at)
            lent_total += share.lent * (later - at)
        out[name] = TeamSummary(
            cohort=seen[-1][1].cohort,
            nominal=seen[-1][1].nominal,
            periods=rows,
            peak_borrowed=max(share.borrowed for _, share in seen),
            peak_lent=max(share.lent for _, share in seen),
            borrowed_gpu_hours=borrowed * record.clock / 3600,
            lent_gpu_hours=lent_total * record.clock / 3600,
            took_back=sum(1 for r in record.reclaims if keyed.get(r.preemptor) == name),
            gave_back=sum(
                1 for r in record.reclaims for victim in r.victims if keyed.get(victim) == name
            ),
        )
    return out


def team_series(record: DemoRecord) -> JsonObject:
    """The cohort queues' GPUs over time: ``at`` and, per queue, ``usage``, ``borrowed`` and
    ``lent`` columns (0 where a sample does not show the queue)."""
    names = sorted({name for sample in record.teams for name in sample.queues})
    empty = TeamShare(cohort="", nominal=0, usage=0, borrowed=0, lent=0)
    return {
        "at": [t.at for t in record.teams],
        "queues": {
            name: {
                column: [getattr(t.queues.get(name, empty), column) for t in record.teams]
                for column in ("usage", "borrowed", "lent")
            }
            for name in names
        },
    }


def schedule_timeline(record: DemoRecord) -> Timeline:
    """The run as a :class:`~tidegate.cli.schedule_figures.Timeline`: the training Jobs (not
    those refused for a reason waiting cannot cure) with a wait from their submission and one
    from each eviction to the admission that follows, and the free GPUs per node at each
    sample, until the last sample."""
    end = max((s.at for s in record.free), default=0.0)
    gangs: list[Gang] = []
    for w in record.workloads.values():
        if w.kind != "Job" or w.waiting_permanently:
            continue
        # A wait from submission to the first admission, and one from each eviction to the
        # admission after it (an evicted gang queues again).
        starts = [(w.key, w.submitted_at)] + [
            (f"{w.key} (evicted at {at:.0f}s)", at) for at, _ in w.preempted_by
        ]
        for key, since in starts:
            started = next((t for t in w.admitted_at if t >= since), None)
            gangs.append(
                Gang(
                    key=key,
                    pods=w.pods,
                    gpus_per_pod=w.gpus_per_pod,
                    submitted_at=since,
                    started_at=started,
                    required_level=w.required_level,
                )
            )
    return Timeline(
        nodes=record.node_paths,
        gpus=record.node_gpus,
        gangs=gangs,
        snapshots=record.free,
        end=end,
        levels=record.levels,
    )


def reservation_figures(record: DemoRecord) -> JsonObject:
    """Utilization, big and small Jobs' waits and fragmentation of the run
    (:func:`tidegate.cli.schedule_figures.schedule_figures`), and whether reservations were on."""
    return {"reservations": record.reservations, **schedule_figures(schedule_timeline(record))}


def _reservation_lines(record: DemoRecord) -> list[str]:
    """The reservation figures in the text report (docs/reservations.md, "Measured")."""
    if not record.free:
        return []
    figures = reservation_figures(record)
    shown = {True: "on", False: "off", None: "?"}[record.reservations]
    lines = [f"reservations {shown}: big gangs (>= {figures['big_gpus']} GPUs) and small Jobs"]
    utilization = figures["utilization"]
    fragmented = figures["fragmented_gpus"]
    lines.append(
        "  GPUs allocated (time-averaged) "
        + (f"{utilization:.1%}" if isinstance(utilization, float) else "-")
        + ", fragmented (free, but fit no waiting Job) "
        + (f"{fragmented:.1f}" if isinstance(fragmented, float) else "-")
    )
    for name, quantiles in (("big", ("p50", "max")), ("small", ("p50", "p99", "max"))):
        row = figures[name]
        assert isinstance(row, dict)
        parts = ", ".join(f"{q} {_seconds(row[q])}s" for q in quantiles)
        lines.append(
            f"  {name:<5} {row['count']:>3} Jobs, {row['never_started']} never started; "
            f"wait {parts}"
        )
    return lines


def _mean(values: list[int]) -> float:
    return statistics.fmean(values) if values else 0.0


def _types(samples: Iterable[UsageSample]) -> list[str]:
    seen = list(SERVICE_TYPES)
    for sample in samples:
        seen.extend(t for t in [*sample.running, *sample.gated] if t not in seen)
    return seen


def sparkline(values: list[float]) -> str:
    """Values in [0, 1] as a row of block characters."""
    return "".join(_SPARK[min(len(_SPARK) - 1, round(v * (len(_SPARK) - 1)))] for v in values)


def render_text(record: DemoRecord, *, width: int = 60) -> str:
    """The human-readable report."""
    lines = ["", "== tidegate demo report =="]
    lines.append(
        f"{'workload':<30} {'queue':<14} {'pods':>4} {'wait s':>7} {'preempted':>9}  state / placement"
    )
    for w in sorted(record.workloads.values(), key=lambda r: r.submitted_at):
        wait = f"{w.first_wait:7.0f}" if w.first_wait is not None else "      -"
        lines.append(
            f"{w.key:<30} {w.queue or '-':<14} {w.pods:>4} {wait} {len(w.preempted_by):>9}  {w.state}"
        )
        if w.placements:
            lines.append(f"{'':<30}   first placed: {w.placements[0]}")
        if w.pending and not w.admitted_at:
            lines.append(f"{'':<30}   why: {w.pending[-1][2]}")
    lines.append("")
    for at, preemptor, victims in record.preemptions:
        lines.append(f"preemption at {at:.0f}s: {preemptor} evicted {', '.join(victims)}")
    mean, peak = record.utilization()
    lines.append(f"GPU utilization ({record.total_gpus} GPUs): mean {mean:.0%}, peak {peak:.0%}")
    if record.samples:
        step = max(1, len(record.samples) // width)
        shares = [
            used / record.total_gpus if record.total_gpus else 0.0
            for _, used in record.samples[::step]
        ]
        lines.append(f"  |{sparkline(shares)}|")
    lines.extend(_tidal_lines(record))
    lines.extend(_team_lines(record))
    lines.extend(_reservation_lines(record))
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(record.decisions.items()))
    lines.append(f"decisions: {counts or 'none'}")
    return "\n".join(lines)


def _period_name(record: DemoRecord, row: PeriodUsage) -> str:
    if record.day_length:
        hours = 24 / record.day_length
        return f"{row.start * hours:02.0f}-{row.end * hours:02.0f}h"
    return f"{row.start:.0f}-{row.end:.0f}s"


def _unit(record: DemoRecord) -> str:
    return "day-clock GPU-hours" if record.day_length else "GPU-hours"


def _tidal_lines(record: DemoRecord) -> list[str]:
    """GPU use by service type per period, waits per queue, losses, locality, scalings."""
    lines: list[str] = []
    if record.usage:
        lines.append("GPUs in use by service type (mean; gated: pods still held by the gate):")
        for row in usage_by_period(record):
            parts = []
            for kind, running in row.running.items():
                gated = row.gated.get(kind, 0.0)
                parts.append(f"{kind} {running:4.0f}" + (f" (+{gated:.0f} gated)" if gated else ""))
            lines.append(f"  {_period_name(record, row):>10}  " + ", ".join(parts))
    if record.scalings:
        ups = sum(1 for s in record.scalings if s.after > s.before)
        lines.append(
            f"autoscaler: {len(record.scalings)} replica changes ({ups} up, "
            f"{len(record.scalings) - ups} down)"
        )
    waits = waits_per_queue(record)
    if waits:
        lines.append("waits until first admission, per queue:")
        for queue, waited in waits.items():
            shown = (
                f"mean {waited.mean:5.0f}s, max {waited.max:5.0f}s"
                if waited.mean is not None and waited.max is not None
                else "none admitted"
            )
            lines.append(
                f"  {queue:<14} {waited.admitted:>3} admitted, {shown}, "
                f"{waited.waiting} still waiting, {waited.refused} refused"
            )
    lines.append(
        f"preemptions: {len(record.preemptions)}, work lost: "
        f"{gpu_hours_lost(record):.1f} {_unit(record)}"
    )
    lines.extend(
        f"gangs inside one {level}: {row.inside_one} of {row.gangs} ({row.share:.0%})"
        for level, row in gang_locality(record).items()
    )
    return lines


def _team_lines(record: DemoRecord) -> list[str]:
    """Per queue of a cohort: GPUs used / borrowed / lent per period, and its reclaims."""
    teams = team_summaries(record)
    if not teams:
        return []
    lines = ["teams sharing a cohort (mean GPUs used / borrowed / lent):"]
    for name, team in teams.items():
        periods = ", ".join(
            f"{_period_name(record, _as_period(p))} {p.usage:.0f}/{p.borrowed:.0f}/{p.lent:.0f}"
            for p in team.periods
        )
        lines.append(f"  {name:<10} cohort {team.cohort}, nominal {team.nominal}: {periods}")
        lines.append(
            f"  {'':<10} borrowed {team.borrowed_gpu_hours:.0f}, lent "
            f"{team.lent_gpu_hours:.0f} {_unit(record)}; took lent GPUs back {team.took_back}x, "
            f"gave back {team.gave_back} gangs"
        )
    for reclaim in record.reclaims:
        victims = ", ".join(f"{v} ({why})" for v, why in reclaim.victims.items())
        lines.append(
            f"reclaim at {reclaim.at:.0f}s in cohort {reclaim.cohort}: {reclaim.preemptor} "
            f"took back {victims}"
        )
    return lines


def _as_period(row: TeamPeriod) -> PeriodUsage:
    return PeriodUsage(start=row.start, end=row.end, samples=0, running={}, gated={})


def _team_markdown(record: DemoRecord) -> list[str]:
    teams = team_summaries(record)
    if not teams:
        return []
    lines = [
        "## Teams sharing a cohort",
        "",
        "Mean GPUs used / borrowed from the cohort / lent to the cohort, per period; "
        f"GPU-hours borrowed and lent ({_unit(record)}); reclaims made and suffered.",
        "",
        "| queue | cohort | nominal | "
        + " | ".join(
            _period_name(record, _as_period(p)) for p in next(iter(teams.values())).periods
        )
        + " | borrowed | lent | took back | gave back |",
        "|---|---|---:|"
        + "---:|" * len(next(iter(teams.values())).periods)
        + "---:|---:|---:|---:|",
    ]
    for name, team in teams.items():
        cells = " | ".join(f"{p.usage:.0f} / {p.borrowed:.0f} / {p.lent:.0f}" for p in team.periods)
        lines.append(
            f"| {name} | {team.cohort} | {team.nominal} | {cells} | "
            f"{team.borrowed_gpu_hours:.0f} | {team.lent_gpu_hours:.0f} | {team.took_back} | "
            f"{team.gave_back} |"
        )
    lines.append("")
    if record.reclaims:
        lines.extend(["| at s | preemptor | cohort | victims (reason) |", "|---:|---|---|---|"])
        lines.extend(
            f"| {r.at:.0f} | {r.preemptor} | {r.cohort or '-'} | "
            + ", ".join(f"{v} ({why})" for v, why in r.victims.items())
            + " |"
            for r in record.reclaims
        )
        lines.append("")
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_markdown(record: DemoRecord, charts: dict[str, str] | None = None) -> str:
    """The report as Markdown (report.md), with the charts (title -> file name) beside it."""
    mean, peak = record.utilization()
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(record.decisions.items()))
    lines = [
        "# tidegate demo report",
        "",
        f"{record.total_gpus} GPUs; utilization mean {mean:.0%}, peak {peak:.0%}; "
        f"{len(record.workloads)} workloads; decisions: {counts or 'none'}.",
        "",
    ]
    for title, name in (charts or {}).items():
        lines.extend([f"![{title}]({name})", ""])
    periods = usage_by_period(record)
    if periods:
        types = _types(record.usage)
        lines.extend(["## GPU use by service type (mean GPUs)", ""])
        lines.append("| period | " + " | ".join(f"{t} running | {t} gated" for t in types) + " |")
        lines.append("|---|" + "---:|---:|" * len(types))
        for row in periods:
            cells = " | ".join(f"{row.running[t]:.0f} | {row.gated[t]:.0f}" for t in types)
            lines.append(f"| {_period_name(record, row)} | {cells} |")
        lines.append("")
    if record.scalings:
        ups = sum(1 for s in record.scalings if s.after > s.before)
        lines.extend(
            [
                f"The autoscaler changed replicas {len(record.scalings)} times ({ups} up, "
                f"{len(record.scalings) - ups} down).",
                "",
            ]
        )
    lines.extend(["## Waits per queue", ""])
    lines.append("| queue | admitted | mean s | median s | max s | still waiting | refused |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    lines.extend(
        f"| {queue} | {row.admitted} | {_seconds(row.mean)} | {_seconds(row.median)} | "
        f"{_seconds(row.max)} | {row.waiting} | {row.refused} |"
        for queue, row in waits_per_queue(record).items()
    )
    losses = preemption_losses(record)
    lines.extend(
        [
            "",
            "## Preemptions",
            "",
            f"{len(record.preemptions)} preemptions; work lost "
            f"{gpu_hours_lost(record):.1f} {_unit(record)} "
            f"({sum(loss.gpu_seconds for loss in losses):.0f} simulated GPU-seconds).",
            "",
        ]
    )
    if losses:
        lines.extend(["| at s | preemptor | victim | GPUs | ran s |", "|---:|---|---|---:|---:|"])
        lines.extend(
            f"| {loss.at:.0f} | {loss.preemptor} | {loss.victim} | {loss.gpus} | "
            f"{loss.ran_seconds:.0f} |"
            for loss in losses
        )
        lines.append("")
    lines.extend(_team_markdown(record))
    lines.extend(["## Gang placement", "", "| level | gangs | inside one domain | share |"])
    lines.append("|---|---:|---:|---:|")
    lines.extend(
        f"| {level} | {row.gangs} | {row.inside_one} | {row.share:.0%} |"
        for level, row in gang_locality(record).items()
    )
    lines.extend(["", "## Workloads", "", "| workload | type | queue | pods | wait s | state |"])
    lines.append("|---|---|---|---:|---:|---|")
    lines.extend(
        f"| {w.key} | {w.service_type} | {w.queue or '-'} | {w.pods} | "
        f"{_seconds(w.first_wait)} | {w.state} |"
        for w in sorted(record.workloads.values(), key=lambda r: r.submitted_at)
    )
    return "\n".join(lines) + "\n"


def to_json(record: DemoRecord) -> JsonObject:
    """The report as a JSON-ready object (written to report.json and used by the e2e tests)."""
    mean, peak = record.utilization()
    return {
        "total_gpus": record.total_gpus,
        "day_length": record.day_length,
        "utilization": {"mean": mean, "peak": peak},
        "usage": usage_series(record),
        "usage_by_period": [dataclasses.asdict(row) for row in usage_by_period(record)],
        "waits_per_queue": {
            queue: {
                "admitted": row.admitted,
                "mean": row.mean,
                "median": row.median,
                "max": row.max,
                "waiting": row.waiting,
                "refused": row.refused,
                "waits": row.waits,
            }
            for queue, row in waits_per_queue(record).items()
        },
        "preemption_losses": {
            "gpu_hours": gpu_hours_lost(record),
            "gpu_hours_unit": _unit(record),
            "victims": [
                {**dataclasses.asdict(loss), "gpu_seconds": loss.gpu_seconds}
                for loss in preemption_losses(record)
            ],
        },
        "gang_locality": {
            level: {"gangs": row.gangs, "inside_one": row.inside_one, "share": row.share}
            for level, row in gang_locality(record).items()
        },
        "scalings": [
            {"at": s.at, "workload": s.workload, "from": s.before, "to": s.after, "load": s.load}
            for s in record.scalings
        ],
        "teams": {
            name: {
                **dataclasses.asdict(team),
                "periods": [dataclasses.asdict(p) for p in team.periods],
            }
            for name, team in team_summaries(record).items()
        },
        "team_usage": team_series(record),
        "reclaims": [dataclasses.asdict(r) for r in record.reclaims],
        "reservation_figures": reservation_figures(record),
        "decisions": dict(record.decisions),
        "preemptions": [
            {"at": at, "preemptor": p, "victims": v} for at, p, v in record.preemptions
        ],
        "workloads": {
            w.key: {
                "kind": w.kind,
                "service_type": w.service_type,
                "queue": w.queue,
                "pods": w.pods,
                "state": w.state,
                "submitted_at": w.submitted_at,
                "admitted_at": w.admitted_at,
                "first_wait": w.first_wait,
                "placements": w.placements,
                "pending_reasons": [reason for _, reason, _ in w.pending],
                "preempted_by": [p for _, p in w.preempted_by],
                "released": [reason for _, reason in w.released],
                "finished_at": w.finished_at,
            }
            for w in record.workloads.values()
        },
    }
