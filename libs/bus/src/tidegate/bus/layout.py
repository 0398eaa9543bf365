"""Names and shapes of every JetStream stream and KV bucket tidegate uses, in one place.

Per cluster id ``<c>`` (one NATS may serve several clusters):

=============================  ===================================  ===========================
name                           subjects                             retention
=============================  ===================================  ===========================
``tidegate-<c>-state``         ``tg.<c>.{node,pod,workload,config}.>``  last value per subject;
                                                                    tombstones expire
``tidegate-<c>-capacity``      ``tg.<c>.capacity.>``                last value per subject;
                                                                    tombstones expire
``tidegate-<c>-decisions``     ``tg.<c>.decision.>``,               append-only, newest 64 per
                               ``tg.<c>.fence.>``                   subject; a deleted workload's
                                                                    purged by admission
``tidegate-<c>-deadletter``    ``tg.<c>.deadletter.>``              append-only, by age
KV ``tidegate-<c>-ledger``     (``$KV.tidegate-<c>-ledger.>``)      last value per key
KV ``tidegate-<c>-leases``     (``$KV.tidegate-<c>-leases.>``)      last value, per-message TTL
=============================  ===================================  ===========================

Every stream has a duplicate window, so a publish retried with the same ``Nats-Msg-Id``
within it is stored once. This module only describes; :func:`tidegate.bus.Bus.ensure_layout`
creates or updates the streams from these descriptions.
"""

from dataclasses import dataclass
from typing import Final

from nats.js import api

from tidegate.model import subjects

DAY: Final = 24 * 3600.0

TOMBSTONE_RETENTION_SECONDS: Final = 3600.0
"""How long a deleted object's tombstone stays on the state and capacity streams by default
(``BusSettings.tombstone_ttl_seconds``): a per-message TTL, after which the subject is empty,
so a start-up replay reads only live objects and the deletions of the last hour."""


@dataclass(frozen=True, kw_only=True)
class LayoutSettings:
    """Limits of the streams; the defaults suit a cluster of a few thousand nodes."""

    duplicate_window_seconds: float = 120.0
    """How long JetStream remembers a Nats-Msg-Id to drop a retried publish."""
    decisions_max_age_seconds: float = 0.0
    """Decisions older than this are removed from the log (0 = kept until purged). An age
    limit would forget the admission of a workload that runs longer than it."""
    decisions_max_bytes: int = -1
    """Size bound of the decision log; the oldest decisions go first (-1 = unbounded). A bound
    can drop an admission still in force: size the stream instead (docs/bus.md)."""
    decisions_per_subject: int = 64
    """The newest decisions kept per subject (per workload and kind): the log of a workload
    that lives for months, resized or re-admitted many times, stays bounded."""
    deadletter_max_age_seconds: float = 14 * DAY
    """Dead letters older than this are removed."""
    replicas: int = 1
    """Stream replicas (3 on a NATS cluster in production)."""
    file_storage: bool = True
    """File storage survives a NATS restart; memory storage is for throwaway setups."""


def state_stream(cluster: str) -> str:
    """Stream holding the last snapshot (or tombstone) of every node, pod, workload and config."""
    return f"tidegate-{cluster}-state"


def capacity_stream(cluster: str) -> str:
    """Stream holding the last capacity record per node and domain."""
    return f"tidegate-{cluster}-capacity"


def decisions_stream(cluster: str) -> str:
    """Append-only stream of decisions: admitted, pending, preempt-requested, preempted, released."""
    return f"tidegate-{cluster}-decisions"


def deadletter_stream(cluster: str) -> str:
    """Stream of messages a consumer gave up on, with the reason in the headers."""
    return f"tidegate-{cluster}-deadletter"


def ledger_bucket(cluster: str) -> str:
    """KV bucket of the admission ledger (what is admitted, charged where)."""
    return f"tidegate-{cluster}-ledger"


def leases_bucket(cluster: str) -> str:
    """KV bucket of leader leases (one key per single-writer role)."""
    return f"tidegate-{cluster}-leases"


def fence_wildcard(cluster: str) -> str:
    """Fence markers of single-writer roles, kept in the decision stream (see
    :mod:`tidegate.bus.fence`); no consumer of decisions sees them (``tg.<c>.decision.>``)."""
    return f"tg.{cluster}.fence.>"


def fence_subject(cluster: str, role: str) -> str:
    """The fence marker of ``role`` in the decision stream."""
    return f"tg.{cluster}.fence.{subjects.token(role)}"


def ledger_fence_key(role: str) -> str:
    """The ledger key holding ``role``'s fence marker (no ``/``: never a workload key)."""
    return f"fence.{role}"


def deadletter_wildcard(cluster: str) -> str:
    """Subjects of the dead-letter stream."""
    return f"tg.{cluster}.deadletter.>"


def deadletter_subject(cluster: str, consumer: str, original_subject: str) -> str:
    """Where ``consumer`` puts a message it gave up on.

    ``tg.<c>.deadletter.<consumer>.<rest>`` where ``<rest>`` is the original subject without
    its ``tg.<c>.`` prefix, so dead letters can be filtered by consumer and by kind.
    """
    prefix = f"tg.{cluster}."
    rest = original_subject.removeprefix(prefix)
    return f"tg.{cluster}.deadletter.{subjects.token(consumer)}.{rest}"


def _storage(settings: LayoutSettings) -> api.StorageType:
    return api.StorageType.FILE if settings.file_storage else api.StorageType.MEMORY


def _stream(
    *,
    name: str,
    description: str,
    stream_subjects: list[str],
    settings: LayoutSettings,
    last_value: bool,
    per_subject: int = -1,
    max_age: float | None = None,
    max_bytes: int | None = None,
    allow_msg_ttl: bool = False,
) -> api.StreamConfig:
    return api.StreamConfig(
        name=name,
        description=description,
        subjects=stream_subjects,
        retention=api.RetentionPolicy.LIMITS,
        max_msgs_per_subject=1 if last_value else per_subject,
        max_age=max_age,
        max_bytes=max_bytes,
        discard=api.DiscardPolicy.OLD,
        duplicate_window=settings.duplicate_window_seconds,
        num_replicas=settings.replicas,
        storage=_storage(settings),
        allow_direct=True,
        allow_msg_ttl=allow_msg_ttl or None,
    )


def stream_configs(cluster: str, settings: LayoutSettings) -> list[api.StreamConfig]:
    """Configurations of the four streams of ``cluster``."""
    subjects.validate_cluster(cluster)
    return [
        _stream(
            name=state_stream(cluster),
            description="tidegate: last snapshot or tombstone per object",
            stream_subjects=subjects.state_wildcards(cluster),
            settings=settings,
            last_value=True,
            allow_msg_ttl=True,  # tombstones expire
        ),
        _stream(
            name=capacity_stream(cluster),
            description="tidegate: last free-capacity record per node and domain",
            stream_subjects=[subjects.capacity_wildcard(cluster)],
            settings=settings,
            last_value=True,
            allow_msg_ttl=True,  # tombstones expire
        ),
        _stream(
            name=decisions_stream(cluster),
            description="tidegate: decision log (public contract, see docs/events.md)",
            stream_subjects=[subjects.decision_wildcard(cluster), fence_wildcard(cluster)],
            settings=settings,
            last_value=False,
            per_subject=settings.decisions_per_subject,
            max_age=settings.decisions_max_age_seconds,
            max_bytes=settings.decisions_max_bytes,
        ),
        _stream(
            name=deadletter_stream(cluster),
            description="tidegate: messages consumers gave up on",
            stream_subjects=[deadletter_wildcard(cluster)],
            settings=settings,
            last_value=False,
            max_age=settings.deadletter_max_age_seconds,
        ),
    ]


def kv_stream_config(bucket: str, settings: LayoutSettings) -> api.StreamConfig:
    """Stream configuration of a KV bucket, the same shape ``js.create_key_value`` makes.

    Written out here (rather than calling ``create_key_value``) so that start-up can create
    *or update* it like the other streams. Per-message TTL is allowed: leases use it.
    """
    return api.StreamConfig(
        name=f"KV_{bucket}",
        description=f"tidegate KV bucket {bucket}",
        subjects=[f"$KV.{bucket}.>"],
        allow_direct=True,
        allow_rollup_hdrs=True,
        allow_msg_ttl=True,
        deny_delete=True,
        discard=api.DiscardPolicy.NEW,
        duplicate_window=settings.duplicate_window_seconds,
        max_msgs_per_subject=1,
        max_msgs=-1,
        max_consumers=-1,
        num_replicas=settings.replicas,
        storage=_storage(settings),
    )


def bucket_names(cluster: str) -> list[str]:
    """The KV buckets of ``cluster``."""
    subjects.validate_cluster(cluster)
    return [ledger_bucket(cluster), leases_bucket(cluster)]
