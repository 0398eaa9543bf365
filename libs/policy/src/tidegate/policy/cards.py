"""GPU card models: what a card name means for quota and for placement.

Volcano's tidal design (seed 002) counts GPU quota per *card model* rather than per resource,
because an ``nvidia.com/gpu`` on an H200 node is not worth the same as one on an RTX-4090 node.
A workload names its model either for the whole workload (``volcano.sh/card.request``, carried
as :attr:`WorkloadState.card_request <tidegate.model.WorkloadState.card_request>`: model → total
cards) or per pod template (``volcano.sh/card.name``, carried as
:attr:`PodSetSpec.card_name <tidegate.model.PodSetSpec.card_name>`, with the cards counted from
the pods' GPU requests).

This module turns card names into :class:`CardModel` (which node label value, which extended
resource) and a workload into its :class:`CardDemand` (cards per model, and which podsets must
sit on which model's nodes). It does no quota arithmetic (:mod:`tidegate.policy.quota`) and no
placement (:mod:`tidegate.placement`); it only says which nodes a podset may use.

Card name → resource and node label (NVIDIA GPU feature discovery conventions):

========================================  ========================  ==============================
card name                                 resource counted          node label nvidia.com/gpu.product
========================================  ========================  ==============================
``NVIDIA-H200``                           ``nvidia.com/gpu``        ``NVIDIA-H200``
``NVIDIA-H200/mig-1g.18gb-mixed``         ``nvidia.com/mig-1g.18gb``  ``NVIDIA-H200``
``NVIDIA-H200/mig-1g.18gb`` (= mixed)     ``nvidia.com/mig-1g.18gb``  ``NVIDIA-H200``
``NVIDIA-H200/mig-1g.18gb-single``        ``nvidia.com/gpu``        ``NVIDIA-H200-MIG-1g.18gb``
========================================  ========================  ==============================
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from tidegate.model import PodSetSpec, WorkloadState

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
"""Node label naming the GPU model of a node (set by NVIDIA GPU feature discovery)."""

WHOLE_GPU_RESOURCE: Final = "nvidia.com/gpu"
"""Extended resource of whole cards (and of MIG slices under the "single" strategy)."""

MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
"""Prefix of the extended resources of MIG slices under the "mixed" strategy."""

_LABEL_VALUE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_MIG: Final = re.compile(
    r"^mig-(?P<profile>[0-9]+g\.[0-9]+gb(?:\.me)?)(?:-(?P<strategy>mixed|single))?$"
)


class CardError(ValueError):
    """A card name or card request that cannot be understood; the message names the field."""


@dataclass(frozen=True, slots=True)
class CardModel:
    """One GPU card model: its name as written in quotas, and how nodes and pods show it."""

    name: str
    """The card name as written in card requests and card quotas."""
    product: str
    """The value of the node label ``nvidia.com/gpu.product`` on nodes of this model."""
    resource: str
    """The extended resource whose pod requests count as cards of this model."""
    mig_profile: str | None = None
    """The MIG profile ("1g.18gb") for MIG slices, None for whole cards."""

    def node_selector(self) -> dict[str, str]:
        """The labels a node must have to offer this model."""
        return {GPU_PRODUCT_LABEL: self.product}


def parse_card_name(name: str) -> CardModel:
    """Return the :class:`CardModel` a card name stands for (table in the module docstring).

    Raises :class:`CardError` for a name that is not a label value or an unknown MIG form.
    """
    product, slash, rest = name.partition("/")
    if not _LABEL_VALUE.match(product):
        raise CardError(
            f"card model {name!r}: {product!r} is not a valid value of the node label "
            f"{GPU_PRODUCT_LABEL}"
        )
    if not slash:
        return CardModel(name=name, product=product, resource=WHOLE_GPU_RESOURCE)
    match = _MIG.match(rest)
    if match is None:
        raise CardError(
            f"card model {name!r}: expected '<product>/mig-<profile>[-mixed|-single]' "
            f"such as 'NVIDIA-H200/mig-1g.18gb-mixed'"
        )
    profile = match["profile"]
    if match["strategy"] == "single":
        return CardModel(
            name=name,
            product=f"{product}-MIG-{profile}",
            resource=WHOLE_GPU_RESOURCE,
            mig_profile=profile,
        )
    return CardModel(
        name=name, product=product, resource=MIG_RESOURCE_PREFIX + profile, mig_profile=profile
    )


@dataclass(frozen=True, slots=True)
class CardDemand:
    """The cards a workload uses and where its podsets may run because of them."""

    cards: dict[str, int] = field(default_factory=dict)
    """Card model name → cards charged to the queue's card quota for the whole workload."""
    podset_models: dict[str, CardModel] = field(default_factory=dict)
    """Podset name → the model whose nodes its pods are restricted to."""

    @property
    def card_resources(self) -> frozenset[str]:
        """Extended resources counted as cards here (quota'd by card model, see quota.py)."""
        return frozenset(model.resource for model in self.podset_models.values())

    @property
    def card_model(self) -> str | None:
        """The one model the workload uses, or None if it uses none or several."""
        names = {model.name for model in self.podset_models.values()} | set(self.cards)
        return next(iter(names)) if len(names) == 1 else None

    def restrict(self, podsets: Sequence[PodSetSpec]) -> list[PodSetSpec]:
        """Return ``podsets`` with each one's node selector extended to its card model's nodes.

        Raises :class:`CardError` when a podset already selects a different GPU product.
        """
        restricted: list[PodSetSpec] = []
        for podset in podsets:
            model = self.podset_models.get(podset.name)
            if model is None:
                restricted.append(podset)
                continue
            wanted = podset.node_selector.get(GPU_PRODUCT_LABEL)
            if wanted is not None and wanted != model.product:
                raise CardError(
                    f"podset {podset.name}: node_selector {GPU_PRODUCT_LABEL}={wanted} "
                    f"conflicts with card model {model.name} (needs {model.product})"
                )
            selector = {**podset.node_selector, **model.node_selector()}
            restricted.append(msgspec.structs.replace(podset, node_selector=selector))
        return restricted


def card_demand(workload: WorkloadState, podsets: Sequence[PodSetSpec] | None = None) -> CardDemand:
    """Work out the cards ``workload`` uses, for quota and for placement.

    ``podsets`` are the podsets actually being placed (a gang reduced to its minimum has fewer
    pods); the workload's own podsets when omitted. Rules, in order:

    1. A podset with ``card_name`` uses that model; its cards are count × its per-pod request
       of the model's resource.
    2. A podset without one, in a workload with ``card_request``, uses the requested model whose
       resource it requests; a podset that requests none of them is not restricted, unless the
       card request names one model and no podset requests its resource (then every podset is
       restricted to it). Two requested models sharing the podset's resource are ambiguous.
    3. Cards charged: the ``card_request`` value for each model it names (the whole workload,
       as declared), plus the counted cards of models named only by ``card_name``.

    Raises :class:`CardError` naming the field for malformed names, negative counts and
    ambiguity.
    """
    podsets = workload.podsets if podsets is None else podsets
    requested: dict[str, CardModel] = {}
    for name, declared in (workload.card_request or {}).items():
        if declared < 0:
            raise CardError(f"card_request[{name!r}]: {declared} is negative")
        try:
            requested[name] = parse_card_name(name)
        except CardError as exc:
            raise CardError(f"card_request: {exc}") from exc

    models: dict[str, CardModel] = {}
    counted: dict[str, int] = {}
    for podset in podsets:
        if podset.card_name is not None:
            try:
                model = parse_card_name(podset.card_name)
            except CardError as exc:
                raise CardError(f"podsets[{podset.name}].card_name: {exc}") from exc
        else:
            matching = [m for m in requested.values() if podset.requests.get(m.resource, 0) > 0]
            if not matching:
                continue
            if len(matching) > 1:
                names = ", ".join(sorted(m.name for m in matching))
                raise CardError(
                    f"podsets[{podset.name}]: card_request names several models using "
                    f"{matching[0].resource} ({names}); set volcano.sh/card.name on its pods"
                )
            model = matching[0]
        models[podset.name] = model
        counted[model.name] = counted.get(model.name, 0) + podset.count * podset.requests.get(
            model.resource, 0
        )

    if len(requested) == 1 and not models:
        (only,) = requested.values()
        models = {podset.name: only for podset in podsets}

    cards = {name: amount for name, amount in counted.items() if name not in requested}
    cards.update(workload.card_request or {})
    return CardDemand(cards=cards, podset_models=models)


def cards_on_node(requests: Mapping[str, int], product: str | None) -> dict[str, int]:
    """The cards a pod requesting ``requests`` holds on a node whose ``nvidia.com/gpu.product``
    label is ``product`` (None: no label, no cards): its whole cards (``nvidia.com/gpu``), of
    the model named like the product. Used for pods that bypassed the gate, whose cards no card
    request declares; MIG slices are not counted as cards here."""
    gpus = requests.get(WHOLE_GPU_RESOURCE, 0)
    return {product: gpus} if product and gpus > 0 else {}
