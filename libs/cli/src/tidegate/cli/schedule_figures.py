"""How well a run used the GPUs and how long its workloads waited: the figures that show what
reservations and backfill change (docs/reservations.md, "Measured").

A :class:`Timeline` is what a run saw: the cluster's nodes (GPUs and topology path), the gangs
with their submission and first start, and snapshots of the free GPUs per node and of the gangs
waiting at that moment. :func:`schedule_figures` turns it into

- **utilization**: allocated GPUs over total, time-averaged (each snapshot holds until the
  next one, the last until ``end``);
- **waits** of the big gangs (p50, max) and of the small ones (p50, p99, max), a gang's wait
  being submission to first start, or submission to ``end`` (and counted as never started)
  for one that never started;
- **fragmentation**: free GPUs no waiting gang could use, time-averaged. A node's free GPUs are
  usable when some waiting gang fits one pod on it and the whole gang fits the free pod slots
  of the node's domain at the gang's required level (the whole cluster when it requires none);
  the rest is free in domains too small for any waiting gang. With nothing waiting, free GPUs
  are idle, not fragmented (0).

GPUs only (CPU and memory are not checked, nor card models); pure, no I/O, used by
``tidegate demo``'s report and ``bench/e2e.py``.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

JsonObject = dict[str, object]

BIG_GPUS = 128
"""A gang of at least this many GPUs counts as big (more than a rack of 64 in the demo)."""


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of ascending ``ordered`` (not empty)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Gang:
    """One workload of the run: its size, where it must sit, when it came and first started."""

    key: str
    pods: int
    gpus_per_pod: int
    submitted_at: float
    started_at: float | None = None
    """First start (admission); None when it never started."""
    required_level: str | None = None
    """The topology level its pods must share one domain of (None: anywhere)."""

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True)
class Snapshot:
    """One moment: the free GPUs of each node and the keys of the gangs waiting then."""

    at: float
    free: Mapping[str, int]
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True)
class Timeline:
    """What a run saw (see the module docstring)."""

    nodes: Mapping[str, Mapping[str, str]]
    """Per node, its topology path: level -> domain value, widest level first."""
    gpus: Mapping[str, int]
    """Per node, its allocatable GPUs."""
    gangs: Sequence[Gang]
    snapshots: Sequence[Snapshot]
    end: float
    levels: Sequence[str] = field(default_factory=tuple)
    """The topology levels, widest first (from the nodes when empty)."""

    @property
    def total_gpus(self) -> int:
        """GPUs of the cluster."""
        return sum(self.gpus.values())


def _levels(timeline: Timeline) -> list[str]:
    if timeline.levels:
        return list(timeline.levels)
    found: list[str] = []
    for path in timeline.nodes.values():
        found.extend(level for level in path if level not in found)
    return found


def _domain(path: Mapping[str, str], levels: Sequence[str], level: str | None) -> tuple[str, ...]:
    """A node's domain at ``level``: its full path down to that level; () (the whole cluster)
    for no level or one the cluster does not have."""
    if level is None or level not in levels:
        return ()
    depth = levels.index(level) + 1
    return tuple(path.get(name, "") for name in levels[:depth])


def _domains_by_level(timeline: Timeline) -> Callable[[str | None], dict[str, tuple[str, ...]]]:
    """Each node's domain at a level (computed once per level)."""
    levels = _levels(timeline)
    cache: dict[str | None, dict[str, tuple[str, ...]]] = {}

    def at(level: str | None) -> dict[str, tuple[str, ...]]:
        if level not in cache:
            cache[level] = {
                node: _domain(path, levels, level) for node, path in timeline.nodes.items()
            }
        return cache[level]

    return at


def fragmented_gpus(
    timeline: Timeline,
    snapshot: Snapshot,
    domains: Callable[[str | None], dict[str, tuple[str, ...]]] | None = None,
) -> int:
    """Free GPUs at ``snapshot`` that no waiting gang could use (0 when nothing waits)."""
    gangs = {g.key: g for g in timeline.gangs}
    waiting = [gangs[key] for key in snapshot.waiting if key in gangs]
    free = {node: max(0, snapshot.free.get(node, 0)) for node in timeline.nodes}
    if not waiting:
        return 0
    domains_at = domains if domains is not None else _domains_by_level(timeline)
    # A domain that fits a gang of some GPUs per pod and level fits every smaller one of the
    # same kind: only the fewest pods per (GPUs per pod, level) matter. A gang asking no GPU
    # uses none of the free ones.
    fewest: dict[tuple[int, str | None], int] = {}
    for gang in waiting:
        if gang.gpus_per_pod > 0:
            kind = (gang.gpus_per_pod, gang.required_level)
            fewest[kind] = min(gang.pods, fewest.get(kind, gang.pods))
    usable: set[str] = set()
    for (per_pod, level), pods in fewest.items():
        node_domains = domains_at(level)
        slots: dict[tuple[str, ...], int] = {}
        for node, domain in node_domains.items():
            slots[domain] = slots.get(domain, 0) + free[node] // per_pod
        usable.update(
            node
            for node, domain in node_domains.items()
            if free[node] >= per_pod and slots[domain] >= pods
        )
    return sum(free.values()) - sum(free[node] for node in usable)


def _time_average(values: Sequence[tuple[float, float]], end: float) -> float | None:
    """The time-weighted mean of a step function given as (time, value) points in time order,
    each value holding until the next point and the last one until ``end``."""
    total = 0.0
    span = 0.0
    for index, (at, value) in enumerate(values):
        until = values[index + 1][0] if index + 1 < len(values) else max(end, at)
        total += value * (until - at)
        span += until - at
    if span <= 0:
        return values[-1][1] if values else None
    return total / span


@dataclass(frozen=True)
class Waits:
    """Waits until first start of a set of gangs, in the run's seconds."""

    waits: tuple[float, ...]
    """Ascending; a gang that never started counts submission to the end of the run."""
    never_started: int

    def quantile(self, q: float) -> float | None:
        """The nearest-rank quantile (None without gangs)."""
        return nearest_rank(self.waits, q) if self.waits else None

    def to_json(self) -> JsonObject:
        """count, never_started, p50, p99, max."""
        return {
            "count": len(self.waits),
            "never_started": self.never_started,
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
            "max": self.waits[-1] if self.waits else None,
        }


def waits(gangs: Sequence[Gang], end: float) -> Waits:
    """The waits of ``gangs``; one that never started waits until ``end``."""
    values = sorted(
        (g.started_at if g.started_at is not None else max(end, g.submitted_at)) - g.submitted_at
        for g in gangs
    )
    return Waits(tuple(values), sum(1 for g in gangs if g.started_at is None))


def schedule_figures(timeline: Timeline, *, big_gpus: int = BIG_GPUS) -> JsonObject:
    """Utilization, waits of big and small gangs, and fragmentation of ``timeline`` (see the
    module docstring), as a JSON-ready object."""
    total = timeline.total_gpus
    snapshots = sorted(timeline.snapshots, key=lambda s: s.at)
    allocated = [
        (s.at, float(total - sum(max(0, s.free.get(n, 0)) for n in timeline.nodes)))
        for s in snapshots
    ]
    domains = _domains_by_level(timeline)
    fragmented = [(s.at, float(fragmented_gpus(timeline, s, domains))) for s in snapshots]
    mean_allocated = _time_average(allocated, timeline.end)
    mean_fragmented = _time_average(fragmented, timeline.end)
    big = [g for g in timeline.gangs if g.gpus >= big_gpus]
    small = [g for g in timeline.gangs if g.gpus < big_gpus]
    everyone = waits(timeline.gangs, timeline.end)
    return {
        "total_gpus": total,
        "big_gpus": big_gpus,
        "utilization": None if mean_allocated is None or not total else mean_allocated / total,
        "fragmented_gpus": mean_fragmented,
        "big": waits(big, timeline.end).to_json(),
        "small": waits(small, timeline.end).to_json(),
        "max_wait": everyone.waits[-1] if everyone.waits else None,
        "never_started": [g.key for g in timeline.gangs if g.started_at is None],
    }


_ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("GPU utilization (allocated, time-averaged)", ("utilization",), "share"),
    ("big gangs: count", ("big", "count"), "count"),
    ("big gangs: never started", ("big", "never_started"), "count"),
    ("big gangs: wait p50", ("big", "p50"), "seconds"),
    ("big gangs: wait max", ("big", "max"), "seconds"),
    ("small jobs: count", ("small", "count"), "count"),
    ("small jobs: wait p50", ("small", "p50"), "seconds"),
    ("small jobs: wait p99", ("small", "p99"), "seconds"),
    ("small jobs: wait max", ("small", "max"), "seconds"),
    ("longest wait of any", ("max_wait",), "seconds"),
    ("fragmented GPUs (time-averaged)", ("fragmented_gpus",), "gpus"),
)


def _cell(figures: Mapping[str, object], path: tuple[str, ...], kind: str) -> str:
    value: object = figures
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if not isinstance(value, int | float):
        return "-"
    if kind == "share":
        return f"{value:.1%}"
    if kind == "count":
        return f"{value:.0f}"
    if kind == "gpus":
        return f"{value:.1f}"
    return f"{value:.0f} s"


def side_by_side(runs: Mapping[str, Mapping[str, object]]) -> str:
    """The figures of several runs (name -> :func:`schedule_figures`) as one text table, a
    column per run (also valid Markdown)."""
    names = list(runs)
    lines = [
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for title, path, kind in _ROWS:
        cells = " | ".join(_cell(runs[name], path, kind) for name in names)
        lines.append(f"| {title} | {cells} |")
    return "\n".join(lines)
