"""What the real API server does to pods on create and update: defaults, admission, validation.

Defaulting and admission on create: scheduler name, restart policy, grace period, DNS policy,
the ``not-ready``/``unreachable`` tolerations (DefaultTolerationSeconds), ``spec.priority`` from
the PriorityClass (unknown class → 403, like the Priority admission plugin), the
``PodScheduled=False/SchedulingGated`` condition for gated pods, ``status.qosClass``; and, when
enabled, the tidegate webhook's behaviour: the ``tidegate.io/admission`` gate on managed pods.

Validation on update implements Kubernetes' rules for pods, the ones tidegate depends on:
scheduling gates may only be removed; while a pod is gated its nodeSelector may only gain keys;
once it is not gated (and for everything else) the spec is immutable except container images,
``activeDeadlineSeconds``, added tolerations and the termination grace period. Functions
return lists of (field path, message) causes; the caller turns them into a 422.
"""

from collections.abc import Mapping
from typing import Final

from tidegate.model.names import ADMISSION_GATE
from tidegate.model.quantity import QuantityError, format_quantity, parse_quantity
from tidegate.sim.errors import JsonObject
from tidegate.sim.names import label_name_problem, qualified_name_problem, rfc3339

QUEUE_KEYS: Final = (
    "tidegate.io/queue",
    "kueue.x-k8s.io/queue-name",
    "kai.scheduler/queue",
    "scheduling.volcano.sh/queue-name",
)
"""Label/annotation keys that make a pod tidegate-managed."""

MANAGED_NAMESPACE_LABEL: Final = "tidegate.io/managed"
"""A namespace labelled ``tidegate.io/managed=true`` has all its pods managed."""

DEFAULT_TOLERATION_SECONDS: Final = 300

IMMUTABLE_SPEC_MESSAGE: Final = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)

Cause = tuple[str, str]


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def gate_names(pod: Mapping[str, object]) -> list[str]:
    """Names of the pod's scheduling gates, in order."""
    spec = _dict(pod.get("spec"))
    return [str(_dict(g).get("name")) for g in _list(spec.get("schedulingGates"))]


def is_managed(pod: Mapping[str, object], namespace_labels: Mapping[str, object]) -> bool:
    """Whether tidegate's webhook would gate this pod (queue label/annotation or namespace)."""
    metadata = _dict(pod.get("metadata"))
    labels = _dict(metadata.get("labels"))
    annotations = _dict(metadata.get("annotations"))
    if any(key in labels or key in annotations for key in QUEUE_KEYS):
        return True
    return namespace_labels.get(MANAGED_NAMESPACE_LABEL) == "true"


def add_admission_gate(spec: JsonObject) -> None:
    """Add the tidegate gate to a pod spec (in place) unless it is already there."""
    gates = _list(spec.get("schedulingGates"))
    if not any(_dict(g).get("name") == ADMISSION_GATE for g in gates):
        spec["schedulingGates"] = [*gates, {"name": ADMISSION_GATE}]


def qos_class(spec: JsonObject) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' requests and limits."""
    containers = [_dict(c) for c in _list(spec.get("containers"))]
    containers += [_dict(c) for c in _list(spec.get("initContainers"))]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = _dict(container.get("resources"))
        requests = _dict(resources.get("requests"))
        limits = _dict(resources.get("limits"))
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            limit = limits.get(name)
            request = requests.get(name, limit)
            if limit is None or str(request) != str(limit):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def apply_create_defaults(pod: JsonObject, *, priority: int, preemption_policy: str) -> None:
    """Fill the defaults and status the API server sets on a new pod (in place)."""
    spec = _dict(pod.get("spec"))
    pod["spec"] = spec
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec["priority"] = priority
    spec.setdefault("preemptionPolicy", preemption_policy)
    tolerations = _list(spec.get("tolerations"))
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(_dict(t).get("key") == key for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations
    for container in _list(spec.get("containers")) + _list(spec.get("initContainers")):
        if isinstance(container, dict):
            image = str(container.get("image", ""))
            container.setdefault(
                "imagePullPolicy", "Always" if image.endswith(":latest") else "IfNotPresent"
            )
            container.setdefault("resources", {})
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
    status: JsonObject = {"phase": "Pending", "qosClass": qos_class(spec)}
    if gate_names(pod):
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(),
            }
        ]
    pod["status"] = status


def _quantity_causes(container: JsonObject, path: str) -> list[Cause]:
    causes: list[Cause] = []
    resources = _dict(container.get("resources"))
    parsed: dict[str, dict[str, int]] = {}
    for section in ("requests", "limits"):
        values = resources.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            causes.append((f"{path}.resources.{section}", "Invalid value: must be a map"))
            continue
        parsed[section] = {}
        for name, value in values.items():
            try:
                parsed[section][name] = parse_quantity(name, value)
            except QuantityError:
                causes.append(
                    (
                        f"{path}.resources.{section}[{name}]",
                        f"Invalid value: {value!r}: must be a valid quantity",
                    )
                )
    for name, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(name)
        shown = format_quantity(name, request)
        if limit is None:
            if not overcommit_allowed(name):
                causes.append(
                    (
                        f"{path}.resources.limits",
                        "Required value: Limit must be set for non overcommitable resources",
                    )
                )
        elif request != limit and not overcommit_allowed(name):
            causes.append(
                (
                    f"{path}.resources.requests",
                    f'Invalid value: "{shown}": must be equal to {name} limit of '
                    f"{format_quantity(name, limit)}",
                )
            )
        elif request > limit:
            causes.append(
                (
                    f"{path}.resources.requests",
                    f'Invalid value: "{shown}": must be less than or equal to {name} limit of '
                    f"{format_quantity(name, limit)}",
                )
            )
    return causes


def overcommit_allowed(resource: str) -> bool:
    """Whether a request may differ from its limit: native resources (no domain, or a
    ``kubernetes.io/`` one) other than hugepages. Extended resources (``nvidia.com/gpu``) must
    have a limit equal to their request, as Kubernetes' validation requires."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


def validate_create(pod: JsonObject) -> list[Cause]:
    """Causes that make a new pod invalid (a useful subset of the real validation)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(("spec.containers", "Required value"))
        containers = []
    seen: set[str] = set()
    for field_name in ("initContainers", "containers"):
        for i, container in enumerate(_list(spec.get(field_name))):
            path = f"spec.{field_name}[{i}]"
            if not isinstance(container, dict):
                causes.append((path, "Invalid value: must be an object"))
                continue
            name = container.get("name")
            if not isinstance(name, str) or not name:
                causes.append((f"{path}.name", "Required value"))
            else:
                problem = label_name_problem(name)
                if problem:
                    causes.append((f"{path}.name", f"Invalid value: {name!r}: {problem}"))
                if name in seen:
                    causes.append((f"{path}.name", f"Duplicate value: {name!r}"))
                seen.add(name)
            if not isinstance(container.get("image"), str) or not container.get("image"):
                causes.append((f"{path}.image", "Required value"))
            causes.extend(_quantity_causes(container, path))
    gates = spec.get("schedulingGates")
    if gates is not None:
        names: set[str] = set()
        for i, gate in enumerate(_list(gates)):
            name = _dict(gate).get("name")
            if not isinstance(name, str) or qualified_name_problem(name):
                causes.append(
                    (f"spec.schedulingGates[{i}].name", f"Invalid value: {name!r}: bad name")
                )
            elif name in names:
                causes.append((f"spec.schedulingGates[{i}].name", f"Duplicate value: {name!r}"))
            else:
                names.add(name)
        if names and spec.get("nodeName"):
            causes.append(
                (
                    "spec.nodeName",
                    "Forbidden: cannot be set until all schedulingGates have been cleared",
                )
            )
    node_selector = spec.get("nodeSelector")
    if node_selector is not None and (
        not isinstance(node_selector, dict)
        or not all(isinstance(v, str) for v in node_selector.values())
    ):
        causes.append(("spec.nodeSelector", "Invalid value: must be a map of strings"))
    return causes


def _without(spec: JsonObject, fields: tuple[str, ...]) -> JsonObject:
    out = {k: v for k, v in spec.items() if k not in fields}
    for field_name in ("containers", "initContainers"):
        items = spec.get(field_name)
        if isinstance(items, list):
            out[field_name] = [{k: v for k, v in _dict(c).items() if k != "image"} for c in items]
    return out


def validate_update(old: JsonObject, new: JsonObject) -> list[Cause]:
    """Causes that make an update of ``old`` into ``new`` invalid (Kubernetes' pod rules)."""
    old_spec = _dict(old.get("spec"))
    new_spec = new.get("spec")
    if not isinstance(new_spec, dict):
        return [("spec", "Required value")]
    if new_spec == old_spec:
        return []
    causes: list[Cause] = []
    old_gates = gate_names(old)
    causes.extend(
        (
            "spec.schedulingGates",
            f"Forbidden: only deletion is allowed, but found new scheduling gate '{name}'",
        )
        for name in gate_names(new)
        if name not in old_gates
    )
    gated = bool(old_gates)
    mutable: tuple[str, ...] = (
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "schedulingGates",
    )
    if gated:
        old_selector = _dict(old_spec.get("nodeSelector"))
        new_selector = new_spec.get("nodeSelector")
        if new_selector is not None and not isinstance(new_selector, dict):
            causes.append(("spec.nodeSelector", "Invalid value: must be a map of strings"))
        else:
            new_map = _dict(new_selector)
            if any(new_map.get(k) != v for k, v in old_selector.items()):
                causes.append(
                    (
                        "spec.nodeSelector",
                        f"Invalid value: {new_map!r}: only additions to spec.nodeSelector are "
                        "allowed (no mutations or deletions)",
                    )
                )
        mutable = (*mutable, "nodeSelector", "affinity")
    old_tolerations = _list(old_spec.get("tolerations"))
    new_tolerations = _list(new_spec.get("tolerations"))
    if any(t not in new_tolerations for t in old_tolerations):
        causes.append(
            (
                "spec.tolerations",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
        )
    if _without(old_spec, mutable) != _without(new_spec, mutable):
        causes.append(("spec", IMMUTABLE_SPEC_MESSAGE))
    return causes


def scheduled_condition(node_name: str) -> JsonObject:
    """The PodScheduled=True condition written when a pod is bound."""
    return {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(),
    }


def set_condition(status: JsonObject, condition: JsonObject) -> bool:
    """Put ``condition`` into ``status.conditions`` by type (in place); True if it changed.

    ``lastTransitionTime`` is kept when the condition's status did not change.
    """
    conditions = [c for c in _list(status.get("conditions")) if isinstance(c, dict)]
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition.get("type"):
            same = all(existing.get(k) == condition.get(k) for k in ("status", "reason", "message"))
            if same:
                return False
            if existing.get("status") == condition.get("status"):
                condition = {**condition, "lastTransitionTime": existing.get("lastTransitionTime")}
            conditions[i] = condition
            status["conditions"] = conditions
            return True
    conditions.append(condition)
    status["conditions"] = conditions
    return True
