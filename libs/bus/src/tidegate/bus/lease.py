"""A single-writer lease on the leases KV bucket, with a fencing epoch.

Why: admission must have exactly one deciding instance; the others stand by. The lease is
one key (the role, e.g. ``admission``) in ``tidegate-<cluster>-leases``:

* **acquire** writes the key only if it is absent (expected last subject sequence 0, or the
  revision of its delete marker), so of two contenders exactly one succeeds;
* **renew** rewrites it only if it still holds *our* revision, so a holder that was paused
  past its TTL and replaced finds out (:class:`LeaseLost`) instead of overwriting the new
  holder: a stale holder's write is rejected by the server;
* **TTL**: every write carries a per-message TTL (``Nats-TTL``, JetStream 2.11+), so the server
  itself removes the key when the holder stops renewing; no clocks are compared between
  machines. JetStream's TTL granularity is one second: TTLs are rounded up to whole seconds.
* **epoch**: the stream sequence of the write that acquired the lease. Sequences only grow, so
  every new holder has a larger epoch than all earlier ones. Put the epoch in what you write
  (``Admitted.epoch``) to say which tenure wrote it. No reader filters on it: what stops a
  deposed leader is a :class:`~tidegate.bus.fence.Fence` on its writes.

What it does not do: make an unrelated write atomic with holding the lease. Check
:meth:`Lease.check` before a critical write and carry the epoch in the write itself.
"""

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats.errors
import nats.js.errors

from tidegate.bus import layout
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.connection import Bus
from tidegate.bus.errors import BusError, Conflict, LeaseLost, LeaseUnconfirmed, Unavailable
from tidegate.bus.message import EXPECTED_LAST_SUBJECT_SEQUENCE, TTL

log = logging.getLogger(__name__)


def default_holder_id() -> str:
    """A holder id unique to this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, kw_only=True)
class LeaseSettings:
    """One lease: which role, who wants it, and how long it lasts without renewal."""

    name: str
    """The role, one KV key (e.g. ``admission``)."""
    holder: str
    """This contender's id; unique per process (see :func:`default_holder_id`)."""
    ttl_seconds: float = 10.0
    """The key disappears this long after the last renewal (rounded up to whole seconds)."""
    renew_every_seconds: float | None = None
    """Renewal interval; default a third of the TTL."""
    acquire_poll_seconds: float = 1.0
    """How often a standby tries to take the lease."""

    def __post_init__(self) -> None:
        if self.ttl_seconds < 1:
            raise ValueError(f"lease {self.name}: ttl_seconds must be at least 1")

    @property
    def renew_interval(self) -> float:
        """Seconds between renewals."""
        if self.renew_every_seconds is not None:
            return self.renew_every_seconds
        return self.ttl_seconds / 3


@dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """What the lease key holds (JSON), readable with ``nats kv get``."""

    holder: str
    epoch: int
    ttl_seconds: float
    acquired_at: float
    renewed_at: float

    def encode(self) -> bytes:
        """JSON bytes of the record."""
        return json.dumps(self.__dict__).encode()


_RECORD_FIELDS = tuple(LeaseRecord.__dataclass_fields__)


class Lease:
    """A lease on ``settings.name`` in the leases bucket of ``cluster``.

    Typical use in a single-writer service::

        lease = Lease(bus, cluster=cluster, settings=LeaseSettings(name="admission", holder=me))
        await lease.acquire()              # standby until we hold it
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(lease.keep_alive())  # raises LeaseLost: the service stops deciding
            ...                             # decide, stamping lease.epoch on every decision
    """

    def __init__(self, bus: Bus, *, cluster: str, settings: LeaseSettings) -> None:
        self._bus = bus
        self.settings = settings
        self._bucket = layout.leases_bucket(cluster)
        self._subject = f"$KV.{self._bucket}.{settings.name}"
        self._revision = 0
        self._epoch = 0
        self._acquired_at = 0.0
        self._renewed_at = 0.0

    @property
    def epoch(self) -> int:
        """The fencing epoch of our tenure (0 when we have never held the lease)."""
        return self._epoch

    @property
    def revision(self) -> int:
        """The KV revision of our last write (our renewals change it; the epoch stays)."""
        return self._revision

    @property
    def held(self) -> bool:
        """True if we hold the lease as far as we know: acquired, and the last successful
        write was *sent* less than the TTL ago (so the server cannot have expired it yet)."""
        return self._revision > 0 and self.remaining_seconds > 0

    @property
    def remaining_seconds(self) -> float:
        """Seconds until the lease may have expired on the server (0 when not held).

        Counted from when the last successful acquire or renewal was sent: the server stores
        the write, and starts its TTL, no earlier than that.
        """
        if self._revision == 0:
            return 0.0
        return max(0.0, self._renewed_at + self.settings.ttl_seconds - time.monotonic())

    def ensure_held(self, margin_seconds: float = 0.0) -> float:
        """The seconds the lease is held beyond ``margin_seconds``; raises unless there are
        some: :class:`LeaseLost` when it is not held at all (lost, or past its TTL),
        :class:`LeaseUnconfirmed` (retryable) when it is but less than the margin is left (a
        renewal is overdue).

        No I/O: for writes the bus cannot fence (Kubernetes), checked right before each one
        (a :data:`tidegate.kube.WriteGuard`: before every attempt, which it bounds).
        """
        remaining = self.remaining_seconds
        if remaining <= 0:
            raise LeaseLost(
                f"lease {self.settings.name} (epoch {self._epoch}) is not held "
                f"(renewal overdue past the TTL, or lost)"
            )
        if remaining <= margin_seconds:
            raise LeaseUnconfirmed(
                f"lease {self.settings.name}: only {remaining:.1f}s confirmed (a renewal is "
                f"overdue); write held back"
            )
        return remaining - margin_seconds

    def _ttl_header(self) -> str:
        return f"{math.ceil(self.settings.ttl_seconds)}s"

    async def _write(self, record: LeaseRecord, expected: int) -> int:
        headers = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected), TTL: self._ttl_header()}
        try:
            ack = await self._bus.jetstream.publish(self._subject, record.encode(), headers=headers)
        except (TimeoutError, nats.errors.Error) as exc:
            raise translate(exc, f"writing lease {self.settings.name}") from exc
        return ack.seq

    async def current(self) -> tuple[LeaseRecord | None, int]:
        """The record in the key now and the revision to expect when replacing it.

        ``(None, revision)`` when the key is absent (revision 0) or deleted (the revision of
        its delete marker).
        """
        kv = await self._bus.key_value(self._bucket)
        with wrapped(f"reading lease {self.settings.name}"):
            try:
                entry = await kv.get(self.settings.name)
            except nats.js.errors.KeyNotFoundError as exc:
                deleted_at = exc.entry.revision if exc.entry is not None else 0
                return None, deleted_at or 0
        try:
            fields = json.loads(entry.value or b"{}")
            # Fields a newer tidegate may add are ignored, like everywhere on the bus.
            record = LeaseRecord(**{key: fields[key] for key in _RECORD_FIELDS if key in fields})
        except (TypeError, ValueError, AttributeError) as exc:
            raise BusError(f"lease {self.settings.name} holds an unreadable record: {exc}") from exc
        return record, entry.revision or 0

    async def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True if we hold it now."""
        now = time.time()
        for _ in range(3):
            holder, expected = await self.current()
            if holder is not None:
                return holder.holder == self.settings.holder and self.held
            record = LeaseRecord(
                holder=self.settings.holder,
                epoch=0,
                ttl_seconds=self.settings.ttl_seconds,
                acquired_at=now,
                renewed_at=now,
            )
            sent = time.monotonic()
            try:
                revision = await self._write(record, expected)
            except Conflict:
                continue  # someone else wrote between our read and our write: look again
            self._revision = self._epoch = revision
            self._acquired_at = now
            self._renewed_at = sent
            # Record the epoch in the value as well, for humans reading the bucket.
            await self._renew_once()
            log.info(
                "lease %s acquired by %s (epoch %d)",
                self.settings.name,
                self.settings.holder,
                self._epoch,
                extra={"lease": self.settings.name, "epoch": self._epoch},
            )
            return True
        return False

    async def acquire(self) -> int:
        """Wait until we hold the lease (standby meanwhile); returns the epoch."""
        while True:
            if await self.try_acquire():
                return self._epoch
            await asyncio.sleep(self.settings.acquire_poll_seconds)

    async def _renew_once(self) -> None:
        record = LeaseRecord(
            holder=self.settings.holder,
            epoch=self._epoch,
            ttl_seconds=self.settings.ttl_seconds,
            acquired_at=self._acquired_at,
            renewed_at=time.time(),
        )
        # The server's TTL runs from when it stores the write, which is after we send it and
        # may be long before its acknowledgement reaches us: our clock starts at the send.
        sent = time.monotonic()
        try:
            self._revision = await self._write(record, self._revision)
        except Conflict as exc:
            self._revision = 0
            raise LeaseLost(
                f"lease {self.settings.name} (epoch {self._epoch}) was taken over or expired"
            ) from exc
        self._renewed_at = sent

    async def renew(self) -> None:
        """Extend the lease by its TTL; :class:`LeaseLost` if it is no longer ours."""
        if self._revision == 0:
            raise LeaseLost(f"lease {self.settings.name} is not held")
        await self._renew_once()

    async def keep_alive(self) -> None:
        """Renew forever; raises :class:`LeaseLost` when the lease is gone.

        If NATS is unreachable the lease is kept trying until the TTL has passed since the
        last successful renewal: from then on another holder may have it, so we stop.
        """
        while True:
            await asyncio.sleep(self.settings.renew_interval)
            try:
                await self.renew()
            except Unavailable as exc:
                if not self.held:
                    self._revision = 0
                    raise LeaseLost(
                        f"lease {self.settings.name}: could not renew within the TTL ({exc})"
                    ) from exc
                log.warning("lease %s: renewal failed, retrying: %s", self.settings.name, exc)

    async def check(self) -> None:
        """Raise :class:`LeaseLost` unless the key still holds our latest write."""
        _, revision = await self.current()
        if self._revision == 0 or revision != self._revision:
            self._revision = 0
            raise LeaseLost(f"lease {self.settings.name} (epoch {self._epoch}) is no longer ours")

    async def release(self) -> None:
        """Give the lease up at once (a standby need not wait for the TTL). Never raises
        for a lease that is already lost."""
        if self._revision == 0:
            return
        kv = await self._bus.key_value(self._bucket)
        with contextlib.suppress(BusError), wrapped(f"releasing lease {self.settings.name}"):
            await kv.delete(self.settings.name, last=self._revision)
        self._revision = 0

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[int]:
        """``async with lease.holding() as epoch:`` acquire, and release on exit.

        Renewal is not started here: run :meth:`keep_alive` beside the work.
        """
        epoch = await self.acquire()
        try:
            yield epoch
        finally:
            await self.release()
