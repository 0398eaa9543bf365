"""Translation of nats-py exceptions into :mod:`tidegate.bus.errors` (internal).

Kept in one place so every call into nats-py classifies failures the same way.
"""

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import nats.errors
import nats.js.errors

from tidegate.bus.errors import BusError, Conflict, Unavailable

# JetStream error codes of a failed optimistic-concurrency check: wrong last sequence
# (10071, and the constant-message variant 10164).
_WRONG_LAST_SEQUENCE: Final = frozenset({10071, 10164})

_TRANSIENT: Final = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.FlushTimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    asyncio.TimeoutError,
)


def translate(exc: BaseException, what: str) -> BusError:
    """The tidegate error for a nats-py exception raised while doing ``what``."""
    if isinstance(exc, BusError):
        return exc
    if isinstance(exc, nats.js.errors.KeyWrongLastSequenceError):
        return Conflict(f"{what}: someone else wrote first ({exc.description})")
    # The KV errors subclass APIError without calling its __init__: no err_code, no description.
    err_code = getattr(exc, "err_code", None)
    description = getattr(exc, "description", None) or str(exc)
    if isinstance(exc, nats.js.errors.APIError) and err_code in _WRONG_LAST_SEQUENCE:
        return Conflict(f"{what}: someone else wrote first ({description})")
    if isinstance(exc, _TRANSIENT):
        return Unavailable(f"{what}: NATS unavailable ({type(exc).__name__}: {exc})")
    if isinstance(exc, nats.js.errors.APIError):
        return BusError(f"{what}: JetStream refused (code {err_code}: {description})")
    return BusError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def wrapped(what: str) -> Iterator[None]:
    """Re-raise any nats-py error inside the block as a tidegate error (``from`` the original)."""
    try:
        yield
    except (TimeoutError, nats.errors.Error) as exc:
        raise translate(exc, what) from exc
