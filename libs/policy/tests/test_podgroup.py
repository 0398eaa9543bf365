"""PodGroup status (counters, phase, conditions) and the placement summary of Events."""

from pathlib import Path

from tidegate.model import (
    Admitted,
    DomainCount,
    Pending,
    PodSetSpec,
    PodState,
    Released,
    TopologyAssignment,
    WorkloadState,
)
from tidegate.policy.podgroup import (
    PHASES,
    count,
    placement_summary,
    podgroup_status,
    same_status,
    with_shown_times,
)

GATE = "tidegate.io/admission"
GROUP = WorkloadState(
    namespace="ns",
    name="pair",
    uid="u",
    owner_kind="PodGroup",
    min_members=2,
    podsets=[PodSetSpec(name="main", count=3)],
)


def admitted(sequence: int = 5) -> Admitted:
    """An admission of two pods on two hosts."""
    domains = [
        DomainCount(values=["b1", "r1", "h1"], count=1),
        DomainCount(values=["b1", "r1", "h2"], count=1),
    ]
    return Admitted(
        workload="ns/pair",
        uid="u",
        queue="q",
        sequence=sequence,
        epoch=1,
        assignments={"main": TopologyAssignment(levels=["b", "r", "h"], domains=domains)},
    )


def pods(*phases: str, gated: int = 0) -> list[PodState]:
    """Released pods in ``phases`` plus ``gated`` gated ones."""
    out = [
        PodState(namespace="ns", name=f"p{i}", uid=f"u{i}", phase=p) for i, p in enumerate(phases)
    ]
    out += [
        PodState(namespace="ns", name=f"g{i}", uid=f"g{i}", scheduling_gates=[GATE])
        for i in range(gated)
    ]
    return out


def status_of(members: list[PodState], **decisions: object) -> dict[str, object]:
    """The status for ``members`` at a fixed time."""
    values: dict[str, object] = {"admitted": None, "released": None, "pending": None}
    values.update(decisions)
    return podgroup_status(GROUP, members, now="2025-01-01T00:00:00Z", **values)  # type: ignore[arg-type]


def conditions(status: dict[str, object]) -> dict[str, tuple[str, str]]:
    """type → (status, reason)."""
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}  # type: ignore[attr-defined,index]


def test_pending_group_shows_the_reason_token() -> None:
    waiting = Pending(
        workload="ns/pair", uid="u", queue="q", reason="WaitingForCapacity", message="no room"
    )
    status = status_of(pods(gated=3), pending=waiting)
    assert status["phase"] == "Pending"
    assert (status["admitted"], status["running"]) == (0, 0)
    assert conditions(status)["Admitted"] == ("False", "WaitingForCapacity")
    assert conditions(status)["PodsReady"] == ("False", "WaitingForPods")


def test_admitted_then_running_then_succeeded() -> None:
    assert (
        status_of(pods("Pending", "Pending", gated=1), admitted=admitted())["phase"] == "Admitted"
    )
    running = status_of(pods("Running", "Running", gated=1), admitted=admitted())
    assert running["phase"] == "Running"
    assert (running["admitted"], running["running"]) == (2, 2)
    assert conditions(running)["PodsReady"] == ("True", "PodsReady")
    done = status_of(pods("Succeeded", "Succeeded"), admitted=admitted())
    assert (done["phase"], done["succeeded"]) == ("Succeeded", 2)
    failed = status_of(pods("Failed", "Succeeded"), admitted=admitted())
    assert (failed["phase"], failed["failed"]) == ("Failed", 1)
    assert {s["phase"] for s in (running, done, failed)} <= set(PHASES)


def test_eviction_condition_and_transition_times() -> None:
    evicted = Released(
        workload="ns/pair",
        uid="u",
        queue="q",
        reason="Evicted",
        sequence=7,
        message="gone",
        evict_pods=True,
    )
    status = status_of(pods(gated=2), released=evicted)
    assert conditions(status)["Evicted"] == ("True", "NodeFailure")
    assert conditions(status)["Admitted"] == ("False", "Evicted")
    again = podgroup_status(
        GROUP,
        pods("Running", "Running"),
        admitted=admitted(sequence=9),
        released=evicted,
        pending=None,
        now="2025-01-01T00:05:00Z",
        previous=status["conditions"],  # type: ignore[arg-type]
    )
    times = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}  # type: ignore[attr-defined,index]
    assert conditions(again)["Evicted"] == ("False", "Readmitted")
    assert times["Evicted"] == "2025-01-01T00:05:00Z"
    assert not same_status(status, again)
    # Same status again later: nothing changed, times kept.
    later = podgroup_status(
        GROUP,
        pods("Running", "Running"),
        admitted=admitted(sequence=9),
        released=evicted,
        pending=None,
        now="2025-01-01T00:09:00Z",
        previous=again["conditions"],  # type: ignore[arg-type]
    )
    assert same_status(again, later)
    assert later["conditions"] == again["conditions"]


def test_the_first_write_keeps_the_times_the_object_shows() -> None:
    desired = status_of(pods("Running", "Running"), admitted=admitted())
    shown = {
        "conditions": [
            {"type": "Admitted", "status": "True", "lastTransitionTime": "2024-12-31T00:00:00Z"},
            {"type": "PodsReady", "status": "False", "lastTransitionTime": "2024-12-31T00:01:00Z"},
            "not a condition",
        ]
    }
    kept = with_shown_times(desired, shown)
    times = {c["type"]: c["lastTransitionTime"] for c in kept["conditions"]}  # type: ignore[attr-defined,index]
    assert times["Admitted"] == "2024-12-31T00:00:00Z"  # same status: its time is kept
    assert times["PodsReady"] != "2024-12-31T00:01:00Z"  # it changed: now
    assert with_shown_times(desired, None) == desired
    assert with_shown_times(desired, {"conditions": "garbage"}) == desired


def test_counts_and_summary() -> None:
    counted = count(pods("Running", "Failed", "Succeeded", gated=2))
    assert (
        counted.admitted,
        counted.running,
        counted.failed,
        counted.succeeded,
        counted.waiting,
    ) == (
        3,
        1,
        1,
        1,
        2,
    )
    assert (
        placement_summary(admitted())
        == "queue q; main: 2 pods in 2 domains (b1/r1/h1 ×1, b1/r1/h2 ×1)"
    )


def test_the_crd_allows_exactly_the_phases_written() -> None:
    import yaml

    root = Path(__file__).resolve().parents[3]
    crd = yaml.safe_load((root / "deploy" / "crds" / "tidegate.io_podgroups.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["status"]["properties"]["phase"]["enum"] == list(PHASES)
