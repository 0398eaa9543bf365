"""Kueue's scheduler performance scenarios, run through the whole tidegate pipeline.

    python bench/kueue_scenario.py [--scenario tas|baseline | --config generator.yaml]
                                   [--scale 1.0] [--json] [--out FILE]

Reads a generator file of Kueue's scheduler performance test (``--scenario`` takes Kueue's own
copies from ``../shared/data/kueue-perf/``) and runs it on one machine as a user would see it
(:class:`tidegate.cli.stack.LocalStack`): the topology's nodes, one Queue per ClusterQueue in
its cohort, each workload a Job whose pods run for its class's runtime. Prints per class the
time to admission and to all pods running, the wall time, queue usage, CPU and memory per
process and decisions lost or duplicated, beside Kueue's figures and CI thresholds.
Measurements, never assertions; the full scenarios take minutes and both cores, so smoke it
with ``--scale 0.01``.
"""

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from e2e import (  # type: ignore[import-not-found]
    JobTimes,
    Observer,
    bench_stack,
    gated_pods,
    lost_decisions,
    nearest_rank,
    observing,
    process_figures,
    settle,
    submit,
    unreleased_admitted,
)

from tidegate.bus import layout
from tidegate.cli.demo_trace import (
    QueueEntry,
    WorkloadEntry,
    priority_class_object,
    queue_object,
)
from tidegate.cli.stack import LocalStack, StackSettings
from tidegate.kube import NAMESPACES, PRIORITY_CLASSES, QUEUES, KubeClient
from tidegate.kube.resources import ResourceType
from tidegate.model import QuantityError, format_quantity, parse_quantity, subjects
from tidegate.runtime.tool import ToolSettingError, run_tool
from tidegate.sim.kinds import PODS

CLUSTER: Final = "kueuebench"
NAMESPACE: Final = "bench"
"""Every Job's namespace (Kueue's generator makes one per ClusterQueue; one is enough here:
the Job's queue label names its queue)."""
HOSTNAME: Final = "kubernetes.io/hostname"
DATA: Final = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "kueue-perf"
SCENARIOS: Final = ("tas", "baseline")
BASELINE_NODE_CPU: Final = "96"
BASELINE_NODE_MEMORY: Final = "256Gi"
KUEUE_TOPOLOGIES: Final = ResourceType(
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="topologies",
    kind="Topology",
    namespaced=False,
)
TAS_CONSTRAINTS: Final = ("required", "preferred", "balanced")
REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"


class ScenarioError(ValueError):
    """A generator file that cannot be used; the message names the file and the field."""


# ------------------------------------------------------------------------ the generator format


@dataclass(frozen=True)
class WorkloadClass:
    """One workload template of a workloads set (Kueue's ``WorkloadTemplate``)."""

    name: str
    runtime_ms: int
    priority: int
    request_m: int
    """CPU per pod, millicores."""
    pods: int = 1
    tas_constraint: str | None = None
    tas_level: str | None = None
    slice_size: int | None = None


@dataclass(frozen=True)
class WorkloadsSet:
    """``count`` rounds, each creating one workload of every class, one per interval."""

    count: int
    interval_ms: int
    classes: tuple[WorkloadClass, ...]


@dataclass(frozen=True)
class QueuesSet:
    """``count`` ClusterQueues of one class in each cohort of the cohort set."""

    name: str
    count: int
    nominal_m: int
    borrowing_limit_m: int | None
    reclaim_within_cohort: str
    within_cluster_queue: str
    workloads_sets: tuple[WorkloadsSet, ...]


@dataclass(frozen=True)
class CohortSet:
    """``count`` cohorts, each with the queues of every queues set."""

    name: str
    count: int
    queues_sets: tuple[QueuesSet, ...]


@dataclass(frozen=True)
class Level:
    """A topology level: its name, domains per parent domain and node label."""

    name: str
    count: int
    node_label: str


@dataclass(frozen=True)
class Topology:
    """Kueue's TAS topology: levels widest first; the last one is the nodes."""

    name: str
    levels: tuple[Level, ...]
    capacity: Mapping[str, str]

    @property
    def nodes(self) -> int:
        return math.prod(level.count for level in self.levels)


@dataclass(frozen=True)
class Scenario:
    """A whole generator file."""

    cohorts: tuple[CohortSet, ...]
    topology: Topology | None = None
    flavor_label: str | None = None
    """The resource flavor's node label (every node carries it), when the file names one."""
    flavor_name: str | None = None


def _field(raw: Mapping[str, Any], key: str, where: str, kind: type, default: Any = ...) -> Any:
    value = raw.get(key, default)
    if value is ...:
        raise ScenarioError(f"{where}.{key}: missing")
    if value is not default and not isinstance(value, kind):
        raise ScenarioError(f"{where}.{key}: {value!r} is not a {kind.__name__}")
    return value


def _count(raw: Mapping[str, Any], key: str, where: str, *, default: Any = ...) -> int:
    value = _field(raw, key, where, int, default)
    if isinstance(value, bool) or value < (0 if key == "count" else 1):
        raise ScenarioError(f"{where}.{key}: {value!r} must be a positive integer")
    return int(value)


def _cpu(value: object, where: str) -> int:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ScenarioError(f"{where}: {value!r} is not a CPU quantity")
    try:
        return parse_quantity("cpu", value)
    except QuantityError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc


def _list(raw: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    items = raw.get(key)
    if not isinstance(items, list) or not items:
        raise ScenarioError(f"{where}.{key}: must be a non-empty list")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}.{key}[{index}]: must be a mapping")
    return items


def _workload_class(raw: Mapping[str, Any], where: str, levels: set[str]) -> WorkloadClass:
    constraint = _field(raw, "tasConstraint", where, str, None)
    level = _field(raw, "tasLevel", where, str, None)
    if constraint is not None and constraint not in TAS_CONSTRAINTS:
        raise ScenarioError(
            f"{where}.tasConstraint: {constraint!r} is not one of {', '.join(TAS_CONSTRAINTS)}"
        )
    if level is not None and level not in levels:
        raise ScenarioError(
            f"{where}.tasLevel: {level!r} is not a node label of the topology's levels"
        )
    if (constraint is None) != (level is None):
        raise ScenarioError(f"{where}: tasConstraint and tasLevel go together")
    slice_size = _field(raw, "sliceSize", where, int, None)
    if slice_size is not None and slice_size < 1:
        raise ScenarioError(f"{where}.sliceSize: {slice_size} must be at least 1")
    runtime = _field(raw, "runtimeMs", where, int)
    priority = _field(raw, "priority", where, int, 0)
    if runtime < 0:
        raise ScenarioError(f"{where}.runtimeMs: {runtime} is negative")
    return WorkloadClass(
        name=_field(raw, "className", where, str),
        runtime_ms=runtime,
        priority=priority,
        request_m=_cpu(raw.get("request"), f"{where}.request"),
        pods=_count(raw, "podCount", where, default=1),
        tas_constraint=constraint,
        tas_level=level,
        slice_size=slice_size,
    )


def _topology(raw: object, where: str) -> Topology:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: must be a mapping")
    levels: list[Level] = []
    capacity: Mapping[str, str] = {}
    entries = _list(raw, "levels", where)
    for index, entry in enumerate(entries):
        at = f"{where}.levels[{index}]"
        levels.append(
            Level(
                name=_field(entry, "name", at, str),
                count=_count(entry, "count", at),
                node_label=_field(entry, "nodeLabel", at, str),
            )
        )
        if index == len(entries) - 1:
            capacity = {str(k): str(v) for k, v in (entry.get("capacity") or {}).items()}
            if "cpu" not in capacity:
                raise ScenarioError(f"{at}.capacity.cpu: the node level needs a CPU capacity")
            _cpu(capacity["cpu"], f"{at}.capacity.cpu")
    if levels[-1].node_label != HOSTNAME:
        raise ScenarioError(f"{where}.levels: the last level must be {HOSTNAME} (the nodes)")
    return Topology(name=_field(raw, "name", where, str), levels=tuple(levels), capacity=capacity)


def parse_scenario(text: str, *, origin: str = "generator") -> Scenario:
    """Read Kueue's generator format; errors name the file and the field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{origin}: not YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ScenarioError(f"{origin}: must be a mapping with 'cohorts'")
    topology = _topology(raw["topology"], f"{origin}: topology") if "topology" in raw else None
    labels = {level.node_label for level in topology.levels} if topology else set()
    flavor = raw.get("resourceFlavor") or {}
    cohorts: list[CohortSet] = []
    for c, cohort in enumerate(_list(raw, "cohorts", origin)):
        cw = f"{origin}: cohorts[{c}]"
        queue_sets: list[QueuesSet] = []
        for q, qset in enumerate(_list(cohort, "queuesSets", cw)):
            qw = f"{cw}.queuesSets[{q}]"
            sets: list[WorkloadsSet] = []
            for s, wset in enumerate(_list(qset, "workloadsSets", qw)):
                sw = f"{qw}.workloadsSets[{s}]"
                classes = tuple(
                    _workload_class(w, f"{sw}.workloads[{i}]", labels)
                    for i, w in enumerate(_list(wset, "workloads", sw))
                )
                interval = _field(wset, "creationIntervalMs", sw, int)
                if interval < 0:
                    raise ScenarioError(f"{sw}.creationIntervalMs: {interval} is negative")
                sets.append(WorkloadsSet(_count(wset, "count", sw), interval, classes))
            limit = qset.get("borrowingLimit")
            queue_sets.append(
                QueuesSet(
                    name=_field(qset, "className", qw, str),
                    count=_count(qset, "count", qw),
                    nominal_m=_cpu(qset.get("nominalQuota"), f"{qw}.nominalQuota"),
                    borrowing_limit_m=None
                    if limit is None
                    else _cpu(limit, f"{qw}.borrowingLimit"),
                    reclaim_within_cohort=str(qset.get("reclaimWithinCohort") or "Never"),
                    within_cluster_queue=str(qset.get("withinClusterQueue") or "Never"),
                    workloads_sets=tuple(sets),
                )
            )
        cohorts.append(
            CohortSet(
                name=_field(cohort, "className", cw, str),
                count=_count(cohort, "count", cw),
                queues_sets=tuple(queue_sets),
            )
        )
    return Scenario(
        cohorts=tuple(cohorts),
        topology=topology,
        flavor_label=str(flavor["nodeLabel"]) if "nodeLabel" in flavor else None,
        flavor_name=str(flavor["name"]) if "name" in flavor else None,
    )


def load_scenario(path: Path) -> Scenario:
    """A generator file read and parsed."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from exc
    return parse_scenario(text, origin=str(path))


# ------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlannedQueue:
    """A ClusterQueue of the scenario, as a tidegate Queue."""

    name: str
    cohort: str
    nominal_m: int
    borrowing_limit_m: int | None
    reclaim_within_cohort: str
    within_cluster_queue: str

    def spec(self, topology: str | None) -> dict[str, object]:
        """The Queue's spec: cohort, nominal quota and borrowing limit on the CPU, Kueue's
        preemption policies, and the hard ceiling nominal + borrowing limit (the most Kueue
        lets a ClusterQueue hold; without a borrowing limit, none)."""
        spec: dict[str, object] = {
            "cohort": self.cohort,
            "nominalQuota": {"cpu": format_quantity("cpu", self.nominal_m)},
            "preemption": {
                "reclaimWithinCohort": self.reclaim_within_cohort,
                "withinClusterQueue": self.within_cluster_queue,
            },
        }
        if self.borrowing_limit_m is not None:
            spec["borrowingLimit"] = {"cpu": format_quantity("cpu", self.borrowing_limit_m)}
            spec["capability"] = {
                "cpu": format_quantity("cpu", self.nominal_m + self.borrowing_limit_m)
            }
        if topology is not None:
            spec["topology"] = topology
        return spec


@dataclass(frozen=True)
class PlannedJob:
    """One workload of the scenario: a Job created ``at`` seconds after the start."""

    name: str
    klass: WorkloadClass
    queue: str
    cohort: str
    at: float

    @property
    def pods(self) -> int:
        return self.klass.pods

    @property
    def cpu_m(self) -> int:
        """CPU of the whole workload, millicores."""
        return self.klass.pods * self.klass.request_m

    def entry(self) -> WorkloadEntry:
        """The Job as the demo's trace machinery builds it (pods run ``runtimeMs``)."""
        return WorkloadEntry(
            name=self.name,
            queue=self.queue,
            priority_class=priority_class_name(self.klass.priority),
            pods=self.klass.pods,
            requests={"cpu": format_quantity("cpu", self.klass.request_m)},
            duration=self.klass.runtime_ms / 1000,
            template_annotations=tas_annotations(self.klass),
        )


@dataclass(frozen=True)
class Plan:
    """Everything a run creates."""

    queues: tuple[PlannedQueue, ...]
    jobs: tuple[PlannedJob, ...]

    def classes(self) -> list[str]:
        return sorted({job.klass.name for job in self.jobs})


def priority_class_name(priority: int) -> str:
    """The PriorityClass of a workload priority (a name cannot hold a minus sign's meaning)."""
    return f"kueue-bench-{priority}" if priority >= 0 else f"kueue-bench-minus-{-priority}"


def tas_annotations(klass: WorkloadClass) -> dict[str, str]:
    """Kueue's pod-template annotations for a class's topology request (balanced: a
    slice-required topology of ``sliceSize`` pods, as Kueue's generator maps it)."""
    if klass.tas_constraint is None or klass.tas_level is None:
        return {}
    if klass.tas_constraint == "required":
        return {REQUIRED: klass.tas_level}
    if klass.tas_constraint == "preferred":
        return {PREFERRED: klass.tas_level}
    out = {SLICE_REQUIRED: klass.tas_level}
    if klass.slice_size is not None:
        out[SLICE_SIZE] = str(klass.slice_size)
    return out


def scaled(count: int, scale: float) -> int:
    """``count`` × ``scale``, rounded, at least 1 (every class stays measured)."""
    return max(1, round(count * scale))


def plan(scenario: Scenario, *, scale: float = 1.0) -> Plan:
    """The queues and the timed Jobs of a scenario, named as Kueue's generator names them
    (ClusterQueue ``<class>-<set>-<index>-<cohort>``; workload ``<class>-<set>-<round>-<i>``,
    prefixed with its queue here since all share one namespace)."""
    if scale <= 0:
        raise ScenarioError(f"scale: {scale} must be positive")
    queues: list[PlannedQueue] = []
    jobs: list[PlannedJob] = []
    for cset in scenario.cohorts:
        for c in range(cset.count):
            cohort = f"{cset.name}-{c}"
            for q_index, qset in enumerate(cset.queues_sets):
                for index in range(qset.count):
                    queue = PlannedQueue(
                        name=f"{qset.name}-{q_index}-{index}-{cohort}",
                        cohort=cohort,
                        nominal_m=qset.nominal_m,
                        borrowing_limit_m=qset.borrowing_limit_m,
                        reclaim_within_cohort=qset.reclaim_within_cohort,
                        within_cluster_queue=qset.within_cluster_queue,
                    )
                    queues.append(queue)
                    for s, wset in enumerate(qset.workloads_sets):
                        step = 0
                        for round_ in range(scaled(wset.count, scale)):
                            for i, klass in enumerate(wset.classes):
                                step += 1  # Kueue waits one interval before each create
                                jobs.append(
                                    PlannedJob(
                                        name=f"{queue.name}-{klass.name}-{s}-{round_}-{i}",
                                        klass=klass,
                                        queue=queue.name,
                                        cohort=cohort,
                                        at=step * wset.interval_ms / 1000,
                                    )
                                )
    jobs.sort(key=lambda job: (job.at, job.name))
    return Plan(queues=tuple(queues), jobs=tuple(jobs))


def nodes_document(
    scenario: Scenario, *, baseline_nodes: int
) -> tuple[dict[str, object], str | None]:
    """The simulator's node file (``levels``, ``defaults``, ``nodes``) for the scenario's
    topology, and the Topology's name; a scenario without one gets ``baseline_nodes`` flat
    nodes of 96 CPUs and no Topology of its own."""
    labels = (
        {scenario.flavor_label: scenario.flavor_name or "bench"} if scenario.flavor_label else {}
    )
    topology = scenario.topology
    if topology is None:
        return {
            "levels": [HOSTNAME],
            "defaults": {
                "allocatable": {"cpu": BASELINE_NODE_CPU, "memory": BASELINE_NODE_MEMORY},
                "labels": labels,
            },
            "nodes": [{"name": f"node-{n}"} for n in range(baseline_nodes)],
        }, None
    nodes: list[dict[str, object]] = []
    domains = [level.count for level in topology.levels]
    for index in range(topology.nodes):
        path: list[int] = []
        rest = index
        for count in reversed(domains):
            path.append(rest % count)
            rest //= count
        path.reverse()
        node_labels: dict[str, str] = {}
        for depth, level in enumerate(topology.levels[:-1]):
            node_labels[level.node_label] = "-".join(
                f"{topology.levels[d].name}{path[d]}" for d in range(depth + 1)
            )
        name = "-".join(f"{level.name}{p}" for level, p in zip(topology.levels, path, strict=True))
        nodes.append({"name": name, "labels": node_labels})
    return {
        "levels": [level.node_label for level in topology.levels],
        "defaults": {"allocatable": dict(topology.capacity), "labels": labels},
        "nodes": nodes,
    }, topology.name


def topology_object(topology: Topology) -> dict[str, object]:
    """Kueue's Topology object for the scenario's levels."""
    return {
        "apiVersion": f"{KUEUE_TOPOLOGIES.group}/{KUEUE_TOPOLOGIES.version}",
        "kind": "Topology",
        "metadata": {"name": topology.name},
        "spec": {"levels": [{"nodeLabel": level.node_label} for level in topology.levels]},
    }


def quota_bound_s(plan_: Plan) -> float:
    """The shortest wall time the quota allows: the CPU-seconds of work over the nominal
    CPUs of all queues (every queue kept full, from the first create)."""
    nominal = sum(q.nominal_m for q in plan_.queues)
    work = sum(job.cpu_m * job.klass.runtime_ms / 1000 for job in plan_.jobs)
    return round(work / nominal, 1) if nominal else 0.0


# ------------------------------------------------------------------------------ the figures


@dataclass(frozen=True)
class Outcome:
    """What happened to one Job, in seconds: since its create (``to_*``) and as epoch times
    (``held``: when it held its queue's quota, admission to release or its pods' end)."""

    name: str
    klass: str
    queue: str
    cohort: str
    cpu_m: int
    to_admitted_s: float | None
    to_running_s: float | None
    held: tuple[float, float] | None
    stages: tuple[float | None, float | None, float | None] = (None, None, None)
    """Seconds of its quota hold: admission to all pods Running, Running to the pods' end,
    their end to the release."""


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Count, mean, p50 and p99 of ``values`` in seconds (nearest rank)."""
    if not values:
        return {"count": 0, "mean_s": None, "p50_s": None, "p99_s": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return float(nearest_rank(ordered, q))

    return {
        "count": len(ordered),
        "mean_s": round(statistics.fmean(ordered), 3),
        "p50_s": round(at(0.50), 3),
        "p99_s": round(at(0.99), 3),
    }


def class_figures(outcomes: Iterable[Outcome]) -> dict[str, dict[str, Any]]:
    """Per class: Jobs, admitted, time from creation to admission and to all pods Running."""
    by_class: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_class.setdefault(outcome.klass, []).append(outcome)
    return {
        name: {
            "jobs": len(rows),
            "admitted": sum(1 for r in rows if r.to_admitted_s is not None),
            "running": sum(1 for r in rows if r.to_running_s is not None),
            "to_admission": spread([r.to_admitted_s for r in rows if r.to_admitted_s is not None]),
            "to_running": spread([r.to_running_s for r in rows if r.to_running_s is not None]),
        }
        for name, rows in sorted(by_class.items())
    }


def queue_usage(
    outcomes: Iterable[Outcome], nominal_m: Mapping[str, int], *, start: float, end: float
) -> dict[str, float]:
    """Per queue: the CPU its Jobs held (admission to release), averaged over ``start`` →
    ``end``, as % of its nominal quota (Kueue's usage figure)."""
    span = end - start
    held: dict[str, float] = dict.fromkeys(nominal_m, 0.0)
    for outcome in outcomes:
        if outcome.held is None or outcome.queue not in held:
            continue
        begin, finish = max(outcome.held[0], start), min(outcome.held[1], end)
        held[outcome.queue] += outcome.cpu_m * max(0.0, finish - begin)
    return {
        queue: round(100 * total / (nominal_m[queue] * span), 1)
        if span > 0 and nominal_m[queue]
        else 0.0
        for queue, total in sorted(held.items())
    }


def peak_share(outcomes: Iterable[Outcome], pool_m: Mapping[str, int]) -> dict[str, float]:
    """Per cohort: the most CPU its Jobs held at one moment, as % of its pool (the sum of its
    queues' nominal quotas). Above 100, admission let the cohort borrow what it does not have."""
    events: dict[str, list[tuple[float, int]]] = {}
    for outcome in outcomes:
        if outcome.held is not None:
            events.setdefault(outcome.cohort, []).extend(
                ((outcome.held[0], outcome.cpu_m), (outcome.held[1], -outcome.cpu_m))
            )
    out: dict[str, float] = {}
    for cohort, pool in sorted(pool_m.items()):
        level = peak = 0
        # Releases before admissions at the same instant: a handover is not an overlap.
        for _, delta in sorted(events.get(cohort, []), key=lambda e: (e[0], e[1])):
            level += delta
            peak = max(peak, level)
        out[cohort] = round(100 * peak / pool, 1) if pool else 0.0
    return out


def group_of(klass: str) -> str:
    """A class's size group, as Kueue's figures are quoted: ``large-required-rack`` → large."""
    return klass.split("-", 1)[0]


KUEUE_HERE: Final[dict[str, dict[str, Any]]] = {
    "tas": {
        "wall_s": 565,
        "to_admission_mean_s": {"large": (118, 121), "medium": (187, 188), "small": (343, 353)},
        "usage_pct": 79,
        "cpu_s": {"kube-apiserver": 753, "minimalkueue": 147, "etcd": 86, "runner": 61},
        "ci_wall_s": 401,
        "ci_to_admission_mean_s": {"large": (38, 40), "medium": (106, 107), "small": (238, 247)},
    },
    "baseline": {
        "wall_s": 451,
        "to_admission_mean_s": {"large": (45, 45), "medium": (134, 134), "small": (256, 256)},
        "ci_wall_s": 351,
        "ci_to_admission_mean_s": {"large": (17, 17), "medium": (77, 77), "small": (215, 215)},
    },
}
"""Kueue's own harness (minimalkueue on a real API server and etcd, no kube-scheduler, no pods)
on this kind of machine at full scale, and its CI means, as docs/benchmarks.md (Beside Kueue, on
Kueue's own benchmark) quotes them; (low, high) over the classes of a size group."""


def read_thresholds(path: Path) -> dict[str, Any]:
    """Kueue's CI thresholds (``rangespec.yaml``): max wall ms, min usage % per queue class,
    max mean time to admission ms per workload class; {} when the file is absent."""
    if not path.is_file():
        return {}
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not YAML: {exc}") from exc
    return {
        "max_wall_ms": (raw.get("cmd") or {}).get("maxWallMs"),
        "min_usage_pct": dict(raw.get("clusterQueueClassesMinUsage") or {}),
        "max_mean_to_admission_ms": dict(raw.get("wlClassesMaxAvgTimeToAdmissionMs") or {}),
    }


def beside_kueue(
    figures: Mapping[str, Any],
    scenario: str | None,
    thresholds: Mapping[str, Any],
    *,
    comparable: bool = True,
) -> dict[str, Any]:
    """Each headline figure beside Kueue's here, its CI mean and threshold, and the
    target (at most half of Kueue's here), with whether it is met. Kueue's figures are at full
    scale: a run at another scale is not ``comparable`` and says met of nothing."""
    kueue = KUEUE_HERE.get(scenario or "", {})
    rows: dict[str, Any] = {}
    wall = figures.get("wall_s")
    if kueue:
        target = kueue["wall_s"] / 2
        rows["wall_s"] = {
            "tidegate": wall,
            "kueue_here": kueue["wall_s"],
            "kueue_ci_mean": kueue["ci_wall_s"],
            "kueue_ci_threshold": (thresholds.get("max_wall_ms") or 0) / 1000 or None,
            "target": target,
            "met": (wall is not None and wall <= target) if comparable else None,
        }
    limits = thresholds.get("max_mean_to_admission_ms") or {}
    for klass, row in figures.get("classes", {}).items():
        mean = row["to_admission"]["mean_s"]
        here = kueue.get("to_admission_mean_s", {}).get(group_of(klass))
        ci = kueue.get("ci_to_admission_mean_s", {}).get(group_of(klass))
        target = here[0] / 2 if here else None
        rows[f"{klass}.mean_to_admission_s"] = {
            "tidegate": mean,
            "kueue_here": list(here) if here else None,
            "kueue_ci_mean": list(ci) if ci else None,
            "kueue_ci_threshold": limits[klass] / 1000 if klass in limits else None,
            "target": target,
            "met": None if target is None or mean is None or not comparable else mean <= target,
        }
    usage = figures.get("usage_pct_of_nominal", {}).get("mean")
    rows["usage_pct_of_nominal"] = {
        "tidegate": usage,
        "kueue_here": kueue.get("usage_pct"),
        "kueue_ci_threshold": (thresholds.get("min_usage_pct") or {}).get("cq"),
    }
    return rows


# ------------------------------------------------------------------------------- the run


class Following(Observer):  # type: ignore[misc]
    """bench/e2e.py's observer, also noting when each pod finished (Succeeded or Failed)."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: dict[str, dict[str, float]] = {}

    def on_pod(self, event: Any) -> None:
        super().on_pod(event)
        pod = event.obj
        metadata = pod.get("metadata", {})
        if metadata.get("namespace") != NAMESPACE:
            return
        app = metadata.get("labels", {}).get("app", "")
        if app in self.jobs and pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            self.finished.setdefault(app, {}).setdefault(metadata.get("name", ""), time.monotonic())

    def done(self, job: PlannedJob) -> float | None:
        """When the Job's last pod finished, once all have."""
        ends = self.finished.get(job.name, {})
        return max(ends.values()) if len(ends) >= job.pods else None


def outcome(observer: Following, job: PlannedJob) -> Outcome:
    """A Job's times from what the observer saw."""
    times: JobTimes | None = observer.jobs.get(job.name)
    history = observer.history(job.name)
    admitted = next((d.time for d in history if d.kind == "admitted"), None)
    released = next((d.time for d in history if d.kind == "released"), None)
    if times is None or not times.created:
        return Outcome(job.name, job.klass.name, job.queue, job.cohort, job.cpu_m, None, None, None)
    running = times.all_running()
    finished = observer.done(job)
    # The same instant on the epoch clock the decisions are stamped with.
    finished_wall = None if finished is None else times.created_wall + finished - times.created
    ends = [t for t in (released, finished_wall) if t is not None]
    held = (admitted, min(ends) if ends else time.time()) if admitted is not None else None
    running_wall = None if running is None else times.created_wall + running - times.created
    stages = (
        _between(admitted, running_wall),
        _between(running_wall, finished_wall),
        _between(finished_wall, released),
    )
    return Outcome(
        name=job.name,
        klass=job.klass.name,
        queue=job.queue,
        cohort=job.cohort,
        cpu_m=job.cpu_m,
        to_admitted_s=None if admitted is None else max(0.0, admitted - times.created_wall),
        to_running_s=None if running is None else running - times.created,
        held=held,
        stages=stages,
    )


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def hold_figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Where a Job's quota hold goes: admission to all pods Running, the pods' run, their end
    to the release (only Jobs that went through all three)."""
    whole = [o.stages for o in outcomes if None not in o.stages]
    return {
        name: spread([float(stage[i] or 0.0) for stage in whole])
        for i, name in enumerate(("to_running", "running", "to_release"))
    }


async def set_up(kube: KubeClient, plan_: Plan, topology: Topology | None) -> None:
    """The managed namespace, a PriorityClass per priority, Kueue's Topology, the Queues."""
    await kube.create(
        NAMESPACES,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"tidegate.io/managed": "true"}},
        },
    )
    for priority in sorted({job.klass.priority for job in plan_.jobs}):
        await kube.create(
            PRIORITY_CLASSES, priority_class_object(priority_class_name(priority), priority)
        )
    if topology is not None:
        await kube.create(KUEUE_TOPOLOGIES, topology_object(topology))
    name = topology.name if topology is not None else None
    for queue in plan_.queues:
        await kube.create(QUEUES, queue_object(QueueEntry(name=queue.name, spec=queue.spec(name))))


def progress(started: float, observer: Following, plan_: Plan) -> str:
    """One line: how far the run is."""
    jobs = plan_.jobs
    created = sum(1 for j in jobs if (t := observer.jobs.get(j.name)) and t.created)
    admitted = sum(
        1 for j in jobs if any(d.kind == "admitted" for d in observer.seen.get(j.name, []))
    )
    running = sum(
        1 for j in jobs if (t := observer.jobs.get(j.name)) and t.all_running() is not None
    )
    finished = sum(1 for j in jobs if observer.done(j) is not None)
    return (
        f"  {time.monotonic() - started:6.0f} s: created {created}/{len(jobs)}, admitted "
        f"{admitted}, all pods running {running}, finished {finished}; load "
        f"{os.getloadavg()[0]:.2f}"
    )


async def run_scenario(args: argparse.Namespace, scenario: Scenario, plan_: Plan) -> dict[str, Any]:
    """Start everything, create the scenario's objects and Jobs, wait for every Job to finish,
    and collect the figures."""
    with tempfile.TemporaryDirectory(prefix="tidegate-kueue-bench-") as scratch:
        workdir = Path(scratch)
        document, topology_name = nodes_document(scenario, baseline_nodes=args.baseline_nodes)
        nodes_file = workdir / "nodes.yaml"
        nodes_file.write_text(yaml.safe_dump(document))
        settings = StackSettings(
            workdir=workdir,
            cluster=CLUSTER,
            nodes=nodes_file,
            time_scale=1.0,
            ready_timeout_seconds=300,
            extra_env={
                "TIDEGATE_LOG_LEVEL": "WARNING",
                "TIDEGATE_WEBHOOK": "off",
                **dict(item.split("=", 1) for item in args.env),
            },
        )
        started = time.monotonic()
        async with bench_stack(settings) as (stack, kube, bus):
            start_up = round(time.monotonic() - started, 2)
            observer = Following()
            assert stack.sim is not None
            unsubscribe = stack.sim.store.subscribe(PODS.key, observer.on_pod)
            stop = asyncio.Event()
            decisions = observing(
                bus,
                "kueue-bench",
                layout.decisions_stream(CLUSTER),
                subjects.decision_wildcard(CLUSTER),
                observer.on_decision,
                cluster=CLUSTER,
            )
            following = asyncio.gather(decisions.run(stop))
            try:
                await set_up(kube, plan_, scenario.topology)
                # The watcher publishes the Queues and admission reads them before the first
                # Job arrives (a Job naming a queue not yet known would wait for it).
                await asyncio.sleep(args.warmup)
                figures = await load(args, stack, kube, observer, plan_)
                figures["stack_start_s"] = start_up
                figures["nodes"] = len(document["nodes"])  # type: ignore[arg-type]
                figures["topology"] = topology_name
            finally:
                stop.set()
                unsubscribe()
                await following
    return figures


async def load(
    args: argparse.Namespace,
    stack: LocalStack,
    kube: KubeClient,
    observer: Following,
    plan_: Plan,
) -> dict[str, Any]:
    """Create the Jobs on Kueue's schedule, report progress, wait for them, account."""
    started = time.monotonic()
    wall_start = time.time()
    done = asyncio.Event()
    load_at_start = round(os.getloadavg()[0], 2)

    restarts: dict[str, int] = {}

    async def restart_the_dead() -> None:
        """Start again a service whose process exited, as the kubelet would, and count it."""
        for process in stack.dead_services():
            print(
                f"  {process.name} exited with status {process.returncode}; restarting it\n"
                f"{process.log_tail(5)}",
                file=sys.stderr,
                flush=True,
            )
            restarts[process.name] = restarts.get(process.name, 0) + 1
            await stack.start_service(process.name)

    async def report() -> None:
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), args.progress)
            except TimeoutError:
                print(progress(started, observer, plan_), file=sys.stderr, flush=True)
                await restart_the_dead()

    reporter = asyncio.create_task(report())
    lag = await submit(kube, observer, list(plan_.jobs))
    deadline = time.monotonic() + args.drain
    while time.monotonic() < deadline:
        if all(observer.done(job) is not None for job in plan_.jobs):
            break
        await restart_the_dead()
        if time.monotonic() - observer.last_change > args.stall:
            print(f"  no progress for {args.stall:g} s: stalled", file=sys.stderr, flush=True)
            break
        await asyncio.sleep(1.0)  # a scan of 15,000 Jobs: not more often
    done.set()
    await reporter
    finished = [f for job in plan_.jobs if (f := observer.done(job)) is not None]
    wall = (max(finished) - started) if len(finished) == len(plan_.jobs) else None
    await asyncio.sleep(1.0)  # the last decisions reach the observer
    names = [job.name for job in plan_.jobs]
    # Lost or in flight, as bench/e2e.py judges them: admitted Jobs left gated once the
    # pipeline went quiet are lost; a Job ungated without an admission is too.
    state = await settle(observer, names, limit_seconds=args.settle, quiet_seconds=args.quiet)
    still = unreleased_admitted(observer, names)
    lost, released_without = lost_decisions(
        observer, names, outcome=state, gated=await gated_pods(kube)
    )
    outcomes = [outcome(observer, job) for job in plan_.jobs]
    end = wall_start + (wall if wall is not None else time.monotonic() - started)
    nominal = {q.name: q.nominal_m for q in plan_.queues}
    pools: dict[str, int] = {}
    for q in plan_.queues:
        pools[q.cohort] = pools.get(q.cohort, 0) + q.nominal_m
    usage = queue_usage(outcomes, nominal, start=wall_start, end=end)
    peaks = peak_share(outcomes, pools)
    return {
        "jobs": len(plan_.jobs),
        "pods": sum(job.pods for job in plan_.jobs),
        "queues": len(plan_.queues),
        "cohorts": len(pools),
        "wall_s": None if wall is None else round(wall, 1),
        "finished": len(finished),
        "quota_bound_wall_s": quota_bound_s(plan_),
        "create_lag_max_s": round(lag, 3),
        "classes": class_figures(outcomes),
        "usage_pct_of_nominal": {
            "mean": round(statistics.fmean(usage.values()), 1) if usage else None,
            "min": min(usage.values(), default=None),
            "per_queue": usage,
        },
        "cohort_peak_pct_of_pool": peaks,
        "quota_hold": hold_figures(outcomes),
        "cohort_pool_enforced": all(p <= 100.0 for p in peaks.values()),
        "admitted": sum(1 for o in outcomes if o.to_admitted_s is not None),
        "all_running": sum(1 for o in outcomes if o.to_running_s is not None),
        "settle": state,
        "unreleased_after_settle": len(still),
        "decisions_lost": len(lost) + len(released_without),
        "decisions_lost_examples": (lost + released_without)[:5],
        "decisions_duplicated": sum(observer.duplicated(n) for n in names),
        "decisions_on_stream": observer.decisions,
        "pending_reasons": pending_reasons(observer, names),
        "processes": process_figures(stack),
        "service_restarts": restarts,
        "load_avg_1m_at_start": load_at_start,
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
    }


def pending_reasons(observer: Following, names: Iterable[str]) -> dict[str, int]:
    """Pending decisions by reason over the run (why Jobs waited)."""
    reasons: dict[str, int] = {}
    for name in names:
        for d in observer.seen.get(name, []):
            if d.kind == "pending":
                reasons[d.reason] = reasons.get(d.reason, 0) + 1
    return reasons


# ------------------------------------------------------------------------------- output


def print_figures(figures: Mapping[str, Any]) -> None:
    """The figures of a run, readably, beside Kueue's."""
    print(
        f"Kueue scenario {figures['scenario'] or figures['config']} at scale {figures['scale']}: "
        f"{figures['jobs']} Jobs ({figures['pods']} pods) in {figures['queues']} queues of "
        f"{figures['cohorts']} cohorts, {figures['nodes']} nodes"
    )
    print(
        f"  wall {figures['wall_s']} s ({figures['finished']}/{figures['jobs']} finished); the "
        f"quota alone allows {figures['quota_bound_wall_s']} s"
    )
    print(
        f"  {'class':<24} {'jobs':>6} {'admission mean / p50 / p99 s':>30} {'running mean / p50 / p99 s':>30}"
    )
    for klass, row in figures["classes"].items():
        a, r = row["to_admission"], row["to_running"]
        print(
            f"  {klass:<24} {row['jobs']:>6} "
            f"{a['mean_s']!s:>10} / {a['p50_s']!s:>7} / {a['p99_s']!s:>7} "
            f"{r['mean_s']!s:>10} / {r['p50_s']!s:>7} / {r['p99_s']!s:>7}"
        )
    usage = figures["usage_pct_of_nominal"]
    print(f"  usage of nominal quota: mean {usage['mean']} %, lowest queue {usage['min']} %")
    hold = figures.get("quota_hold")
    if hold and hold["running"]["count"]:
        print(
            "  quota held per Job, mean s: admission to all pods Running "
            f"{hold['to_running']['mean_s']}, running {hold['running']['mean_s']}, "
            f"pods' end to release {hold['to_release']['mean_s']}"
        )
    peaks = figures["cohort_peak_pct_of_pool"]
    print(
        f"  cohort peak use of its pool: {max(peaks.values(), default=0)} % "
        + ("" if figures["cohort_pool_enforced"] else "(above 100: the pool was not enforced)")
    )
    print(
        f"  admitted {figures['admitted']}, all pods running {figures['all_running']}; lost "
        f"{figures['decisions_lost']}, duplicated {figures['decisions_duplicated']} "
        f"(settle: {figures['settle']})"
    )
    print(f"  pending decisions by reason: {figures['pending_reasons'] or 'none'}")
    for name, proc in figures["processes"].items():
        print(f"  {name:<18} cpu {proc['cpu_s']} s, peak rss {proc['peak_rss_mib']} MiB")
    print(
        "  beside Kueue (target: at most half of Kueue's here"
        + (")" if figures["comparable_with_kueue"] else "; Kueue's are at full scale, this is not)")
        + ":"
    )
    for name, row in figures["beside_kueue"].items():
        print(
            f"    {name:<44} tidegate {row.get('tidegate')!s:>8}  Kueue here "
            f"{row.get('kueue_here')!s:>10}  CI mean {row.get('kueue_ci_mean')!s:>10}  CI "
            f"threshold {row.get('kueue_ci_threshold')!s:>6}  target {row.get('target')!s:>6}"
            + (f"  {'met' if row['met'] else 'not met'}" if row.get("met") is not None else "")
        )
    print(
        f"  load average at the start {figures['load_avg_1m_at_start']}, after "
        f"{figures['load_avg_after']} on {figures['cpus']} cpus"
    )


def main(argv: list[str] | None = None) -> int:
    """Run a scenario and print (or write) its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--scenario", choices=SCENARIOS, help=f"Kueue's own file from {DATA}")
    which.add_argument("--config", type=Path, help="a generator file in Kueue's format")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of workload counts")
    parser.add_argument(
        "--baseline-nodes",
        type=int,
        default=64,
        help="96-CPU nodes for a scenario without topology",
    )
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds between queues and Jobs")
    parser.add_argument("--drain", type=float, default=1800.0, help="max seconds for all to finish")
    parser.add_argument(
        "--stall",
        type=float,
        default=120.0,
        help="stop waiting after this long without a decision or a pod ungated",
    )
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--quiet", type=float, default=15.0)
    parser.add_argument(
        "--progress", type=float, default=10.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="TIDEGATE_X=VALUE", help="service setting"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.env):
        parser.error("--env takes TIDEGATE_NAME=VALUE")
    name: str | None = None if args.config else (args.scenario or "tas")
    config: Path = args.config or DATA / str(name) / "generator.yaml"
    try:
        scenario = load_scenario(config)
        plan_ = plan(scenario, scale=args.scale)
        thresholds = read_thresholds(config.parent / "rangespec.yaml")
    except ScenarioError as exc:
        parser.error(str(exc))
    if name is None and config.parent.name in SCENARIOS:
        name = config.parent.name
    print(
        f"Kueue scenario {name or config}: {len(plan_.jobs)} Jobs in {len(plan_.queues)} "
        f"queues at scale {args.scale}",
        file=sys.stderr,
        flush=True,
    )
    try:
        figures = run_tool(run_scenario(args, scenario, plan_))
    except ToolSettingError as exc:
        parser.error(str(exc))
    figures = {"scenario": name, "config": str(config), "scale": args.scale, **figures}
    figures["comparable_with_kueue"] = args.scale == 1.0
    figures["beside_kueue"] = beside_kueue(
        figures, name, thresholds, comparable=figures["comparable_with_kueue"]
    )
    figures["cpus"] = len(os.sched_getaffinity(0))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures))
    else:
        print_figures(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
