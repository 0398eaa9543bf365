"""Workload traces for ``tidegate demo``: a YAML file of queues and timed workload arrivals.

A trace says what a platform team would set up (priority classes, Queues) and what its users
submit over time (training Jobs, inference Deployments), with the annotations of whichever
system they wrote them for (tidegate, Kueue, KAI, Volcano). This module parses a trace and turns
each entry into the Kubernetes objects the demo creates; it does no I/O besides reading the
file. The format is documented in docs/demo.md; the built-in trace is ``traces/default.yaml``
beside this module.
"""

from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec
import yaml

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


class Trace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole trace."""

    namespace: str = "default"
    priority_classes: dict[str, int] = msgspec.field(default_factory=dict)
    queues: list[QueueEntry] = msgspec.field(default_factory=list)
    workloads: list[WorkloadEntry] = msgspec.field(default_factory=list)
    end_after: float | None = None
    """Stop the demo this many simulated seconds after the start even if work remains."""


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
    return trace


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


def workload_object(entry: WorkloadEntry, namespace: str, *, gate: bool = False) -> JsonObject:
    """The Job (Indexed, all pods at once) or Deployment an entry submits.

    With ``gate`` the pod template carries tidegate's scheduling gate itself, as the gate
    webhook would add it to every pod (for clusters where the webhook is not registered).
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
    if entry.kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "parallelism": entry.pods,
                "completions": entry.pods,
                "completionMode": "Indexed",
                "backoffLimit": 100,
                "template": template,
            },
        }
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
