"""The simulated cluster's nodes, from a topology description or a file listing them.

A description like ``"4x8x16x8gpu"`` means 4 blocks × 8 racks per block × 16 nodes per rack,
each node with 8 GPUs. With fewer dimensions the widest levels are dropped (``"8x16x8gpu"`` is
racks × nodes); a fourth dimension adds a zone level above blocks. The GPU part is optional
(``"2x4x8"``: CPU-only nodes) and may name the product: ``"2x4x8x8gpu:NVIDIA-A100"``.

Files: YAML (``levels``, ``defaults`` and a ``nodes`` list with names, labels, allocatable,
taints) or CSV (one row per node; a ``name``/``node``/``hostname``/``ip`` column names it,
other columns become labels). The CSV of the Lingjun cluster (columns ``ip,DSW,PSW,ASW``) is
understood: DSW → ``tidegate.io/zone``, PSW → ``tidegate.io/block``, ASW → ``tidegate.io/rack``
(prefixed with its PSW, because ASW names repeat under different PSWs), and node names longer
than a label value allows are shortened.

This module only builds Node objects (plain dicts) and the topology levels; it writes nothing.
"""

import csv
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

from tidegate.sim.errors import JsonObject

HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "tidegate.io/zone"
BLOCK: Final = "tidegate.io/block"
RACK: Final = "tidegate.io/rack"
GPU: Final = "nvidia.com/gpu"
GPU_PRODUCT: Final = "nvidia.com/gpu.product"
DEFAULT_GPU_PRODUCT: Final = "NVIDIA-H200"
DEFAULT_ALLOCATABLE: Final[dict[str, str]] = {
    "cpu": "128",
    "memory": "1024Gi",
    "pods": "110",
    "ephemeral-storage": "1Ti",
}
"""Allocatable of a generated node unless overridden (plus ``nvidia.com/gpu`` when it has GPUs)."""

_DESCRIPTION: Final = re.compile(
    r"^(?P<dims>\d+(?:x\d+){0,3})(?:x(?P<gpus>\d+)gpu(?::(?P<product>[A-Za-z0-9._-]+))?)?$"
)
_LEVEL_LABELS: Final = (ZONE, BLOCK, RACK)
_LINGJUN: Final = {"DSW": ZONE, "PSW": BLOCK, "ASW": RACK}
_NAME_COLUMNS: Final = ("name", "node", "hostname", "ip")


class TopologyError(ValueError):
    """A topology description or node file that cannot be used; the message says why."""


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One node to create."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, str]
    taints: list[JsonObject] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """The nodes of a simulated cluster and its topology levels (widest first)."""

    nodes: list[NodeSpec]
    levels: list[str]


def parse_description(
    text: str,
    *,
    gpu_product: str = DEFAULT_GPU_PRODUCT,
    allocatable: Mapping[str, str] | None = None,
) -> ClusterLayout:
    """Nodes for a description such as ``"4x8x16x8gpu"`` (see module docstring)."""
    match = _DESCRIPTION.match(text.strip())
    if match is None:
        raise TopologyError(
            f"nodes: {text!r} is not a topology description like '4x8x16x8gpu' "
            "(blocks x racks x nodes x GPUs per node) nor an existing file"
        )
    dims = [int(d) for d in match["dims"].split("x")]
    if any(d < 1 for d in dims):
        raise TopologyError(f"nodes: every dimension of {text!r} must be at least 1")
    gpus = int(match["gpus"] or 0)
    product = match["product"] or gpu_product
    level_labels = list(_LEVEL_LABELS[len(_LEVEL_LABELS) - (len(dims) - 1) :])
    base = dict(DEFAULT_ALLOCATABLE)
    if gpus:
        base[GPU] = str(gpus)
    base.update(allocatable or {})
    nodes: list[NodeSpec] = []
    for index in range(_product(dims)):
        coords = _unravel(index, dims)
        labels: dict[str, str] = {}
        path = ""
        for level, coord in zip(level_labels, coords[:-1], strict=True):
            part = f"{level.rsplit('/', 1)[1]}{coord}"
            path = f"{path}-{part}" if path else part
            labels[level] = path
        name = f"{path}-node{coords[-1]}" if path else f"node{coords[-1]}"
        labels[HOSTNAME] = name
        labels["kubernetes.io/os"] = "linux"
        labels["kubernetes.io/arch"] = "amd64"
        if gpus:
            labels[GPU_PRODUCT] = product
            labels["nvidia.com/gpu.count"] = str(gpus)
        nodes.append(NodeSpec(name=name, labels=labels, allocatable=dict(base)))
    return ClusterLayout(nodes=nodes, levels=[*level_labels, HOSTNAME])


def _product(dims: list[int]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def _unravel(index: int, dims: list[int]) -> list[int]:
    coords: list[int] = []
    for d in reversed(dims):
        coords.append(index % d)
        index //= d
    return list(reversed(coords))


def load_file(
    path: Path,
    *,
    gpu_product: str = DEFAULT_GPU_PRODUCT,
    gpus_per_node: int = 8,
    allocatable: Mapping[str, str] | None = None,
) -> ClusterLayout:
    """Nodes from a YAML or CSV file (see module docstring)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"nodes: cannot read {path}: {exc}") from exc
    if path.suffix.lower() == ".csv":
        return _from_csv(text, path, gpu_product, gpus_per_node, allocatable or {})
    return _from_yaml(text, path, gpu_product, allocatable or {})


def _node_name(raw: str) -> str:
    name = raw.strip().lower().replace("_", "-")
    if len(name) > 63:
        name = f"n-{name[:20]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def _from_csv(
    text: str, path: Path, product: str, gpus: int, allocatable: Mapping[str, str]
) -> ClusterLayout:
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise TopologyError(f"nodes: {path} has no rows")
    header = list(rows[0].keys())
    name_column = next((c for c in header if c.lower() in _NAME_COLUMNS), None)
    if name_column is None:
        raise TopologyError(f"nodes: {path} needs a column named one of {', '.join(_NAME_COLUMNS)}")
    level_columns = [c for c in header if c in _LINGJUN]
    label_columns = [c for c in header if c != name_column and c not in _LINGJUN]
    resource_columns = {"cpu", "memory", "pods", GPU}
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        raw_name = (row.get(name_column) or "").strip()
        if not raw_name:
            raise TopologyError(f"nodes: {path} line {line}: empty {name_column}")
        name = _node_name(raw_name)
        if name in seen:
            raise TopologyError(f"nodes: {path} line {line}: duplicate node {raw_name!r}")
        seen.add(name)
        labels: dict[str, str] = {}
        path_value = ""
        for column in ("DSW", "PSW", "ASW"):
            if column in level_columns:
                value = (row.get(column) or "").strip()
                # DSW is the zone; PSW and ASW names repeat across parents, so qualify them.
                path_value = f"{path_value}-{value}" if path_value and column == "ASW" else value
                labels[_LINGJUN[column]] = path_value
        node_allocatable = dict(DEFAULT_ALLOCATABLE)
        if gpus:
            node_allocatable[GPU] = str(gpus)
            labels[GPU_PRODUCT] = product
        node_allocatable.update(allocatable)
        for column in label_columns:
            value = (row.get(column) or "").strip()
            if column in resource_columns:
                node_allocatable[column] = value
            else:
                labels[column] = value
        labels[HOSTNAME] = name
        nodes.append(NodeSpec(name=name, labels=labels, allocatable=node_allocatable))
    levels = [_LINGJUN[c] for c in ("DSW", "PSW", "ASW") if c in level_columns]
    levels = [level for level in levels if level != ZONE] or levels
    return ClusterLayout(nodes=nodes, levels=[*levels, HOSTNAME])


def _from_yaml(
    text: str, path: Path, product: str, allocatable: Mapping[str, str]
) -> ClusterLayout:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"nodes: {path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise TopologyError(f"nodes: {path} must be a mapping with a 'nodes' list")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise TopologyError(f"nodes: {path}: 'defaults' must be a mapping")
    default_alloc = {
        **DEFAULT_ALLOCATABLE,
        **_str_map(defaults.get("allocatable"), "defaults.allocatable", path),
    }
    default_alloc.update(allocatable)
    default_labels = _str_map(defaults.get("labels"), "defaults.labels", path)
    nodes: list[NodeSpec] = []
    for i, entry in enumerate(document["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise TopologyError(f"nodes: {path}: {where} needs a name")
        name = _node_name(entry["name"])
        labels = {**default_labels, **_str_map(entry.get("labels"), f"{where}.labels", path)}
        labels.setdefault(HOSTNAME, name)
        node_alloc = {
            **default_alloc,
            **_str_map(entry.get("allocatable"), f"{where}.allocatable", path),
        }
        if GPU in node_alloc and node_alloc[GPU] not in ("", "0"):
            labels.setdefault(GPU_PRODUCT, product)
        taints = entry.get("taints") or []
        if not isinstance(taints, list) or not all(isinstance(t, dict) for t in taints):
            raise TopologyError(f"nodes: {path}: {where}.taints must be a list of taints")
        nodes.append(
            NodeSpec(name=name, labels=labels, allocatable=node_alloc, taints=list(taints))
        )
    levels = document.get("levels")
    if levels is None:
        levels = [HOSTNAME]
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        raise TopologyError(f"nodes: {path}: 'levels' must be a list of label keys")
    return ClusterLayout(nodes=nodes, levels=list(levels))


def _str_map(value: object, where: str, path: Path) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TopologyError(f"nodes: {path}: {where} must be a mapping")
    return {str(k): str(v) for k, v in value.items()}


def layout_for(
    nodes: str | Path,
    *,
    gpu_product: str = DEFAULT_GPU_PRODUCT,
    allocatable: Mapping[str, str] | None = None,
) -> ClusterLayout:
    """A layout from either a description or a path to a YAML/CSV file."""
    if isinstance(nodes, Path) or Path(str(nodes)).suffix.lower() in (".yaml", ".yml", ".csv"):
        return load_file(Path(nodes), gpu_product=gpu_product, allocatable=allocatable)
    return parse_description(str(nodes), gpu_product=gpu_product, allocatable=allocatable)


def node_object(spec: NodeSpec, *, created: str) -> JsonObject:
    """The Node object (Ready, schedulable) for a node spec."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": dict(spec.labels)},
        "spec": {"taints": list(spec.taints)} if spec.taints else {},
        "status": {
            "capacity": dict(spec.allocatable),
            "allocatable": dict(spec.allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status (simulated)",
                    "lastHeartbeatTime": created,
                    "lastTransitionTime": created,
                }
            ],
            "addresses": [{"type": "Hostname", "address": spec.name}],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": spec.name,
                "containerRuntimeVersion": "sim://1",
                "kernelVersion": "6.1.0-sim",
                "kubeProxyVersion": "v1.33.0-tidegate-sim",
                "kubeletVersion": "v1.33.0-tidegate-sim",
                "machineID": spec.name,
                "operatingSystem": "linux",
                "osImage": "tidegate simulated node",
                "systemUUID": spec.name,
            },
        },
    }


def topology_object(name: str, levels: list[str], *, group: str = "tidegate.io") -> JsonObject:
    """A Topology custom object (tidegate.io or kueue.x-k8s.io shape) for ``levels``."""
    version = "v1alpha1" if group == "tidegate.io" else "v1beta1"
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }
