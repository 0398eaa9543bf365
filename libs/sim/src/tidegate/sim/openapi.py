"""Minimal OpenAPI v3 documents, so kubectl's write commands work against the simulator.

kubectl (create, apply, replace) first asks ``/openapi/v3`` whether the server validates fields
itself (the ``fieldValidation`` query parameter on the resource's PATCH operation); if it
cannot tell, it refuses to send anything without ``--validate=false``. These documents declare,
for every served resource, the operations with their ``x-kubernetes-group-version-kind`` and the
``fieldValidation`` parameter, and nothing else: no schemas (the simulator does not validate
objects against schemas, see docs/simulator.md).
"""

from tidegate.sim.errors import JsonObject
from tidegate.sim.kinds import Registry, ResourceType


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def index(registry: Registry) -> JsonObject:
    """``GET /openapi/v3``: one entry per served group/version."""
    paths: JsonObject = {}
    for group in ["", *registry.groups()]:
        for version in registry.versions_of(group) if group else ["v1"]:
            prefix = _prefix(group, version)
            paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}"}
    return {"paths": paths}


def _operations(rtype: ResourceType, verbs: tuple[str, ...]) -> JsonObject:
    gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    parameters = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]
    return {
        verb: {
            "operationId": f"{verb}{rtype.kind}",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": parameters if verb in ("post", "put", "patch") else [],
            "responses": {"200": {"description": "OK"}},
        }
        for verb in verbs
    }


def group_version(registry: Registry, group: str, version: str) -> JsonObject | None:
    """``GET /openapi/v3/<api|apis/group>/<version>``, or None when not served."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    root = "/" + _prefix(group, version)
    paths: JsonObject = {}
    for rtype in types:
        scope = f"{root}/namespaces/{{namespace}}" if rtype.namespaced else root
        paths[f"{scope}/{rtype.plural}"] = _operations(rtype, ("get", "post", "delete"))
        paths[f"{scope}/{rtype.plural}/{{name}}"] = _operations(
            rtype, ("get", "put", "patch", "delete")
        )
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (tidegate simulator)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }
