"""Workload traces for ``tidegate demo``: a YAML file of queues and timed workload arrivals.

A trace says what a platform team would set up (priority classes, Queues and the Cohorts
they share quota through) and what its users
submit over time (training Jobs, inference Deployments), with the annotations of whichever
system they wrote them for (tidegate, Kueue, KAI, Volcano). This module parses a trace and turns
each entry into the Kubernetes objects the demo creates; it does no I/O besides reading the
file. The format is documented in docs/demo.md; the built-in trace is ``traces/default.yaml``
beside this module.
"""

import itertools
import math
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec
import yaml

from tidegate.kube.read.annotations import Layer, podset_settings
from tidegate.kube.read.keys import TG_MAX_RUNTIME
from tidegate.model.names import ADMISSION_GATE

JsonObject = dict[str, object]

DURATION_ANNOTATION = "tidegate.io/sim-duration-seconds"
QUEUE_LABEL = "tidegate.io/queue"


class TraceError(ValueError):
    """A trace that cannot be used; the message names the file and the field."""


class QueueEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A Queue to create: its name and its spec as in the Queue custom resource."""

    name: str
    spec: dict[str, object] = msgspec.field(default_factory=dict)


class CohortEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A Cohort to create (a node of the queue tree, docs/queues.md): its name and its spec
    as in the Cohort custom resource."""

    name: str
    spec: dict[str, object] = msgspec.field(default_factory=dict)


class Autoscale(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An HPA-like driver for a Deployment: its replicas follow a load curve.

    Every ``every`` simulated seconds the demo computes the replicas the Kubernetes Horizontal
    Pod Autoscaler would want for the load at that moment (:func:`desired_replicas`) and, when
    they differ, sets them through the Deployment's ``scale`` subresource, as the HPA does.
    """

    load: list[tuple[float, float]]
    """``[simulated second, load]`` points, linear in between and flat beyond the ends."""
    target_per_replica: float
    """The load one replica should carry (the HPA's target average value)."""
    min_replicas: int = 1
    max_replicas: int
    every: float = 30.0
    """Seconds (simulated) between two looks, like the HPA's sync period."""


HPA_TOLERANCE = 0.1
"""The HPA's default tolerance: no change while the usage ratio stays within 10 % of 1."""


def load_at(points: list[tuple[float, float]], at: float) -> float:
    """The load of a piecewise-linear curve at ``at`` (flat before the first and after the
    last point)."""
    if not points:
        return 0.0
    if at <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if at <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (at - t0) / (t1 - t0)
    return points[-1][1]


def desired_replicas(autoscale: Autoscale, load: float, current: int) -> int:
    """The HPA's rule for an average-value target: ``ceil(load / target)``, kept at
    ``current`` while the ratio is within the tolerance, and bounded by min and max."""
    if current > 0:
        ratio = load / (current * autoscale.target_per_replica)
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return max(autoscale.min_replicas, min(autoscale.max_replicas, current))
    wanted = math.ceil(load / autoscale.target_per_replica - 1e-9)
    return max(autoscale.min_replicas, min(autoscale.max_replicas, wanted))


class WorkloadEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One submission: at ``at`` simulated seconds, create a Job or Deployment of ``pods`` pods."""

    name: str
    at: float = 0.0
    kind: Literal["Job", "Deployment"] = "Job"
    queue: str | None = None
    priority_class: str | None = None
    pods: int = 1
    requests: dict[str, str | int] = msgspec.field(default_factory=dict)
    duration: float | None = None
    """Simulated seconds each pod runs; None runs until deleted (a service)."""
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    """On the Job/Deployment itself (workload-wide settings, Kueue/KAI/Volcano/tidegate)."""
    template_annotations: dict[str, str] = msgspec.field(default_factory=dict)
    """On the pod template (per-podset settings)."""
    note: str = ""
    """What this entry shows, printed when it is submitted."""
    autoscale: Autoscale | None = None
    """Deployments only: replicas driven by an HPA-like load curve (``pods`` is the start)."""
    max_runtime: float | None = None
    """The runtime it declares, in simulated seconds: the demo writes it as
    ``tidegate.io/max-runtime`` in the services' (wall) seconds. Set from the trace's
    ``declared_runtimes`` rule when absent."""


class DeclaredRuntimes(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the trace's Jobs declare their runtimes (``tidegate.io/max-runtime``), as users of a
    batch system do: each Job with a ``duration`` and no ``max_runtime`` of its own declares
    its duration times ``factor``, rounded up to a multiple of ``round_up_to`` (users ask for
    round figures and more than they need; the declaration is never below the run)."""

    factor: float = 1.5
    round_up_to: float = 25.0
    """Simulated seconds (25 is a quarter of an hour of the demo's 2400-second day)."""


def declared_runtime(duration: float, rule: DeclaredRuntimes) -> float:
    """The runtime a Job of ``duration`` simulated seconds declares under ``rule``."""
    wanted = duration * rule.factor
    return max(rule.round_up_to, math.ceil(wanted / rule.round_up_to - 1e-9) * rule.round_up_to)


def required_level(entry: WorkloadEntry) -> str | None:
    """The topology level an entry's pods must share one domain of (its pod template first,
    then the workload, read as the watcher reads them), or None."""
    layers = (
        Layer("the pod template", {}, entry.template_annotations),
        Layer("the workload", {}, entry.annotations),
    )
    return podset_settings(layers, []).topology.required


class Trace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole trace."""

    namespace: str = "default"
    priority_classes: dict[str, int] = msgspec.field(default_factory=dict)
    queues: list[QueueEntry] = msgspec.field(default_factory=list)
    cohorts: list[CohortEntry] = msgspec.field(default_factory=list)
    """Cohorts the queues share quota through (``spec.cohort`` of a Queue names one)."""
    workloads: list[WorkloadEntry] = msgspec.field(default_factory=list)
    end_after: float | None = None
    """Stop the demo this many simulated seconds after the start even if work remains."""
    day_length: float | None = None
    """Simulated seconds that stand for 24 hours (a compressed day): the report then shows
    the hour of the day and GPU-hours on that clock."""
    declared_runtimes: DeclaredRuntimes | None = None
    """When set, Jobs without a ``max_runtime`` declare one by this rule."""


def load_trace(path: Path | None) -> Trace:
    """Read a trace file (the built-in one when ``path`` is None)."""
    if path is None:
        text = resources.files("tidegate.cli").joinpath("traces/default.yaml").read_text()
        origin = "built-in trace"
    else:
        try:
            text = path.read_text()
        except OSError as exc:
            raise TraceError(f"{path}: {exc.strerror}") from exc
        origin = str(path)
    return parse_trace(text, origin=origin)


def parse_trace(text: str, *, origin: str = "trace") -> Trace:
    """Parse and validate a trace document; errors name the field (``workloads[2].pods``)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TraceError(f"{origin}: not YAML: {exc}") from exc
    try:
        trace = msgspec.convert(raw, Trace)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{origin}: {exc}") from exc
    names: set[str] = set()
    for index, workload in enumerate(trace.workloads):
        where = f"{origin}: workloads[{index}]"
        if workload.pods < 1:
            raise TraceError(f"{where}.pods: must be at least 1, got {workload.pods}")
        if workload.at < 0:
            raise TraceError(f"{where}.at: must not be negative, got {workload.at}")
        if workload.name in names:
            raise TraceError(f"{where}.name: {workload.name!r} appears twice")
        names.add(workload.name)
        if workload.autoscale is not None:
            _check_autoscale(workload, where)
        if workload.max_runtime is not None and workload.max_runtime <= 0:
            raise TraceError(f"{where}.max_runtime: must be positive, got {workload.max_runtime}")
    if trace.day_length is not None and trace.day_length <= 0:
        raise TraceError(f"{origin}: day_length: must be positive, got {trace.day_length}")
    rule = trace.declared_runtimes
    if rule is None:
        return trace
    if rule.factor < 1 or rule.round_up_to <= 0:
        raise TraceError(
            f"{origin}: declared_runtimes: need factor >= 1 (a declaration is never below the "
            f"run) and round_up_to > 0, got {rule.factor} and {rule.round_up_to}"
        )
    return msgspec.structs.replace(
        trace,
        workloads=[
            msgspec.structs.replace(w, max_runtime=declared_runtime(w.duration, rule))
            if w.kind == "Job" and w.duration is not None and w.max_runtime is None
            else w
            for w in trace.workloads
        ],
    )


def _check_autoscale(workload: WorkloadEntry, where: str) -> None:
    scale = workload.autoscale
    assert scale is not None
    if workload.kind != "Deployment":
        raise TraceError(f"{where}.autoscale: only a Deployment scales, not a {workload.kind}")
    if scale.target_per_replica <= 0:
        raise TraceError(f"{where}.autoscale.target_per_replica: must be positive")
    if not 0 <= scale.min_replicas <= scale.max_replicas:
        raise TraceError(
            f"{where}.autoscale: need 0 <= min_replicas <= max_replicas, got "
            f"{scale.min_replicas} and {scale.max_replicas}"
        )
    if scale.every <= 0:
        raise TraceError(f"{where}.autoscale.every: must be positive, got {scale.every}")
    times = [t for t, _ in scale.load]
    if not times or times != sorted(times) or any(v < 0 for _, v in scale.load):
        raise TraceError(
            f"{where}.autoscale.load: [second, load] points in time order, loads not negative"
        )


SERVICE_TYPE_ANNOTATION = "volcano.sh/service.type"


def service_type(entry: WorkloadEntry) -> str:
    """``inference`` or ``training``: Volcano's service-type annotation when set, else by kind
    (a Deployment serves, a Job trains), as in the tidal design (seed 002)."""
    declared = entry.annotations.get(SERVICE_TYPE_ANNOTATION)
    if declared in ("inference", "training"):
        return declared
    return "inference" if entry.kind == "Deployment" else "training"


def priority_class_object(name: str, value: int) -> JsonObject:
    """A scheduling.k8s.io/v1 PriorityClass."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def queue_object(entry: QueueEntry) -> JsonObject:
    """A tidegate.io/v1alpha1 Queue."""
    return {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": entry.name},
        "spec": dict(entry.spec),
    }


def cohort_object(entry: CohortEntry) -> JsonObject:
    """A tidegate.io/v1alpha1 Cohort."""
    return {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": entry.name},
        "spec": dict(entry.spec),
    }


def workload_object(
    entry: WorkloadEntry,
    namespace: str,
    *,
    gate: bool = False,
    per_index_backoff: bool = False,
    time_scale: float = 1.0,
) -> JsonObject:
    """The Job (Indexed, all pods at once) or Deployment an entry submits.

    With ``gate`` the pod template carries tidegate's scheduling gate itself, as the gate
    webhook would add it to every pod (for clusters where the webhook is not registered).
    With ``per_index_backoff`` a Job counts failures per index (``backoffLimitPerIndex``), so
    that a real Job controller replaces an evicted gang after 10 s instead of up to 10 minutes
    (the demo's Jobs; docs/preemption.md). Such a Job keeps a failed pod's finalizer in a
    namespace being deleted: delete it before its namespace. A declared ``max_runtime`` becomes
    ``tidegate.io/max-runtime`` on the workload, times ``time_scale`` (the services count wall
    seconds; the simulator scales the pods' durations the same way).
    """
    labels = {"app": entry.name}
    if entry.queue is not None:
        labels[QUEUE_LABEL] = entry.queue
    template_annotations = dict(entry.template_annotations)
    if entry.duration is not None:
        template_annotations[DURATION_ANNOTATION] = f"{entry.duration:g}"
    pod_spec: JsonObject = {
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {
                    "requests": {k: str(v) for k, v in entry.requests.items()},
                    "limits": {
                        k: str(v) for k, v in entry.requests.items() if k.startswith("nvidia.com/")
                    },
                },
            }
        ],
    }
    if entry.priority_class is not None:
        pod_spec["priorityClassName"] = entry.priority_class
    if gate:
        pod_spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    template: JsonObject = {
        "metadata": {"labels": labels, "annotations": template_annotations},
        "spec": pod_spec,
    }
    metadata: JsonObject = {
        "name": entry.name,
        "namespace": namespace,
        "labels": dict(labels),
        "annotations": dict(entry.annotations),
    }
    if entry.max_runtime is not None and TG_MAX_RUNTIME not in entry.annotations:
        annotations = metadata["annotations"]
        assert isinstance(annotations, dict)
        annotations[TG_MAX_RUNTIME] = f"{entry.max_runtime * time_scale:g}"
    if entry.kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        job_spec: JsonObject = {
            "parallelism": entry.pods,
            "completions": entry.pods,
            "completionMode": "Indexed",
            "backoffLimit": 100,
            # An evicted pod (preemption) is not the Job's failure (Kueue's advice).
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": template,
        }
        if per_index_backoff:
            # The Job controller waits its pod-failure backoff before replacing failed pods,
            # ignored ones included (kubernetes/kubernetes#130881): 10 s doubling per failure,
            # so up to 10 minutes for a whole gang counted together. Counted per index, a gang
            # evicted once waits 10 s.
            job_spec["backoffLimitPerIndex"] = 100
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": entry.pods,
            "selector": {"matchLabels": {"app": entry.name}},
            "template": template,
        },
    }
