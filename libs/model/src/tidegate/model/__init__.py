"""The one schema module for every message on the tidegate bus.

Everything that crosses NATS is a msgspec Struct defined here, wrapped in an
:class:`~tidegate.model.events.Envelope`. Other systems subscribe to the decision subjects, so
these types are a public, versioned contract: new fields get defaults, no field is ever
retyped or renamed (msgspec's schema-evolution rules). This package is pure: no I/O.
"""

from tidegate.model.events import (
    SCHEMA_VERSION,
    Admitted,
    CapacityDomain,
    CapacityNode,
    CardRequest,
    DisruptionBudgetState,
    DomainCount,
    Envelope,
    LostAdmission,
    Message,
    NodeState,
    Pending,
    PendingReason,
    PodSetSpec,
    PodState,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    ReplaceCause,
    ReplaceRequested,
    Taint,
    Toleration,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    TopologyRequest,
    WorkloadState,
)
from tidegate.model.ids import ClusterId, NodeName, WorkloadKey, workload_key
from tidegate.model.quantity import QuantityError, format_quantity, parse_quantity, parse_resources
from tidegate.model.resources import Resources

__all__ = [
    "SCHEMA_VERSION",
    "Admitted",
    "CapacityDomain",
    "CapacityNode",
    "CardRequest",
    "ClusterId",
    "DisruptionBudgetState",
    "DomainCount",
    "Envelope",
    "LostAdmission",
    "Message",
    "NodeName",
    "NodeState",
    "Pending",
    "PendingReason",
    "PodSetSpec",
    "PodState",
    "PreemptRequested",
    "Preempted",
    "QuantityError",
    "QueueConfig",
    "Released",
    "ReplaceCause",
    "ReplaceRequested",
    "Resources",
    "Taint",
    "Toleration",
    "Tombstone",
    "TopologyAssignment",
    "TopologyConfig",
    "TopologyRequest",
    "WorkloadKey",
    "WorkloadState",
    "format_quantity",
    "parse_quantity",
    "parse_resources",
    "workload_key",
]
