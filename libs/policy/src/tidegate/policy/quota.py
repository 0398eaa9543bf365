"""Queue quotas: what each queue has in use, and whether a gang still fits under its quota.

A queue (:class:`tidegate.model.QueueConfig`) bounds what its admitted workloads may hold at
once, per resource (``quota``: cpu, memory, ``nvidia.com/gpu``, any extended resource) and per
GPU card model (``card_quota``). The rules, as users read them in docs/queues.md:

- ``quota`` None: no resource limit. A dict: each resource it names is bounded; a resource it
  does not name is not limited (Volcano's ``capability`` semantics, the field users write).
  GPUs used as cards of a card model are bounded by the card quota as well. Only resources the
  gang actually requests (amount > 0) are checked.
- ``card_quota`` None: no card limit. A dict: a model it does not name has card quota 0.
- A gang is charged whole at admission and released whole on completion, deletion or
  eviction; a second charge of the same workload replaces the first (idempotent replay).

This module is pure bookkeeping and arithmetic. It does not decide who is admitted (see
:mod:`tidegate.policy.admission`) nor what a card name means (:mod:`tidegate.policy.cards`).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tidegate.model import (
    CohortConfig,
    PodSetSpec,
    QueueConfig,
    Resources,
    WorkloadKey,
    format_quantity,
)
from tidegate.model import resources as res

QuotaReason = Literal["ExceedsQuota", "CardQuotaExceeded"]
"""The pending reason tokens a quota check can give."""


@dataclass(frozen=True, slots=True)
class QuotaRequest:
    """What a gang would add to its queue's usage if admitted."""

    resources: Resources = field(default_factory=dict)
    """Total requests of the gang (every pod placed), per resource."""
    cards: dict[str, int] = field(default_factory=dict)
    """Cards per card model."""
    card_resources: frozenset[str] = frozenset()
    """Resources this gang uses as cards of a model: governed by the card quota, and by
    ``quota`` only where ``quota`` names them."""


@dataclass(frozen=True, slots=True)
class Charge:
    """What one admitted workload holds against its queue."""

    queue: str
    resources: Resources = field(default_factory=dict)
    cards: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What a queue's admitted workloads hold, per resource and per card model."""

    resources: Resources = field(default_factory=dict)
    cards: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    """Why a gang does not fit under its queue's quota, with the numbers."""

    reason: QuotaReason
    queue: str
    name: str
    """The resource (ExceedsQuota) or card model (CardQuotaExceeded) that is short."""
    in_use: int
    requested: int
    quota: int
    node: Literal["queue", "cohort"] = "queue"
    """Whose ceiling it is: the queue's own, or a cohort's above it (:mod:`.queuetree`)."""

    @property
    def message(self) -> str:
        """A sentence for users, quantities in Kubernetes notation.

        "queue online: nvidia.com/gpu 12 in use + 8 requested > quota 16" or
        "queue online: NVIDIA-H200 cards 12 in use + 8 requested > card quota 16"; a cohort's
        ceiling reads "cohort research: …".
        """
        if self.reason == "CardQuotaExceeded":
            return (
                f"{self.node} {self.queue}: {self.name} cards {self.in_use} in use + "
                f"{self.requested} requested > card quota {self.quota}"
            )
        fmt = format_quantity
        return (
            f"{self.node} {self.queue}: {self.name} {fmt(self.name, self.in_use)} in use + "
            f"{fmt(self.name, self.requested)} requested > quota {fmt(self.name, self.quota)}"
        )


def gang_resources(podsets: Iterable[PodSetSpec]) -> Resources:
    """Total requests of every pod of ``podsets`` (count × per-pod requests), zeros dropped."""
    return res.non_zero(res.total(res.scale(p.requests, p.count) for p in podsets))


def check_quota(
    queue: QueueConfig | CohortConfig, usage: QueueUsage, request: QuotaRequest
) -> QuotaExceeded | None:
    """Return None if ``request`` fits under ``queue``'s quota on top of ``usage``, else why not.

    A :class:`~tidegate.model.CohortConfig` is checked the same way, ``usage`` then being what
    its whole subtree holds. Resources are checked before cards, each in name order, so the
    answer is deterministic.
    """
    node: Literal["queue", "cohort"] = "cohort" if isinstance(queue, CohortConfig) else "queue"
    if queue.quota is not None:
        for name in sorted(request.resources):
            amount = request.resources[name]
            if amount <= 0:
                continue
            if name not in queue.quota:
                # Like Volcano's capability: only the resources a queue names are capped.
                continue
            limit = queue.quota[name]
            in_use = usage.resources.get(name, 0)
            if in_use + amount > limit:
                return QuotaExceeded(
                    reason="ExceedsQuota",
                    queue=queue.name,
                    name=name,
                    in_use=in_use,
                    requested=amount,
                    quota=limit,
                    node=node,
                )
    if queue.card_quota is not None:
        for model in sorted(request.cards):
            cards = request.cards[model]
            if cards <= 0:
                continue
            limit = queue.card_quota.get(model, 0)
            in_use = usage.cards.get(model, 0)
            if in_use + cards > limit:
                return QuotaExceeded(
                    reason="CardQuotaExceeded",
                    queue=queue.name,
                    name=model,
                    in_use=in_use,
                    requested=cards,
                    quota=limit,
                    node=node,
                )
    return None


class QuotaLedger:
    """Quota usage per queue, kept as the sum of one :class:`Charge` per admitted workload.

    Charging an already charged workload replaces its charge, and releasing an unknown one is
    a no-op, so replaying admissions and releases in any order of duplicates is harmless.

    A workload whose pods run without an admission (they bypassed the gate) holds what they
    request (:meth:`charge_outside`) for as long as it holds no admission's charge: an admission
    charges the whole workload, bypassing pods included.
    """

    def __init__(self) -> None:
        """Start with nothing charged."""
        self._charges: dict[WorkloadKey, Charge] = {}
        self._outside: dict[WorkloadKey, Charge] = {}
        self._resources: dict[str, Resources] = {}
        self._cards: dict[str, dict[str, int]] = {}
        self.version = 0
        """Bumped whenever any queue's usage changes (for callers that cache what they
        derive from it)."""
        self.changed_at: dict[str, int] = {}
        """Per queue, :attr:`version` when its usage last changed."""

    def charge(self, key: WorkloadKey, charge: Charge) -> None:
        """Record that ``key`` holds ``charge`` (replacing any earlier charge of ``key``)."""
        self.release(key)
        outside = self._outside.get(key)
        if outside is not None:
            self._add(outside, -1)
        self._charges[key] = charge
        self._add(charge, 1)

    def release(self, key: WorkloadKey) -> Charge | None:
        """Give ``key``'s charge back to its queue; return it, or None if it held none."""
        charge = self._charges.pop(key, None)
        if charge is not None:
            self._add(charge, -1)
            outside = self._outside.get(key)
            if outside is not None:
                self._add(outside, 1)
        return charge

    def charge_outside(self, key: WorkloadKey, charge: Charge | None) -> None:
        """Record what ``key``'s pods that bypassed the gate hold (None: nothing), counted
        while ``key`` holds no admission's charge."""
        old = self._outside.pop(key, None)
        counted = key not in self._charges
        if old is not None and counted:
            self._add(old, -1)
        if charge is not None:
            self._outside[key] = charge
            if counted:
                self._add(charge, 1)

    def outside(self, key: WorkloadKey) -> Charge | None:
        """What ``key``'s pods that bypassed the gate hold, or None."""
        return self._outside.get(key)

    def charge_of(self, key: WorkloadKey) -> Charge | None:
        """What ``key`` holds, or None."""
        return self._charges.get(key)

    def holders(self, queue: str | None = None) -> list[WorkloadKey]:
        """Keys of the charged workloads (of one queue if given), sorted."""
        return sorted(k for k, c in self._charges.items() if queue is None or c.queue == queue)

    def usage(self, queue: str) -> QueueUsage:
        """What ``queue``'s admitted workloads, and pods that bypassed the gate, hold now."""
        return QueueUsage(
            resources=dict(self._resources.get(queue, {})),
            cards=dict(self._cards.get(queue, {})),
        )

    def check(self, queue: QueueConfig, request: QuotaRequest) -> QuotaExceeded | None:
        """:func:`check_quota` against this ledger's usage of ``queue``."""
        return check_quota(queue, self.usage(queue.name), request)

    def _add(self, charge: Charge, sign: int) -> None:
        self.version += 1
        self.changed_at[charge.queue] = self.version
        self._resources[charge.queue] = _accumulate(
            self._resources.get(charge.queue, {}), charge.resources, sign
        )
        self._cards[charge.queue] = _accumulate(
            self._cards.get(charge.queue, {}), charge.cards, sign
        )


def _accumulate(base: Mapping[str, int], delta: Mapping[str, int], sign: int) -> dict[str, int]:
    return res.non_zero(res.add(base, res.scale(delta, sign)))
