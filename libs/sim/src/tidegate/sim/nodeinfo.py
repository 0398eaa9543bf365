"""Pure helpers about nodes and pods that both the scheduler and the node controllers need.

Resource requests of a pod (the scheduler's rule: sum of containers, at least the largest init
container, plus one ``pods`` slot), taint toleration, node readiness, and required node
affinity. No I/O, no store access.
"""

from collections.abc import Mapping
from typing import Final

from tidegate.model.quantity import QuantityError, parse_quantity
from tidegate.sim.errors import JsonObject

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def parse_resource_list(values: object) -> dict[str, int]:
    """A ResourceList as integers (cpu in millicores); unparseable entries are skipped."""
    parsed: dict[str, int] = {}
    for name, value in _dict(values).items():
        try:
            parsed[name] = parse_quantity(name, value)
        except QuantityError:
            continue
    return parsed


def pod_requests(pod: JsonObject) -> dict[str, int]:
    """What the pod asks of a node, as the scheduler computes it (including one pod slot)."""
    spec = _dict(pod.get("spec"))
    total: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        resources = _dict(_dict(container).get("resources"))
        requests = parse_resource_list(resources.get("requests"))
        for name, amount in parse_resource_list(resources.get("limits")).items():
            requests.setdefault(name, amount)
        for name, amount in requests.items():
            total[name] = total.get(name, 0) + amount
    for container in _list(spec.get("initContainers")):
        resources = _dict(_dict(container).get("resources"))
        requests = parse_resource_list(resources.get("requests"))
        for name, amount in requests.items():
            total[name] = max(total.get(name, 0), amount)
    for name, amount in parse_resource_list(spec.get("overhead")).items():
        total[name] = total.get(name, 0) + amount
    total["pods"] = total.get("pods", 0) + 1
    return {name: amount for name, amount in total.items() if amount > 0}


def tolerates(tolerations: list[object], taint: Mapping[str, object]) -> bool:
    """Whether any toleration matches the taint (key, value, effect, operator)."""
    for item in tolerations:
        toleration = _dict(item)
        effect = toleration.get("effect")
        if effect not in (None, "") and effect != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key")
        if operator == "Exists":
            if key in (None, "") or key == taint.get("key"):
                return True
            continue
        if key == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def untolerated_taint(pod: JsonObject, taints: list[object]) -> JsonObject | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate, if any."""
    tolerations = _list(_dict(pod.get("spec")).get("tolerations"))
    for item in taints:
        taint = _dict(item)
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            return taint
    return None


def node_ready(node: JsonObject) -> bool:
    """Whether the node's Ready condition is True."""
    for condition in _list(_dict(node.get("status")).get("conditions")):
        cond = _dict(condition)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _expression_matches(expr: JsonObject, labels: Mapping[str, object]) -> bool:
    key = str(expr.get("key"))
    operator = expr.get("operator")
    values = [str(v) for v in _list(expr.get("values"))]
    present = key in labels
    value = str(labels.get(key, ""))
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def affinity_matches(pod: JsonObject, node_name: str, labels: Mapping[str, object]) -> bool:
    """Whether the node satisfies the pod's required node affinity (if any)."""
    affinity = _dict(_dict(_dict(pod.get("spec")).get("affinity")).get("nodeAffinity"))
    required = _dict(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = _list(required.get("nodeSelectorTerms"))
    if not terms:
        return True
    for item in terms:
        term = _dict(item)
        expressions = [_dict(e) for e in _list(term.get("matchExpressions"))]
        fields = [_dict(e) for e in _list(term.get("matchFields"))]
        if not expressions and not fields:
            continue
        if all(_expression_matches(e, labels) for e in expressions) and all(
            _expression_matches(f, {"metadata.name": node_name}) for f in fields
        ):
            return True
    return False
