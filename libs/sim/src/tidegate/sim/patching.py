"""The three PATCH formats of the Kubernetes API, applied to plain JSON objects.

- JSON merge patch (RFC 7386, ``application/merge-patch+json``): written here, it is a few
  lines.
- JSON patch (RFC 6902, ``application/json-patch+json``): the ``jsonpatch`` library.
- Strategic merge patch (``application/strategic-merge-patch+json``): Kubernetes' own format,
  for built-in kinds only. Lists with a patch merge key (containers by ``name``,
  schedulingGates by ``name``, conditions by ``type``, …) are merged element by element;
  primitive lists with the merge strategy (finalizers) are unions; every other list is
  replaced, as in the real server (``tolerations`` and ``taints`` have no merge key upstream,
  so a patch replaces them whole). Directives ``$patch: delete|replace|merge``,
  ``$deleteFromPrimitiveList/<field>``, ``$retainKeys`` and ``$setElementOrder/<field>`` are
  understood (the last is accepted and ignored: order of merged lists is original order then
  new elements).

The merge-key table is the subset of upstream ``patchMergeKey`` tags for the kinds served
here. Functions never mutate their inputs. Failures raise
:class:`~tidegate.sim.errors.ApiError`.
"""

from collections.abc import Mapping
from typing import Final

import jsonpatch
import jsonpointer
import msgspec

from tidegate.sim.errors import ApiError, JsonObject, bad_request

JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

Path = tuple[str, ...]
_MERGE_PRIMITIVES: Final = "<merge>"

_POD_SPEC_KEYS: Final[dict[Path, str]] = {
    ("containers",): "name",
    ("initContainers",): "name",
    ("ephemeralContainers",): "name",
    ("containers", "env"): "name",
    ("initContainers", "env"): "name",
    ("containers", "ports"): "containerPort",
    ("initContainers", "ports"): "containerPort",
    ("containers", "volumeMounts"): "mountPath",
    ("initContainers", "volumeMounts"): "mountPath",
    ("containers", "volumeDevices"): "devicePath",
    ("volumes",): "name",
    ("schedulingGates",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("resourceClaims",): "name",
}
_METADATA_KEYS: Final[dict[Path, str]] = {
    ("metadata", "finalizers"): _MERGE_PRIMITIVES,
    ("metadata", "ownerReferences"): "uid",
}
_CONDITIONS: Final[dict[Path, str]] = {("status", "conditions"): "type"}


def _prefixed(prefix: Path, table: Mapping[Path, str]) -> dict[Path, str]:
    return {prefix + path: key for path, key in table.items()}


_TEMPLATE_KEYS: Final = {
    **_METADATA_KEYS,
    **_CONDITIONS,
    **_prefixed(("spec", "template", "spec"), _POD_SPEC_KEYS),
    **_prefixed(("spec", "template"), _METADATA_KEYS),
}

MERGE_KEYS: Final[dict[str, dict[Path, str]]] = {
    "Pod": {
        **_METADATA_KEYS,
        **_CONDITIONS,
        **_prefixed(("spec",), _POD_SPEC_KEYS),
        ("status", "podIPs"): "ip",
        ("status", "hostIPs"): "ip",
    },
    "Node": {
        **_METADATA_KEYS,
        **_CONDITIONS,
        ("status", "addresses"): "type",
        ("spec", "podCIDRs"): _MERGE_PRIMITIVES,
    },
    "Namespace": {**_METADATA_KEYS, **_CONDITIONS},
    "Job": _TEMPLATE_KEYS,
    "Deployment": _TEMPLATE_KEYS,
    "ReplicaSet": _TEMPLATE_KEYS,
}
"""Per kind: path of a list (indices dropped) → its merge key, or merge-of-primitives."""


def _copy(value: object) -> object:
    return msgspec.json.decode(msgspec.json.encode(value))


def merge_patch(target: object, patch: object) -> object:
    """Apply an RFC 7386 JSON merge patch; returns a new value."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result: JsonObject = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: JsonObject, operations: object) -> JsonObject:
    """Apply an RFC 6902 JSON patch; 422 when an operation does not apply."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a JSON array of operations")
    try:
        # A msgspec round trip copies JSON data many times faster than the deepcopy
        # ``in_place=False`` makes (the ungater's release patch: most of its cost here).
        patched = jsonpatch.apply_patch(_copy(target), operations, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise ApiError(422, "Invalid", f"the json patch does not apply: {exc}") from exc
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise bad_request(f"invalid json patch: {exc}") from exc
    if not isinstance(patched, dict):
        raise ApiError(422, "Invalid", "the json patch replaced the object by a non-object")
    return patched


def strategic_merge_patch(target: JsonObject, patch: object, kind: str) -> JsonObject:
    """Apply a strategic merge patch to an object of built-in ``kind``."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    return _merge_map(target, patch, (), MERGE_KEYS.get(kind, _METADATA_KEYS))


def _merge_map(
    original: object, patch: JsonObject, path: Path, keys: dict[Path, str]
) -> JsonObject:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    result: JsonObject = dict(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            current = result.get(field)
            if isinstance(current, list) and isinstance(value, list):
                result[field] = [item for item in current if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = _merge_map(result.get(key), value, (*path, key), keys)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, (*path, key), keys)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: object, patch: list[object], path: Path, keys: dict[Path, str]) -> object:
    strategy = keys.get(path)
    current = list(original) if isinstance(original, list) else []
    if strategy is None:
        return [_strip_directives(item) if isinstance(item, dict) else item for item in patch]
    if strategy == _MERGE_PRIMITIVES:
        merged = list(current)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip_directives(item)
            for item in patch
            if isinstance(item, dict) and item.get("$patch") != "replace"
        ]
    merged_items: list[object] = list(current)
    for item in patch:
        if not isinstance(item, dict) or strategy not in item:
            raise bad_request(
                f"strategic merge patch: every element of {'.'.join(path)} needs the merge key "
                f"{strategy!r}"
            )
        position = next(
            (
                i
                for i, existing in enumerate(merged_items)
                if isinstance(existing, dict) and existing.get(strategy) == item[strategy]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del merged_items[position]
            continue
        if position is None:
            merged_items.append(_strip_directives(item))
        else:
            merged_items[position] = _merge_map(merged_items[position], item, path, keys)
    return merged_items


def _strip_directives(value: JsonObject) -> JsonObject:
    out: JsonObject = {}
    for key, item in value.items():
        if key.startswith("$"):
            continue
        if isinstance(item, dict):
            out[key] = _strip_directives(item)
        elif isinstance(item, list):
            out[key] = [_strip_directives(i) if isinstance(i, dict) else i for i in item]
        else:
            out[key] = item
    return out
