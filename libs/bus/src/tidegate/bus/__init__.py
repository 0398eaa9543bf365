"""NATS JetStream adapter: the only importer of nats.

Why: every service talks to every other only through the bus, so how tidegate uses JetStream
(stream layout, deduplication, replay, acks, dead letters, leases) is decided once, here.
Nothing outside this package sees a nats-py object or exception.

* :func:`connect` / :class:`BusSettings` / :class:`Bus` — connection, layout, one publish.
* :mod:`.layout` — names and limits of every stream and KV bucket.
* :class:`Publisher` — asynchronous publishing with bounded in-flight messages.
* :class:`StateFollower` — replay the last value per subject, then follow.
* :class:`DurableConsumer` — durable pull consumption with explicit outcomes and dead letters.
* :class:`Lease` — a single-writer lease with a fencing epoch; :class:`Ledger` — a KV map.
* :mod:`.errors` — the error hierarchy and the handler outcomes.

It does not decide anything about workloads; it moves :class:`tidegate.model.Envelope` s.
"""

from tidegate.bus import layout
from tidegate.bus.connection import Bus, BusSettings, connect, servers_from_url
from tidegate.bus.consumer import (
    Ack,
    ConsumerObserver,
    ConsumerSettings,
    DurableConsumer,
    Handler,
    Outcome,
    Reject,
    Retry,
)
from tidegate.bus.errors import (
    BusError,
    Conflict,
    LeaseLost,
    LeaseUnconfirmed,
    Permanent,
    Retryable,
    Unavailable,
)
from tidegate.bus.fence import Fence
from tidegate.bus.follower import StateFollower, StateHandler
from tidegate.bus.layout import LayoutSettings
from tidegate.bus.lease import Lease, LeaseRecord, LeaseSettings, default_holder_id
from tidegate.bus.ledger import Ledger, LedgerEntry
from tidegate.bus.message import Published, Received
from tidegate.bus.publisher import Publisher, PublishError, PublishFailure, PublishStats

__all__ = [
    "Ack",
    "Bus",
    "BusError",
    "BusSettings",
    "Conflict",
    "ConsumerObserver",
    "ConsumerSettings",
    "DurableConsumer",
    "Fence",
    "Handler",
    "LayoutSettings",
    "Lease",
    "LeaseLost",
    "LeaseRecord",
    "LeaseSettings",
    "LeaseUnconfirmed",
    "Ledger",
    "LedgerEntry",
    "Outcome",
    "Permanent",
    "PublishError",
    "PublishFailure",
    "PublishStats",
    "Published",
    "Publisher",
    "Received",
    "Reject",
    "Retry",
    "Retryable",
    "StateFollower",
    "StateHandler",
    "Unavailable",
    "connect",
    "default_holder_id",
    "layout",
    "servers_from_url",
]
