"""Which side of the tide a workload is on: inference, training, or unknown.

Volcano's tidal design (seed 002) lets online *inference* reclaim capacity from offline
*training* and nothing else. The service type comes from the workload's
``volcano.sh/service.type`` annotation; when that is absent it is derived from the kind of the
pod's owner through a configurable map (by default ReplicaSet/Deployment → inference,
Job → training, like Volcano's ``podOwnerReferenceToServiceType``); anything else is
``unknown``, which neither reclaims nor is ever reclaimed.

This module also holds the who-may-reclaim-whom rule (:func:`may_reclaim`). It does not decide
whether a particular workload is a victim (preemptable flag, queue, priority): that is
:mod:`tidegate.policy.victims`.
"""

from collections.abc import Mapping
from typing import Final, get_args

from tidegate.model.events import ServiceType

SERVICE_TYPE_ANNOTATION: Final = "volcano.sh/service.type"
"""The annotation that names a workload's service type explicitly."""

SERVICE_TYPES: Final[tuple[ServiceType, ...]] = get_args(ServiceType)
"""Every service type: ("inference", "training", "unknown")."""

DEFAULT_OWNER_KIND_SERVICE_TYPES: Final[Mapping[str, ServiceType]] = {
    "ReplicaSet": "inference",
    "Deployment": "inference",
    "Job": "training",
}
"""The owner-kind map used when none is configured (the seed's plugin configuration)."""


class ServiceTypeError(ValueError):
    """A service-type value that is not one of inference, training (or unknown in a map)."""


def parse_service_type(value: str, *, field: str = SERVICE_TYPE_ANNOTATION) -> ServiceType:
    """Return ``value`` as a :data:`ServiceType`, or raise :class:`ServiceTypeError` naming ``field``.

    Only "inference" and "training" may be written by users; "unknown" is accepted too so that
    a configuration can say explicitly that a kind is neither.
    """
    for known in SERVICE_TYPES:
        if value == known:
            return known
    raise ServiceTypeError(
        f"{field}: {value!r} is not a service type (expected inference or training)"
    )


def validate_owner_kind_map(
    mapping: Mapping[str, str], *, field: str = "owner_kind_service_types"
) -> dict[str, ServiceType]:
    """Check a configured owner-kind → service-type map; errors name ``field[kind]``."""
    checked: dict[str, ServiceType] = {}
    for kind, value in mapping.items():
        if not kind:
            raise ServiceTypeError(f"{field}: an owner kind must not be empty")
        checked[kind] = parse_service_type(value, field=f"{field}[{kind!r}]")
    return checked


def resolve_service_type(
    annotation: str | None,
    owner_kind: str | None,
    owner_kind_map: Mapping[str, ServiceType] = DEFAULT_OWNER_KIND_SERVICE_TYPES,
) -> ServiceType:
    """The workload's service type: its annotation, else its owner kind's entry, else unknown.

    An empty annotation counts as absent (as in Volcano). A malformed annotation raises
    :class:`ServiceTypeError` rather than silently becoming a victim or a reclaimer; the caller
    marks the workload invalid with the message.
    """
    if annotation:
        return parse_service_type(annotation.strip())
    if owner_kind:
        return owner_kind_map.get(owner_kind, "unknown")
    return "unknown"


def may_reclaim(reclaimer: ServiceType, reclaimee: ServiceType) -> bool:
    """Whether a workload of type ``reclaimer`` may take capacity from one of type ``reclaimee``.

    Only inference reclaims, and only from training: training never preempts anything,
    inference never preempts inference, and unknown is neither a reclaimer nor a victim.
    """
    return reclaimer == "inference" and reclaimee == "training"
