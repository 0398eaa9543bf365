"""Queue definitions from every family tidegate reads → QueueConfig and CohortConfig.

tidegate's own Queue and Cohort, Kueue's ClusterQueue, Cohort and LocalQueue (with the
ResourceFlavors they name), Volcano's Queue and KAI-Scheduler's Queue are all read as nodes of
one queue tree, per the mapping table of docs/queues.md ("Mapping from Kueue, Volcano and KAI";
keep the two in agreement).
:func:`definitions` takes every such object as the API server sent it and returns the queue
and cohort messages to publish, by name, and the LocalQueue → ClusterQueue map that recognition
uses for Kueue's ``kueue.x-k8s.io/queue-name``.

Rules kept here:

- A malformed object is still a queue (or cohort) of its name, with ``invalid_reason`` naming
  the object and the field: its workloads wait with reason ``Invalid``; nothing else stops.
- A Volcano or KAI queue that another queue of its family names as its parent is a Cohort (it
  cannot hold workloads, as in KAI); its own quota is divided among its children, so the
  Cohort's nominal quota is the parent's less its children's (children asking for more than
  the parent has make the Cohort Invalid).
- A Kueue flavor whose ResourceFlavor pins a GPU product (``nvidia.com/gpu.product`` in its
  nodeLabels) makes its ``nvidia.com/gpu`` quotas card quotas of that model too.
- Volcano queues naming no parent go under Volcano's ``root``, KAI's top-level queues under
  ``kai-root``, when a queue of the family names a nominal: the root holds the cluster (the
  nodes' allocatable) less what its children deserve, as those systems share the cluster.
- Name clashes between families: tidegate's own object wins, then Kueue's, KAI's, Volcano's
  (the order :mod:`tidegate.kube.read.keys` consults their labels in); the object that loses
  is not read, and the winner's publication logs which one it shadows. Queues and cohorts are
  separate name spaces.

Pure code: no I/O; :class:`~tidegate.kube.read.index.ClusterIndex` feeds it the objects.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from typing import Final, Literal

import msgspec

from tidegate.kube.read import keys
from tidegate.kube.read.convert import (
    TreeFields,
    card_counts,
    cohort_config,
    fair_weight,
    parse_resource_list,
    preemption,
    queue_config,
    queueing_strategy,
)
from tidegate.kube.read.objects import (
    KaiQueue,
    KaiQueueResource,
    KueueClusterQueue,
    KueueCohort,
    KueueLocalQueue,
    KueueResourceFlavor,
    KueueResourceGroup,
    Meta,
    ObjectError,
    ObjectMeta,
    VolcanoQueue,
    decode,
    describe_error,
)
from tidegate.model import QuantityError, parse_quantity
from tidegate.model import resources as res
from tidegate.model.events import CohortConfig, QueueConfig
from tidegate.model.quantity import format_quantity, parse_decimal
from tidegate.model.resources import Resources
from tidegate.policy.cards import GPU_PRODUCT_LABEL, CardError, CardModel, parse_card_name

QueueSource = Literal[
    "Queue",
    "Cohort",
    "KueueClusterQueue",
    "KueueCohort",
    "KueueLocalQueue",
    "KueueResourceFlavor",
    "VolcanoQueue",
    "KaiQueue",
]
"""Object kinds that define queues, cohorts or queue names (as the index calls them)."""

QUEUE_SOURCES: Final[tuple[QueueSource, ...]] = (
    "Queue",
    "Cohort",
    "KueueClusterQueue",
    "KueueCohort",
    "KueueLocalQueue",
    "KueueResourceFlavor",
    "VolcanoQueue",
    "KaiQueue",
)

KAI_RESOURCES: Final = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}
"""KAI's resource names → Kubernetes resource names."""
VOLCANO_ROOT: Final = "root"
"""Volcano's root queue: the parent of every Volcano Queue naming none (Volcano creates it and
gives it the cluster's resources)."""
KAI_ROOT: Final = "kai-root"
"""The parent tidegate gives KAI's top-level queues, among which KAI divides the cluster."""
KAI_UNITS: Final = {"gpu": Decimal(1), "cpu": Decimal(1), "memory": Decimal(1_000_000)}
"""KAI quantities in tidegate units: GPUs, millicores (tidegate's cpu unit), megabytes."""


@dataclass(frozen=True)
class Definition:
    """One published queue or cohort, where it came from, and problems worth logging."""

    message: QueueConfig | CohortConfig
    uid: str
    source: str
    """ "Kueue ClusterQueue research": the object it was read from."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Definitions:
    """Every queue and cohort, by name, and Kueue's LocalQueues."""

    queues: Mapping[str, Definition] = field(default_factory=dict)
    cohorts: Mapping[str, Definition] = field(default_factory=dict)
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, LocalQueue name) → the ClusterQueue it points to."""


@dataclass
class _Family:
    """One family's nodes, before name clashes are settled."""

    label: str
    queues: dict[str, Definition] = field(default_factory=dict)
    cohorts: dict[str, Definition] = field(default_factory=dict)


def definitions(
    objects: Mapping[QueueSource, Mapping[str, object]], cluster: Mapping[str, int] | None = None
) -> Definitions:
    """Every queue and cohort the objects define (see the module doc). ``cluster`` is what the
    nodes offer (allocatable summed per resource): what Volcano's and KAI's roots share out.
    Never raises: an object whose metadata cannot be read is skipped (the index reports those
    on arrival)."""
    cluster = cluster or {}
    families = [
        _tidegate(objects.get("Queue", {}), objects.get("Cohort", {})),
        _kueue(
            objects.get("KueueClusterQueue", {}),
            objects.get("KueueCohort", {}),
            objects.get("KueueResourceFlavor", {}),
        ),
        _kai(objects.get("KaiQueue", {}), cluster),
        _volcano(objects.get("VolcanoQueue", {}), cluster),
    ]
    return Definitions(
        queues=_merge(family.queues for family in families),
        cohorts=_merge(family.cohorts for family in families),
        local_queues=_local_queues(objects.get("KueueLocalQueue", {})),
    )


def _merge(layers: Iterable[Mapping[str, Definition]]) -> dict[str, Definition]:
    out: dict[str, Definition] = {}
    shadowed: dict[str, list[str]] = {}
    for layer in layers:
        for name, definition in layer.items():
            if name in out:
                shadowed.setdefault(name, []).append(definition.source)
            else:
                out[name] = definition
    for name, losers in shadowed.items():
        winner = out[name]
        note = (
            f"{winner.source} shadows {', '.join(losers)} of the same name, not read "
            "(tidegate's own wins a name clash, then Kueue's, KAI's, Volcano's)"
        )
        out[name] = Definition(winner.message, winner.uid, winner.source, (*winner.problems, note))
    return out


def _meta(raw: object) -> ObjectMeta | None:
    try:
        return decode(raw, Meta).metadata
    except ObjectError:
        return None


def _definition(message: QueueConfig | CohortConfig, meta: ObjectMeta, source: str) -> Definition:
    invalid = (message.invalid_reason,) if message.invalid_reason else ()
    return Definition(message, meta.uid, f"{source} {meta.name}", invalid)


# --------------------------------------------------------------------------- tidegate


def _tidegate(queues: Mapping[str, object], cohorts: Mapping[str, object]) -> _Family:
    family = _Family("tidegate")
    for raw in queues.values():
        meta = _meta(raw)
        if meta is not None:
            family.queues[meta.name] = _definition(queue_config(raw), meta, "Queue")
    for raw in cohorts.values():
        meta = _meta(raw)
        if meta is not None:
            family.cohorts[meta.name] = _definition(cohort_config(raw), meta, "Cohort")
    return family


# --------------------------------------------------------------------------- Kueue


def _flavor_products(flavors: Mapping[str, object]) -> dict[str, str]:
    """ResourceFlavor name → the GPU product its ``spec.nodeLabels`` pin (the node label
    ``nvidia.com/gpu.product``), for the flavors that pin one. A flavor that cannot be read
    pins nothing: the ClusterQueue's quota of it stays a plain resource quota."""
    products: dict[str, str] = {}
    for raw in flavors.values():
        try:
            flavor = decode(raw, KueueResourceFlavor)
        except ObjectError:
            continue
        product = flavor.spec.node_labels.get(GPU_PRODUCT_LABEL)
        if product:
            products[flavor.metadata.name] = product
    return products


_Key = tuple[Literal["resource", "card"], str]
"""A quota dimension: a resource, or a GPU card model."""


def _kueue_quotas(
    groups: Sequence[KueueResourceGroup],
    products: Mapping[str, str],
    weight: object,
    problems: list[str],
) -> TreeFields:
    """Kueue resourceGroups read as nominal quota and limits, per resource and per card model.

    Per resource: nominal quota summed over the flavors; a limit summed likewise, and only
    when every flavor of the resource names one (a flavor without one leaves it unbounded).
    The ``nvidia.com/gpu`` quota of a flavor pinning a GPU product is also the card quota of
    that product's card model (:func:`tidegate.policy.cards.parse_card_name`), per model by the
    same rules; it still counts in ``nvidia.com/gpu``, which bounds workloads naming no model.
    """
    nominal: dict[_Key, int] = {}
    limits: dict[str, dict[_Key, int | None]] = {"borrowingLimit": {}, "lendingLimit": {}}
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group.flavors):
            model = _card_model(products.get(flavor.name), f"spec.resourceGroups[{g}]", problems)
            for r, quota in enumerate(flavor.resources):
                path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                name = quota.name
                keys_: list[_Key] = [("resource", name)]
                if model is not None and name == model.resource:
                    keys_.append(("card", model.name))
                amount = _amount(name, quota.nominal_quota, f"{path}.nominalQuota", problems)
                values = {
                    key: _amount(name, value, f"{path}.{key}", problems)
                    for key, value in (
                        ("borrowingLimit", quota.borrowing_limit),
                        ("lendingLimit", quota.lending_limit),
                    )
                }
                for dim in keys_:
                    nominal[dim] = nominal.get(dim, 0) + (amount or 0)
                    for key, limit in values.items():
                        summed = limits[key]
                        if limit is None or (dim in summed and summed[dim] is None):
                            summed[dim] = None
                        else:
                            summed[dim] = (summed.get(dim) or 0) + limit

    def named(summed: Mapping[_Key, int | None], kind: str) -> dict[str, int] | None:
        out = {n: a for (k, n), a in summed.items() if k == kind and a is not None}
        return out or None

    return TreeFields(
        nominal=named(nominal, "resource"),
        borrowing_limit=named(limits["borrowingLimit"], "resource"),
        lending_limit=named(limits["lendingLimit"], "resource"),
        card_nominal=named(nominal, "card"),
        card_borrowing_limit=named(limits["borrowingLimit"], "card"),
        card_lending_limit=named(limits["lendingLimit"], "card"),
        fair_weight=fair_weight(weight, "spec.fairSharing.weight", problems),
    )


def _card_model(product: str | None, path: str, problems: list[str]) -> CardModel | None:
    """The card model of whole GPUs on nodes labelled ``product``, as card quotas name it."""
    if product is None:
        return None
    try:
        return parse_card_name(product)
    except CardError as exc:
        problems.append(f"{path}: its ResourceFlavor's {GPU_PRODUCT_LABEL}: {exc}")
        return None


def _amount(name: str, value: object, path: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    try:
        return parse_quantity(name, value)
    except QuantityError as exc:
        problems.append(f"{path}: {exc}")
        return None


def _kueue(
    queues: Mapping[str, object], cohorts: Mapping[str, object], flavors: Mapping[str, object]
) -> _Family:
    family = _Family("Kueue")
    products = _flavor_products(flavors)
    for kind, objects, into in (
        ("ClusterQueue", queues, family.queues),
        ("Cohort", cohorts, family.cohorts),
    ):
        for raw in objects.values():
            meta = _meta(raw)
            if meta is not None:
                message = _kueue_node(raw, meta, kind == "ClusterQueue", products)
                into[meta.name] = _definition(message, meta, f"Kueue {kind}")
    return family


def _kueue_node(
    raw: object, meta: ObjectMeta, is_queue: bool, products: Mapping[str, str]
) -> QueueConfig | CohortConfig:
    """A Kueue ClusterQueue (``is_queue``) or Cohort: their resourceGroups and fairSharing are
    read alike; a ClusterQueue adds its cohort, queueing strategy and preemption policies."""
    where = f"Kueue {'ClusterQueue' if is_queue else 'Cohort'} {meta.name}"
    problems: list[str] = []
    node: KueueClusterQueue | KueueCohort | None = None
    try:
        node = decode(raw, KueueClusterQueue) if is_queue else decode(raw, KueueCohort)
    except ObjectError as exc:
        problems.append(describe_error(exc))
    tree = TreeFields()
    if node is not None:
        weight = node.spec.fair_sharing.weight if node.spec.fair_sharing is not None else None
        tree = _kueue_quotas(node.spec.resource_groups, products, weight, problems)
    queue = node if isinstance(node, KueueClusterQueue) else None
    cohort = node if isinstance(node, KueueCohort) else None
    strategy = queueing_strategy(queue.spec.queueing_strategy if queue else None, problems)
    policies = preemption(queue.spec.preemption if queue else None, problems)
    invalid = f"{where}: {'; '.join(problems)}" if problems else None
    if not is_queue:
        parent = (cohort.spec.parent_name or cohort.spec.parent or None) if cohort else None
        return CohortConfig(name=meta.name, parent=parent, invalid_reason=invalid, **asdict(tree))
    return QueueConfig(
        name=meta.name,
        strategy=strategy,
        parent=(queue.spec.cohort_name or queue.spec.cohort or None) if queue else None,
        preemption=policies,
        invalid_reason=invalid,
        **asdict(tree),
    )


def _local_queues(objects: Mapping[str, object]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for raw in objects.values():
        try:
            local = decode(raw, KueueLocalQueue)
        except ObjectError:
            continue  # names no ClusterQueue we can read: the workload keeps its queue name
        if local.spec.cluster_queue:
            out[(local.metadata.namespace, local.metadata.name)] = local.spec.cluster_queue
    return out


# --------------------------------------------------------------------------- Volcano and KAI


@dataclass
class _Node:
    """A Volcano or KAI queue read: its tidegate fields, before it is known to be a parent."""

    meta: ObjectMeta
    parent: str | None = None
    priority: int = 0
    reclaimable: bool = True
    capability: Resources | None = None
    card_quota: dict[str, int] | None = None
    nominal: Resources | None = None
    lending_limit: Resources | None = None
    fair_weight: float = 1.0
    problems: list[str] = field(default_factory=list)
    from_cluster: frozenset[str] = frozenset()
    """Resources whose ``nominal`` is the cluster's (a root's): children asking for more than
    that leave the root nothing of its own, and are no error."""
    implicit: bool = False
    """A root no object defines."""


def _volcano_node(raw: object, meta: ObjectMeta) -> _Node:
    node = _Node(meta)
    try:
        queue = decode(raw, VolcanoQueue)
    except ObjectError as exc:
        node.problems.append(describe_error(exc))
        return node
    spec = queue.spec
    problems = node.problems
    node.parent = spec.parent or None
    node.priority = spec.priority or 0
    node.reclaimable = True if spec.reclaimable is None else spec.reclaimable
    if spec.weight is not None:
        node.fair_weight = fair_weight(spec.weight, "spec.weight", problems)
    if spec.capability is not None:
        node.capability = parse_resource_list(spec.capability, "spec.capability", problems)
    if spec.deserved is not None:
        node.nominal = parse_resource_list(spec.deserved, "spec.deserved", problems)
    if spec.guarantee is not None and spec.guarantee.resource:
        guarantee = parse_resource_list(
            spec.guarantee.resource, "spec.guarantee.resource", problems
        )
        deserved = node.nominal or {}
        node.lending_limit = {
            name: max(deserved.get(name, 0) - amount, 0) for name, amount in guarantee.items()
        }
    node.card_quota = _annotation_cards(meta, problems)
    return node


def _annotation_cards(meta: ObjectMeta, problems: list[str]) -> dict[str, int] | None:
    text = meta.annotations.get(keys.VOLCANO_CARD_QUOTA)
    if text is None:
        return None
    path = f"annotation {keys.VOLCANO_CARD_QUOTA}"
    try:
        data: object = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        problems.append(f"{path}: {text!r} is not valid JSON ({exc})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}: {text!r} is not a JSON object of card model to count")
        return None
    return card_counts(data, path, problems)


def _kai_node(raw: object, meta: ObjectMeta) -> _Node:
    node = _Node(meta)
    try:
        queue = decode(raw, KaiQueue)
    except ObjectError as exc:
        node.problems.append(describe_error(exc))
        return node
    spec = queue.spec
    node.parent = spec.parent_queue or None
    node.priority = spec.priority or 0
    nominal: Resources = {}
    limit: Resources = {}
    given = spec.resources
    for kai_name, name in KAI_RESOURCES.items():
        resource: KaiQueueResource | None = getattr(given, kai_name) if given else None
        if resource is None:
            continue
        path = f"spec.resources.{kai_name}"
        for value, key, into in (
            (resource.quota, "quota", nominal),
            (resource.limit, "limit", limit),
        ):
            amount = _kai_amount(kai_name, value, f"{path}.{key}", node.problems)
            if amount is not None:
                into[name] = amount
        if kai_name == "gpu" and resource.over_quota_weight is not None:
            node.fair_weight = fair_weight(
                resource.over_quota_weight, f"{path}.overQuotaWeight", node.problems
            )
    node.nominal = nominal or None
    node.capability = limit or None
    return node


def _kai_amount(kai_name: str, value: float | None, path: str, problems: list[str]) -> int | None:
    """A KAI quota or limit in tidegate units; None for absent or -1 (unlimited)."""
    if value is None or value == -1:
        return None
    if value < 0:
        problems.append(f"{path}: {value:g} is negative (only -1, unlimited, is allowed)")
        return None
    try:
        amount = parse_decimal(value) * KAI_UNITS[kai_name]
    except QuantityError as exc:
        problems.append(f"{path}: {exc}")
        return None
    if kai_name == "gpu" and amount != amount.to_integral_value():
        problems.append(f"{path}: {value:g} is not a whole number of GPUs")
        return None
    return int(amount)


def _volcano(objects: Mapping[str, object], cluster: Mapping[str, int]) -> _Family:
    nodes = [
        _volcano_node(raw, meta) for raw in objects.values() if (meta := _meta(raw)) is not None
    ]
    return _parented(_rooted(nodes, VOLCANO_ROOT, cluster), "Volcano Queue")


def _kai(objects: Mapping[str, object], cluster: Mapping[str, int]) -> _Family:
    nodes = [_kai_node(raw, meta) for raw in objects.values() if (meta := _meta(raw)) is not None]
    return _parented(_rooted(nodes, KAI_ROOT, cluster), "KAI Queue")


def _rooted(nodes: Sequence[_Node], root: str, cluster: Mapping[str, int]) -> list[_Node]:
    """One family's queues under one root, as Volcano and KAI share the cluster among their
    top-level queues: every queue naming no parent goes under ``root`` (the queue of that name,
    or an implicit one), whose nominal quota is the cluster's for each resource a queue of
    the family names a nominal of (the root's own ``deserved`` where it names one). When no
    queue names a nominal there is nothing to share, and the queues stay as they are."""
    named = sorted({name for node in nodes for name in node.nominal or {}})
    top = next((node for node in nodes if node.meta.name == root), None)
    under = [node for node in nodes if node is not top and node.parent in (None, root)]
    if not named or not under:
        return list(nodes)
    given = (top.nominal or {}) if top is not None else {}
    pool = {name: cluster.get(name, 0) for name in named if name not in given}
    if top is None:
        top = _Node(ObjectMeta(name=root), implicit=True)
    rooted = replace(top, parent=None, nominal={**pool, **given}, from_cluster=frozenset(pool))
    return [
        rooted,
        *(
            replace(node, parent=root) if node.parent is None else node
            for node in nodes
            if node.meta.name != root
        ),
    ]


def _parented(nodes: Sequence[_Node], label: str) -> _Family:
    """Leaves become queues; a queue another names as its parent becomes a cohort whose own
    nominal quota is the parent's less its children's."""
    family = _Family(label)
    children: dict[str, list[_Node]] = {}
    for node in nodes:
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node)
    for node in nodes:
        name = node.meta.name
        source = f"{label} {name}"
        kids = children.get(name)
        if kids is None:
            problems = node.problems
            family.queues[name] = _definition(
                QueueConfig(
                    name=name,
                    priority=node.priority,
                    reclaimable=node.reclaimable,
                    quota=node.capability,
                    card_quota=node.card_quota,
                    parent=node.parent,
                    nominal=node.nominal,
                    lending_limit=node.lending_limit,
                    fair_weight=node.fair_weight,
                    invalid_reason=f"{source}: {'; '.join(problems)}" if problems else None,
                ),
                node.meta,
                label,
            )
            continue
        problems = list(node.problems)
        nominal = node.nominal
        if nominal is not None:
            given = res.total(kid.nominal or {} for kid in kids)
            own = res.subtract(nominal, {k: v for k, v in given.items() if k in nominal})
            for resource in sorted(own):
                if own[resource] < 0 and resource not in node.from_cluster:
                    names = ", ".join(sorted(kid.meta.name for kid in kids))
                    total = format_quantity(resource, given[resource])
                    own_total = format_quantity(resource, nominal[resource])
                    problems.append(
                        f"its children ({names}) are guaranteed {total} {resource} in all, "
                        f"more than its own {own_total}"
                    )
            nominal = {k: max(v, 0) for k, v in own.items()}
        family.cohorts[name] = _definition(
            CohortConfig(
                name=name,
                parent=node.parent,
                quota=node.capability,
                card_quota=node.card_quota,
                nominal=nominal,
                lending_limit=node.lending_limit,
                fair_weight=node.fair_weight,
                invalid_reason=f"{source}: {'; '.join(problems)}" if problems else None,
            ),
            node.meta,
            f"implicit {label}" if node.implicit else label,
        )
    return family
