"""The mutating webhook's decision: which new pods get tidegate's scheduling gate, and the patch.

The API server sends an AdmissionReview (``admission.k8s.io/v1``) for every pod being created
that the webhook configuration selects; :func:`review` answers it. The work is split:

- **the chart selects** which pods are sent at all (``namespaceSelector``: by default
  namespaces labelled ``tidegate.io/managed=true``; ``objectSelector``), because a webhook
  does not see the labels of a pod's namespace;
- **this module decides** for each pod it is sent: with ``gate_all`` (the default) every pod
  the API server sends belongs to tidegate (the namespace matched); otherwise only pods that
  name a queue in a label or annotation of any family tidegate understands
  (``tidegate.io/queue``, ``kueue.x-k8s.io/queue-name``, ``kai.scheduler/queue``,
  ``scheduling.volcano.sh/queue-name``).
  Never gated: DaemonSet pods and pods already bound to a node (they cannot wait for a
  placement), mirror pods, and pods that carry the gate already.

A pod that belongs gets a JSONPatch adding ``tidegate.io/admission`` to
``spec.schedulingGates`` (other gates kept). Odd input never raises: a review that cannot be
read at all is answered with HTTP 400 (the API server then applies the webhook's
``failurePolicy``); a readable review with a bad pod is answered by the webhook's own
``failure_policy``: ``Ignore`` admits the pod unchanged with a warning, ``Fail`` refuses it
with a message naming the field.

Pure: bytes in, status and JSON out; :mod:`tidegate.ungater.webhook` serves it.
"""

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from tidegate.kube.read.keys import QUEUE_KEYS
from tidegate.model.names import ADMISSION_GATE
from tidegate.model.pods import admission_gated

MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"

REVIEW_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")

FailurePolicy = Literal["Ignore", "Fail"]
"""What the webhook answers for a pod it cannot judge: admit it ungated, or refuse it."""

Verdict = Literal["gated", "passed", "ignored-error", "refused", "unreadable"]
"""How one review ended (the metric label)."""


@dataclass(frozen=True, slots=True)
class GateRules:
    """How the webhook decides (the ungater's ``webhook_*`` settings)."""

    gate_all: bool = True
    """Gate every pod the API server sends (the chart's selectors chose them); False: only
    pods naming a queue."""
    failure_policy: FailurePolicy = "Ignore"


@dataclass(frozen=True, slots=True)
class Answer:
    """The HTTP answer to one review."""

    status: int
    body: bytes
    verdict: Verdict
    reason: str = ""
    """Why the pod was passed, refused or not read (for logs)."""


class BadPodError(ValueError):
    """The pod in a readable review is malformed; the message names the field."""


def review(body: bytes, rules: GateRules) -> Answer:
    """Answer one AdmissionReview (see the module docstring)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _unreadable(f"the body is not JSON: {exc}")
    if not isinstance(document, dict):
        return _unreadable("the body is not a JSON object")
    api_version = document.get("apiVersion")
    if api_version not in REVIEW_VERSIONS:
        return _unreadable(f"apiVersion {api_version!r} is not one of {', '.join(REVIEW_VERSIONS)}")
    request = document.get("request")
    if not isinstance(request, dict):
        return _unreadable("request: missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return _unreadable("request.uid: missing or not a string")
    try:
        patch, why = _decide(request, rules)
    except BadPodError as exc:
        reason = str(exc)
        if rules.failure_policy == "Fail":
            refusal: dict[str, object] = {
                "uid": uid,
                "allowed": False,
                "status": {"code": 400, "reason": "BadRequest", "message": f"tidegate: {reason}"},
            }
            return Answer(200, _envelope(api_version, refusal), "refused", reason)
        warning: dict[str, object] = {
            "uid": uid,
            "allowed": True,
            "warnings": [f"tidegate did not gate this pod: {reason}"],
        }
        return Answer(200, _envelope(api_version, warning), "ignored-error", reason)
    response: dict[str, object] = {"uid": uid, "allowed": True}
    if patch is None:
        return Answer(200, _envelope(api_version, response), "passed", why)
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return Answer(200, _envelope(api_version, response), "gated", why)


def belongs(pod: Mapping[str, object], rules: GateRules) -> tuple[bool, str]:
    """Whether ``pod`` (as created) is tidegate's to hold, and why (or why not)."""
    metadata = _mapping(pod.get("metadata"), "metadata")
    spec = _mapping(pod.get("spec"), "spec")
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations")
    labels = _mapping(metadata.get("labels"), "metadata.labels")
    if spec.get("nodeName"):
        return False, "already bound to a node"
    if MIRROR_ANNOTATION in annotations:
        return False, "a mirror pod"
    owners = metadata.get("ownerReferences")
    if owners is not None and not isinstance(owners, list):
        raise BadPodError("metadata.ownerReferences: not a list")
    for index, owner in enumerate(owners or []):
        if not isinstance(owner, Mapping):
            raise BadPodError(f"metadata.ownerReferences[{index}]: not an object")
        if owner.get("kind") == "DaemonSet":
            return False, "a DaemonSet pod"
    for key in QUEUE_KEYS:
        if key in labels or key in annotations:
            return True, f"names a queue ({key})"
    if rules.gate_all:
        return True, "selected by the webhook configuration"
    return False, "names no queue"


def _decide(
    request: Mapping[str, object], rules: GateRules
) -> tuple[list[dict[str, object]] | None, str]:
    kind = request.get("kind")
    resource = request.get("resource")
    is_pod = (isinstance(kind, Mapping) and kind.get("kind") == "Pod") or (
        isinstance(resource, Mapping) and resource.get("resource") == "pods"
    )
    if not is_pod or request.get("subResource"):
        return None, "not a pod"
    if request.get("operation") != "CREATE":
        return None, f"operation {request.get('operation')!r} is not CREATE"
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        raise BadPodError("request.object: missing or not an object")
    take, why = belongs(pod, rules)
    if not take:
        return None, why
    spec = _mapping(pod.get("spec"), "spec")
    gates = spec.get("schedulingGates")
    if gates is None:
        return [
            {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": ADMISSION_GATE}]}
        ], why
    if not isinstance(gates, list):
        raise BadPodError("spec.schedulingGates: not a list")
    for index, gate in enumerate(gates):
        if not isinstance(gate, Mapping):
            raise BadPodError(f"spec.schedulingGates[{index}]: not an object")
    if admission_gated(str(gate.get("name")) for gate in gates):
        return None, "carries the gate already"
    return [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": ADMISSION_GATE}}
    ], why


def _mapping(value: object, field: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadPodError(f"{field}: not an object")
    return value


def _envelope(api_version: object, response: Mapping[str, object]) -> bytes:
    document = {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
    return json.dumps(document).encode()


def _unreadable(reason: str) -> Answer:
    body = json.dumps({"error": f"tidegate: unreadable AdmissionReview: {reason}"}).encode()
    return Answer(400, body, "unreadable", reason)
