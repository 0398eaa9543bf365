"""The order in which placement lists domains: natural order of paths.

Ties between equally good domains are broken by path, and a podset's assignment lists its
domains in path order within their parent, so that pod ranks handed out in that order put
consecutive ranks in the same or neighbouring domains. "Path order" is *natural* order, the
one people expect: ``rack-2`` before ``rack-10``. Values are compared segment by segment,
digit runs as numbers; the raw string breaks the remaining ties (``r07`` vs ``r7``).

This module only defines the key; it does not sort anything itself.
"""

import re
from typing import Final

_DIGITS: Final = re.compile(r"(\d+)")

NaturalKey = tuple[tuple[str | int, ...], str]
"""A sortable key: alternating text and number segments, then the raw value."""


def natural_key(value: str) -> NaturalKey:
    """Return the key that sorts ``value`` in natural order (``n2`` < ``n10``)."""
    parts = _DIGITS.split(value)
    # re.split with one capture group alternates text, digits, text, ... starting with text,
    # so position parity tells which is which and mixed comparisons never happen.
    segments = tuple(int(part) if index % 2 else part for index, part in enumerate(parts))
    return segments, value
