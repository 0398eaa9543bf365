"""Fixtures for the deploy/ checks: where things are, the CRDs, and the chart rendered by Helm.

The chart is rendered and linted by Helm's own engine (the Go SDK behind ``helm template`` and
``helm lint``), reached through the ``helm-python-sdk`` package because no helm binary can be
installed from the registries this project uses. Rendered manifests are validated against the
Kubernetes OpenAPI schemas shipped by ``kubernetes-validate`` (offline), and tidegate's own
objects against the CRDs' schemas.
"""

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "crds"
CHART_DIR = REPO / "deploy" / "helm" / "tidegate"
EXAMPLES_DIR = REPO / "deploy" / "examples"

RELEASE = "tg"
NAMESPACE = "tidegate"
# Kubernetes versions the chart is checked against: the oldest it supports (Chart.yaml's
# kubeVersion) and a current one.
KUBE_VERSIONS = ("1.27.0", "1.33.0")

Manifest = dict[str, Any]
Render = Callable[[dict[str, Any]], list[Manifest]]


def load_documents(path: Path) -> list[Manifest]:
    """Every YAML document of a file, empty ones dropped."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="session")
def crds() -> dict[str, Manifest]:
    """The CRDs of deploy/crds by kind (Topology, Queue, PodGroup)."""
    found: dict[str, Manifest] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        (crd,) = load_documents(path)
        found[crd["spec"]["names"]["kind"]] = crd
    return found


def crd_schema(crd: Manifest) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD's only version."""
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def list_map_violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Duplicate keys in lists declared x-kubernetes-list-type: map (the API server rejects them).

    JSON Schema cannot say this, so it is checked here by walking the value with its schema.
    """
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if child is not None:
                problems += list_map_violations(child, item, f"{path}.{key}")
    elif isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
            duplicates = {key for key in seen if seen.count(key) > 1}
            problems += [f"{path}: duplicate entry for {keys}={key}" for key in sorted(duplicates)]
        for index, item in enumerate(value):
            problems += list_map_violations(schema.get("items", {}), item, f"{path}[{index}]")
    return problems


def custom_resource_errors(crds: dict[str, Manifest], obj: Manifest) -> list[str]:
    """Why the API server would refuse ``obj`` under tidegate's CRDs ([] when it accepts it).

    The openAPIV3Schema is JSON Schema apart from the x-kubernetes-* extensions, so a draft-7
    validator checks types, enums, bounds and patterns; list-map key uniqueness is added.
    """
    crd = crds[obj["kind"]]
    group = crd["spec"]["group"]
    (version,) = crd["spec"]["versions"]
    if obj.get("apiVersion") != f"{group}/{version['name']}":
        return [f"apiVersion {obj.get('apiVersion')!r} is not {group}/{version['name']}"]
    schema = crd_schema(crd)
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(obj)
    ]
    return errors + list_map_violations(schema, obj)


def kubernetes_errors(obj: Manifest, kube_version: str) -> list[str]:
    """Why Kubernetes' OpenAPI schema of ``kube_version`` rejects a built-in object ([] if valid)."""
    try:
        kubernetes_validate.validate(obj, kube_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.message} at {list(exc.path)}"]
    return []


@pytest.fixture(scope="session")
def render() -> Iterator[Render]:
    """Render the chart with the given values, as ``helm template`` does; results are cached."""
    cache: dict[str, list[Manifest]] = {}
    chart = helm.Chart.load(CHART_DIR)

    def _render(values: dict[str, Any]) -> list[Manifest]:
        key = yaml.safe_dump(values, sort_keys=True)
        if key not in cache:
            rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
            documents: list[Manifest] = []
            for path, text in sorted(rendered.items()):
                if path.endswith(".yaml"):
                    documents += [doc for doc in yaml.safe_load_all(text) if doc]
            cache[key] = documents
        return cache[key]

    try:
        yield _render
    finally:
        chart.close()


def tool_findings(tool: str, *arguments: str, missing: str = "run dev/bootstrap") -> str:
    """Run the venv's ``tool`` with ``arguments``: "" when it exits 0, else what it printed.

    A tool that is not installed fails the test (``missing`` says how to get it).
    """
    found = shutil.which(tool, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{tool} is not installed: {missing}")
    result = subprocess.run(
        [found, *arguments], capture_output=True, text=True, check=False, timeout=60
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


@pytest.fixture(scope="session")
def uv() -> str:
    """The uv that dev/bootstrap installs (or one on PATH)."""
    candidate = REPO / ".bootstrap" / "bin" / "uv"
    found = str(candidate) if candidate.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("uv not found: run dev/bootstrap (it installs uv into .bootstrap/)")
    return found
