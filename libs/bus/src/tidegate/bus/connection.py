"""Connecting to NATS, creating the stream layout, and publishing one message.

:class:`Bus` is the handle every service holds. It owns the nats-py client; nothing outside
:mod:`tidegate.bus` sees nats objects. Bulk publishing with a bounded number in flight is in
:mod:`.publisher`; consuming is in :mod:`.follower` and :mod:`.consumer`; leases and the
ledger in :mod:`.lease` and :mod:`.ledger`.
"""

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Self

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from tidegate.bus import layout
from tidegate.bus._wrap import translate, wrapped
from tidegate.bus.errors import BusError, Unavailable
from tidegate.bus.message import (
    EXPECTED_LAST_SUBJECT_SEQUENCE,
    MSG_ID,
    TTL,
    Published,
    Received,
)
from tidegate.model import Envelope, Tombstone, codec
from tidegate.telemetry import producer_span

log = logging.getLogger(__name__)

_EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
"""The header of a fenced write (:mod:`.fence`): the expected sequence is this subject's."""
ACK_AFTER_RECONNECT_SECONDS: Final = 1.0
"""How long a publish awaited across a reconnect still waits for its acknowledgement before
it counts as timed out (its answer was most likely lost with the old connection)."""
_RECONNECT_POLL_SECONDS: Final = 0.1


@dataclass(frozen=True, kw_only=True)
class BusSettings:
    """How to reach NATS. Credentials are file paths or strings, never logged."""

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    """Every URL of the NATS cluster (or one): the client connects to any and, when that
    server goes away, to another; it also learns members the servers announce."""
    name: str = "tidegate"
    """Connection name shown in NATS monitoring (the service name)."""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    creds_file: Path | None = None
    """A NATS ``.creds`` file (JWT + nkey seed), the usual way to authenticate in production."""
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    connect_timeout_seconds: float = 5.0
    """Per attempt to open a connection."""
    wait_for_server_seconds: float | None = None
    """Give up the initial connection after this long (None: keep trying, as a service should
    while NATS starts)."""
    request_timeout_seconds: float = 5.0
    """How long a publish waits for JetStream's acknowledgement, and a JetStream API call."""
    max_in_flight: int = 4096
    """Upper bound of asynchronous publishes awaiting their acknowledgement."""
    drain_timeout_seconds: float = 10.0
    """How long a drain may take before the connection is closed anyway."""
    tombstone_ttl_seconds: float = layout.TOMBSTONE_RETENTION_SECONDS
    """A published ``tombstone`` expires after this long (per-message TTL, rounded up to whole
    seconds; 0: kept for ever): the state streams stay proportional to live objects."""
    leaderless_wait_seconds: float = 20.0
    """On a NATS cluster, how long a publish keeps retrying while no server accepts it because
    the stream has no leader (the cluster electing a new one after a server died: a few
    seconds). Retrying is safe: no server took the message."""
    reconnect_wait_seconds: int = 1
    """After losing its server the client tries the others in turn, forever; it waits this
    long before trying the same server again."""
    stream_replicas: int = 1
    """Replicas of every stream and KV bucket :meth:`Bus.ensure_layout` creates (3 on a
    three-server NATS cluster); every service of a cluster must use the same number, as
    ``ensure_layout`` updates an existing stream to it."""

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("no NATS server URL given")
        if self.stream_replicas < 1:
            raise ValueError(f"stream replicas must be at least 1, not {self.stream_replicas}")
        if self.leaderless_wait_seconds < 0:
            raise ValueError("leaderless_wait_seconds must not be negative")
        if self.reconnect_wait_seconds < 0:
            raise ValueError("reconnect_wait_seconds must not be negative")
        if self.tombstone_ttl_seconds < 0:
            raise ValueError("tombstone_ttl_seconds must not be negative")


def _tls_context(settings: BusSettings) -> ssl.SSLContext | None:
    if settings.tls_ca_file is None and settings.tls_cert_file is None:
        return None
    context = ssl.create_default_context(
        cafile=str(settings.tls_ca_file) if settings.tls_ca_file else None
    )
    if settings.tls_cert_file is not None:
        if settings.tls_key_file is None:
            raise BusError("NATS TLS: a client certificate needs its key file too")
        context.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file))
    return context


async def connect(settings: BusSettings) -> "Bus":
    """Connect to NATS; raises :class:`Unavailable` if ``wait_for_server_seconds`` runs out.

    The connection reconnects by itself after it was once established.
    """

    async def on_error(exc: Exception) -> None:
        log.warning("nats: %s: %s", type(exc).__name__, exc)

    async def on_disconnected() -> None:
        if not (client.is_closed or client.is_draining):
            log.warning("nats: disconnected")

    async def on_reconnected() -> None:
        log.info("nats: reconnected")

    try:
        tls = _tls_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise BusError(f"NATS TLS files could not be loaded: {exc}") from exc
    client = Client()
    try:
        async with asyncio.timeout(settings.wait_for_server_seconds):
            await client.connect(
                servers=list(settings.servers),
                name=settings.name,
                connect_timeout=max(1, round(settings.connect_timeout_seconds)),
                reconnect_time_wait=settings.reconnect_wait_seconds,
                drain_timeout=max(1, round(settings.drain_timeout_seconds)),
                max_reconnect_attempts=-1,
                error_cb=on_error,
                disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected,
                user=settings.user,
                password=settings.password if settings.user is not None else None,
                user_credentials=str(settings.creds_file) if settings.creds_file else None,
                tls=tls,
            )
    except TimeoutError as exc:
        await client.close()
        raise Unavailable(
            f"could not reach NATS at {', '.join(settings.servers)} within "
            f"{settings.wait_for_server_seconds}s (last error: {client.last_error})"
        ) from exc
    except (nats.errors.Error, OSError) as exc:
        await client.close()
        raise BusError(f"could not connect to NATS: {type(exc).__name__}: {exc}") from exc
    return Bus(client, settings)


class _LeaderWaitingJetStream(JetStreamContext):
    """nats-py's JetStream context whose ``publish`` waits out a stream without a leader.

    While a NATS cluster elects a stream's new leader, a publish to it finds no responder and
    fails at once (``NoStreamResponseError``). No server stored it, so sending it again is
    safe, also for a KV update with an expected revision (the ledger's and the leases' writes
    go through this method too); any other error, and a timeout (which may have been stored),
    is raised as before. Against a single server (no other server known) no responder means
    no stream takes the subject, and the error is raised at once.

    A publish that times out on a cluster (its server died with the request in flight) is sent
    again within the same window if JetStream would drop a second copy (it carries a
    ``Nats-Msg-Id`` and no expected sequence). A write with an expected sequence (a ledger or
    lease write) first reads the subject's last message: ours (the same bytes) means it was
    stored, the expected sequence still means it was not (send again), anything else is the
    conflict JetStream would have answered. A fenced write (its expected sequence is the fence
    marker's) is not resolved this way: its timeout is raised as before.
    """

    def __init__(self, conn: Client, *, leaderless_wait_seconds: float, **opts: Any) -> None:
        super().__init__(conn, **opts)
        self._leaderless_wait_seconds = leaderless_wait_seconds

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = None,  # noqa: ASYNC109 (nats-py's signature)
        stream: str | None = None,
        headers: dict[str, Any] | None = None,
        msg_ttl: float | None = None,
    ) -> api.PubAck:
        deadline = time.monotonic() + self._leaderless_wait_seconds
        pause = 0.05
        sent = dict(headers or {})
        expected = sent.get(EXPECTED_LAST_SUBJECT_SEQUENCE)
        while True:
            try:
                return await self._acknowledged(
                    super().publish(
                        subject,
                        payload,
                        timeout=timeout,
                        stream=stream,
                        headers=dict(sent) if headers is not None else None,
                        msg_ttl=msg_ttl,
                    )
                )
            except nats.js.errors.NoStreamResponseError:
                if len(self._nc.servers) < 2 or time.monotonic() + pause > deadline:
                    raise
                log.info("nats: no leader takes %s yet; retrying in %.2fs", subject, pause)
                await asyncio.sleep(pause)
                pause = min(2 * pause, 1.0)
            except nats.errors.TimeoutError:
                if len(self._nc.servers) < 2 or time.monotonic() > deadline:
                    raise
                if expected is None and MSG_ID in sent:
                    # JetStream drops a second copy with the same Nats-Msg-Id.
                    log.info("nats: no acknowledgement for %s; sending it again", subject)
                    continue
                if expected is None or _EXPECTED_SUBJECT in sent:
                    # A fenced write's expected sequence is another subject's (the fence
                    # marker): reading the written subject cannot tell its outcome.
                    raise
                # An expected-sequence write (ledger, lease): JetStream checks the sequence
                # before duplicates, so find out what happened before writing again.
                stored = await self._outcome(subject, payload, int(expected), deadline)
                if stored is not None:
                    return stored
                log.info("nats: %s was not stored; sending it again", subject)

    async def _acknowledged(self, sending: Coroutine[Any, Any, api.PubAck]) -> api.PubAck:
        """The acknowledgement of a publish being sent; ``nats.errors.TimeoutError`` once the
        connection was re-established while it was awaited and no acknowledgement followed
        within :data:`ACK_AFTER_RECONNECT_SECONDS`, rather than at the end of the request
        timeout.

        JetStream answers on the connection a publish came on: when that connection is lost
        first, so is the answer, and nats-py would wait out the whole request timeout before
        the caller could send again. A publish still in nats-py's buffer at the disconnect is
        sent after the reconnect and answered well within the grace; an answer later than that
        is the timeout a slow server gives anyway, which every caller handles already (the
        message may have been stored)."""
        reconnects = self._nc.stats["reconnects"]
        task = asyncio.ensure_future(sending)
        give_up: float | None = None
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=_RECONNECT_POLL_SECONDS)
                if done:
                    return task.result()
                if give_up is None and self._nc.stats["reconnects"] != reconnects:
                    give_up = time.monotonic() + ACK_AFTER_RECONNECT_SECONDS
                if give_up is not None and time.monotonic() >= give_up:
                    log.info("nats: the connection was lost before an acknowledgement came")
                    raise nats.errors.TimeoutError
        finally:
            if task.done():
                if not task.cancelled():
                    task.exception()  # retrieved: raised above, or ours superseded it
            else:
                task.cancel()

    async def _outcome(
        self, subject: str, payload: bytes, expected: int, deadline: float
    ) -> api.PubAck | None:
        """After a timed-out write that expected ``subject``'s last sequence to be
        ``expected``: its acknowledgement if it was stored, None if it was not (the subject is
        unchanged); the conflict JetStream would have answered if someone else wrote."""
        while True:
            try:
                name = await self.find_stream_name_by_subject(subject)
                try:
                    last = await self.get_last_msg(name, subject)
                    sequence, data = last.seq or 0, last.data or b""
                except nats.js.errors.NotFoundError:
                    sequence, data = 0, b""
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                if time.monotonic() > deadline:
                    raise nats.errors.TimeoutError from exc
                await asyncio.sleep(0.2)
            except nats.js.errors.ServiceUnavailableError as exc:
                if time.monotonic() > deadline:
                    raise nats.errors.TimeoutError from exc
                await asyncio.sleep(0.2)
        if sequence == expected:
            return None
        if data == payload:
            return api.PubAck(stream=name, seq=sequence)
        raise nats.js.errors.BadRequestError(
            code=400,
            err_code=10071,
            description=f"wrong last sequence: {sequence} (found after a timed-out write)",
        )


class Bus:
    """A connection to NATS with JetStream: create the layout, publish, and hand out consumers."""

    def __init__(self, client: Client, settings: BusSettings) -> None:
        self._client = client
        self._settings = settings
        self._js: JetStreamContext = _LeaderWaitingJetStream(
            client,
            leaderless_wait_seconds=settings.leaderless_wait_seconds,
            timeout=settings.request_timeout_seconds,
            publish_async_max_pending=settings.max_in_flight,
        )

    @property
    def settings(self) -> BusSettings:
        """The settings this bus was connected with."""
        return self._settings

    @property
    def connected(self) -> bool:
        """True while the connection is up (False while reconnecting, draining or closed)."""
        return self._client.is_connected

    @property
    def jetstream(self) -> JetStreamContext:
        """The nats-py JetStream context, for the other modules of :mod:`tidegate.bus` only."""
        return self._js

    @property
    def client(self) -> Client:
        """The nats-py client, for the other modules of :mod:`tidegate.bus` only."""
        return self._client

    # ------------------------------------------------------------------ layout

    async def ensure_stream(self, config: api.StreamConfig) -> None:
        """Create the stream, or update it to ``config`` if it exists (idempotent)."""
        with wrapped(f"creating stream {config.name}"):
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError as exc:
                # 10058: a stream with this name exists with a different configuration.
                if exc.err_code != 10058:
                    raise
                await self._js.update_stream(config)

    async def ensure_layout(
        self, cluster: str, settings: layout.LayoutSettings | None = None
    ) -> None:
        """Create or update every stream and KV bucket of ``cluster`` (see :mod:`.layout`);
        without ``settings``, the default layout with this connection's ``stream_replicas``."""
        chosen = (
            settings
            if settings is not None
            else layout.LayoutSettings(replicas=self._settings.stream_replicas)
        )
        for config in layout.stream_configs(cluster, chosen):
            await self.ensure_stream(config)
        for bucket in layout.bucket_names(cluster):
            await self.ensure_stream(layout.kv_stream_config(bucket, chosen))

    async def key_value(self, bucket: str) -> KeyValue:
        """The nats-py handle of a KV bucket (which :meth:`ensure_layout` created)."""
        with wrapped(f"opening KV bucket {bucket}"):
            return await self._js.key_value(bucket)

    async def stored_after(self, stream: str, sequence: int, subjects: Sequence[str]) -> bool:
        """True if ``stream`` holds a message on one of ``subjects`` (wildcards allowed) with
        a sequence above ``sequence``: a follower that handled up to ``sequence`` is behind."""
        for subject in subjects:
            with wrapped(f"reading {stream}"):
                try:
                    await self._js.get_msg(stream, seq=sequence + 1, subject=subject, next=True)
                except nats.js.errors.NotFoundError:
                    continue
            return True
        return False

    async def subjects_in(self, stream: str, subjects: str) -> dict[str, int]:
        """The subjects of ``stream`` matching ``subjects`` (a wildcard) that hold messages,
        with their message counts (the server answers at most 100,000 subjects at once)."""
        with wrapped(f"listing the subjects of {stream}"):
            info = await self._js.stream_info(stream, subjects_filter=subjects)
        return dict(info.state.subjects or {})

    async def purge(self, stream: str, subjects: str, *, before: int | None = None) -> None:
        """Remove the messages of ``stream`` on ``subjects`` (a wildcard); with ``before``,
        only those stored at a lower sequence."""
        with wrapped(f"purging {subjects} from {stream}"):
            await self._js.purge_stream(stream, subject=subjects, seq=before)

    async def last_on(self, stream: str, subject: str) -> Received | None:
        """The newest message stored on ``subject`` in ``stream``, decoded; None when the
        subject holds none, or when it does not decode (logged)."""
        with wrapped(f"reading {subject} in {stream}"):
            try:
                msg = await self._js.get_last_msg(stream, subject)
            except nats.js.errors.NotFoundError:
                return None
        try:
            envelope = codec.decode(msg.data or b"")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("the last message on %s does not decode, taken as none: %s", subject, exc)
            return None
        return Received(
            subject=subject,
            envelope=envelope,
            stream_sequence=msg.seq or 0,
            headers=dict(msg.headers or {}),
        )

    async def last_sequence(self, stream: str) -> int:
        """The sequence of the newest message in ``stream`` (0 when empty)."""
        with wrapped(f"reading stream {stream}"):
            info = await self._js.stream_info(stream)
        return info.state.last_seq

    async def stream_leader(self, stream: str) -> str | None:
        """Name of the NATS server that leads ``stream`` (None on a single server)."""
        with wrapped(f"reading stream {stream}"):
            info = await self._js.stream_info(stream)
        return info.cluster.leader if info.cluster is not None else None

    # ------------------------------------------------------------------ publish

    async def publish(
        self,
        subject: str,
        envelope: Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
    ) -> Published:
        """Publish ``envelope`` to ``subject`` and wait for JetStream to store it.

        The ``Nats-Msg-Id`` is the envelope's ``event_id``: a retry within the stream's
        duplicate window comes back with ``duplicate=True`` and is not stored twice. With
        ``expected_last_subject_sequence`` the publish fails with :class:`Conflict` unless the
        subject's newest message has that sequence (0: the subject is empty).
        """
        headers = message_headers(
            envelope,
            expected_last_subject_sequence,
            tombstone_ttl_seconds=self._settings.tombstone_ttl_seconds,
        )
        payload = codec.encode(envelope)
        with producer_span(subject, headers, message_id=envelope.event_id):
            try:
                ack = await self._js.publish(subject, payload, headers=headers)
            except (TimeoutError, nats.errors.Error) as exc:
                raise translate(exc, f"publishing to {subject}") from exc
        return Published(stream=ack.stream, sequence=ack.seq, duplicate=bool(ack.duplicate))

    # ------------------------------------------------------------------ lifecycle

    async def drain(self) -> None:
        """Stop subscriptions, deliver what is buffered, flush publishes, then close."""
        if self._client.is_closed:
            return
        try:
            await self._client.drain()
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            # Reconnecting (the server restarted) or the socket reset mid-drain: nothing more
            # can be flushed, so close.
            log.warning("nats: drain did not finish cleanly: %s", exc)
            await self.close()

    async def close(self) -> None:
        """Close the connection at once (buffered messages may be lost; prefer :meth:`drain`)."""
        if not self._client.is_closed:
            try:
                await self._client.close()
            except OSError as exc:
                # nats-py flushes what is buffered before closing; on a socket that was lost
                # meanwhile (a server restart) that raises, after the client is marked closed.
                log.warning("nats: closed with the socket already lost: %s", exc)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.drain()


def message_headers(
    envelope: Envelope,
    expected_last_subject_sequence: int | None = None,
    *,
    tombstone_ttl_seconds: float = 0.0,
) -> dict[str, str]:
    """Headers of a message carrying ``envelope`` (trace context is added when publishing).

    A tombstone gets a per-message TTL of ``tombstone_ttl_seconds`` (when positive): it tells
    followers about the deletion, then leaves the subject empty."""
    headers = {MSG_ID: envelope.event_id}
    if expected_last_subject_sequence is not None:
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(expected_last_subject_sequence)
    if tombstone_ttl_seconds > 0 and isinstance(envelope.body, Tombstone):
        headers[TTL] = f"{math.ceil(tombstone_ttl_seconds)}s"
    return headers


def servers_from_url(url: str) -> Sequence[str]:
    """Split a comma-separated list of NATS URLs (the form ``TIDEGATE_NATS_URL`` takes)."""
    servers = tuple(part.strip() for part in url.split(",") if part.strip())
    if not servers:
        raise ValueError("no NATS server URL given")
    return servers
