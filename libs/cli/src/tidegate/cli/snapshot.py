"""Reading the what-if input documents: topology, nodes with quantities, workloads.

``tidegate place`` and ``tidegate preempt`` read one JSON or YAML document describing a cluster
snapshot (the format is in docs/placement.md and WHAT-IF.md). This module turns such a document
into tidegate's own types (:class:`~tidegate.placement.NodeCapacity`,
:class:`~tidegate.model.PodSetSpec`, …) and, when the document is wrong, raises a
:class:`SnapshotError` whose message starts with the path of the offending field, e.g.
``nodes[3].allocatable.cpu: "abc" is not a quantity``, so the command can print it as its one
line on standard error.

The building blocks (:class:`Field` and the ``parse_*`` functions) are shared by every what-if
command. Unknown keys are rejected (a misspelt ``requird`` must not silently change the answer).
This module does no placement and no policy.
"""

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import yaml

from tidegate.model import (
    PodSetSpec,
    QuantityError,
    Resources,
    Taint,
    Toleration,
    TopologyConfig,
    TopologyRequest,
    parse_quantity,
)
from tidegate.placement import NodeCapacity

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
"""Effects a taint may have (Kubernetes)."""


class SnapshotError(ValueError):
    """A malformed input document; the message starts with the path of the offending field."""

    def __init__(self, path: str, message: str) -> None:
        """``path`` like ``nodes[3].allocatable.cpu``; ``message`` says what is wrong."""
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def _show(value: object) -> str:
    """A value as the user wrote it, JSON-style (``"abc"``, ``-1``, ``true``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class Field:
    """A value of the document and the path that leads to it (for error messages)."""

    value: object
    path: str = ""

    def fail(self, message: str) -> NoReturn:
        """Raise a :class:`SnapshotError` at this field."""
        raise SnapshotError(self.path, message)

    def child_path(self, key: str | int) -> str:
        """The path of a key (str) or item (int) below this field."""
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def mapping(self) -> Mapping[str, object]:
        """The value as an object (JSON object / YAML mapping)."""
        if not isinstance(self.value, dict):
            self.fail(f"expected an object, got {_kind(self.value)}")
        return self.value

    def only(self, *keys: str) -> "Field":
        """Check that the object has no keys besides ``keys``; returns self."""
        for key in self.mapping():
            if key not in keys:
                Field(None, self.child_path(str(key))).fail(
                    f"unknown field (known: {', '.join(keys)})"
                )
        return self

    def get(self, key: str) -> "Field | None":
        """The field at ``key``, or None when it is absent or null."""
        value = self.mapping().get(key)
        return None if value is None else Field(value, self.child_path(key))

    def require(self, key: str) -> "Field":
        """The field at ``key``; an error when it is absent or null."""
        found = self.get(key)
        if found is None:
            Field(None, self.child_path(key)).fail("is required")
        return found

    def items(self) -> Iterator["Field"]:
        """The items of a list."""
        if not isinstance(self.value, list):
            self.fail(f"expected a list, got {_kind(self.value)}")
        for index, value in enumerate(self.value):
            yield Field(value, self.child_path(index))

    def entries(self) -> Iterator[tuple[str, "Field"]]:
        """The (key, field) pairs of an object."""
        for key, value in self.mapping().items():
            yield str(key), Field(value, self.child_path(str(key)))

    def string(self) -> str:
        """The value as a non-empty string."""
        if not isinstance(self.value, str):
            self.fail(f"expected a string, got {_kind(self.value)}")
        if not self.value:
            self.fail("must not be empty")
        return self.value

    def label_value(self) -> str:
        """A label value: a string, or a number YAML did not quote (rack: 7)."""
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            return str(self.value)
        if not isinstance(self.value, str):
            self.fail(f"expected a string, got {_kind(self.value)}")
        return self.value

    def integer(self) -> int:
        """The value as an integer (a float with no fraction is accepted)."""
        value = self.value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(f"expected an integer, got {_show(value)}")
        return value

    def boolean(self) -> bool:
        """The value as a boolean."""
        if not isinstance(self.value, bool):
            self.fail(f"expected true or false, got {_show(self.value)}")
        return self.value

    def strings(self) -> dict[str, str]:
        """An object of label-like strings (labels, nodeSelector)."""
        return {key: value.label_value() for key, value in self.entries()}

    def quantities(self) -> Resources:
        """A Kubernetes ResourceList: resource → quantity ("500m", "64Gi", 8)."""
        parsed: Resources = {}
        for resource, value in self.entries():
            if isinstance(value.value, bool) or not isinstance(value.value, str | int | float):
                value.fail(f"{_show(value.value)} is not a quantity")
            try:
                parsed[resource] = parse_quantity(resource, value.value)
            except QuantityError:
                amount = value.value
                negative = isinstance(amount, int | float) and amount < 0
                if isinstance(amount, str) and amount.strip().startswith("-"):
                    negative = True
                value.fail(f"{_show(amount)} is " + ("negative" if negative else "not a quantity"))
        return parsed


# --------------------------------------------------------------------------- documents


def load_document(text: str) -> object:
    """Parse JSON, or YAML when it is not JSON. SnapshotError when it is neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SnapshotError("input", f"not valid JSON or YAML{where}: {first}") from exc


def read_document(argument: str | None) -> object:
    """The document in file ``argument``, or on standard input when it is ``-`` or None."""
    if argument is None or argument == "-":
        text = sys.stdin.read()
        source = "stdin"
    else:
        try:
            text = Path(argument).read_text(encoding="utf-8")
        except OSError as exc:
            raise SnapshotError(argument, exc.strerror or str(exc)) from exc
        except UnicodeDecodeError as exc:
            raise SnapshotError(argument, "is not UTF-8 text") from exc
        source = argument
    if not text.strip():
        raise SnapshotError(source, "is empty")
    return load_document(text)


# --------------------------------------------------------------------------- pieces


def parse_topology(field: Field) -> TopologyConfig:
    """``{"name": ..., "levels": [label, ...]}``: levels widest first, distinct, non-empty."""
    field.only("name", "levels")
    name_field = field.get("name")
    name = name_field.string() if name_field is not None else "default"
    levels: list[str] = []
    for item in field.require("levels").items():
        level = item.string()
        if level in levels:
            item.fail(f"duplicate level {_show(level)}")
        levels.append(level)
    if not levels:
        Field(None, field.child_path("levels")).fail("a topology needs at least one level")
    return TopologyConfig(name=name, levels=levels)


def parse_taint(field: Field) -> Taint:
    """``{"key", "value", "effect"}`` with effect one of :data:`TAINT_EFFECTS`."""
    field.only("key", "value", "effect")
    key = field.require("key").string()
    value_field = field.get("value")
    value = value_field.label_value() if value_field is not None else ""
    effect_field = field.get("effect")
    effect = effect_field.string() if effect_field is not None else "NoSchedule"
    if effect not in TAINT_EFFECTS:
        field.require("effect").fail(f"{_show(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Taint(key=key, value=value, effect=effect)


def parse_toleration(field: Field) -> Toleration:
    """``{"key", "operator": "Equal"|"Exists", "value", "effect"}`` (Kubernetes semantics)."""
    field.only("key", "operator", "value", "effect")
    key_field = field.get("key")
    key = key_field.label_value() if key_field is not None else ""
    operator_field = field.get("operator")
    operator = operator_field.string() if operator_field is not None else "Equal"
    if operator == "Exists":
        pass
    elif operator == "Equal":
        if not key:
            Field(None, field.child_path("key")).fail("is required with operator Equal")
    else:
        field.require("operator").fail(f"{_show(operator)} is not Equal or Exists")
    value_field = field.get("value")
    value = value_field.label_value() if value_field is not None else ""
    effect_field = field.get("effect")
    effect = effect_field.string() if effect_field is not None else ""
    if effect and effect not in TAINT_EFFECTS:
        field.require("effect").fail(f"{_show(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Toleration(
        key=key,
        operator="Exists" if operator == "Exists" else "Equal",
        value=value,
        effect=effect,
    )


NODE_KEYS: Final = ("name", "labels", "allocatable", "used", "taints", "ready", "unschedulable")


def parse_node(field: Field, *, allow_used: bool = True) -> NodeCapacity:
    """One node: name, labels, allocatable, used (optional), taints, ready, unschedulable."""
    keys = NODE_KEYS if allow_used else tuple(k for k in NODE_KEYS if k != "used")
    field.only(*keys)
    labels_field = field.get("labels")
    used_field = field.get("used")
    taints_field = field.get("taints")
    ready_field = field.get("ready")
    cordon_field = field.get("unschedulable")
    return NodeCapacity(
        name=field.require("name").string(),
        labels=labels_field.strings() if labels_field is not None else {},
        allocatable=field.require("allocatable").quantities(),
        used=used_field.quantities() if used_field is not None else {},
        taints=tuple(parse_taint(t) for t in taints_field.items()) if taints_field else (),
        ready=ready_field.boolean() if ready_field is not None else True,
        unschedulable=cordon_field.boolean() if cordon_field is not None else False,
    )


def parse_nodes(field: Field, *, allow_used: bool = True) -> list[NodeCapacity]:
    """A list of nodes with distinct names."""
    nodes: list[NodeCapacity] = []
    seen: set[str] = set()
    for item in field.items():
        node = parse_node(item, allow_used=allow_used)
        if node.name in seen:
            item.require("name").fail(f"duplicate node {_show(node.name)}")
        seen.add(node.name)
        nodes.append(node)
    return nodes


TOPOLOGY_REQUEST_KEYS: Final = (
    "required",
    "preferred",
    "unconstrained",
    "slice_size",
    "slice_required",
)


def parse_topology_request(field: Field | None) -> TopologyRequest:
    """A podset's topology request; every key optional (absent: unconstrained, still compact)."""
    if field is None:
        return TopologyRequest()
    field.only(*TOPOLOGY_REQUEST_KEYS)
    required = field.get("required")
    preferred = field.get("preferred")
    unconstrained = field.get("unconstrained")
    slice_size = field.get("slice_size")
    slice_required = field.get("slice_required")
    return TopologyRequest(
        required=required.string() if required is not None else None,
        preferred=preferred.string() if preferred is not None else None,
        unconstrained=unconstrained.boolean() if unconstrained is not None else False,
        slice_size=slice_size.integer() if slice_size is not None else None,
        slice_required=slice_required.string() if slice_required is not None else None,
    )


PODSET_KEYS: Final = (
    "name",
    "count",
    "requests",
    "topology",
    "node_selector",
    "tolerations",
    "group",
    "min_count",
    "pods_per_index_group",
    "card_name",
)


def parse_podset(field: Field) -> PodSetSpec:
    """A podset as in the what-if input (names follow :class:`tidegate.model.PodSetSpec`)."""
    field.only(*PODSET_KEYS)
    requests = field.get("requests")
    selector = field.get("node_selector")
    tolerations = field.get("tolerations")
    group = field.get("group")
    min_count = field.get("min_count")
    per_index = field.get("pods_per_index_group")
    card = field.get("card_name")
    return PodSetSpec(
        name=field.require("name").string(),
        count=field.require("count").integer(),
        requests=requests.quantities() if requests is not None else {},
        topology=parse_topology_request(field.get("topology")),
        node_selector=selector.strings() if selector is not None else {},
        tolerations=[parse_toleration(t) for t in tolerations.items()] if tolerations else [],
        group=group.string() if group is not None else None,
        min_count=min_count.integer() if min_count is not None else None,
        pods_per_index_group=per_index.integer() if per_index is not None else None,
        card_name=card.string() if card is not None else None,
    )


def parse_podsets(field: Field) -> list[PodSetSpec]:
    """A list of podsets with distinct names."""
    podsets: list[PodSetSpec] = []
    seen: set[str] = set()
    for item in field.items():
        podset = parse_podset(item)
        if podset.name in seen:
            item.require("name").fail(f"duplicate podset {_show(podset.name)}")
        seen.add(podset.name)
        podsets.append(podset)
    return podsets


# --------------------------------------------------------------------------- place input


@dataclass(frozen=True, slots=True)
class PlaceWorkload:
    """The workload of a ``tidegate place`` snapshot."""

    name: str
    namespace: str
    podsets: list[PodSetSpec]
    profile: str | None = None
    node_selector: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class PlaceSnapshot:
    """Everything ``tidegate place`` reads."""

    topology: TopologyConfig
    nodes: list[NodeCapacity]
    workload: PlaceWorkload
    profile: str | None
    """The top-level profile; None leaves it to the workload, then the default."""


def parse_workload(field: Field) -> PlaceWorkload:
    """``{"name", "namespace", "podsets": [...], "profile", "node_selector"}``."""
    field.only("name", "namespace", "podsets", "profile", "node_selector")
    namespace = field.get("namespace")
    profile = field.get("profile")
    selector = field.get("node_selector")
    return PlaceWorkload(
        name=field.require("name").string(),
        namespace=namespace.string() if namespace is not None else "default",
        podsets=parse_podsets(field.require("podsets")),
        profile=profile.string() if profile is not None else None,
        node_selector=selector.strings() if selector is not None else None,
    )


def parse_place_snapshot(document: object) -> PlaceSnapshot:
    """The whole ``tidegate place`` input (see WHAT-IF.md)."""
    root = Field(document)
    if not isinstance(document, dict):
        raise SnapshotError("input", f"expected an object, got {_kind(document)}")
    root.only("topology", "nodes", "workload", "profile")
    profile = root.get("profile")
    return PlaceSnapshot(
        topology=parse_topology(root.require("topology")),
        nodes=parse_nodes(root.require("nodes")),
        workload=parse_workload(root.require("workload")),
        profile=profile.string() if profile is not None else None,
    )
