"""What a handler receives, what a publish returns, and the header names tidegate sets.

These types keep nats-py's ``Msg`` and ``PubAck`` inside the adapter.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidegate.model import Envelope

MSG_ID: Final = "Nats-Msg-Id"
"""JetStream's deduplication header; tidegate sets it to the envelope's ``event_id``."""
EXPECTED_LAST_SUBJECT_SEQUENCE: Final = "Nats-Expected-Last-Subject-Sequence"
"""JetStream rejects the publish unless the subject's last stored sequence is this number."""
TTL: Final = "Nats-TTL"
"""Per-message time to live (JetStream 2.11+), e.g. ``"10s"``."""
DEADLETTER_REASON: Final = "Tidegate-Deadletter-Reason"
"""Why the consumer gave up (the handler's error message)."""
DEADLETTER_CONSUMER: Final = "Tidegate-Deadletter-Consumer"
"""The durable consumer that gave up."""
DEADLETTER_SUBJECT: Final = "Tidegate-Deadletter-Subject"
"""The subject the message was first published to."""
DEADLETTER_SEQUENCE: Final = "Tidegate-Deadletter-Sequence"
"""Its sequence in the original stream."""
DEADLETTER_DELIVERIES: Final = "Tidegate-Deadletter-Deliveries"
"""How many times it had been delivered."""


@dataclass(frozen=True, kw_only=True)
class Published:
    """JetStream's acknowledgement of a publish."""

    stream: str
    sequence: int
    duplicate: bool
    """True when JetStream had already stored a message with this Nats-Msg-Id (a retry)."""


@dataclass(frozen=True, kw_only=True)
class Received:
    """One message as a handler sees it: decoded, with its place in the stream."""

    subject: str
    envelope: Envelope
    stream_sequence: int
    delivered: int = 1
    """How many times this message has been delivered (1 the first time)."""
    headers: Mapping[str, str] = field(default_factory=dict)
