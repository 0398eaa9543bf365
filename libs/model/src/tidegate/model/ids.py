"""Identifier types shared by every tidegate package."""

from typing import NewType

ClusterId = NewType("ClusterId", str)
"""The cluster a message belongs to: one NATS may serve several clusters."""

NodeName = NewType("NodeName", str)
"""A Kubernetes node name."""

WorkloadKey = NewType("WorkloadKey", str)
"""A workload's identity on the bus: ``"<namespace>/<name>"``."""


def workload_key(namespace: str, name: str) -> WorkloadKey:
    """Return the key ``namespace/name`` that names a workload everywhere in tidegate."""
    return WorkloadKey(f"{namespace}/{name}")
