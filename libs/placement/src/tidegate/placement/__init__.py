"""Topology-aware gang placement: pure, typed, no I/O.

Given free capacity on a topology (:class:`CapacityView`) and a gang (:class:`PlacementRequest`),
:func:`place` says where every pod goes (:class:`PlacementResult`) or why the gang does not fit.
Admission, preemption and the ``tidegate place`` what-if command all call this same code. The
semantics are documented in docs/placement.md.
"""

from tidegate.placement.capacity import (
    DEFAULT_MAX_PODS,
    HARD_TAINT_EFFECTS,
    CapacityView,
    NodeCapacity,
    OverReleaseError,
    tolerates,
)
from tidegate.placement.engine import apply, place, release
from tidegate.placement.request import (
    AUTO,
    PROFILES,
    PlacementError,
    PlacementRequest,
    PlacementResult,
    resolve_profile,
)
from tidegate.placement.structure import Structure

__all__ = [
    "AUTO",
    "DEFAULT_MAX_PODS",
    "HARD_TAINT_EFFECTS",
    "PROFILES",
    "CapacityView",
    "NodeCapacity",
    "OverReleaseError",
    "PlacementError",
    "PlacementRequest",
    "PlacementResult",
    "Structure",
    "apply",
    "place",
    "release",
    "resolve_profile",
    "tolerates",
]
