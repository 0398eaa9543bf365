"""Every nats-py exception raised inside ``wrapped`` leaves it as a tidegate ``BusError``."""

import nats.errors
import nats.js.errors
import pytest

from tidegate.bus._wrap import wrapped
from tidegate.bus.errors import BusError, Conflict, Unavailable


def subclasses(cls: type[Exception]) -> set[type[Exception]]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *subclasses(sub)}
    return found


def instance(cls: type[Exception]) -> Exception:
    """An instance as nats-py makes it (a few constructors need arguments)."""
    if issubclass(cls, nats.errors.SlowConsumerError):
        return cls(subject="s", reply="", sid=1, sub=None)  # type: ignore[arg-type]
    if issubclass(cls, nats.js.errors.ConsumerSequenceMismatchError):
        return cls(stream_resume_sequence=2, consumer_sequence=1, last_consumer_sequence=0)
    return cls()


NATS_ERRORS = sorted(
    subclasses(nats.errors.Error) | {nats.errors.Error},
    key=lambda c: f"{c.__module__}.{c.__name__}",
)


@pytest.mark.parametrize("error", NATS_ERRORS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_nats_error_leaves_wrapped_as_a_bus_error(error: type[Exception]) -> None:
    raised = instance(error)
    with pytest.raises(BusError, match=r"^doing it: ") as caught, wrapped("doing it"):
        raise raised
    assert caught.value.__cause__ is raised


def test_errors_are_classified() -> None:
    with pytest.raises(Unavailable), wrapped("publishing"):
        raise nats.errors.NoRespondersError
    with pytest.raises(Conflict), wrapped("updating"):
        raise nats.js.errors.KeyWrongLastSequenceError(description="wrong last sequence")
    with pytest.raises(Conflict), wrapped("publishing"):
        raise nats.js.errors.APIError(err_code=10071, description="wrong last sequence")
