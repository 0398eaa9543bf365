"""Table tests of service-type recognition and the who-may-reclaim-whom rule (seed 002)."""

import pytest

from tidegate.model.events import ServiceType
from tidegate.policy.service_type import (
    DEFAULT_OWNER_KIND_SERVICE_TYPES,
    ServiceTypeError,
    may_reclaim,
    resolve_service_type,
    validate_owner_kind_map,
)


@pytest.mark.parametrize(
    ("annotation", "owner_kind", "expected"),
    [
        ("inference", "Job", "inference"),  # the annotation wins over the owner kind
        ("training", "Deployment", "training"),
        (" training ", None, "training"),
        (None, "Deployment", "inference"),
        (None, "ReplicaSet", "inference"),
        (None, "Job", "training"),
        ("", "Job", "training"),  # empty annotation counts as absent, as in Volcano
        (None, "StatefulSet", "unknown"),
        (None, "JobSet", "unknown"),
        (None, None, "unknown"),
        (None, "", "unknown"),
    ],
)
def test_resolve_with_default_map(
    annotation: str | None, owner_kind: str | None, expected: ServiceType
) -> None:
    assert resolve_service_type(annotation, owner_kind) == expected


def test_configured_map_replaces_the_default() -> None:
    mapping = validate_owner_kind_map({"JobSet": "training", "Deployment": "unknown"})
    assert resolve_service_type(None, "JobSet", mapping) == "training"
    assert resolve_service_type(None, "Deployment", mapping) == "unknown"
    assert resolve_service_type(None, "Job", mapping) == "unknown"
    assert resolve_service_type(None, "Job", {}) == "unknown"


def test_default_map_is_the_seeds() -> None:
    assert dict(DEFAULT_OWNER_KIND_SERVICE_TYPES) == {
        "ReplicaSet": "inference",
        "Deployment": "inference",
        "Job": "training",
    }


@pytest.mark.parametrize("bad", ["Inference", "online", "batch", "unknownx"])
def test_malformed_annotation_is_an_error_naming_it(bad: str) -> None:
    with pytest.raises(
        ServiceTypeError, match=r"volcano\.sh/service\.type: .* is not a service type"
    ):
        resolve_service_type(bad, "Job")


def test_malformed_map_entry_names_the_kind() -> None:
    with pytest.raises(ServiceTypeError, match=r"owner_kind_service_types\['Job'\]: 'batch'"):
        validate_owner_kind_map({"Deployment": "inference", "Job": "batch"})
    with pytest.raises(ServiceTypeError, match="must not be empty"):
        validate_owner_kind_map({"": "training"})


@pytest.mark.parametrize(
    ("reclaimer", "reclaimee", "allowed"),
    [
        ("inference", "training", True),
        ("inference", "inference", False),  # inference never preempts inference
        ("inference", "unknown", False),  # unknown is never a victim
        ("training", "training", False),  # training never preempts anything
        ("training", "inference", False),
        ("training", "unknown", False),
        ("unknown", "training", False),  # unknown never reclaims
        ("unknown", "inference", False),
        ("unknown", "unknown", False),
    ],
)
def test_who_may_reclaim_whom(
    reclaimer: ServiceType, reclaimee: ServiceType, allowed: bool
) -> None:
    assert may_reclaim(reclaimer, reclaimee) is allowed
