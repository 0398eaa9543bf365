"""Resource lists as plain dicts of integers, and the arithmetic quota and capacity need.

A :data:`Resources` maps a resource name ("cpu", "memory", "nvidia.com/gpu", …) to an amount in
tidegate's unit (millicores for cpu, base units otherwise; see :mod:`tidegate.model.quantity`).
A missing resource is zero.
"""

from collections.abc import Iterable, Mapping

Resources = dict[str, int]
"""Resource name → amount (cpu in millicores, everything else in base units)."""


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Return a + b, resource by resource."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Return a − b, resource by resource (may go negative: callers decide what that means)."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) - amount
    return out


def scale(a: Mapping[str, int], factor: int) -> Resources:
    """Return a × factor."""
    return {name: amount * factor for name, amount in a.items()}


def total(items: Iterable[Mapping[str, int]]) -> Resources:
    """Sum many resource lists."""
    out: Resources = {}
    for item in items:
        for name, amount in item.items():
            out[name] = out.get(name, 0) + amount
    return out


def exceeding(request: Mapping[str, int], limit: Mapping[str, int]) -> list[str]:
    """Names of resources in ``request`` that are larger than ``limit`` (missing limit = 0)."""
    return sorted(name for name, amount in request.items() if amount > limit.get(name, 0))


def non_zero(a: Mapping[str, int]) -> Resources:
    """Drop zero entries, so two equal resource lists compare equal."""
    return {name: amount for name, amount in a.items() if amount != 0}
