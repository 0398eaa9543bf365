"""Nodes from topology descriptions and node files."""

from pathlib import Path

import pytest

from tidegate.sim.topology import (
    BLOCK,
    GPU,
    GPU_PRODUCT,
    HOSTNAME,
    RACK,
    ZONE,
    TopologyError,
    layout_for,
    load_file,
    parse_description,
)

# A copy of /work/shared/data/lingjun-topology.csv (the Lingjun cluster: ip,DSW,PSW,ASW).
LINGJUN = Path(__file__).parent / "data" / "lingjun-topology.csv"


def test_description_dimensions_and_labels() -> None:
    layout = parse_description("2x3x4x8gpu")
    assert len(layout.nodes) == 24
    assert layout.levels == [BLOCK, RACK, HOSTNAME]
    last = layout.nodes[-1]
    assert last.name == "block1-rack2-node3"
    assert last.labels[BLOCK] == "block1"
    assert last.labels[RACK] == "block1-rack2"
    assert last.labels[HOSTNAME] == last.name
    assert last.labels[GPU_PRODUCT] == "NVIDIA-H200"
    assert last.allocatable[GPU] == "8"
    assert last.allocatable["pods"] == "110"


def test_description_variants() -> None:
    racks = parse_description("3x2")
    assert racks.levels == [RACK, HOSTNAME]
    assert GPU not in racks.nodes[0].allocatable
    assert GPU_PRODUCT not in racks.nodes[0].labels
    zones = parse_description("2x1x1x1x4gpu:NVIDIA-A100", allocatable={"cpu": "64"})
    assert zones.levels == [ZONE, BLOCK, RACK, HOSTNAME]
    assert zones.nodes[1].labels[ZONE] == "zone1"
    assert zones.nodes[1].labels[GPU_PRODUCT] == "NVIDIA-A100"
    assert zones.nodes[1].allocatable["cpu"] == "64"
    assert [n.name for n in parse_description("3").nodes] == ["node0", "node1", "node2"]


@pytest.mark.parametrize("text", ["", "4x", "x8gpu", "4x8x16x8gpus", "1x2x3x4x5x8gpu", "0x4"])
def test_bad_descriptions_name_the_setting(text: str) -> None:
    with pytest.raises(TopologyError, match="nodes:"):
        parse_description(text)


def test_lingjun_csv() -> None:
    layout = load_file(LINGJUN)
    assert len(layout.nodes) == 847
    assert layout.levels == [BLOCK, RACK, HOSTNAME]
    names = [n.name for n in layout.nodes]
    assert len(set(names)) == 847
    assert all(len(n) <= 63 for n in names)
    racks = {n.labels[RACK] for n in layout.nodes}
    # ASW names repeat under different PSWs: qualified rack labels keep them apart.
    assert len(racks) == 119
    assert all(rack.startswith(("P8-", "P10-", "P12-")) for rack in racks)
    assert {n.labels[BLOCK] for n in layout.nodes} == {"P8", "P10", "P12"}
    assert {n.labels[ZONE] for n in layout.nodes} == {"G6"}


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(
        """
levels: [example.com/row, kubernetes.io/hostname]
defaults:
  allocatable: {cpu: "32", nvidia.com/gpu: "4"}
  labels: {example.com/pool: train}
nodes:
  - name: a1
    labels: {example.com/row: a}
  - name: b1
    labels: {example.com/row: b}
    allocatable: {cpu: "16"}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
"""
    )
    layout = layout_for(str(path))
    assert layout.levels == ["example.com/row", HOSTNAME]
    a1, b1 = layout.nodes
    assert a1.labels == {
        "example.com/pool": "train",
        "example.com/row": "a",
        HOSTNAME: "a1",
        GPU_PRODUCT: "NVIDIA-H200",
    }
    assert b1.allocatable["cpu"] == "16"
    assert b1.allocatable[GPU] == "4"
    assert b1.taints == [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]


def test_bad_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(TopologyError, match="cannot read"):
        load_file(missing)
    no_nodes = tmp_path / "x.yaml"
    no_nodes.write_text("levels: []\n")
    with pytest.raises(TopologyError, match="'nodes' list"):
        load_file(no_nodes)
    bad_csv = tmp_path / "x.csv"
    bad_csv.write_text("rack,zone\nr1,z1\n")
    with pytest.raises(TopologyError, match="needs a column"):
        load_file(bad_csv)
    dup = tmp_path / "d.csv"
    dup.write_text("name,PSW,ASW\nn1,P1,S1\nn1,P1,S2\n")
    with pytest.raises(TopologyError, match="duplicate node"):
        load_file(dup)
