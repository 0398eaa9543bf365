"""Card names → resources and node labels; a workload's card demand and podset restriction."""

import pytest

from tidegate.model import PodSetSpec
from tidegate.policy.cards import (
    GPU_PRODUCT_LABEL,
    CardError,
    CardModel,
    card_demand,
    cards_on_node,
    parse_card_name,
)
from tidegate.testing.messages import Messages

msg = Messages(namespace="ns", queue=None, defaults={"workload": {"uid": "u"}})


@pytest.mark.parametrize(
    ("name", "product", "resource", "profile"),
    [
        ("NVIDIA-H200", "NVIDIA-H200", "nvidia.com/gpu", None),
        ("NVIDIA-GeForce-RTX-4090", "NVIDIA-GeForce-RTX-4090", "nvidia.com/gpu", None),
        ("NVIDIA-H200/mig-1g.18gb-mixed", "NVIDIA-H200", "nvidia.com/mig-1g.18gb", "1g.18gb"),
        ("NVIDIA-H200/mig-3g.71gb", "NVIDIA-H200", "nvidia.com/mig-3g.71gb", "3g.71gb"),
        (
            "NVIDIA-A100-SXM4-40GB/mig-1g.5gb-single",
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
            "nvidia.com/gpu",
            "1g.5gb",
        ),
    ],
)
def test_card_names_map_to_resource_and_node_label(
    name: str, product: str, resource: str, profile: str | None
) -> None:
    model = parse_card_name(name)
    assert model == CardModel(name=name, product=product, resource=resource, mig_profile=profile)
    assert model.node_selector() == {GPU_PRODUCT_LABEL: product}


@pytest.mark.parametrize(
    "name", ["", "NVIDIA H200", "NVIDIA-H200/", "NVIDIA-H200/mig-big", "x/mig-1g.5gb-double"]
)
def test_malformed_card_names_are_errors_naming_the_card(name: str) -> None:
    with pytest.raises(CardError, match="card model"):
        parse_card_name(name)


def test_card_request_counts_declared_cards_and_restricts_gpu_podsets() -> None:
    w = msg.workload(
        "w",
        PodSetSpec(name="launcher", count=1, requests={"cpu": 1000}),
        PodSetSpec(name="workers", count=2, requests={"cpu": 1000, "nvidia.com/gpu": 4}),
        card_request={"NVIDIA-H200": 8},
    )
    demand = card_demand(w)
    assert demand.cards == {"NVIDIA-H200": 8}
    assert set(demand.podset_models) == {"workers"}
    assert demand.card_model == "NVIDIA-H200"
    assert demand.card_resources == {"nvidia.com/gpu"}
    launcher, workers = demand.restrict(w.podsets)
    assert launcher.node_selector == {}
    assert workers.node_selector == {GPU_PRODUCT_LABEL: "NVIDIA-H200"}


def test_card_name_counts_cards_from_gpu_requests() -> None:
    w = msg.workload(
        "w",
        PodSetSpec(
            name="serve",
            count=3,
            requests={"nvidia.com/mig-1g.18gb": 2},
            card_name="NVIDIA-H200/mig-1g.18gb-mixed",
        ),
    )
    demand = card_demand(w)
    assert demand.cards == {"NVIDIA-H200/mig-1g.18gb-mixed": 6}
    assert demand.card_resources == {"nvidia.com/mig-1g.18gb"}
    (serve,) = demand.restrict(w.podsets)
    assert serve.node_selector == {GPU_PRODUCT_LABEL: "NVIDIA-H200"}


def test_card_counts_follow_the_podsets_being_placed() -> None:
    full = PodSetSpec(
        name="w", count=4, requests={"nvidia.com/gpu": 2}, card_name="NVIDIA-GeForce-RTX-4090"
    )
    reduced = PodSetSpec(
        name="w", count=1, requests={"nvidia.com/gpu": 2}, card_name="NVIDIA-GeForce-RTX-4090"
    )
    assert card_demand(msg.workload("w", full), [reduced]).cards == {"NVIDIA-GeForce-RTX-4090": 2}


def test_single_requested_model_restricts_every_podset_when_none_requests_its_resource() -> None:
    w = msg.workload("w", PodSetSpec(name="a", count=1), card_request={"NVIDIA-H200": 1})
    assert card_demand(w).podset_models == {"a": parse_card_name("NVIDIA-H200")}


def test_two_whole_card_models_without_card_names_are_ambiguous() -> None:
    w = msg.workload(
        "w",
        PodSetSpec(name="workers", count=1, requests={"nvidia.com/gpu": 1}),
        card_request={"NVIDIA-H200": 1, "NVIDIA-A100": 1},
    )
    with pytest.raises(CardError, match=r"podsets\[workers\].*NVIDIA-A100, NVIDIA-H200"):
        card_demand(w)


def test_whole_card_and_mig_models_are_told_apart_by_resource() -> None:
    w = msg.workload(
        "w",
        PodSetSpec(name="big", count=1, requests={"nvidia.com/gpu": 8}),
        PodSetSpec(name="small", count=2, requests={"nvidia.com/mig-1g.18gb": 1}),
        card_request={"NVIDIA-H200": 8, "NVIDIA-H200/mig-1g.18gb-mixed": 2},
    )
    demand = card_demand(w)
    assert demand.podset_models["big"].resource == "nvidia.com/gpu"
    assert demand.podset_models["small"].resource == "nvidia.com/mig-1g.18gb"
    assert demand.card_model is None


def test_negative_and_malformed_card_requests_name_the_field() -> None:
    with pytest.raises(CardError, match=r"card_request\['NVIDIA-H200'\]: -1 is negative"):
        card_demand(msg.workload("w", card_request={"NVIDIA-H200": -1}))
    with pytest.raises(CardError, match=r"card_request: card model"):
        card_demand(msg.workload("w", card_request={"bad name": 1}))
    with pytest.raises(CardError, match=r"podsets\[p\]\.card_name"):
        card_demand(msg.workload("w", PodSetSpec(name="p", count=1, card_name="a/b")))


def test_conflicting_node_selector_is_an_error() -> None:
    podset = PodSetSpec(
        name="p",
        count=1,
        node_selector={GPU_PRODUCT_LABEL: "NVIDIA-A100"},
        card_name="NVIDIA-H200",
    )
    demand = card_demand(msg.workload("w", podset))
    with pytest.raises(CardError, match="conflicts with card model NVIDIA-H200"):
        demand.restrict([podset])


def test_a_pod_holds_whole_cards_of_its_nodes_gpu_model() -> None:
    gpus = {"cpu": 1000, "nvidia.com/gpu": 2}
    assert cards_on_node(gpus, "NVIDIA-H200") == {"NVIDIA-H200": 2}
    assert cards_on_node(gpus, None) == {}
    assert cards_on_node({"cpu": 1000}, "NVIDIA-H200") == {}
    assert cards_on_node({"nvidia.com/mig-1g.18gb": 1}, "NVIDIA-H200") == {}
