"""Durable pull consumption in batches, with an explicit outcome for every message.

A :class:`DurableConsumer` keeps its position on the server (a durable JetStream consumer),
so a service that restarts resumes where it left off, and a message whose handler did not
finish (the process died, the connection dropped) is delivered again after
``ack_wait_seconds``. **Handlers must therefore be idempotent**: running one twice on the same
message must leave the same result as running it once (key writes by id, compare sequence
numbers, ignore what is already applied).

What happens to a message is decided by the handler (FastStream's explicit ack policy):

==========================================  ==============================================
the handler …                               the consumer …
==========================================  ==============================================
returns ``None`` or :class:`Ack`            acks it
returns :class:`Retry` / raises Retryable   naks it with a delay (``Retry.delay_seconds``,
(or any unexpected exception)               else the backoff schedule by delivery count)
returns :class:`Reject` / raises Permanent  publishes it to the dead-letter subject, then
                                            terminates it (no more deliveries)
==========================================  ==============================================

A message that fails on its ``max_deliver``-th delivery is dead-lettered rather than retried
again. A message delivered more than ``max_deliver`` times without any outcome (its handler
kept crashing the process) is dead-lettered before the handler sees it again. With
``max_deliver=None`` a failing message is delivered again for as long as it takes (for
decisions whose loss would leak state: a failure there is transient, never a verdict). A message that
does not decode is dead-lettered with the validation error (which names the JSON path).
While a handler runs, the consumer tells JetStream it is still working on the message, so a
slow handler is not redelivered to someone else.

Graceful stop: :meth:`DurableConsumer.run` stops fetching when its stop event is set, finishes
the batch in hand, and returns; the caller then drains the connection.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from tidegate.bus import layout
from tidegate.bus._cancel import unless_cancelled
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.connection import Bus
from tidegate.bus.errors import BusError, LeaseLost, Permanent, Retryable
from tidegate.bus.message import (
    DEADLETTER_CONSUMER,
    DEADLETTER_DELIVERIES,
    DEADLETTER_REASON,
    DEADLETTER_SEQUENCE,
    DEADLETTER_SUBJECT,
    MSG_ID,
    Received,
)
from tidegate.model import codec
from tidegate.telemetry import consumer_span

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ack:
    """Done: acknowledge the message."""


@dataclass(frozen=True)
class Retry:
    """Not now: redeliver after ``delay_seconds`` (None: the backoff schedule decides)."""

    reason: str
    delay_seconds: float | None = None


@dataclass(frozen=True)
class Reject:
    """Never: terminate the message and publish it to the dead-letter subject."""

    reason: str


Outcome = Ack | Retry | Reject
"""What a handler wants done with its message."""

Handler = Callable[[Received], Awaitable[Outcome | None]]
"""A message handler: must be idempotent (see the module docstring)."""


class ConsumerObserver(Protocol):
    """Receives one call per handled message (the runtime turns these into metrics)."""

    def message_handled(self, consumer: str, outcome: str, seconds: float) -> None:
        """``outcome`` is one of ack, retry, deadletter."""


@dataclass(frozen=True, kw_only=True)
class ConsumerSettings:
    """A durable consumer: its name, what it reads, and its redelivery policy."""

    durable: str
    """Consumer name on the server; keep it stable across restarts (e.g. the service name)."""
    stream: str
    subjects: tuple[str, ...]
    batch_size: int = 64
    fetch_timeout_seconds: float = 1.0
    """How long one fetch waits for messages; also bounds how long a stop takes to notice."""
    ack_wait_seconds: float = 30.0
    """A delivered message not acked (nor reported in progress) within this is redelivered."""
    max_deliver: int | None = 5
    """Deliveries before a failing message is dead-lettered; None: never, it is delivered
    again until its handler settles it (only a Reject, or a message that does not decode,
    is dead-lettered)."""
    backoff_seconds: tuple[float, ...] = (1.0, 5.0, 30.0)
    """Nak delay by delivery count (the last entry repeats) when the handler names none."""
    max_ack_pending: int = 1024
    """Messages handed out and not yet acked, at most."""
    deliver_new_only: bool = False
    """When the consumer is first created: start after the stream's current end (else at its
    beginning). Later starts always resume where the consumer left off."""

    def __post_init__(self) -> None:
        if not self.subjects:
            raise ValueError(f"consumer {self.durable}: subjects must not be empty")
        if self.max_deliver is not None and self.max_deliver < 1:
            raise ValueError(f"consumer {self.durable}: max_deliver must be at least 1")
        if self.batch_size < 1:
            raise ValueError(f"consumer {self.durable}: batch_size must be at least 1")
        if not self.backoff_seconds:
            raise ValueError(f"consumer {self.durable}: backoff_seconds must not be empty")


class DurableConsumer:
    """Fetches batches from a durable pull consumer and settles every message."""

    def __init__(
        self,
        bus: Bus,
        *,
        cluster: str,
        settings: ConsumerSettings,
        handler: Handler,
        observer: ConsumerObserver | None = None,
    ) -> None:
        self._bus = bus
        self._cluster = cluster
        self.settings = settings
        self._handler = handler
        self._observer = observer
        self._subscription: JetStreamContext.PullSubscription | None = None

    @property
    def name(self) -> str:
        """The durable consumer's name."""
        return self.settings.durable

    def consumer_config(self) -> api.ConsumerConfig:
        """The server-side consumer configuration (create-or-update at :meth:`start`)."""
        settings = self.settings
        subjects = list(settings.subjects)
        return api.ConsumerConfig(
            name=settings.durable,
            durable_name=settings.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=settings.ack_wait_seconds,
            # One extra delivery lets us see a message whose handler crashed the process every
            # time, and dead-letter it instead of leaving it stuck.
            max_deliver=-1 if settings.max_deliver is None else settings.max_deliver + 1,
            max_ack_pending=settings.max_ack_pending,
            deliver_policy=(
                api.DeliverPolicy.NEW if settings.deliver_new_only else api.DeliverPolicy.ALL
            ),
            filter_subject=subjects[0] if len(subjects) == 1 else None,
            filter_subjects=subjects if len(subjects) > 1 else None,
        )

    async def start(self) -> None:
        """Create or update the durable consumer on the server and bind to it."""
        with wrapped(f"creating consumer {self.name} on {self.settings.stream}"):
            await self._bus.jetstream.add_consumer(self.settings.stream, self.consumer_config())
            self._subscription = await self._bus.jetstream.pull_subscribe_bind(
                durable=self.name, stream=self.settings.stream
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch and handle batches until ``stop`` is set; the batch in hand is finished.

        Raises :class:`LeaseLost` when a handler does (see the module docstring)."""
        if self._subscription is None:
            await self.start()
        failures = 0
        try:
            while not stop.is_set():
                try:
                    batch = await self.fetch()
                except BusError as exc:
                    failures += 1
                    delay = min(5.0, 0.2 * 2**failures)
                    log.warning(
                        "consumer %s: fetch failed (%s); retrying in %.1fs", self.name, exc, delay
                    )
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await stop.wait()
                    continue
                failures = 0
                unless_cancelled()
                await self.handle_batch(batch)
        finally:
            await self.close()
        log.info("consumer %s stopped", self.name)

    async def close(self) -> None:
        """Unbind from the server-side consumer (which keeps its position)."""
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            # Without this a connection drain would wait for fetch replies nobody reads.
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()

    async def fetch(self) -> list[Msg]:
        """One batch (possibly empty after ``fetch_timeout_seconds``)."""
        assert self._subscription is not None, "start() first"
        try:
            return await self._subscription.fetch(
                self.settings.batch_size, timeout=self.settings.fetch_timeout_seconds
            )
        except (nats.errors.TimeoutError, TimeoutError):
            # Both mean "nothing arrived in time": nats-py raises the bare asyncio one when the
            # event loop was too busy to see the server's answer before the deadline.
            return []
        except nats.errors.Error as exc:
            raise translate(exc, f"fetching for {self.name}") from exc

    async def handle_batch(self, batch: Sequence[Msg]) -> None:
        """Handle and settle each message of ``batch`` in order.

        Meanwhile every message of the batch not yet settled is reported in progress every
        third of ``ack_wait_seconds``, so neither a slow handler nor a long queue within the
        batch makes JetStream redeliver a message we are about to handle.
        """
        unsettled = list(batch)
        keepalive = asyncio.create_task(self._keep_in_progress(unsettled))
        try:
            for msg in batch:
                await self._handle(msg)
                unsettled.remove(msg)
                unless_cancelled()
        except LeaseLost:
            # A deposed leader must not retry (its next attempt is fenced off anyway) nor hold
            # the messages for ack_wait: hand them back now, for the new leader.
            for msg in unsettled:
                with contextlib.suppress(nats.errors.Error):
                    await msg.nak()
            raise
        finally:
            keepalive.cancel()
            # gather: the task's own cancellation is its result, while one of ours still
            # propagates (suppressing CancelledError here would swallow it).
            await asyncio.gather(keepalive, return_exceptions=True)

    async def _handle(self, msg: Msg) -> None:
        started = time.monotonic()
        delivered = msg.metadata.num_delivered
        sequence = msg.metadata.sequence.stream
        headers = dict(msg.headers or {})
        outcome: Outcome
        max_deliver = self.settings.max_deliver
        if max_deliver is not None and delivered > max_deliver:
            outcome = Reject(
                f"delivered {delivered} times without an outcome (the handler may be crashing "
                "the process)"
            )
        else:
            try:
                envelope = codec.decode(msg.data)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                outcome = Reject(f"undecodable message: {exc}")
            else:
                received = Received(
                    subject=msg.subject,
                    envelope=envelope,
                    stream_sequence=sequence,
                    delivered=delivered,
                    headers=headers,
                )
                with consumer_span(msg.subject, headers, message_id=envelope.event_id) as span:
                    outcome = await self._run_handler(received)
                    span.set_attribute("tidegate.outcome", type(outcome).__name__.lower())
        if isinstance(outcome, Retry) and max_deliver is not None and delivered >= max_deliver:
            outcome = Reject(f"gave up after {delivered} deliveries: {outcome.reason}")
        label = await self._settle(msg, outcome, delivered=delivered, headers=headers)
        if self._observer is not None:
            self._observer.message_handled(self.name, label, time.monotonic() - started)

    async def _run_handler(self, received: Received) -> Outcome:
        try:
            result = await self._handler(received)
        except LeaseLost:
            raise
        except Permanent as exc:
            return Reject(str(exc))
        except Retryable as exc:
            return Retry(str(exc), exc.delay_seconds)
        except Exception as exc:
            log.exception(
                "consumer %s: handler failed on %s (seq %d)",
                self.name,
                received.subject,
                received.stream_sequence,
                extra={"subject": received.subject, "sequence": received.stream_sequence},
            )
            return Retry(f"{type(exc).__name__}: {exc}")
        return Ack() if result is None else result

    async def _keep_in_progress(self, unsettled: list[Msg]) -> None:
        interval = max(0.5, self.settings.ack_wait_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            for msg in list(unsettled):
                with contextlib.suppress(nats.errors.Error):
                    await msg.in_progress()

    def _retry_delay(self, outcome: Retry, delivered: int) -> float:
        if outcome.delay_seconds is not None:
            return outcome.delay_seconds
        schedule = self.settings.backoff_seconds
        return schedule[min(delivered, len(schedule)) - 1]

    async def _settle(
        self, msg: Msg, outcome: Outcome, *, delivered: int, headers: dict[str, str]
    ) -> str:
        try:
            if isinstance(outcome, Ack):
                await msg.ack()
                return "ack"
            if isinstance(outcome, Retry):
                delay = self._retry_delay(outcome, delivered)
                log.info(
                    "consumer %s: retrying %s in %.1fs: %s",
                    self.name,
                    msg.subject,
                    delay,
                    outcome.reason,
                    extra={"subject": msg.subject, "delivered": delivered},
                )
                await msg.nak(delay=delay)
                return "retry"
            try:
                await self._dead_letter(msg, outcome.reason, delivered=delivered, headers=headers)
            except BusError as exc:
                log.warning(
                    "consumer %s: could not dead-letter %s (%s); will retry",
                    self.name,
                    msg.subject,
                    exc,
                )
                await msg.nak(delay=self.settings.backoff_seconds[0])
                return "retry"
            await msg.term()
            return "deadletter"
        except nats.errors.Error as exc:
            # The ack did not reach the server: the message comes back after ack_wait, and the
            # handler is idempotent, so this loses nothing.
            log.warning("consumer %s: could not settle %s: %s", self.name, msg.subject, exc)
            return "unsettled"

    async def _dead_letter(
        self, msg: Msg, reason: str, *, delivered: int, headers: dict[str, str]
    ) -> None:
        sequence = msg.metadata.sequence.stream
        subject = layout.deadletter_subject(self._cluster, self.name, msg.subject)
        dl_headers = {
            key: value for key, value in headers.items() if not key.startswith("Nats-")
        } | {
            # One dead letter per (consumer, original message), even if this is retried.
            MSG_ID: f"{self.name}:{self.settings.stream}:{sequence}",
            DEADLETTER_REASON: " ".join(reason.split())[:4000],
            DEADLETTER_CONSUMER: self.name,
            DEADLETTER_SUBJECT: msg.subject,
            DEADLETTER_SEQUENCE: str(sequence),
            DEADLETTER_DELIVERIES: str(delivered),
        }
        log.warning(
            "consumer %s: dead-lettered %s (seq %d): %s",
            self.name,
            msg.subject,
            sequence,
            reason,
            extra={"subject": msg.subject, "sequence": sequence, "deadletter": subject},
        )
        with wrapped(f"dead-lettering to {subject}"):
            await self._bus.jetstream.publish(subject, msg.data, headers=dl_headers)
