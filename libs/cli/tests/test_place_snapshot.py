"""The what-if document parser: the pieces other commands reuse, and their error paths."""

import pytest

from tidegate.cli.snapshot import (
    Field,
    SnapshotError,
    load_document,
    parse_node,
    parse_nodes,
    parse_podset,
    parse_toleration,
    parse_topology,
)
from tidegate.model import Taint, Toleration


def error(call: object) -> str:
    assert callable(call)
    with pytest.raises(SnapshotError) as caught:
        call()
    return str(caught.value)


def test_node_with_every_field() -> None:
    node = parse_node(
        Field(
            {
                "name": "n1",
                "labels": {"rack": 7, "zone": "z"},
                "allocatable": {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": 8},
                "used": {"cpu": 0.5},
                "taints": [{"key": "gpu", "effect": "NoExecute"}],
                "ready": False,
                "unschedulable": True,
            },
            "nodes[0]",
        )
    )
    assert node.labels == {"rack": "7", "zone": "z"}
    assert node.allocatable == {"cpu": 1500, "memory": 2**30, "nvidia.com/gpu": 8}
    assert node.used == {"cpu": 500}
    assert node.taints == (Taint(key="gpu", value="", effect="NoExecute"),)
    assert (node.ready, node.unschedulable) == (False, True)


def test_nodes_without_usage_for_commands_that_compute_it() -> None:
    document = [{"name": "n1", "allocatable": {"cpu": 1}, "used": {"cpu": 1}}]
    assert error(lambda: parse_nodes(Field(document, "nodes"), allow_used=False)) == (
        "nodes[0].used: unknown field (known: name, labels, allocatable, taints, ready, "
        "unschedulable)"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "nodes[0].allocatable.cpu: true is not a quantity"),
        ("1x", 'nodes[0].allocatable.cpu: "1x" is not a quantity'),
        (-2, "nodes[0].allocatable.cpu: -2 is negative"),
        ([1], "nodes[0].allocatable.cpu: [1] is not a quantity"),
    ],
)
def test_quantity_errors(value: object, message: str) -> None:
    document = {"name": "n1", "allocatable": {"cpu": value}}
    assert error(lambda: parse_node(Field(document, "nodes[0]"))) == message


def test_tolerations() -> None:
    assert parse_toleration(Field({"operator": "Exists"})) == Toleration(operator="Exists")
    assert parse_toleration(Field({"key": "k", "value": "v", "effect": "NoSchedule"})) == (
        Toleration(key="k", value="v", effect="NoSchedule")
    )
    assert error(lambda: parse_toleration(Field({"value": "v"}, "t[0]"))) == (
        "t[0].key: is required with operator Equal"
    )
    assert error(lambda: parse_toleration(Field({"key": "k", "operator": "In"}, "t[0]"))) == (
        't[0].operator: "In" is not Equal or Exists'
    )


def test_podset_defaults_and_types() -> None:
    podset = parse_podset(Field({"name": "w", "count": 4.0}))
    assert podset.count == 4
    assert podset.topology.required is None
    assert podset.requests == {}
    assert error(lambda: parse_podset(Field({"name": "w", "count": True}, "p"))) == (
        "p.count: expected an integer, got true"
    )
    assert error(lambda: parse_podset(Field({"name": "", "count": 1}, "p"))) == (
        "p.name: must not be empty"
    )


def test_topology() -> None:
    assert parse_topology(Field({"levels": ["a", "b"]})).name == "default"
    assert error(lambda: parse_topology(Field({"levels": ["a", "a"]}, "topology"))) == (
        'topology.levels[1]: duplicate level "a"'
    )
    assert error(lambda: parse_topology(Field({"levels": "a"}, "topology"))) == (
        "topology.levels: expected a list, got a string"
    )


def test_documents_are_json_or_yaml() -> None:
    assert load_document('{"a": 1}') == {"a": 1}
    assert load_document("a: [1, 2]\n") == {"a": [1, 2]}
    message = error(lambda: load_document("a: [1, 2\n"))
    assert message.startswith("input: not valid JSON or YAML at line 2")
