"""Which workloads' decisions the retention sweep purges (pure part)."""

from tidegate.admission.retention import expired
from tidegate.model import WorkloadKey

GONE, ALIVE, BACK = WorkloadKey("ns/gone"), WorkloadKey("ns/alive"), WorkloadKey("ns/back")


def test_a_workload_unknown_for_the_retention_expires_a_known_one_never() -> None:
    absent: dict[WorkloadKey, float] = {}
    candidates = [GONE, ALIVE]
    assert expired(candidates, {ALIVE}, absent, now=0.0, keep_seconds=10) == []
    assert expired(candidates, {ALIVE}, absent, now=9.9, keep_seconds=10) == []
    assert expired(candidates, {ALIVE}, absent, now=10.0, keep_seconds=10) == [GONE]


def test_a_workload_known_again_starts_its_clock_again() -> None:
    absent: dict[WorkloadKey, float] = {}
    expired([BACK], set(), absent, now=0.0, keep_seconds=10)
    expired([BACK], {BACK}, absent, now=5.0, keep_seconds=10)  # created again
    assert expired([BACK], set(), absent, now=12.0, keep_seconds=10) == []  # deleted again
    assert expired([BACK], set(), absent, now=22.0, keep_seconds=10) == [BACK]


def test_a_workload_no_longer_a_candidate_is_forgotten_and_the_oldest_absence_goes_first() -> None:
    absent: dict[WorkloadKey, float] = {}
    expired([BACK], set(), absent, now=0.0, keep_seconds=10)
    expired([BACK, GONE], set(), absent, now=1.0, keep_seconds=10)
    assert expired([GONE, BACK], set(), absent, now=11.0, keep_seconds=10) == [BACK, GONE]
    expired([], set(), absent, now=12.0, keep_seconds=10)
    assert absent == {}
