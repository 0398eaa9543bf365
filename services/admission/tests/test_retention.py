"""Which workloads' decisions the retention sweep purges (pure part)."""

from tidegate.admission.retention import expired
from tidegate.model import WorkloadKey

GONE, ALIVE, BACK = WorkloadKey("ns/gone"), WorkloadKey("ns/alive"), WorkloadKey("ns/back")


def test_a_workload_unknown_for_the_retention_expires_a_known_one_never() -> None:
    absent = {GONE: 0.0, ALIVE: 0.0}
    assert expired(absent, {ALIVE}, now=0.0, keep_seconds=10) == []
    assert expired(absent, {ALIVE}, now=9.9, keep_seconds=10) == []
    assert expired(absent, {ALIVE}, now=10.0, keep_seconds=10) == [GONE]


def test_a_workload_known_again_starts_its_clock_again() -> None:
    absent = {BACK: 0.0}
    expired(absent, {BACK}, now=5.0, keep_seconds=10)  # created again
    assert absent == {}
    absent[BACK] = 12.0  # deleted again (DecisionRetention.deleted)
    assert expired(absent, set(), now=12.0, keep_seconds=10) == []
    assert expired(absent, set(), now=22.0, keep_seconds=10) == [BACK]


def test_the_oldest_absence_goes_first() -> None:
    absent = {GONE: 1.0, BACK: 0.0}
    assert expired(absent, set(), now=11.0, keep_seconds=10) == [BACK, GONE]
