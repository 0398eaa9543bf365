"""The admission ledger: a KV map from key (e.g. a workload key) to bytes, with revisions.

Why: admission's record of what it admitted must survive restarts and leader changes, and a
write must not overwrite one it has not seen. Every write can name the revision it expects
(optimistic concurrency): a mismatch raises :class:`Conflict` (re-read, decide again). The
values are opaque bytes; the caller picks the encoding (admission uses msgspec JSON).
Keys may hold letters, digits and ``-/_=.``; a workload key ``ns/name`` is valid as is.

A deleted key leaves a delete marker; opened with :meth:`Ledger.open`, the marker expires
after the bus's ``tombstone_ttl_seconds`` (per-message TTL), so the bucket — and every
takeover that reads it — stays proportional to the live keys.
"""

import contextlib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KeyValue

from tidegate.bus import layout
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.connection import Bus
from tidegate.bus.errors import Permanent
from tidegate.bus.message import EXPECTED_LAST_SUBJECT_SEQUENCE, TTL

if TYPE_CHECKING:
    from tidegate.bus.fence import Fence

_VALID_KEY: Final = re.compile(r"^[-/_=.a-zA-Z0-9]+$")

LIST_WAIT_SECONDS: Final = 10.0
"""How long listing the keys waits for the next one the server announced (and how long its
consumer lives on if it could not be deleted)."""


def is_deletion(headers: dict[str, str] | None) -> bool:
    """Whether a KV message with ``headers`` removes its key (a delete or purge by a client,
    or a marker the server placed when a value or marker expired)."""
    if not headers:
        return False
    return headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One key's current value and the revision that wrote it."""

    key: str
    value: bytes
    revision: int


class Ledger:
    """Get, put (optionally conditional on a revision), delete and list keys of a KV bucket."""

    def __init__(
        self, kv: KeyValue, bucket: str, *, bus: Bus, marker_ttl_seconds: float = 0
    ) -> None:
        """Wrap the KV handle of ``bucket`` on ``bus``; with a positive ``marker_ttl_seconds``
        delete markers expire after that long."""
        self._kv = kv
        self._bus = bus
        self._prefix = f"$KV.{bucket}."
        self._marker_ttl = marker_ttl_seconds
        self.bucket = bucket
        """The KV bucket's name."""

    @classmethod
    async def open(cls, bus: Bus, cluster: str) -> Self:
        """The ledger of ``cluster`` (its bucket is created by ``Bus.ensure_layout``)."""
        bucket = layout.ledger_bucket(cluster)
        return cls(
            await bus.key_value(bucket),
            bucket,
            bus=bus,
            marker_ttl_seconds=bus.settings.tombstone_ttl_seconds,
        )

    def marker_headers(self) -> dict[str, str]:
        """Headers a delete marker of this ledger carries (its TTL, when it expires)."""
        if self._marker_ttl <= 0:
            return {}
        return {TTL: f"{math.ceil(self._marker_ttl)}s"}

    def _check(self, key: str) -> None:
        if not _VALID_KEY.match(key) or key.startswith(".") or key.endswith("."):
            raise Permanent(
                f"ledger key {key!r} is not valid: use letters, digits and -/_=. "
                "(not starting or ending with a dot)"
            )

    async def get(self, key: str) -> LedgerEntry | None:
        """The current entry, or None if the key is absent or deleted."""
        self._check(key)
        with wrapped(f"reading ledger key {key}"):
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
        return LedgerEntry(key=key, value=entry.value or b"", revision=entry.revision or 0)

    async def put(
        self, key: str, value: bytes, *, revision: int | None = None, fence: "Fence | None" = None
    ) -> int:
        """Write ``value``; returns the new revision.

        ``revision=None`` writes unconditionally; ``revision=0`` only if the key does not
        exist; ``revision=N`` only if N is the key's current revision. Otherwise
        :class:`Conflict`. With ``fence`` (a :class:`~tidegate.bus.fence.Fence` on this
        bucket) the write is stored only while the fence's claim stands, else
        :class:`LeaseLost`; ``revision`` must then be None (one condition per write).
        """
        self._check(key)
        if fence is not None:
            if revision is not None:
                raise ValueError("a fenced ledger write cannot also check a revision")
            return await fence.put_raw(f"$KV.{self.bucket}.{key}", value)
        with wrapped(f"writing ledger key {key}"):
            if revision is None:
                return await self._kv.put(key, value)
            if revision == 0:
                return await self._kv.create(key, value)
            return await self._kv.update(key, value, last=revision)

    async def delete(
        self, key: str, *, revision: int | None = None, fence: "Fence | None" = None
    ) -> None:
        """Delete ``key`` (only if its revision is ``revision``, when given; only while
        ``fence``'s claim stands, when given: see :meth:`put`)."""
        self._check(key)
        if fence is not None:
            if revision is not None:
                raise ValueError("a fenced ledger delete cannot also check a revision")
            await fence.put_raw(
                f"$KV.{self.bucket}.{key}", b"", delete=True, headers=self.marker_headers()
            )
            return
        expiring = self.marker_headers()
        if expiring:
            headers = {"KV-Operation": "DEL", **expiring}
            if revision is not None:
                headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(revision)
            try:
                await self._bus.jetstream.publish(f"$KV.{self.bucket}.{key}", b"", headers=headers)
            except (TimeoutError, nats.errors.Error) as exc:
                raise translate(exc, f"deleting ledger key {key}") from exc
            return
        with wrapped(f"deleting ledger key {key}"):
            await self._kv.delete(key, last=revision)

    async def keys(self) -> list[str]:
        """Every key that currently has a value.

        Read with an ordered consumer of each key's last message until the server says none
        is pending. Not nats-py's ``KeyValue.keys()``: it decides "nothing to list" from the
        messages the client has received when the consumer's info arrives, so it can list no
        keys for a bucket that has some (a successor would then take over an empty ledger).
        """
        subject = f"{self._prefix}>"
        found: set[str] = set()
        with wrapped(f"listing {self.bucket}"):
            subscription = await self._bus.jetstream.subscribe(
                subject,
                stream=f"KV_{self.bucket}",
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                headers_only=True,
                inactive_threshold=LIST_WAIT_SECONDS,
            )
            consumer: str | None = None
            try:
                info = await subscription.consumer_info()
                consumer = info.name
                delivered = info.delivered.consumer_seq if info.delivered else 0
                if not info.num_pending and not delivered:
                    return []
                while True:
                    msg = await subscription.next_msg(timeout=LIST_WAIT_SECONDS)
                    key = msg.subject[len(self._prefix) :]
                    if is_deletion(msg.headers):
                        found.discard(key)
                    else:
                        found.add(key)
                    if msg.metadata.num_pending == 0:
                        break
            finally:
                # Consumers outlive their subscription: delete it rather than leave one per
                # listing until the server reaps it (the server limits how many there are).
                with contextlib.suppress(nats.errors.Error):
                    await subscription.unsubscribe()
                    if consumer is not None:
                        await self._bus.jetstream.delete_consumer(f"KV_{self.bucket}", consumer)
        return sorted(found)

    async def entries(self) -> list[LedgerEntry]:
        """Every current entry (a consistent read per key, not a snapshot of the bucket)."""
        found = []
        for key in await self.keys():
            entry = await self.get(key)
            if entry is not None:
                found.append(entry)
        return found
