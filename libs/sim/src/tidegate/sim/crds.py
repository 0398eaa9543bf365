"""CustomResourceDefinitions: which resource types a CRD object makes the server serve.

A CRD (apiextensions.k8s.io/v1) names a group, a plural, a kind, a scope and served versions,
each optionally with a ``status`` subresource. :func:`resource_types` turns it into
:class:`~tidegate.sim.kinds.ResourceType` entries; :func:`validate` checks what the real server
refuses (the name must be ``<plural>.<group>``, names and scope present, at least one served
and exactly one storage version); :func:`accepted_status` is the status the real server's
controllers write once names are accepted. OpenAPI schema validation and pruning are not
simulated (see docs/simulator.md).
"""

from tidegate.sim.errors import JsonObject
from tidegate.sim.kinds import STATUS, ResourceType
from tidegate.sim.names import rfc3339

Cause = tuple[str, str]


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def validate(crd: JsonObject) -> list[Cause]:
    """Causes that make a CRD invalid."""
    spec = _dict(crd.get("spec"))
    names = _dict(spec.get("names"))
    causes: list[Cause] = []
    group = spec.get("group")
    plural = names.get("plural")
    if not isinstance(group, str) or not group:
        causes.append(("spec.group", "Required value"))
    if not isinstance(plural, str) or not plural:
        causes.append(("spec.names.plural", "Required value"))
    if not isinstance(names.get("kind"), str) or not names.get("kind"):
        causes.append(("spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            (
                "spec.scope",
                f'Unsupported value: {spec.get("scope")!r}: supported values: "Cluster", "Namespaced"',
            )
        )
    name = _dict(crd.get("metadata")).get("name")
    if isinstance(group, str) and isinstance(plural, str) and name != f"{plural}.{group}":
        causes.append(
            ("metadata.name", f'Invalid value: {name!r}: must be spec.names.plural+"."+spec.group')
        )
    versions = [_dict(v) for v in _list(spec.get("versions"))]
    if not versions or sum(1 for v in versions if v.get("storage") is True) != 1:
        causes.append(
            (
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    elif not any(v.get("served") is True for v in versions):
        causes.append(("spec.versions", "Invalid value: must serve at least one version"))
    return causes


def resource_types(crd: JsonObject) -> list[ResourceType]:
    """The resource types a valid CRD serves, one per served version."""
    spec = _dict(crd.get("spec"))
    names = _dict(spec.get("names"))
    types: list[ResourceType] = []
    for version in (_dict(v) for v in _list(spec.get("versions"))):
        if version.get("served") is not True:
            continue
        subresources = frozenset(
            {STATUS} if "status" in _dict(version.get("subresources")) else set()
        )
        types.append(
            ResourceType(
                group=str(spec.get("group")),
                version=str(version.get("name")),
                plural=str(names.get("plural")),
                kind=str(names.get("kind")),
                namespaced=spec.get("scope") == "Namespaced",
                singular=str(names.get("singular") or str(names.get("kind")).lower()),
                short_names=tuple(str(s) for s in _list(names.get("shortNames"))),
                subresources=subresources,
                builtin=False,
                categories=tuple(str(c) for c in _list(names.get("categories"))),
                printer_columns=tuple(
                    _dict(c) for c in _list(version.get("additionalPrinterColumns"))
                ),
            )
        )
    return types


def accepted_status(crd: JsonObject) -> JsonObject:
    """The status of an accepted, established CRD."""
    spec = _dict(crd.get("spec"))
    names = dict(_dict(spec.get("names")))
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind')}List")
    now = rfc3339()
    return {
        "acceptedNames": names,
        "storedVersions": [
            str(_dict(v).get("name"))
            for v in _list(spec.get("versions"))
            if _dict(v).get("storage") is True
        ],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
    }
