"""Server-enforced fencing of a lease holder's writes: a deposed leader's write is refused.

Why: a lease tells a leader when it *may* write, but a leader paused past its TTL (GC, a
stopped VM, SIGSTOP) wakes up believing it still leads, and its next write would land after
its successor's. The epoch in a message only lets readers drop it afterwards; a :class:`Fence`
makes JetStream itself refuse the write.

How: a fence is one *marker* subject in the stream written to (``tg.<c>.fence.<role>`` in the
decision stream, the key ``fence.<role>`` in the ledger bucket). A new leader **claims** it
right after acquiring the lease: it writes ``{"holder", "epoch"}`` there, only if the marker
holds no newer epoch (compare-and-set on the marker's last sequence), and remembers the
sequence of its claim. Every fenced write then carries ``Nats-Expected-Last-Subject-Sequence:
<claim>`` with ``Nats-Expected-Last-Subject-Sequence-Subject: <marker>`` (nats-server 2.11+):
the server stores it only while the marker's newest message is still our claim. Once a
successor has claimed, every write of the old leader fails, whatever its clock says.

A claim that has disappeared (the decision stream's age limit removed the marker) is renewed
on the next write if, and only if, the lease is still ours (:meth:`Lease.check`); a marker
holding a newer epoch raises :class:`LeaseLost`.

Writes the bus cannot fence (the Kubernetes API) use :meth:`Lease.ensure_held` instead.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeVar

import nats.errors
import nats.js.errors

from tidegate.bus import layout
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.connection import Bus, message_headers
from tidegate.bus.errors import Conflict, LeaseLost
from tidegate.bus.lease import Lease
from tidegate.bus.message import EXPECTED_LAST_SUBJECT_SEQUENCE, Published
from tidegate.model import Envelope, codec
from tidegate.telemetry import producer_span

log = logging.getLogger(__name__)

EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: Final = "Nats-Expected-Last-Subject-Sequence-Subject"
"""With the expected-last-subject-sequence header: the subject whose last sequence is checked."""
KV_OPERATION: Final = "KV-Operation"
"""The KV delete-marker header (value ``DEL``), as nats clients write it."""

T = TypeVar("T")


class Fence:
    """One lease holder's claim on one marker subject of one stream (module docstring)."""

    def __init__(self, bus: Bus, lease: Lease, *, stream: str, marker: str) -> None:
        """A fence on ``marker`` (a subject of ``stream``) for the holder of ``lease``;
        :meth:`claim` before the first write."""
        self._bus = bus
        self._lease = lease
        self.stream = stream
        self.marker = marker
        self._claimed = 0
        # One fenced write in flight at a time: a clustered stream refuses a write whose
        # expected-last-subject-sequence names a subject another in-flight write also names
        # (error 10164), so concurrent fenced writes would refuse each other.
        self._lock = asyncio.Lock()

    @classmethod
    def on_decisions(cls, bus: Bus, lease: Lease, *, cluster: str) -> "Fence":
        """The fence of ``lease``'s role in the decision stream of ``cluster``."""
        return cls(
            bus,
            lease,
            stream=layout.decisions_stream(cluster),
            marker=layout.fence_subject(cluster, lease.settings.name),
        )

    @classmethod
    def on_ledger(cls, bus: Bus, lease: Lease, *, cluster: str) -> "Fence":
        """The fence of ``lease``'s role in the ledger bucket of ``cluster``."""
        bucket = layout.ledger_bucket(cluster)
        return cls(
            bus,
            lease,
            stream=f"KV_{bucket}",
            marker=f"$KV.{bucket}.{layout.ledger_fence_key(lease.settings.name)}",
        )

    @property
    def sequence(self) -> int:
        """The stream sequence of our claim (0 before :meth:`claim`)."""
        return self._claimed

    async def _marker_now(self) -> tuple[int, int]:
        """(epoch written in the marker, its sequence); (0, 0) when there is none."""
        with wrapped(f"reading fence {self.marker}"):
            try:
                msg = await self._bus.jetstream.get_last_msg(self.stream, self.marker)
            except nats.js.errors.NotFoundError:
                return 0, 0
        try:
            epoch = int(json.loads(msg.data or b"{}").get("epoch", 0))
        except (ValueError, TypeError, AttributeError):
            epoch = 0
        return epoch, msg.seq or 0

    async def claim(self) -> int:
        """Write our epoch into the marker unless a newer one is there; returns the claim's
        sequence. Raises :class:`LeaseLost` when a newer holder has claimed."""
        mine = self._lease.epoch
        for _ in range(5):
            epoch, sequence = await self._marker_now()
            if epoch > mine:
                self._claimed = 0
                raise LeaseLost(
                    f"fence {self.marker}: epoch {epoch} claimed it after ours ({mine})"
                )
            body = json.dumps({"holder": self._lease.settings.holder, "epoch": mine}).encode()
            headers = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(sequence)}
            try:
                ack = await self._bus.jetstream.publish(self.marker, body, headers=headers)
            except (TimeoutError, nats.errors.Error) as exc:
                error = translate(exc, f"claiming fence {self.marker}")
                if isinstance(error, Conflict):
                    continue  # someone wrote it meanwhile: look again
                raise error from exc
            self._claimed = ack.seq
            log.info(
                "fence %s claimed for epoch %d (sequence %d)",
                self.marker,
                mine,
                ack.seq,
                extra={"fence": self.marker, "epoch": mine},
            )
            return ack.seq
        raise LeaseLost(f"fence {self.marker}: could not claim it (others keep writing)")

    def headers(self) -> dict[str, str]:
        """The headers that make a write to :attr:`stream` conditional on our claim."""
        if self._claimed == 0:
            raise LeaseLost(f"fence {self.marker} is not claimed by this instance")
        return {
            EXPECTED_LAST_SUBJECT_SEQUENCE: str(self._claimed),
            EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: self.marker,
        }

    async def write(self, what: str, attempt: Callable[[Mapping[str, str]], Awaitable[T]]) -> T:
        """Run ``attempt(fence_headers)`` (one JetStream publish into :attr:`stream`); fenced
        writes of one fence are sent one at a time (see ``_lock``).

        A refusal of the fence raises :class:`LeaseLost` when another holder has claimed; when
        our claim merely disappeared (age limit) and the lease is still ours, the fence is
        claimed again and the write retried once.
        """
        async with self._lock:
            try:
                return await attempt(self.headers())
            except Conflict as exc:
                await self.verify(f"{what}: refused by fence {self.marker}: {exc}")
            try:
                return await attempt(self.headers())
            except Conflict as exc:
                self._claimed = 0
                raise LeaseLost(f"{what}: refused by fence {self.marker}: {exc}") from exc

    async def verify(self, why: str = "") -> None:
        """After a write the fence refused: raise :class:`LeaseLost` if another holder has
        claimed; claim again if our claim merely disappeared (age limit) and the lease is
        still ours. Returns when the next write may be tried again."""
        mine = self._lease.epoch
        epoch, sequence = await self._marker_now()
        if epoch > mine or (epoch == mine and sequence != self._claimed):
            # A newer holder claimed; or a claim with our epoch we did not make.
            self._claimed = 0
            raise LeaseLost(why or f"fence {self.marker} was claimed by another holder")
        if epoch < mine:
            # Our claim is gone (the marker aged out): claim again if we still lead.
            await self._lease.check()
            await self.claim()
        # else: a concurrent write of ours claimed again meanwhile; retry with that claim.

    async def publish(self, subject: str, envelope: Envelope) -> Published:
        """Publish ``envelope`` like :meth:`Bus.publish` (deduplicated by event id), fenced.

        ``subject`` must belong to :attr:`stream`."""

        async def attempt(fence_headers: Mapping[str, str]) -> Published:
            headers = message_headers(envelope) | dict(fence_headers)
            payload = codec.encode(envelope)
            with producer_span(subject, headers, message_id=envelope.event_id):
                try:
                    ack = await self._bus.jetstream.publish(subject, payload, headers=headers)
                except (TimeoutError, nats.errors.Error) as exc:
                    raise translate(exc, f"publishing to {subject}") from exc
            return Published(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))

        return await self.write(f"publishing to {subject}", attempt)

    async def put_raw(
        self,
        subject: str,
        value: bytes,
        *,
        delete: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Write ``value`` (or a KV delete marker) to ``subject`` of :attr:`stream`, fenced,
        with ``headers`` besides the fence's; returns the stream sequence (the KV revision)."""
        extra = dict(headers or {})

        async def attempt(fence_headers: Mapping[str, str]) -> int:
            headers = extra | dict(fence_headers)
            if delete:
                headers[KV_OPERATION] = "DEL"
            try:
                ack = await self._bus.jetstream.publish(subject, value, headers=headers)
            except (TimeoutError, nats.errors.Error) as exc:
                raise translate(exc, f"writing {subject}") from exc
            return ack.seq

        return await self.write(f"writing {subject}", attempt)
