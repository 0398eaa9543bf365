"""Last-value state: replay the newest message of every subject, then follow new ones.

This is how a service rebuilds its view at start (an informer cache over the bus): the state
and capacity streams keep one message per subject, a :class:`StateFollower` delivers each of
them (tombstones included, so the handler learns about deletions it missed) and then every
new message, in stream order. :attr:`StateFollower.replayed` is set once the backlog that
existed at start has been handed to the handler; services report ready (``/readyz``) only
after that.

It uses an *ordered* ephemeral consumer: no acks, no durable state on the server, and nats-py
re-creates it from the last sequence seen if a message goes missing. A message that cannot be
decoded is bad input: it is logged and skipped. A handler that raises is *retried* with
backoff until it succeeds, never skipped: a skipped message (a decision the topology-cache
failed to apply, say) would leave the view wrong for good, and silently. While it retries,
:attr:`StateFollower.failing` is set and :attr:`StateFollower.failures` counts every failure
(the runtime exports both as metrics), so a handler that keeps failing shows as a stuck
follower, not as a wrong view. Replayed messages get no trace spans (they are history);
followed messages get a CONSUMER span each.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import api

from tidegate.bus._cancel import unless_cancelled
from tidegate.bus._wrap import wrapped
from tidegate.bus.connection import Bus
from tidegate.bus.message import Received
from tidegate.model import codec
from tidegate.telemetry import consumer_span

log = logging.getLogger(__name__)

StateHandler = Callable[[Received], Awaitable[None]]
"""Called with every message, in stream order; must be idempotent (replay repeats history, and
a handler that raised is called again with the same message)."""

RETRY_FIRST_SECONDS = 0.05
"""Pause before the first retry of a failed handler; doubled after each failure."""
RETRY_MAX_SECONDS = 5.0
"""Longest pause between two retries of a failed handler."""
INBOX_SIZE = 256
"""Messages handed over by nats-py and not yet handled, at most (beyond it they wait in
nats-py's own bounded pending queue, as before)."""


class StateFollower:
    """Replays then follows ``subjects`` of ``stream``, calling ``handler`` for each message."""

    def __init__(
        self,
        bus: Bus,
        *,
        stream: str,
        subjects: Sequence[str],
        handler: StateHandler,
        name: str = "",
    ) -> None:
        if not subjects:
            raise ValueError("StateFollower needs at least one subject")
        self._bus = bus
        self._stream = stream
        self._subjects = list(subjects)
        self._handler = handler
        self.name = name or stream
        """Names the follower in logs, metrics and /readyz."""
        self.replayed = asyncio.Event()
        """Set once every message that existed at start has been handled."""
        self.handled = 0
        """Messages handed to the handler so far."""
        self.last_sequence = 0
        """Stream sequence of the last message handled."""
        self.failures = 0
        """Handler calls that raised, since start (each one is retried)."""
        self.failing: int | None = None
        """Stream sequence of the message whose handler keeps failing, None when none does."""
        self.lag_seconds = 0.0
        """How far behind the follower is: the time from the last message handled after the
        replay being published (its envelope's time) to its handling (0 until then)."""

    async def run(self) -> None:
        """Replay, then follow until cancelled."""
        with wrapped(f"following {self._stream}"):
            backlog_end = await self._bus.last_sequence(self._stream)
            unless_cancelled()
            config = api.ConsumerConfig(
                filter_subjects=self._subjects if len(self._subjects) > 1 else None
            )
            # nats-py hands each message to ``inbox.put`` from its subscription task; reading
            # them with ``next_msg`` instead made a task and a uuid4 per message: a third of
            # the delivery's CPU (bench/bus.py's follower: 57-59 against 38-39 µs a message).
            # Services cancel their followers before draining the connection, so a follower
            # never waits on a closed one.
            inbox: asyncio.Queue[Msg] = asyncio.Queue(maxsize=INBOX_SIZE)
            subscription = await self._bus.jetstream.subscribe(
                self._subjects[0],
                stream=self._stream,
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                config=config,
                idle_heartbeat=2.0,
                cb=inbox.put,
            )
        try:
            # Each wait of the start can swallow a cancellation too (nats-py's wait_for): the
            # stream may be empty, so no message would come to notice it at.
            unless_cancelled()
            info = await subscription.consumer_info()
            unless_cancelled()
            nothing_delivered = info.delivered is None or not info.delivered.consumer_seq
            if info.num_pending == 0 and nothing_delivered:
                self._mark_replayed()
            while True:
                msg = await inbox.get()
                unless_cancelled()
                await self._deliver(msg)
                unless_cancelled()
                metadata = msg.metadata
                if not self.replayed.is_set() and (
                    metadata.num_pending == 0 or metadata.sequence.stream >= backlog_end
                ):
                    self._mark_replayed()
        finally:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()

    def _mark_replayed(self) -> None:
        log.info(
            "follower %s replayed",
            self.name,
            extra={"follower": self.name, "messages": self.handled},
        )
        self.replayed.set()

    async def _deliver(self, msg: Msg) -> None:
        sequence = msg.metadata.sequence.stream
        headers = dict(msg.headers or {})
        try:
            envelope = codec.decode(msg.data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning(
                "follower %s: skipped undecodable message on %s (seq %d): %s",
                self.name,
                msg.subject,
                sequence,
                exc,
                extra={"subject": msg.subject, "sequence": sequence},
            )
            self.last_sequence = sequence
            return
        received = Received(
            subject=msg.subject,
            envelope=envelope,
            stream_sequence=sequence,
            delivered=msg.metadata.num_delivered,
            headers=headers,
        )
        pause = RETRY_FIRST_SECONDS
        while True:
            try:
                if self.replayed.is_set():
                    with consumer_span(msg.subject, headers, message_id=envelope.event_id):
                        await self._handler(received)
                else:
                    await self._handler(received)
                break
            except Exception:
                self.failures += 1
                self.failing = sequence
                log.exception(
                    "follower %s: handler failed on %s (seq %d); retrying in %.2fs",
                    self.name,
                    msg.subject,
                    sequence,
                    pause,
                    extra={"subject": msg.subject, "sequence": sequence},
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)
        self.failing = None
        self.handled += 1
        self.last_sequence = sequence
        if self.replayed.is_set() and envelope.time > 0:
            self.lag_seconds = max(0.0, time.time() - envelope.time)
