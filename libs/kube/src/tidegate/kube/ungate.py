"""The patch that releases a gated pod: remove one scheduling gate, add its nodeSelector.

Pure: it reads a pod object and returns a JSON merge patch (or None when there is nothing left
to do), so the rules can be tested without a server. The real API server's rules this respects
(pod update validation, KEP-3521 and KEP-3838): scheduling gates may only be removed, never
added; while a pod is gated its nodeSelector may only gain keys; once it is no longer gated it
cannot change at all. Removing the gate and adding keys in one update is allowed because the
server checks the *old* pod's gates. The patch carries the pod's resourceVersion, so a pod that
changed since it was read yields 409 Conflict instead of a lost update, and resending the same
patch after a lost response is harmless.

With what the caller already knows of the pod (:class:`KnownPod`: its uid, gates and
selector, for example from a watch), :func:`ungate_json_patch` gives a JSON patch that does the
same in one request without reading the pod first: ``test`` operations check that the pod is
the one known and that the gate is where it was seen, so a pod that changed since is refused
(422) instead of overwritten, and the caller reads it and uses the merge patch. It relies on
the same rules: a gate list can only shrink, so a gate found at its known index proves the
gates before it unchanged; a selector replaced whole while the caller saw none could only add
keys, or the server refuses it.

What it does not do: decide which selector a pod gets (the ungater does), or hide an illegal
change: a selector that would change an existing key is sent as asked and the server's 422
reaches the caller as :class:`~tidegate.kube.errors.Invalid`.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidegate.kube.transport import JsonObject


@dataclass(frozen=True)
class KnownPod:
    """What a caller already knows of a pod, to release it without reading it first."""

    uid: str
    scheduling_gates: Sequence[str]
    """Names of its scheduling gates, in order."""
    node_selector: Mapping[str, str]


def ungate_json_patch(
    known: KnownPod, gate: str, node_selector: Mapping[str, str]
) -> list[JsonObject] | None:
    """A JSON patch removing ``gate`` and adding ``node_selector`` to the pod ``known``
    describes, refused by the server unless the pod still is as known (module docstring);
    None when ``known`` shows no such gate (read the pod instead)."""
    if gate not in known.scheduling_gates:
        return None
    index = list(known.scheduling_gates).index(gate)
    operations: list[JsonObject] = [
        {"op": "test", "path": "/metadata/uid", "value": known.uid},
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": gate},
    ]
    if len(known.scheduling_gates) == 1:
        operations.append({"op": "remove", "path": "/spec/schedulingGates"})
    else:
        operations.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
    additions = {k: v for k, v in node_selector.items() if known.node_selector.get(k) != v}
    if additions and not known.node_selector:
        operations.append({"op": "add", "path": "/spec/nodeSelector", "value": additions})
    else:
        operations.extend(
            {"op": "add", "path": f"/spec/nodeSelector/{_pointer(key)}", "value": value}
            for key, value in additions.items()
        )
    return operations


def _pointer(key: str) -> str:
    """``key`` as one JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def ungate_patch(
    pod: Mapping[str, object], gate: str, node_selector: Mapping[str, str]
) -> JsonObject | None:
    """A merge patch removing ``gate`` and merging ``node_selector`` into ``pod``; None if done.

    Other gates are kept in their order. Selector keys the pod already has with the same value
    are left out of the patch; keys with a different value are included (the server decides).
    """
    spec = _mapping(pod.get("spec"))
    metadata = _mapping(pod.get("metadata"))
    gates = [g for g in _list(spec.get("schedulingGates")) if isinstance(g, Mapping)]
    remaining = [dict(g) for g in gates if g.get("name") != gate]
    current = _mapping(spec.get("nodeSelector"))
    additions = {k: v for k, v in node_selector.items() if current.get(k) != v}
    if len(remaining) == len(gates) and not additions:
        return None
    spec_patch: JsonObject = {}
    if len(remaining) != len(gates):
        # null deletes the field: an emptied list is how the API shows a pod with no gates.
        spec_patch["schedulingGates"] = remaining or None
    if additions:
        spec_patch["nodeSelector"] = additions
    patch: JsonObject = {"spec": spec_patch}
    resource_version = metadata.get("resourceVersion")
    if isinstance(resource_version, str) and resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


def has_gate(pod: Mapping[str, object], gate: str) -> bool:
    """Whether ``pod`` still carries the scheduling gate ``gate``."""
    spec = _mapping(pod.get("spec"))
    return any(
        isinstance(g, Mapping) and g.get("name") == gate for g in _list(spec.get("schedulingGates"))
    )


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []
