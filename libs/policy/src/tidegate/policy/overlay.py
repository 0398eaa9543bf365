"""Admission's own decisions that the capacity view does not show yet ("never double-book").

The topology-cache publishes each node's free capacity with ``applied_sequence``: the highest
admission decision sequence it has applied. Between admission deciding (sequence S) and the
cache's report of S for a node, the reported free capacity still counts the room S took as
free. The overlay keeps, per node, what each such decision took, and subtracts it from the
node's reported free capacity until that node (in that topology) reports a sequence ≥ S.

Contract with the topology-cache (docs/admission.md): a CapacityNode for node N with
``applied_sequence`` ≥ S reflects decision S's effect on N. Decisions are keyed by node, so a
decision made through one topology also shows in every other topology that holds the node.

If the cache does not republish a node a decision never touched in its own accounting (it may
spread a reservation above the hostname level differently), that entry would linger: the
service calls :meth:`Overlay.expire` with the cache's global watermark to drop entries the
cache has long applied. Lingering is conservative (room held too long), never a double booking.

This module holds no views and does no placement; :mod:`tidegate.policy.capacity` applies it.
"""

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidegate.model import NodeName, Resources
from tidegate.model import resources as res


@dataclass(frozen=True, slots=True)
class OverlayEntry:
    """What one decision took on one node."""

    sequence: int
    amount: Resources
    added_at: float


class Overlay:
    """Per-node reservations of decisions not yet reported applied, per topology."""

    def __init__(self) -> None:
        """Start empty."""
        self._entries: dict[NodeName, list[OverlayEntry]] = {}
        self._reported: dict[NodeName, dict[str, int]] = {}
        # Every entry ever added, by sequence, so expiry looks only at the oldest ones.
        self._by_sequence: list[tuple[int, NodeName, OverlayEntry]] = []

    def add(self, sequence: int, usage: Mapping[NodeName, Resources], *, at: float = 0.0) -> None:
        """Record that decision ``sequence`` took ``usage`` (node → resources).

        A node whose every topology already reported ``sequence`` applied gets no entry (a
        decision restored from the ledger after the cache caught up).
        """
        for node, amount in usage.items():
            reported = self._reported.get(node)
            if reported and min(reported.values()) >= sequence:
                continue
            if any(v for v in amount.values()):
                entry = OverlayEntry(sequence=sequence, amount=dict(amount), added_at=at)
                entries = self._entries.setdefault(node, [])
                entries.insert(bisect.bisect_right(entries, sequence, key=_sequence), entry)
                item = (sequence, node, entry)
                bisect.insort_right(self._by_sequence, item, key=lambda i: i[0])

    def report(self, topology: str, node: NodeName, applied_sequence: int) -> Resources:
        """Record that ``topology``'s view of ``node`` reflects decisions ≤ ``applied_sequence``.

        Returns what is still pending on the node in that topology (to subtract from the free
        capacity just reported).
        """
        reported = self._reported.setdefault(node, {})
        reported[topology] = max(applied_sequence, reported.get(topology, applied_sequence))
        self._collect(node)
        return self.pending(topology, node)

    def pending(self, topology: str, node: NodeName) -> Resources:
        """What decisions not yet reported applied by ``topology`` hold on ``node``."""
        seen = self._reported.get(node, {}).get(topology, -1)
        return res.total(e.amount for e in self._entries.get(node, ()) if e.sequence > seen)

    def forget(self, topology: str, node: NodeName) -> None:
        """``node`` left ``topology``'s view: its reports there no longer hold entries back."""
        reported = self._reported.get(node)
        if reported is not None:
            reported.pop(topology, None)
            if not reported:
                del self._reported[node]
            self._collect(node)

    def expire(self, *, watermark: int, before: float) -> list[NodeName]:
        """Drop entries with sequence ≤ ``watermark`` added before ``before``; return the nodes
        whose pending amounts changed."""
        changed: set[NodeName] = set()
        kept: list[tuple[int, NodeName, OverlayEntry]] = []
        index = 0
        while index < len(self._by_sequence) and self._by_sequence[index][0] <= watermark:
            sequence, node, entry = self._by_sequence[index]
            index += 1
            entries = self._entries.get(node, [])
            if not any(e is entry for e in entries):
                continue  # already dropped when its node reported it
            if entry.added_at >= before:
                kept.append((sequence, node, entry))
                continue
            self._set(node, [e for e in entries if e is not entry])
            changed.add(node)
        self._by_sequence[:index] = kept
        return sorted(changed)

    def nodes(self) -> list[NodeName]:
        """Nodes with entries, sorted."""
        return sorted(self._entries)

    def entries(self, node: NodeName) -> list[OverlayEntry]:
        """The entries held on ``node``, by sequence."""
        return list(self._entries.get(node, ()))

    def __len__(self) -> int:
        """Number of (decision, node) entries held."""
        return sum(len(entries) for entries in self._entries.values())

    def _collect(self, node: NodeName) -> None:
        reported = self._reported.get(node)
        entries = self._entries.get(node)
        if not entries or not reported:
            return
        applied_everywhere = min(reported.values())
        self._set(node, [e for e in entries if e.sequence > applied_everywhere])

    def _set(self, node: NodeName, entries: Iterable[OverlayEntry]) -> None:
        kept = list(entries)
        if kept:
            self._entries[node] = kept
        else:
            self._entries.pop(node, None)


def _sequence(entry: OverlayEntry) -> int:
    return entry.sequence
