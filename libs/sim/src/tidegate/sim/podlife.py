"""What a kubelet does with a bound pod, as pure decisions: the next status to write, and when.

One implementation of the pod lifecycle, shared by the simulator's kubelets
(:mod:`tidegate.sim.kubelet`, writing through the in-process API server) and the node agent
(``tidegate nodes``, writing to any cluster over HTTP). Both only carry out the
:data:`Step` that :func:`next_step` returns for a pod; neither decides anything itself.

The rules: a pod bound to a node becomes Running (conditions, start time, container statuses,
pod and host IPs). A pod annotated ``tidegate.io/sim-duration-seconds: "<s>"`` runs for that
many simulated seconds (wall time × ``time_scale``); then it exits with the code in
``tidegate.io/sim-exit-code`` (default 0) and, following its ``restartPolicy``, becomes
Succeeded or Failed, or is restarted (``restartCount`` + 1). Without the annotation it runs
until deleted. A pod being deleted gracefully is removed (deleted with grace 0) once its grace
period, scaled by ``time_scale``, has passed.

Times are wall-clock seconds since the epoch (``time.time()``); nothing here reads a clock.
"""

import hashlib
from dataclasses import dataclass
from typing import Final, Literal

from tidegate.sim.errors import JsonObject
from tidegate.sim.names import parse_rfc3339, rfc3339
from tidegate.sim.pods import set_condition

DURATION_ANNOTATION: Final = "tidegate.io/sim-duration-seconds"
EXIT_CODE_ANNOTATION: Final = "tidegate.io/sim-exit-code"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Nothing:
    """Nothing to do now or later (not bound, finished, or running until deleted)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do before wall time ``at``; ask again then."""

    at: float


@dataclass(frozen=True, slots=True)
class WriteStatus:
    """Write ``status`` (the pod's whole new status) through the pods/status subresource."""

    status: JsonObject
    transition: Literal["run", "restart", "finish", "kill"]
    """What the write does: start the pod, restart its containers, finish it, or mark it
    Failed after its containers were killed for a deletion."""
    started: float | None
    """When the (re)started containers started: remember it for the next decision; None
    (after finishing) means forget it."""
    due: float | None
    """When the containers will exit (ask again then), or None when they run until deleted."""


@dataclass(frozen=True, slots=True)
class Remove:
    """The grace period of a deletion is over: delete the pod with grace period 0."""


Step = Nothing | Wait | WriteStatus | Remove
"""What to do with one pod now."""


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def next_step(
    pod: JsonObject, *, started: float | None, now: float, time_scale: float = 1.0
) -> Step:
    """The next thing a kubelet does with ``pod`` at wall time ``now``.

    ``started`` is when its containers last started, as remembered by the caller from an
    earlier :class:`WriteStatus`; None when unknown (the containers' ``startedAt`` in the
    pod's status is used then). The caller checks that the pod's node is its own and Ready.
    """
    spec = _dict(pod.get("spec"))
    if not spec.get("nodeName"):
        return Nothing()
    metadata = _dict(pod.get("metadata"))
    status = _dict(pod.get("status"))
    phase = status.get("phase")
    if metadata.get("deletionTimestamp"):
        due = deletion_due(pod, now=now, time_scale=time_scale)
        if now < due:
            return Wait(due)
        if phase not in TERMINAL_PHASES:
            # A kubelet records a deleted pod's end (phase Failed) before removing it: a Job
            # with a podFailurePolicy replaces a pod only once it is terminal.
            return WriteStatus(
                status=killed_status(pod, now=now), transition="kill", started=None, due=now
            )
        return Remove()
    if phase in TERMINAL_PHASES:
        return Nothing()
    duration = duration_seconds(pod, time_scale=time_scale)
    if phase != "Running":
        return WriteStatus(
            status=running_status(pod, now=now),
            transition="run",
            started=now,
            due=None if duration is None else now + duration,
        )
    if duration is None:
        return Nothing()
    if started is None:
        started = started_at(pod)
    if started is None:
        started = now
    due = started + duration
    if now < due:
        return Wait(due)
    if restarts_after(pod, exit_code(pod)):
        return WriteStatus(
            status=restarted_status(pod, now=now),
            transition="restart",
            started=now,
            due=now + duration,
        )
    return WriteStatus(
        status=finished_status(pod, now=now), transition="finish", started=None, due=None
    )


def duration_seconds(pod: JsonObject, *, time_scale: float = 1.0) -> float | None:
    """Wall seconds the pod's containers run (the duration annotation × ``time_scale``), or None
    when they run until deleted (no annotation, or one that is not a number)."""
    raw = _dict(_dict(pod.get("metadata")).get("annotations")).get(DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        seconds = float(str(raw))
    except ValueError:
        return None
    if seconds != seconds:  # NaN
        return None
    return max(seconds, 0.0) * time_scale


def exit_code(pod: JsonObject) -> int:
    """The code the containers exit with: the exit-code annotation, 0 without it, 1 if it is
    not an integer."""
    annotations = _dict(_dict(pod.get("metadata")).get("annotations"))
    try:
        return int(str(annotations.get(EXIT_CODE_ANNOTATION, "0")))
    except ValueError:
        return 1


def restarts_after(pod: JsonObject, code: int) -> bool:
    """Whether the kubelet restarts the containers after they exit with ``code``
    (``restartPolicy`` Always, or OnFailure and a non-zero code; the default is Always)."""
    policy = _dict(pod.get("spec")).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def deletion_due(pod: JsonObject, *, now: float, time_scale: float = 1.0) -> float:
    """Wall time at which a gracefully deleted pod is removed: when the deletion was requested
    plus its grace period scaled by ``time_scale`` (``now`` if the timestamp is unreadable)."""
    metadata = _dict(pod.get("metadata"))
    grace = metadata.get("deletionGracePeriodSeconds")
    grace_seconds = float(grace) if isinstance(grace, int) else 0.0
    try:
        deadline = parse_rfc3339(str(metadata["deletionTimestamp"]))
    except (KeyError, ValueError):
        return now
    requested = deadline - grace_seconds
    return requested + grace_seconds * time_scale


def started_at(pod: JsonObject) -> float | None:
    """When the pod's running containers started, from their status, or None."""
    for item in _list(_dict(pod.get("status")).get("containerStatuses")):
        running = _dict(_dict(_dict(item).get("state")).get("running"))
        if running.get("startedAt"):
            try:
                return parse_rfc3339(str(running["startedAt"]))
            except ValueError:
                return None
    return None


def pod_ip(uid: str) -> str:
    """The pod's IP, derived from its uid (10.0.0.0/8, never a network or broadcast address)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{1 + digest[2] % 254}"


def host_ip(node: str) -> str:
    """The node's IP, derived from its name (192.168.0.0/16)."""
    digest = hashlib.sha256(node.encode()).digest()
    return f"192.168.{digest[0]}.{1 + digest[1] % 254}"


def _condition(kind: str, status: str, now: str, reason: str | None = None) -> JsonObject:
    condition: JsonObject = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    return condition


def _container_status(container: object, uid: str, started: str, *, restarts: int) -> JsonObject:
    spec = _dict(container)
    name = str(spec.get("name"))
    image = str(spec.get("image"))
    return {
        "name": name,
        "image": image,
        "imageID": f"sim://{image}",
        "containerID": f"sim://{uid}/{name}",
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": started}},
    }


def running_status(pod: JsonObject, *, now: float) -> JsonObject:
    """The status of ``pod`` once its containers run (phase Running, IPs, conditions)."""
    metadata = _dict(pod.get("metadata"))
    spec = _dict(pod.get("spec"))
    status = dict(_dict(pod.get("status")))
    stamp = rfc3339(now)
    uid = str(metadata.get("uid"))
    status["phase"] = "Running"
    status["startTime"] = status.get("startTime") or stamp
    status["hostIP"] = host_ip(str(spec.get("nodeName")))
    status["hostIPs"] = [{"ip": status["hostIP"]}]
    status["podIP"] = pod_ip(uid)
    status["podIPs"] = [{"ip": status["podIP"]}]
    status["containerStatuses"] = [
        _container_status(c, uid, stamp, restarts=0) for c in _list(spec.get("containers"))
    ]
    for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
        set_condition(status, _condition(kind, "True", stamp))
    set_condition(status, _condition("PodScheduled", "True", stamp))
    return status


def restarted_status(pod: JsonObject, *, now: float) -> JsonObject:
    """The status after the containers exited and were started again (``restartCount`` + 1)."""
    metadata = _dict(pod.get("metadata"))
    spec = _dict(pod.get("spec"))
    status = dict(_dict(pod.get("status")))
    statuses = [_dict(s) for s in _list(status.get("containerStatuses"))]
    restarts = int(str(statuses[0].get("restartCount", 0))) + 1 if statuses else 1
    uid = str(metadata.get("uid"))
    status["containerStatuses"] = [
        _container_status(c, uid, rfc3339(now), restarts=restarts)
        for c in _list(spec.get("containers"))
    ]
    return status


def killed_status(pod: JsonObject, *, now: float) -> JsonObject:
    """The status of a pod whose containers were killed for its deletion: Failed, each
    container terminated with exit code 137 (a still-pending pod gets phase Failed only)."""
    status = finished_status(pod, now=now)
    status["phase"] = "Failed"
    for container in _list(status.get("containerStatuses")):
        terminated = _dict(_dict(_dict(container).get("state")).get("terminated"))
        terminated.update({"exitCode": 137, "reason": "Error"})
    return status


def finished_status(pod: JsonObject, *, now: float) -> JsonObject:
    """The status after the containers exited for good: Succeeded (code 0) or Failed."""
    code = exit_code(pod)
    status = dict(_dict(pod.get("status")))
    stamp = rfc3339(now)
    succeeded = code == 0
    status["phase"] = "Succeeded" if succeeded else "Failed"
    reason = "Completed" if succeeded else "Error"
    status["containerStatuses"] = [
        {
            **_dict(s),
            "ready": False,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": _dict(_dict(_dict(s).get("state")).get("running")).get(
                        "startedAt", stamp
                    ),
                    "finishedAt": stamp,
                }
            },
        }
        for s in _list(status.get("containerStatuses"))
    ]
    for kind in ("Ready", "ContainersReady"):
        set_condition(status, _condition(kind, "False", stamp, "PodCompleted"))
    set_condition(status, _condition("PodReadyToStartContainers", "False", stamp))
    return status
