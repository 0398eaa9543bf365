"""Server-side printing: ``meta.k8s.io/v1`` Table answers, so ``kubectl get`` shows columns.

kubectl asks for ``application/json;as=Table;v=v1;g=meta.k8s.io``; the real server answers
with column definitions and one row of cells per object, computed server-side (that is where
``kubectl get pods`` gets READY, STATUS, RESTARTS, AGE). This module renders the columns
kubectl users expect for the built-in kinds served here and a CRD's
``additionalPrinterColumns`` (simple ``.a.b`` and ``.a[*].b`` JSON paths) for custom
resources. Cells are approximations of the real printers, for people reading a terminal;
programs should read objects, not tables.
"""

import time
from collections.abc import Callable
from typing import Final

from tidegate.sim.errors import JsonObject
from tidegate.sim.kinds import ResourceType
from tidegate.sim.names import parse_rfc3339

Cells = list[object]

_NAME: Final[JsonObject] = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name of the object.",
    "priority": 0,
}


def wants_table(accept: str) -> bool:
    """Whether the Accept header asks for a Table first."""
    first = accept.split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def age(obj: JsonObject) -> str:
    """Time since creation, as kubectl prints it (``45s``, ``3m12s``, ``5h``, ``2d``)."""
    stamp = _dict(obj.get("metadata")).get("creationTimestamp")
    try:
        seconds = int(time.time() - parse_rfc3339(str(stamp)))
    except ValueError:
        return "<unknown>"
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _column(name: str, kind: str = "string", priority: int = 0) -> JsonObject:
    return {"name": name, "type": kind, "format": "", "description": name, "priority": priority}


def _pod_cells(pod: JsonObject) -> Cells:
    spec = _dict(pod.get("spec"))
    status = _dict(pod.get("status"))
    statuses = [_dict(s) for s in _list(status.get("containerStatuses"))]
    containers = len(_list(spec.get("containers")))
    ready = sum(1 for s in statuses if s.get("ready") is True)
    restarts = sum(int(str(s.get("restartCount", 0))) for s in statuses)
    phase = str(status.get("phase", "Pending"))
    shown = phase
    if spec.get("schedulingGates"):
        shown = "SchedulingGated"
    elif phase == "Succeeded":
        shown = "Completed"
    elif phase == "Failed":
        shown = "Error"
    if _dict(pod.get("metadata")).get("deletionTimestamp"):
        shown = "Terminating"
    return [
        _dict(pod.get("metadata")).get("name"),
        f"{ready}/{containers}",
        shown,
        restarts,
        age(pod),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_cells(node: JsonObject) -> Cells:
    ready = "Unknown"
    for condition in _list(_dict(node.get("status")).get("conditions")):
        if _dict(condition).get("type") == "Ready":
            ready = "Ready" if _dict(condition).get("status") == "True" else "NotReady"
    if _dict(node.get("spec")).get("unschedulable"):
        ready += ",SchedulingDisabled"
    info = _dict(_dict(node.get("status")).get("nodeInfo"))
    return [
        _dict(node.get("metadata")).get("name"),
        ready,
        "<none>",
        age(node),
        info.get("kubeletVersion", ""),
    ]


def _job_cells(job: JsonObject) -> Cells:
    spec = _dict(job.get("spec"))
    status = _dict(job.get("status"))
    shown = "Running"
    for condition in _list(status.get("conditions")):
        cond = _dict(condition)
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            shown = str(cond.get("type"))
    completions = spec.get("completions")
    total = completions if completions is not None else spec.get("parallelism", 1)
    return [
        _dict(job.get("metadata")).get("name"),
        shown,
        f"{status.get('succeeded', 0)}/{total}",
        age(job),
    ]


def _deployment_cells(deployment: JsonObject) -> Cells:
    spec = _dict(deployment.get("spec"))
    status = _dict(deployment.get("status"))
    return [
        _dict(deployment.get("metadata")).get("name"),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        age(deployment),
    ]


def _replicaset_cells(rs: JsonObject) -> Cells:
    spec = _dict(rs.get("spec"))
    status = _dict(rs.get("status"))
    return [
        _dict(rs.get("metadata")).get("name"),
        spec.get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        age(rs),
    ]


def _namespace_cells(namespace: JsonObject) -> Cells:
    phase = _dict(namespace.get("status")).get("phase", "Active")
    return [_dict(namespace.get("metadata")).get("name"), phase, age(namespace)]


_BUILTIN: Final[dict[str, tuple[list[JsonObject], Callable[[JsonObject], Cells]]]] = {
    "Pod": (
        [
            _NAME,
            _column("Ready"),
            _column("Status"),
            _column("Restarts", "integer"),
            _column("Age"),
            _column("IP", priority=1),
            _column("Node", priority=1),
            _column("Nominated Node", priority=1),
            _column("Readiness Gates", priority=1),
        ],
        _pod_cells,
    ),
    "Node": (
        [_NAME, _column("Status"), _column("Roles"), _column("Age"), _column("Version")],
        _node_cells,
    ),
    "Job": ([_NAME, _column("Status"), _column("Completions"), _column("Age")], _job_cells),
    "Deployment": (
        [
            _NAME,
            _column("Ready"),
            _column("Up-to-date", "integer"),
            _column("Available", "integer"),
            _column("Age"),
        ],
        _deployment_cells,
    ),
    "ReplicaSet": (
        [
            _NAME,
            _column("Desired", "integer"),
            _column("Current", "integer"),
            _column("Ready", "integer"),
            _column("Age"),
        ],
        _replicaset_cells,
    ),
    "Namespace": ([_NAME, _column("Status"), _column("Age")], _namespace_cells),
}


def _json_path(obj: object, path: str) -> object:
    current: list[object] = [obj]
    for part in path.strip(".").replace("[*]", ".[*]").split("."):
        if not part:
            continue
        if part == "[*]":
            current = [item for value in current for item in _list(value)]
        else:
            current = [_dict(value).get(part) for value in current]
    values = [v for v in current if v is not None]
    if not values:
        return None
    if len(values) == 1 and "[*]" not in path:
        return values[0]
    return ",".join(str(v) for v in values)


def _custom(rtype: ResourceType) -> tuple[list[JsonObject], Callable[[JsonObject], Cells]]:
    columns = [
        c for c in rtype.printer_columns if c.get("jsonPath") != ".metadata.creationTimestamp"
    ]
    definitions = [_NAME] + [
        _column(str(c.get("name")), str(c.get("type", "string")), int(str(c.get("priority", 0))))
        for c in columns
    ]
    definitions.append(_column("Age"))

    def cells(obj: JsonObject) -> Cells:
        return [
            _dict(obj.get("metadata")).get("name"),
            *(_json_path(obj, str(c.get("jsonPath", ""))) for c in columns),
            age(obj),
        ]

    return definitions, cells


def _printer(rtype: ResourceType) -> tuple[list[JsonObject], Callable[[JsonObject], Cells]]:
    if rtype.builtin and rtype.kind in _BUILTIN:
        return _BUILTIN[rtype.kind]
    if not rtype.builtin:
        return _custom(rtype)
    return [_NAME, _column("Age")], lambda obj: [_dict(obj.get("metadata")).get("name"), age(obj)]


def _partial(obj: JsonObject) -> JsonObject:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    rtype: ResourceType,
    objects: list[JsonObject],
    list_metadata: JsonObject,
    *,
    headers: bool = True,
) -> JsonObject:
    """A Table of ``objects`` (column definitions omitted when ``headers`` is False)."""
    columns, cells = _printer(rtype)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": columns if headers else [],
        "rows": [{"cells": cells(obj), "object": _partial(obj)} for obj in objects],
    }
