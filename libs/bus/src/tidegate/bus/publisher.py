"""Publishing many messages without waiting for each acknowledgement.

Awaiting every JetStream acknowledgement costs a round trip per message (a few thousand per
second); a :class:`Publisher` sends the next message while earlier ones are still being
stored, with at most ``max_in_flight`` unacknowledged, and reports failures when you
:meth:`~Publisher.flush`. Deduplication is the same as :meth:`Bus.publish`: the
``Nats-Msg-Id`` is the envelope's event id, so re-publishing after a failed flush is safe.

The acknowledgements are collected on an inbox of our own rather than with nats-py's
``publish_async``: there, an error reply (e.g. a failed expected-sequence check) never resolves
the returned future and leaks its in-flight slot (nats-io/nats.py#985).

On a NATS cluster, a message that finds no responder (its stream is electing a new leader
after a server died) is sent again, with a growing pause, for up to the bus's
``leaderless_wait_seconds``; :meth:`~Publisher.flush` waits for those too. No server stored
it, so sending it again cannot store it twice. A message whose acknowledgement does not come
within the flush timeout (lost with the server the connection was on) is sent again too, within
the same window: its ``Nats-Msg-Id`` makes JetStream store it once.
"""

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Literal, Self

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tidegate.bus._wrap import translate
from tidegate.bus.connection import Bus, message_headers
from tidegate.bus.errors import BusError, Conflict, Unavailable
from tidegate.bus.message import EXPECTED_LAST_SUBJECT_SEQUENCE
from tidegate.model import Envelope, codec
from tidegate.telemetry import producer_span

log = logging.getLogger(__name__)

# JetStream error codes of a failed expected-last-sequence check.
_WRONG_LAST_SEQUENCE: Final = frozenset({10071, 10164})


@dataclass(frozen=True, kw_only=True)
class PublishFailure:
    """One message JetStream did not store."""

    subject: str
    event_id: str
    error: BusError


class PublishError(BusError):
    """Some messages of a :class:`Publisher` were not stored; ``failures`` says which."""

    def __init__(self, failures: list[PublishFailure]) -> None:
        first = failures[0]
        super().__init__(
            f"{len(failures)} publishes failed; first: {first.subject} "
            f"(event {first.event_id}): {first.error}"
        )
        self.failures = failures


@dataclass(kw_only=True)
class PublishStats:
    """Counts since the publisher was made."""

    submitted: int = 0
    stored: int = 0
    duplicates: int = 0
    """Acknowledged as already stored (a retry JetStream dropped)."""
    failed: int = 0


@dataclass
class _InFlight:
    subject: str
    event_id: str
    payload: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    retry_until: float = 0.0
    """Until when a no-responder reply sends the message again (0: never)."""
    pause: float = 0.05
    retrying: bool = False


class Publisher:
    """Asynchronous publishing with a bounded number of messages in flight.

    :meth:`submit` returns once the message is handed to the connection; it waits only while
    ``max_in_flight`` acknowledgements are outstanding. :meth:`flush` waits for every
    outstanding acknowledgement and raises :class:`PublishError` listing what was not stored.
    Use as ``async with Publisher(bus) as publisher:`` (flushes and closes on exit).
    """

    def __init__(self, bus: Bus, *, max_in_flight: int | None = None) -> None:
        self._bus = bus
        limit = max_in_flight if max_in_flight is not None else bus.settings.max_in_flight
        if limit < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._slots = asyncio.Semaphore(limit)
        self._tokens = itertools.count(1)
        self._in_flight: dict[str, _InFlight] = {}
        self._failures: list[PublishFailure] = []
        self._all_settled = asyncio.Event()
        self._all_settled.set()
        self._inbox = ""
        self._subscription: Subscription | None = None
        self._resends: set[asyncio.Task[None]] = set()
        self.stats = PublishStats()
        """Counts of what was submitted, stored, dropped as duplicate, and failed."""

    async def _open(self) -> None:
        self._inbox = self._bus.client.new_inbox() + "."
        try:
            self._subscription = await self._bus.client.subscribe(
                self._inbox + "*", cb=self._on_reply
            )
        except nats.errors.Error as exc:
            raise translate(exc, "opening the publish inbox") from exc

    async def submit(
        self,
        subject: str,
        envelope: Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send ``envelope`` to ``subject``; its acknowledgement is collected by :meth:`flush`.
        ``headers`` are added (e.g. a :class:`~tidegate.bus.Fence`'s; a refusal then shows
        as a :class:`Conflict` failure)."""
        if self._subscription is None:
            await self._open()
        headers = message_headers(
            envelope,
            expected_last_subject_sequence,
            tombstone_ttl_seconds=self._bus.settings.tombstone_ttl_seconds,
        ) | dict(headers or {})
        payload = codec.encode(envelope)
        await self._slots.acquire()
        token = str(next(self._tokens))
        clustered = len(self._bus.client.servers) > 1
        self._in_flight[token] = _InFlight(
            subject,
            envelope.event_id,
            payload=payload,
            headers=dict(headers),
            retry_until=(
                time.monotonic() + self._bus.settings.leaderless_wait_seconds if clustered else 0.0
            ),
        )
        self._all_settled.clear()
        with producer_span(subject, headers, message_id=envelope.event_id):
            try:
                await self._bus.client.publish(
                    subject, payload, reply=self._inbox + token, headers=headers
                )
            except nats.errors.Error as exc:
                self._settle(token, translate(exc, f"publishing to {subject}"))
                raise translate(exc, f"publishing to {subject}") from exc
        self.stats.submitted += 1

    async def _on_reply(self, msg: Msg) -> None:
        token = msg.subject[len(self._inbox) :]
        entry = self._in_flight.get(token)
        if entry is None:
            return
        if _no_responder(msg) and time.monotonic() + entry.pause < entry.retry_until:
            entry.retrying = True
            task = asyncio.create_task(self._resend(token, entry))
            self._resends.add(task)
            task.add_done_callback(self._resends.discard)
            return
        self._settle(token, _reply_error(msg, entry.subject))

    async def _resend(self, token: str, entry: _InFlight) -> None:
        """Send a message no server took again after a pause (its stream has no leader)."""
        log.info("nats: no leader takes %s yet; retrying in %.2fs", entry.subject, entry.pause)
        await asyncio.sleep(entry.pause)
        entry.pause = min(2 * entry.pause, 1.0)
        if token not in self._in_flight:
            return
        try:
            await self._bus.client.publish(
                entry.subject, entry.payload, reply=self._inbox + token, headers=entry.headers
            )
        except nats.errors.Error as exc:
            self._settle(token, translate(exc, f"publishing to {entry.subject}"))

    def _settle(self, token: str, error: BusError | Literal["duplicate"] | None) -> None:
        entry = self._in_flight.pop(token, None)
        if entry is None:
            return
        self._slots.release()
        if error is None:
            self.stats.stored += 1
        elif error == "duplicate":
            self.stats.stored += 1
            self.stats.duplicates += 1
        else:
            self.stats.failed += 1
            self._failures.append(
                PublishFailure(subject=entry.subject, event_id=entry.event_id, error=error)
            )
        if not self._in_flight:
            self._all_settled.set()

    @property
    def in_flight(self) -> int:
        """Messages sent whose acknowledgement has not arrived yet."""
        return len(self._in_flight)

    async def flush(self, timeout_seconds: float | None = None) -> None:
        """Wait for every outstanding acknowledgement; raise :class:`PublishError` if any failed.

        Acknowledgements still missing after the timeout (default: the bus's request timeout)
        count as failed with :class:`Unavailable`. Failures are reported once: after the
        exception the publisher is clean again.
        """
        timeout = (
            timeout_seconds
            if timeout_seconds is not None
            else self._bus.settings.request_timeout_seconds
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._all_settled.wait()
                break
            except TimeoutError:
                # Messages being sent again for a stream without a leader get their own
                # timeout after their last attempt.
                retrying = [e.retry_until for e in self._in_flight.values() if e.retrying]
                if retrying and max(retrying) + timeout > deadline:
                    deadline = max(retrying) + timeout
                    continue
                if await self._resend_unacknowledged():
                    deadline = time.monotonic() + timeout
                    continue
                for token in list(self._in_flight):
                    self._settle(token, Unavailable(f"no acknowledgement within {timeout}s"))
                break
        if self._failures:
            failures, self._failures = self._failures, []
            raise PublishError(failures)

    async def _resend_unacknowledged(self) -> bool:
        """On a NATS cluster, send again what has no acknowledgement (it may have been lost
        with the server the connection was on); True if anything was sent.

        Safe because the ``Nats-Msg-Id`` makes JetStream store a message once. Not for a
        message with an expected last sequence: JetStream checks that before duplicates, so a
        message stored the first time would come back as a conflict.
        """
        now = time.monotonic()
        again = [
            (token, entry)
            for token, entry in self._in_flight.items()
            if entry.retry_until > now and EXPECTED_LAST_SUBJECT_SEQUENCE not in entry.headers
        ]
        for token, entry in again:
            log.info("nats: no acknowledgement for %s yet; sending it again", entry.subject)
            try:
                await self._bus.client.publish(
                    entry.subject, entry.payload, reply=self._inbox + token, headers=entry.headers
                )
            except nats.errors.Error as exc:
                self._settle(token, translate(exc, f"publishing to {entry.subject}"))
        return bool(again)

    async def close(self) -> None:
        """Stop listening for acknowledgements (call :meth:`flush` first)."""
        for task in list(self._resends):
            task.cancel()
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            try:
                await subscription.unsubscribe()
            except nats.errors.Error as exc:
                raise translate(exc, "closing the publish inbox") from exc

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is None:
                await self.flush()
        finally:
            await self.close()


def _no_responder(msg: Msg) -> bool:
    """The reply nats-server sends when no one (no stream, or no stream leader) took it."""
    return bool(msg.headers and msg.headers.get("Status") == "503")


def _reply_error(msg: Msg, subject: str) -> BusError | Literal["duplicate"] | None:
    """None when stored, "duplicate" when dropped as a retry, else the error."""
    if _no_responder(msg):
        return Unavailable(f"publishing to {subject}: no stream takes this subject")
    try:
        reply = json.loads(msg.data)
    except ValueError:
        return BusError(f"publishing to {subject}: unreadable acknowledgement {msg.data[:200]!r}")
    error = reply.get("error")
    if error is None:
        return "duplicate" if reply.get("duplicate") else None
    description = error.get("description", "")
    if error.get("err_code") in _WRONG_LAST_SEQUENCE:
        return Conflict(f"publishing to {subject}: someone else wrote first ({description})")
    if error.get("code") == 503:
        return Unavailable(f"publishing to {subject}: JetStream unavailable ({description})")
    return BusError(f"publishing to {subject}: JetStream refused ({description})")
