"""Kubernetes resource quantities ("500m", "64Gi", "1e3", 8) as exact integers.

tidegate keeps every amount as an ``int`` in the unit the Kubernetes scheduler itself uses:
``cpu`` in millicores, every other resource in its base unit (bytes for memory and storage,
devices for GPUs and other extended resources), rounded up like the API server rounds
requests. Integers keep quota arithmetic exact and fit NumPy ``int64`` arrays.
"""

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Final

from tidegate.model.resources import Resources

MILLI_RESOURCES: Final = frozenset({"cpu"})
"""Resources counted in thousandths of their unit (Kubernetes' ``MilliValue``)."""

MAX_AMOUNT: Final = 2**63 - 1
"""Amounts saturate here (int64, like Kubernetes' own scaled values): in practice, unlimited."""

MAX_EXPONENT: Final = 30
"""Decimal exponents beyond this saturate without arithmetic (``1e1000000`` would be slow)."""

_SUFFIXES: Final[dict[str, Decimal]] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY: Final = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message says what was wrong."""


def parse_decimal(value: object) -> Decimal:
    """Parse a quantity (string in Kubernetes notation, int or float) into an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if number == 0:
            return Decimal(0)
        if exponent > MAX_EXPONENT:
            return Decimal(MAX_AMOUNT).copy_sign(number)
        if exponent < -MAX_EXPONENT:
            return Decimal("1e-30").copy_sign(number)
        return number * Decimal(10) ** exponent
    return number * _SUFFIXES[match["suffix"] or ""]


def parse_quantity(resource: str, value: object) -> int:
    """Return ``value`` as an integer in tidegate's unit for ``resource`` (see module doc).

    Raises :class:`QuantityError` for malformed or negative values.
    """
    if type(value) in (str, int, float):
        # Every pod event carries the same few quantities ("8", "16Gi"): parsed once each.
        return _cached_quantity(resource, value)
    return _quantity(resource, value)


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_quantity(resource: str, value: str | int | float) -> int:
    return _quantity(resource, value)


def _quantity(resource: str, value: object) -> int:
    amount = parse_decimal(value)
    if amount < 0:
        raise QuantityError(f"{value!r} is negative")
    if resource in MILLI_RESOURCES:
        amount *= 1000
    return min(MAX_AMOUNT, int(amount.to_integral_value(rounding=ROUND_CEILING)))


def parse_resources(values: dict[str, object] | None) -> Resources:
    """Parse a Kubernetes ResourceList. Raises QuantityError naming the offending resource."""
    parsed: dict[str, int] = {}
    for resource, value in (values or {}).items():
        try:
            parsed[resource] = parse_quantity(resource, value)
        except QuantityError as exc:
            raise QuantityError(f"{resource}: {exc}") from exc
    return parsed


def format_quantity(resource: str, amount: int) -> str:
    """Render an amount back in Kubernetes notation ("1500m", "64Gi", "8")."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if amount >= unit and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)
