"""The bus's own exceptions: nats errors never leak past :mod:`tidegate.bus`.

Two families live here.

*Adapter errors* say what went wrong talking to NATS: :class:`BusError` is the root; every
nats-py exception is wrapped (``raise … from exc``) as :class:`Unavailable` (retry later:
timeouts, no connection, no stream responding), :class:`Conflict` (an optimistic-concurrency
check failed: expected-last-sequence or KV revision), :class:`LeaseLost`, or plain
:class:`BusError` (a configuration the server rejects).

*Handler outcomes* are raised by message handlers to tell a durable consumer what to do with
the message (STYLE.md 5): :class:`Retryable` → nak with a delay, redelivered later;
:class:`Permanent` → terminate and publish to the dead-letter subject; :class:`Conflict` →
the handler should re-read and retry itself, and if it lets the error escape the message is
nak'ed for a quick retry. Any other exception from a handler counts as Retryable.
"""


class BusError(Exception):
    """Root of every error raised by :mod:`tidegate.bus`."""


class Retryable(BusError):  # noqa: N818  (an outcome, not an error class name)
    """Try again later: the message is nak'ed and redelivered after ``delay_seconds``.

    With ``delay_seconds=None`` the consumer's backoff schedule picks the delay.
    """

    def __init__(self, message: str, *, delay_seconds: float | None = None) -> None:
        super().__init__(message)
        self.delay_seconds = delay_seconds


class Unavailable(Retryable):
    """NATS did not answer in time, the connection is down, or no stream took the message."""


class Conflict(Retryable):
    """An optimistic-concurrency check failed: someone else wrote first. Re-read, then retry."""


class Permanent(BusError):  # noqa: N818
    """Retrying cannot help (malformed message, invalid reference): terminate and dead-letter."""


class LeaseLost(BusError):  # noqa: N818
    """The lease is no longer ours: it expired, or another holder took it."""


class LeaseUnconfirmed(Retryable):
    """The lease may still be ours, but too little of it is confirmed for a write nobody can
    fence (a renewal is overdue, e.g. while NATS elects a new leader): hold the write back and
    try again; :class:`LeaseLost` follows if the renewal never comes."""
