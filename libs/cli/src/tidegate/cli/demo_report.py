"""What ``tidegate demo`` saw, and the report it prints: placements, waits, preemptions, use.

The demo feeds a :class:`DemoRecord` with every decision from the bus, every submission, every
GPU-usage sample and every finished Job; :func:`render_text` and :func:`to_json` turn it into
the report. Pure: no I/O, so the report can be tested on a hand-made record.
"""

from collections import Counter
from dataclasses import dataclass, field

from tidegate.model import (
    Admitted,
    Message,
    Pending,
    Preempted,
    PreemptRequested,
    Released,
    TopologyAssignment,
)

JsonObject = dict[str, object]

PERMANENT_REASONS = frozenset(
    {"Invalid", "QueueNotFound", "ExceedsQuota", "CardQuotaExceeded", "TopologyPlacementFailed"}
)
"""Pending reasons that will not change by waiting; the demo does not wait for such workloads."""

_SPARK = " ▁▂▃▄▅▆▇█"


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
            not self.admitted_at and bool(self.pending) and self.pending[-1][1] in PERMANENT_REASONS
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

    def decision(self, at: float, body: Message) -> str | None:
        """Record one decision; returns the line to print live (None for uninteresting ones)."""
        match body:
            case Admitted():
                self.decisions["admitted"] += 1
                summary = placement_summary(body.assignments)
                record = self.workloads.get(body.workload)
                if record is not None:
                    record.admitted_at.append(at)
                    record.placements.append(summary)
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
                for victim in body.victims:
                    record = self.workloads.get(victim)
                    if record is not None:
                        record.preempted_by.append((at, body.preemptor))
                victims = ", ".join(f"{v} ({body.mode.get(v, 'restart')})" for v in body.victims)
                return f"preempted {body.preemptor:<28} evicted whole: {victims}"
            case Released():
                self.decisions["released"] += 1
                record = self.workloads.get(body.workload)
                if record is not None:
                    record.released.append((at, body.reason))
                return f"released  {body.workload:<28} {body.reason}"
            case _:
                return None

    def sample(self, at: float, gpus_in_use: int) -> None:
        """Record how many GPUs running pods hold at ``at``."""
        self.samples.append((at, gpus_in_use))

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
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(record.decisions.items()))
    lines.append(f"decisions: {counts or 'none'}")
    return "\n".join(lines)


def to_json(record: DemoRecord) -> JsonObject:
    """The report as a JSON-ready object (written to report.json and used by the e2e tests)."""
    mean, peak = record.utilization()
    return {
        "total_gpus": record.total_gpus,
        "utilization": {"mean": mean, "peak": peak},
        "decisions": dict(record.decisions),
        "preemptions": [
            {"at": at, "preemptor": p, "victims": v} for at, p, v in record.preemptions
        ],
        "workloads": {
            w.key: {
                "kind": w.kind,
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
