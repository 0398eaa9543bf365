"""Which capacity records to publish, on which subjects, with which event ids.

The capacity stream keeps the last record per subject. :class:`PublishedView` remembers what
the stream holds (replayed from the stream at start, then updated after every stored publish)
and :meth:`PublishedView.plan` publishes a record only when its content differs from that, or
when a decision concerned the node (so admission sees the decision's sequence there and drops
its overlay). A node that left a topology gets a ``tombstone`` on its subject; a domain that
lost its last node gets a record with ``nodes: 0`` and nothing free (a tombstone there would
name no object kind admission expects).

Event ids are deterministic: the position in the input streams the record reflects plus the
subject, so a retried publish of the same record is dropped by JetStream's deduplication, and
two different records for one subject never share an id.

Pure: no I/O. :mod:`tidegate.topology_cache.app` sends what :meth:`PublishedView.plan` returns.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tidegate.model import CapacityDomain, CapacityNode, Envelope, Message, Tombstone, subjects
from tidegate.model.subjects import untoken
from tidegate.placement.accounting import (
    CapacityAccounting,
    CapacityKey,
    CapacityRecord,
    NodeKey,
    key_of,
    same_content,
)

SOURCE: Final = "topology-cache"
"""The ``source`` of every envelope this service publishes."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish, and what its subject holds once it is stored."""

    key: CapacityKey
    subject: str
    envelope: Envelope
    record: CapacityRecord | None
    """The record the subject then holds; None for a tombstone or an empty domain."""


def subject_of(cluster: str, key: CapacityKey) -> str:
    """The capacity subject of ``key``."""
    if isinstance(key, NodeKey):
        return subjects.capacity_node(cluster, key.topology, key.node)
    return subjects.capacity_domain(cluster, key.topology, key.level, list(key.path))


def node_key_of_subject(subject: str) -> NodeKey | None:
    """The key named by ``tg.<c>.capacity.<topology>.node.<name>``, else None."""
    parts = subject.split(".")
    if len(parts) == 6 and parts[2] == "capacity" and parts[4] == "node":
        return NodeKey(untoken(parts[3]), untoken(parts[5]))
    return None


class PublishedView:
    """What the capacity stream holds for one cluster, and what to publish to change it."""

    def __init__(self, cluster: str) -> None:
        """Start knowing nothing is held (call :meth:`replayed` for each stored message)."""
        self.cluster = cluster
        self._held: dict[CapacityKey, CapacityRecord] = {}

    def replayed(self, subject: str, body: Message) -> bool:
        """Take in one message read back from the capacity stream; False if it is not a
        capacity record or tombstone (ignored)."""
        match body:
            case CapacityNode() | CapacityDomain():
                self._remember(key_of(body), body)
            case Tombstone():
                key = node_key_of_subject(subject)
                if key is None:
                    return False
                self._held.pop(key, None)
            case _:
                return False
        return True

    def held(self, key: CapacityKey) -> CapacityRecord | None:
        """The record the stream holds for ``key`` (None: nothing, or an empty domain)."""
        return self._held.get(key)

    def keys(self) -> set[CapacityKey]:
        """Keys of every record the stream holds."""
        return set(self._held)

    def __len__(self) -> int:
        """Number of records held."""
        return len(self._held)

    def plan(
        self,
        accounting: CapacityAccounting,
        keys: Iterable[CapacityKey],
        *,
        touched: Iterable[CapacityKey] = (),
        position: str,
        now: float,
    ) -> list[Outgoing]:
        """Messages that make the stream hold the accounting's records for ``keys``.

        ``touched`` keys are published even when their content is unchanged (a decision
        concerned them). ``position`` identifies the inputs the records reflect (it goes into
        the event ids); ``now`` is the envelope time.
        """
        always = set(touched)
        out: list[Outgoing] = []
        for key in sorted(set(keys), key=_order):
            current = accounting.record(key)
            if isinstance(current, CapacityDomain) and current.nodes == 0 and not current.free:
                current = None
            previous = self._held.get(key)
            if current is None:
                if previous is None:
                    continue
                body: Message = _removal(previous, accounting.applied_sequence)
            elif key in always or not same_content(previous, current):
                body = current
            else:
                continue
            subject = subject_of(self.cluster, key)
            envelope = Envelope(
                event_id=f"{SOURCE}:{position}:{subject}",
                cluster=self.cluster,
                source=SOURCE,
                time=now,
                body=body,
            )
            out.append(Outgoing(key=key, subject=subject, envelope=envelope, record=current))
        return out

    def stored(self, item: Outgoing) -> None:
        """Record that JetStream stored ``item``."""
        if item.record is None:
            self._held.pop(item.key, None)
        else:
            self._remember(item.key, item.record)

    def _remember(self, key: CapacityKey, record: CapacityRecord) -> None:
        if isinstance(record, CapacityDomain) and record.nodes == 0 and not record.free:
            self._held.pop(key, None)
        else:
            self._held[key] = record


def _removal(previous: CapacityRecord, applied_sequence: int) -> Message:
    if isinstance(previous, CapacityNode):
        return Tombstone(object_kind="node", name=previous.node)
    return CapacityDomain(
        topology=previous.topology,
        level=previous.level,
        domain=list(previous.domain),
        free={},
        nodes=0,
        applied_sequence=applied_sequence,
    )


def _order(key: CapacityKey) -> tuple[int, str]:
    # Nodes first, so a node's new record is stored before the domain sums that include it.
    return (0 if isinstance(key, NodeKey) else 1, repr(key))
