"""A leader's client guard: what a lease guard's outcomes become for a Kubernetes write."""

import pytest

from tidegate.bus import LeaseLost, LeaseUnconfirmed
from tidegate.kube import HeldBack, KubeError
from tidegate.runtime.leadership import lease_write_guard


def test_a_lease_guard_becomes_a_write_guard() -> None:
    assert lease_write_guard(lambda: 4.5)() == 4.5

    def unconfirmed() -> float:
        raise LeaseUnconfirmed("only 0.5s confirmed")

    with pytest.raises(HeldBack, match="confirmed") as held:
        lease_write_guard(unconfirmed)()
    assert isinstance(held.value, KubeError)  # what the writers already retry

    def lost() -> float:
        raise LeaseLost("taken over")

    with pytest.raises(LeaseLost):  # stops the writer, not retried as a Kubernetes failure
        lease_write_guard(lost)()
