"""The custom resource definitions: valid CRDs, structural schemas, the fixed field names, and
agreement with tidegate.model (defaults, enums, quantities).

What a real API server would check on `kubectl apply` is checked here offline: the CRD objects
against Kubernetes' own schema (kubernetes-validate), the structural-schema rules of
apiextensions.k8s.io/v1 (written out below from the Kubernetes documentation, "Specifying a
structural schema"), and example objects against the CRDs' schemas.
"""

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.model.events import (
    BorrowWithinCohortPolicy,
    CohortConfig,
    QueueConfig,
    QueueingStrategy,
    ReclaimPolicy,
    WithinQueuePolicy,
)
from tidegate.model.quantity import parse_quantity

from .conftest import (
    CHART_DIR,
    CRD_DIR,
    EXAMPLES_DIR,
    KUBE_VERSIONS,
    Manifest,
    crd_schema,
    custom_resource_errors,
    kubernetes_errors,
    load_documents,
)

GROUP = "tidegate.io"
VERSION = "v1alpha1"

# The contract other helpers code against (names fixed by the design): kind -> (plural, scope,
# spec fields, status fields).
CONTRACT: dict[str, tuple[str, str, set[str], set[str]]] = {
    "Topology": ("topologies", "Cluster", {"levels"}, {"conditions"}),
    "Queue": (
        "queues",
        "Cluster",
        {
            "priority",
            "reclaimable",
            "capability",
            "cardQuota",
            "placementProfile",
            "queueingStrategy",
            "topology",
            "cohort",
            "nominalQuota",
            "borrowingLimit",
            "lendingLimit",
            "cardNominalQuota",
            "cardBorrowingLimit",
            "cardLendingLimit",
            "fairSharing",
            "preemption",
            "defaultMaxRuntime",
            "maxReservations",
            "aging",
        },
        {"admitted", "pending", "usage", "cardUsage", "conditions"},
    ),
    "Cohort": (
        "cohorts",
        "Cluster",
        {
            "parent",
            "capability",
            "cardQuota",
            "nominalQuota",
            "borrowingLimit",
            "lendingLimit",
            "cardNominalQuota",
            "cardBorrowingLimit",
            "cardLendingLimit",
            "fairSharing",
        },
        {"usage", "cardUsage", "conditions"},
    ),
    "PodGroup": (
        "podgroups",
        "Namespaced",
        {"minMember", "minResources", "queue", "priorityClassName"},
        {"phase", "admitted", "running", "succeeded", "failed", "conditions"},
    ),
}

# Formats the API server knows (k8s.io/kube-openapi strfmt); anything else is refused.
KNOWN_FORMATS = {
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
    "password",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "duration",
}
LOGIC = ("allOf", "anyOf", "oneOf", "not")
FORBIDDEN = ("$ref", "definitions", "additionalItems", "dependencies", "patternProperties")
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema: dict[str, Any], path: str = "") -> list[str]:
    """Violations of the structural-schema rules (apiextensions.k8s.io/v1) under ``schema``."""
    problems: list[str] = []
    where = path or "<root>"
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if not schema.get("type") and not (int_or_string or preserve):
        problems.append(f"{where}: type is required")
    if int_or_string and schema.get("anyOf") != INT_OR_STRING and schema.get("allOf") is None:
        problems.append(f"{where}: int-or-string needs anyOf [integer, string]")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{where}: properties and additionalProperties are mutually exclusive")
    problems += [f"{where}: {name} is not allowed" for name in FORBIDDEN if name in schema]
    if schema.get("uniqueItems") is True:
        problems.append(f"{where}: uniqueItems: true is not allowed")
    if "format" in schema and schema["format"] not in KNOWN_FORMATS:
        problems.append(f"{where}: unknown format {schema['format']!r}")
    if schema.get("type") == "array" and "items" not in schema:
        problems.append(f"{where}: an array needs items")
    if schema.get("x-kubernetes-list-type") == "map":
        items = schema.get("items", {})
        defaulted = {k for k, v in items.get("properties", {}).items() if "default" in v}
        problems += [
            f"{where}: list-map key {key!r} must be required or defaulted"
            for key in schema.get("x-kubernetes-list-map-keys", [])
            if key not in items.get("required", []) and key not in defaulted
        ]
    for junctor in LOGIC:
        for index, branch in enumerate(schema.get(junctor, [])):
            problems += [
                f"{where}.{junctor}[{index}]: {name} not allowed"
                for name in ("description", "default", "additionalProperties", "nullable")
                if name in branch
            ]
            if "type" in branch and not (int_or_string and junctor == "anyOf"):
                problems.append(f"{where}.{junctor}[{index}]: type not allowed")
    for name, child in schema.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}[]")
    return problems


def defaults_problems(schema: dict[str, Any], path: str = "") -> list[str]:
    """Defaults that do not validate against their own schema (the API server refuses them)."""
    import jsonschema

    problems: list[str] = []
    if "default" in schema:
        problems += [
            f"{path}: default {schema['default']!r}: {error.message}"
            for error in jsonschema.Draft7Validator(schema).iter_errors(schema["default"])
        ]
    for name, child in schema.get("properties", {}).items():
        problems += defaults_problems(child, f"{path}.{name}")
    return problems


def schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    """The schema a printer-column JSONPath such as .spec.levels[*].nodeLabel points at."""
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        if node is None:
            return None
        name = part.removesuffix("[*]")
        node = node.get("properties", {}).get(name)
        if node is not None and part.endswith("[*]"):
            node = node.get("items")
    return node


def field_paths(schema: dict[str, Any], prefix: str) -> list[str]:
    """Every named field under ``schema`` as dotted paths (list items walked through)."""
    paths: list[str] = []
    for name, child in schema.get("properties", {}).items():
        paths.append(f"{prefix}.{name}")
        target = child.get("items", child) if child.get("type") == "array" else child
        paths += field_paths(target, f"{prefix}.{name}")
    return paths


# -- the CRD objects ------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_crd_is_a_valid_customresourcedefinition(
    crds: dict[str, Manifest], kube_version: str
) -> None:
    for crd in crds.values():
        assert kubernetes_errors(crd, kube_version) == []


def test_the_kubernetes_schema_check_rejects_a_broken_crd(crds: dict[str, Manifest]) -> None:
    broken = copy.deepcopy(crds["Queue"])
    broken["spec"]["scope"] = 7
    broken["spec"]["versions"][0]["servedd"] = True
    assert kubernetes_errors(broken, KUBE_VERSIONS[-1]) != []


def test_the_crds_are_the_fixed_contract(crds: dict[str, Manifest]) -> None:
    assert set(crds) == set(CONTRACT)
    for kind, (plural, scope, spec_fields, status_fields) in CONTRACT.items():
        crd = crds[kind]
        assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
        assert crd["spec"]["group"] == GROUP
        assert crd["spec"]["scope"] == scope
        assert crd["spec"]["names"]["plural"] == plural
        assert crd["spec"]["names"]["singular"] == kind.lower()
        assert crd["spec"]["names"]["listKind"] == f"{kind}List"
        assert "tidegate" in crd["spec"]["names"]["categories"]
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
        assert version["subresources"] == {"status": {}}
        properties = crd_schema(crd)["properties"]
        assert set(properties["spec"]["properties"]) == spec_fields
        assert set(properties["status"]["properties"]) == status_fields
    assert crds["Queue"]["spec"]["names"]["shortNames"] == ["tq"]


def test_the_file_names_follow_group_and_plural(crds: dict[str, Manifest]) -> None:
    names = sorted(path.name for path in CRD_DIR.glob("*.yaml"))
    assert names == sorted(f"{GROUP}_{plural}.yaml" for plural, *_ in CONTRACT.values())


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_schemas_are_structural(crds: dict[str, Manifest], kind: str) -> None:
    schema = crd_schema(crds[kind])
    assert structural_problems(schema) == []
    # At the root only apiVersion, kind, metadata, spec and status, and metadata unconstrained.
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert defaults_problems(schema) == []


def test_the_structural_check_finds_violations() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "c": {"type": "integer", "format": "int16"},
            "d": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        },
        "additionalProperties": {"type": "string"},
    }
    problems = structural_problems(bad)
    assert len(problems) == 5, problems
    assert defaults_problems({"type": "integer", "minimum": 1, "default": 0}) != []


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_printer_columns_point_at_fields_of_their_type(
    crds: dict[str, Manifest], kind: str
) -> None:
    (version,) = crds[kind]["spec"]["versions"]
    schema = crd_schema(crds[kind])
    columns = version["additionalPrinterColumns"]
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns[:-1]:
        target = schema_at(schema, column["jsonPath"])
        assert target is not None, column
        assert target.get("type") == column["type"], column


def test_conditions_have_the_metav1_condition_shape_everywhere(crds: dict[str, Manifest]) -> None:
    shapes = [
        crd_schema(crd)["properties"]["status"]["properties"]["conditions"] for crd in crds.values()
    ]
    assert all(shape == shapes[0] for shape in shapes)
    item = shapes[0]["items"]
    assert set(item["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert shapes[0]["x-kubernetes-list-map-keys"] == ["type"]


# -- the chart ships the same files ---------------------------------------------------------


def test_the_chart_ships_identical_crds() -> None:
    source = {path.name: path.read_bytes() for path in CRD_DIR.glob("*.yaml")}
    shipped = {path.name: path.read_bytes() for path in (CHART_DIR / "crds").glob("*.yaml")}
    assert source.keys() == shipped.keys()
    stale = [name for name in source if source[name] != shipped[name]]
    assert stale == [], (
        f"deploy/helm/tidegate/crds/ differs from deploy/crds/ for {stale}: "
        "run `cp deploy/crds/*.yaml deploy/helm/tidegate/crds/`"
    )
    assert not any(path.is_symlink() for path in (CHART_DIR / "crds").iterdir())


# -- agreement with tidegate.model ----------------------------------------------------------


def test_queue_defaults_and_enums_match_the_model(crds: dict[str, Manifest]) -> None:
    spec = crd_schema(crds["Queue"])["properties"]["spec"]["properties"]
    defaults = QueueConfig(name="q")
    assert spec["reclaimable"]["default"] is defaults.reclaimable
    assert spec["priority"]["default"] == defaults.priority
    assert spec["queueingStrategy"]["default"] == defaults.strategy
    assert set(spec["queueingStrategy"]["enum"]) == set(typing.get_args(QueueingStrategy))
    preemption = spec["preemption"]["properties"]
    policies = defaults.preemption
    assert preemption["reclaimWithinCohort"]["default"] == policies.reclaim_within_cohort
    assert preemption["withinClusterQueue"]["default"] == policies.within_cluster_queue
    borrow = preemption["borrowWithinCohort"]["properties"]
    assert borrow["policy"]["default"] == policies.borrow_within_cohort
    assert set(preemption["reclaimWithinCohort"]["enum"]) == set(typing.get_args(ReclaimPolicy))
    assert set(preemption["withinClusterQueue"]["enum"]) == set(typing.get_args(WithinQueuePolicy))
    assert set(borrow["policy"]["enum"]) == set(typing.get_args(BorrowWithinCohortPolicy))
    assert spec["maxReservations"]["default"] == defaults.max_reservations
    assert "default" not in spec["defaultMaxRuntime"]
    assert defaults.default_max_runtime_seconds is None
    assert defaults.aging is None
    weight = spec["fairSharing"]["properties"]["weight"]["default"]
    assert weight == defaults.fair_weight == CohortConfig(name="c").fair_weight


@pytest.mark.parametrize("kind", ["Queue", "Cohort"])
def test_every_tree_quantity_map_has_the_capability_pattern(
    crds: dict[str, Manifest], kind: str
) -> None:
    spec = crd_schema(crds[kind])["properties"]["spec"]["properties"]
    for name in ("nominalQuota", "borrowingLimit", "lendingLimit"):
        assert spec[name]["additionalProperties"]["pattern"] == QUANTITY_PATTERN, name
    for name in ("cardNominalQuota", "cardBorrowingLimit", "cardLendingLimit"):
        assert spec[name]["additionalProperties"]["minimum"] == 0, name


def _quantity_pattern(crds: dict[str, Manifest]) -> str:
    capability = crd_schema(crds["Queue"])["properties"]["spec"]["properties"]["capability"]
    pattern: str = capability["additionalProperties"]["pattern"]
    return pattern


def test_every_quantity_pattern_is_the_same(crds: dict[str, Manifest]) -> None:
    queue = crd_schema(crds["Queue"])["properties"]
    group = crd_schema(crds["PodGroup"])["properties"]
    patterns = {
        queue["spec"]["properties"]["capability"]["additionalProperties"]["pattern"],
        queue["status"]["properties"]["usage"]["additionalProperties"]["pattern"],
        group["spec"]["properties"]["minResources"]["additionalProperties"]["pattern"],
    }
    assert len(patterns) == 1


QUANTITY_PATTERN = _quantity_pattern(
    {
        doc["spec"]["names"]["kind"]: doc
        for path in CRD_DIR.glob("*.yaml")
        for doc in load_documents(path)
    }
)


@given(data=st.data())
def test_every_quantity_the_crds_accept_parses_in_the_model(data: st.DataObject) -> None:
    text = data.draw(st.from_regex(QUANTITY_PATTERN, fullmatch=True))
    resource = data.draw(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
    assert parse_quantity(resource, text) >= 0


# -- objects against the schemas ------------------------------------------------------------


def _example_objects() -> list[tuple[str, Manifest]]:
    return [
        (f"{path.name}#{index}", doc)
        for path in sorted(EXAMPLES_DIR.glob("*.yaml"))
        for index, doc in enumerate(load_documents(path))
    ]


def _docs_objects() -> list[tuple[str, Manifest]]:
    import re

    text = (Path(CRD_DIR).parents[1] / "docs" / "crds.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    import yaml

    return [
        (f"docs/crds.md block {index}", doc)
        for index, block in enumerate(blocks)
        for doc in yaml.safe_load_all(block)
        if doc and doc.get("apiVersion", "").startswith(f"{GROUP}/")
    ]


@pytest.mark.parametrize(("where", "obj"), _example_objects() + _docs_objects())
def test_examples_are_accepted(crds: dict[str, Manifest], where: str, obj: Manifest) -> None:
    if obj["apiVersion"].startswith(f"{GROUP}/"):
        assert custom_resource_errors(crds, obj) == [], where
    else:
        assert kubernetes_errors(obj, KUBE_VERSIONS[-1]) == [], where


def test_docs_show_an_example_of_every_kind() -> None:
    kinds = {obj["kind"] for _, obj in _docs_objects()}
    assert kinds == set(CONTRACT)


@pytest.mark.parametrize("kind", sorted(CONTRACT))
def test_docs_describe_every_field(crds: dict[str, Manifest], kind: str) -> None:
    text = (Path(CRD_DIR).parents[1] / "docs" / "crds.md").read_text()
    schema = crd_schema(crds[kind])
    missing = [
        path
        for top in ("spec", "status")
        for path in field_paths(schema["properties"][top], top)
        if f"`{path}`" not in text
    ]
    assert missing == [], f"docs/crds.md does not describe {kind} fields {missing}"


def _topology(levels: list[dict[str, Any]]) -> Manifest:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": levels},
    }


def _queue(**spec: Any) -> Manifest:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": spec,
    }


def _cohort(**spec: Any) -> Manifest:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Cohort",
        "metadata": {"name": "c"},
        "spec": spec,
    }


def _podgroup(**spec: Any) -> Manifest:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "n"},
        "spec": spec,
    }


REFUSED: dict[str, Manifest] = {
    "no levels": _topology([]),
    "nine levels": _topology([{"nodeLabel": f"l{i}"} for i in range(9)]),
    "a level twice": _topology([{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]),
    "a level without a label": _topology([{}]),
    "a label with a space": _topology([{"nodeLabel": "my rack"}]),
    "an unknown strategy": _queue(queueingStrategy="LIFO"),
    "an unknown profile": _queue(placementProfile="pack"),
    "a negative card quota": _queue(cardQuota={"NVIDIA-H200": -1}),
    "a card quota that is not a number": _queue(cardQuota={"NVIDIA-H200": "two"}),
    "a negative capability": _queue(capability={"cpu": "-1"}),
    "a capability that is no quantity": _queue(capability={"memory": "64 GB"}),
    "a string priority": _queue(priority="high"),
    "a negative nominal quota": _queue(nominalQuota={"nvidia.com/gpu": "-2"}),
    "a negative card lending limit": _queue(cardLendingLimit={"NVIDIA-H200": -1}),
    "a negative fair-sharing weight": _queue(fairSharing={"weight": "-1"}),
    "an unknown reclaim policy": _queue(preemption={"reclaimWithinCohort": "Always"}),
    "Any is no borrowWithinCohort policy": _queue(
        preemption={"borrowWithinCohort": {"policy": "Any"}}
    ),
    "a cohort named by a number": _queue(cohort=7),
    "a cohort with a negative borrowing limit": _cohort(borrowingLimit={"cpu": "-1"}),
    "a cohort whose parent is a list": _cohort(parent=["a"]),
    "reclaimable as a string": _queue(reclaimable="yes"),
    "minMember 0": _podgroup(minMember=0),
    "no minMember": _podgroup(queue="q"),
    "minResources that are no quantity": _podgroup(minMember=2, minResources={"cpu": "lots"}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_malformed_objects_are_refused(crds: dict[str, Manifest], case: str) -> None:
    assert custom_resource_errors(crds, REFUSED[case]) != []


def test_mig_card_names_and_int_quantities_are_accepted(crds: dict[str, Manifest]) -> None:
    queue = _queue(
        capability={"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": "16"},
        cardQuota={"NVIDIA-H200": 16, "NVIDIA-H200/mig-1g.18gb-mixed": 28},
    )
    assert custom_resource_errors(crds, queue) == []


def test_a_queue_tree_is_accepted(crds: dict[str, Manifest]) -> None:
    queue = _queue(
        cohort="research",
        nominalQuota={"nvidia.com/gpu": 8, "cpu": "64"},
        borrowingLimit={"nvidia.com/gpu": "8"},
        lendingLimit={"nvidia.com/gpu": 4},
        cardNominalQuota={"NVIDIA-H200": 8},
        cardBorrowingLimit={"NVIDIA-H200": 0},
        cardLendingLimit={"NVIDIA-H200/mig-1g.18gb-mixed": 14},
        fairSharing={"weight": "0.5"},
        preemption={
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            "withinClusterQueue": "LowerOrNewerEqualPriority",
        },
    )
    cohort = _cohort(
        parent="org", capability={"nvidia.com/gpu": 64}, nominalQuota={"cpu": 8}, fairSharing={}
    )
    assert custom_resource_errors(crds, queue) == []
    assert custom_resource_errors(crds, cohort) == []
