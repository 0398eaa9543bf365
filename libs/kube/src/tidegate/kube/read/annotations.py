"""Reading workload settings from labels and annotations of four families.

A setting may be written on several objects: the top owner (Job, JobSet, Deployment, PodGroup),
a JobSet's job template, the pod template, or a pod. Each is a :class:`Layer`; a lookup walks
the layers in the order given and, within a layer, the keys in family precedence
(:mod:`tidegate.kube.read.keys`), and takes the first value found. Callers order the layers:
workload-wide settings (queue, service type, …) put the top owner first; per-podset settings
(topology request, card name) put the pod template first, so the template wins.

Every parser here appends a sentence naming the key, the object it was found on and the bad
value to ``problems`` instead of raising; the caller turns problems into the workload's
``invalid_reason``. This module knows nothing about owners, pods or the bus.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from tidegate.kube.read import keys
from tidegate.model.events import CardRequest, OnPreemption, TopologyRequest

AUTO: Final = "auto"
"""The level value that means "the narrowest level that can hold the podset"."""


@dataclass(frozen=True)
class Layer:
    """One object's labels and annotations, and how to name it in a message."""

    where: str
    """E.g. "Job default/train" or "the pod template of Job default/train"."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Found:
    """A value found by :func:`lookup`, with where it came from."""

    key: str
    value: str
    where: str
    source: Literal["annotation", "label"]

    def describe(self) -> str:
        """ "annotation <key> on <object>", for messages."""
        return f"{self.source} {self.key} on {self.where}"


def lookup(layers: Sequence[Layer], names: Sequence[str], *, labels: bool = True) -> Found | None:
    """The first value of any of ``names`` in ``layers`` (layer order first, then key order).

    Annotations are consulted before labels on the same object; ``labels=False`` ignores labels.
    """
    for layer in layers:
        for name in names:
            if name in layer.annotations:
                return Found(name, layer.annotations[name], layer.where, "annotation")
            if labels and name in layer.labels:
                return Found(name, layer.labels[name], layer.where, "label")
    return None


def _text(found: Found | None) -> str | None:
    """The stripped value, or None when absent or empty."""
    return (found.value.strip() or None) if found is not None else None


def parse_bool(found: Found, problems: list[str]) -> bool | None:
    """ "true" / "false" (any case); anything else is a problem and None."""
    text = found.value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    problems.append(f"{found.describe()}: {found.value!r} is not true or false")
    return None


def parse_count(found: Found, problems: list[str], *, minimum: int = 1) -> int | None:
    """An integer ≥ ``minimum`` written as a string; anything else is a problem and None."""
    text = found.value.strip()
    try:
        number = int(text)
    except ValueError:
        problems.append(f"{found.describe()}: {found.value!r} is not an integer")
        return None
    if number < minimum:
        qualifier = "positive" if minimum == 1 else f"at least {minimum}"
        problems.append(f"{found.describe()}: {found.value!r} is not {qualifier}")
        return None
    return number


def parse_level(found: Found, problems: list[str]) -> str | None:
    """A topology level: a node label key, or "auto"."""
    text = found.value.strip()
    if not text or any(ch.isspace() for ch in text):
        problems.append(f"{found.describe()}: {found.value!r} is not a topology level")
        return None
    return text


def parse_card_request(found: Found, problems: list[str]) -> CardRequest | None:
    """Volcano's card request: a JSON object card model → number of cards (≥ 0)."""
    try:
        data: object = json.loads(found.value)
    except ValueError as exc:
        problems.append(f"{found.describe()}: {found.value!r} is not valid JSON ({exc})")
        return None
    if not isinstance(data, dict):
        problems.append(
            f"{found.describe()}: {found.value!r} is not a JSON object of card model to count"
        )
        return None
    cards: CardRequest = {}
    for model, count in data.items():
        if not model:
            problems.append(f"{found.describe()}: a card model name is empty")
        elif isinstance(count, bool) or not isinstance(count, int):
            problems.append(f"{found.describe()}: count {count!r} for {model} is not an integer")
        elif count < 0:
            problems.append(f"{found.describe()}: count {count} for {model} is negative")
        else:
            cards[model] = count
    return cards


@dataclass(frozen=True)
class WorkloadSettings:
    """Settings that hold for a whole workload."""

    queue: str | None = None
    queue_key: str | None = None
    """The label or annotation key that named the queue."""
    topology: str | None = None
    service_type: str | None = None
    """The raw ``volcano.sh/service.type`` value (validated by the caller)."""
    service_type_found: Found | None = None
    preemptable: bool = True
    card_request: CardRequest | None = None
    profile: str | None = None
    profile_found: Found | None = None
    on_preemption: OnPreemption = "restart"
    trace_context: dict[str, str] = field(default_factory=dict)


def workload_settings(layers: Sequence[Layer], problems: list[str]) -> WorkloadSettings:
    """Read workload-wide settings; the first layer (normally the top owner) wins."""
    queue = lookup(layers, keys.QUEUE_KEYS)
    topology = lookup(layers, keys.TOPOLOGY_NAME_KEYS)
    service_type = lookup(layers, (keys.VOLCANO_SERVICE_TYPE,), labels=False)
    preemptable_found = lookup(layers, (keys.VOLCANO_PREEMPTABLE,))
    card_found = lookup(layers, (keys.VOLCANO_CARD_REQUEST,), labels=False)
    profile = lookup(layers, (keys.TG_PLACEMENT_PROFILE,))
    on_preemption_found = lookup(layers, (keys.TG_ON_PREEMPTION,))

    problems.extend(
        f"{found.describe()} is empty"
        for found in (queue, topology)
        if found is not None and not found.value.strip()
    )
    preemptable = True
    if preemptable_found is not None:
        parsed = parse_bool(preemptable_found, problems)
        preemptable = True if parsed is None else parsed
    on_preemption: OnPreemption = "restart"
    if on_preemption_found is not None:
        text = on_preemption_found.value.strip()
        if text == "abort":
            on_preemption = "abort"
        elif text != "restart":
            problems.append(
                f"{on_preemption_found.describe()}: {on_preemption_found.value!r} is not "
                "restart or abort"
            )
    trace_context = {}
    owner = layers[:1]
    for name, header in ((keys.TG_TRACEPARENT, "traceparent"), (keys.TG_TRACESTATE, "tracestate")):
        found = lookup(owner, (name,), labels=False)
        if found is not None and found.value:
            trace_context[header] = found.value
    return WorkloadSettings(
        queue=_text(queue),
        queue_key=queue.key if queue is not None else None,
        topology=_text(topology),
        service_type=service_type.value.strip() if service_type else None,
        service_type_found=service_type,
        preemptable=preemptable,
        card_request=parse_card_request(card_found, problems) if card_found else None,
        profile=profile.value.strip() if profile else None,
        profile_found=profile,
        on_preemption=on_preemption,
        trace_context=trace_context,
    )


@dataclass(frozen=True)
class PodSetSettings:
    """Settings of one podset: where its pods must or should sit, its group and card."""

    topology: TopologyRequest = field(default_factory=TopologyRequest)
    group: str | None = None
    card_name: str | None = None
    level_sources: Mapping[str, Found] = field(default_factory=dict)
    """Which annotation gave ``required`` / ``preferred`` / ``slice_required``, for messages."""


def podset_settings(layers: Sequence[Layer], problems: list[str]) -> PodSetSettings:
    """Read per-podset settings; the first layer (normally the pod template) wins."""
    sources: dict[str, Found] = {}
    levels: dict[str, str | None] = {}
    for name, names in (
        ("required", keys.REQUIRED_KEYS),
        ("preferred", keys.PREFERRED_KEYS),
        ("slice_required", keys.SLICE_TOPOLOGY_KEYS),
    ):
        found = lookup(layers, names)
        levels[name] = parse_level(found, problems) if found else None
        if found is not None:
            sources[name] = found

    unconstrained = False
    found = lookup(layers, (keys.KUEUE_PODSET_UNCONSTRAINED,))
    if found is not None:
        unconstrained = bool(parse_bool(found, problems))
        if unconstrained and (levels["required"] or levels["preferred"]):
            problems.append(
                f"{found.describe()} is true but the podset also asks for a topology level"
            )
    slice_size = None
    size_found = lookup(layers, keys.SLICE_SIZE_KEYS)
    if size_found is not None:
        slice_size = parse_count(size_found, problems)
    slice_level = sources.get("slice_required")
    if slice_level is not None and size_found is None:
        problems.append(f"{slice_level.describe()} is set but no slice size is given")
    if size_found is not None and slice_level is None:
        problems.append(f"{size_found.describe()} is set but no slice topology level is given")
    if levels["slice_required"] == AUTO and slice_level is not None:
        problems.append(f"{slice_level.describe()}: 'auto' is not allowed for slices")

    group = lookup(layers, (keys.KUEUE_PODSET_GROUP_NAME,))
    card = lookup(layers, (keys.VOLCANO_CARD_NAME,), labels=False)
    if card is not None and not card.value.strip():
        problems.append(f"{card.describe()} is empty")
    return PodSetSettings(
        topology=TopologyRequest(
            required=levels["required"],
            preferred=levels["preferred"],
            unconstrained=unconstrained,
            slice_size=slice_size,
            slice_required=levels["slice_required"],
        ),
        group=_text(group),
        card_name=_text(card),
        level_sources=sources,
    )


def check_levels(
    settings: PodSetSettings, levels: Sequence[str], topology: str, problems: list[str]
) -> TopologyRequest:
    """Check the podset's levels against its Topology's; return the request with levels resolved.

    A value must be one of the Topology's node labels or "auto". A short name (KAI's examples
    write "rack") is accepted when exactly one level label ends with "/<name>" or equals it.
    """
    request = settings.topology
    resolved: dict[str, str | None] = {}
    for name in ("required", "preferred", "slice_required"):
        value: str | None = getattr(request, name)
        if value is None or value == AUTO or value in levels:
            resolved[name] = value
            continue
        matches = [level for level in levels if level.rsplit("/", 1)[-1] == value]
        if len(matches) == 1:
            resolved[name] = matches[0]
            continue
        found = settings.level_sources[name]
        problems.append(
            f"{found.describe()}: {value!r} is not a level of Topology {topology} "
            f"(levels: {', '.join(levels) or 'none'})"
        )
        resolved[name] = value
    return TopologyRequest(
        required=resolved["required"],
        preferred=resolved["preferred"],
        unconstrained=request.unconstrained,
        slice_size=request.slice_size,
        slice_required=resolved["slice_required"],
    )
