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

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from tidegate.bus import layout
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.connection import Bus
from tidegate.bus.errors import Permanent
from tidegate.bus.message import EXPECTED_LAST_SUBJECT_SEQUENCE, TTL

if TYPE_CHECKING:
    from tidegate.bus.fence import Fence

_VALID_KEY: Final = re.compile(r"^[-/_=.a-zA-Z0-9]+$")


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One key's current value and the revision that wrote it."""

    key: str
    value: bytes
    revision: int


class Ledger:
    """Get, put (optionally conditional on a revision), delete and list keys of a KV bucket."""

    def __init__(
        self, kv: KeyValue, bucket: str, *, bus: Bus | None = None, marker_ttl_seconds: float = 0
    ) -> None:
        """Wrap a KV handle; with ``bus`` and a positive ``marker_ttl_seconds`` delete markers
        expire after that long."""
        self._kv = kv
        self._bus = bus
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
        if self._bus is None or self._marker_ttl <= 0:
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
        if self._bus is not None and expiring:
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
        """Every key that currently has a value."""
        with wrapped(f"listing {self.bucket}"):
            try:
                return sorted(await self._kv.keys())
            except nats.js.errors.NoKeysError:
                return []

    async def entries(self) -> list[LedgerEntry]:
        """Every current entry (a consistent read per key, not a snapshot of the bucket)."""
        found = []
        for key in await self.keys():
            entry = await self.get(key)
            if entry is not None:
                found.append(entry)
        return found
