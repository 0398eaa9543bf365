"""Release planning as a table: a situation (the view, what the releaser remembers) → the
intents a plan returns, and the memory it keeps."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import pytest

from tidegate.model import (
    Admitted,
    DomainCount,
    Message,
    NodeState,
    PodSetSpec,
    PodState,
    Released,
    TopologyAssignment,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.policy import release
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.release import (
    EMPTY,
    Expectation,
    Memory,
    Plan,
    Timing,
)

KEY = WorkloadKey("team/train")
LEVELS = ["block", "rack", "host"]
TIMING = Timing(expectation_timeout_seconds=30, replace_retry_seconds=10, unschedulable_seconds=60)
NOW = 1000.0
WALL = 1_700_000_000.0


def node(host: str, *, ready: bool = True) -> NodeState:
    """Node n<k> for host h<k>, in rack r1 of block b1."""
    return NodeState(
        name=f"n{host[1:]}", labels={"block": "b1", "rack": "r1", "host": host}, ready=ready
    )


def workload(kind: str = "Job", uid: str = "u1", **changes: object) -> WorkloadState:
    fields: dict[str, object] = {"podsets": [PodSetSpec(name="main", count=2)], **changes}
    return WorkloadState(
        namespace="team",
        name="train",
        uid=uid,
        owner_kind=kind,
        **fields,  # type: ignore[arg-type]
    )


def admitted(
    *hosts: tuple[str, int], sequence: int = 1, uid: str = "u1", **changes: object
) -> Admitted:
    domains = [DomainCount(values=["b1", "r1", h], count=c) for h, c in hosts]
    return Admitted(
        workload=KEY,
        uid=uid,
        queue="q",
        sequence=sequence,
        epoch=1,
        assignments={"main": TopologyAssignment(levels=LEVELS, domains=domains)},
        **changes,  # type: ignore[arg-type]
    )


def gated(index: int, **changes: object) -> PodState:
    return PodState(
        namespace="team",
        name=f"p{index}",
        uid=f"pu{index}",
        workload=KEY,
        podset="main",
        scheduling_gates=[ADMISSION_GATE],
        created_at=float(index),
        **changes,  # type: ignore[arg-type]
    )


def released(index: int, host: str, **changes: object) -> PodState:
    """A pod released into ``host`` and bound there (Running)."""
    fields: dict[str, object] = {
        "node_name": f"n{host[1:]}",
        "phase": "Running",
        **changes,
    }
    return PodState(
        namespace="team",
        name=f"p{index}",
        uid=f"pu{index}",
        workload=KEY,
        podset="main",
        node_selector={"block": "b1", "rack": "r1", "host": host},
        created_at=float(index),
        **fields,  # type: ignore[arg-type]
    )


def expecting(host: str, *, at: float = NOW) -> Expectation:
    return Expectation(podset="main", domain=("b1", "r1", host), at=at)


def view_of(messages: Sequence[object]) -> ClusterView:
    view = ClusterView()
    for sequence, body in enumerate(messages, start=1):
        view.apply(cast(Message, body), stream_sequence=sequence)
    return view


def plan_of(
    messages: Sequence[object],
    memory: Memory = EMPTY,
    *,
    releasing: bool = True,
    now: float = NOW,
    wall_now: float = WALL,
) -> Plan:
    return release.plan(
        view_of(messages),
        KEY,
        memory,
        releasing=releasing,
        now=now,
        wall_now=wall_now,
        timing=TIMING,
        stamp="2026-01-01T00:00:00Z",
    )


def summary(intent: release.Intent) -> tuple[object, ...]:
    """An intent, short: what and whom."""
    match intent:
        case release.ReleasePod(pod=pod, domain=domain):
            return ("release", pod.name, domain[-1])
        case release.RequestReplacement(request=request):
            lost = {
                podset: sorted((d.values[-1], d.count) for d in domains)
                for podset, domains in request.lost.items()
            }
            kind = "give-back" if request.give_back else request.cause
            return (kind, request.admitted_sequence, lost, tuple(request.nodes))
        case release.EvictPod(pod=pod):
            return ("evict", pod.name)
        case release.RequeueOwner(workload=owner, pods=pods):
            return ("requeue", owner.uid, tuple(p.name for p in pods))
        case release.ResumeOwner(workload=owner):
            return ("resume", owner.uid)
        case release.WritePodGroupStatus(status=status, first=first):
            return ("status", status["phase"], first)
        case release.Notice(message=message):
            return ("notice", message)


@dataclass(frozen=True)
class Case:
    """A situation and what its plan must say."""

    messages: Sequence[object]
    intents: list[tuple[object, ...]]
    memory: Memory = EMPTY
    waiting: int = 0
    releasing: bool = True
    expected_after: dict[str, str] | None = None
    """Pod name → host of each release in flight the plan remembers (None: not checked)."""


H1 = node("h1")
H2 = node("h2")
H1_DOWN = node("h1", ready=False)

CASES: dict[str, Case] = {
    "a gang with a gated pod per slot is released whole": Case(
        messages=[H1, H2, workload(), admitted(("h1", 1), ("h2", 1)), gated(0), gated(1)],
        intents=[("release", "p0", "h1"), ("release", "p1", "h2")],
        expected_after={"p0": "h1", "p1": "h2"},
    ),
    "more gated pods than slots: the slots are filled, the rest wait": Case(
        messages=[H1, workload(), admitted(("h1", 2)), gated(0), gated(1), gated(2)],
        intents=[("release", "p0", "h1"), ("release", "p1", "h1")],
        waiting=1,
    ),
    "slots held by released pods are not filled again": Case(
        messages=[
            H1,
            H2,
            workload(),
            admitted(("h1", 1), ("h2", 1)),
            released(0, "h1"),
            gated(1),
            gated(2),
        ],
        intents=[("release", "p1", "h2")],
        waiting=1,
    ),
    "a handover while a release is in flight fills no slot twice": Case(
        # p0's release (by the deposed leader, found at takeover) holds h1's slot although
        # the bus still shows p0 gated: only h2 is free.
        messages=[H1, H2, workload(), admitted(("h1", 1), ("h2", 1)), gated(0), gated(1), gated(2)],
        memory=Memory(expectations={"pu0": expecting("h1")}),
        intents=[("release", "p1", "h2")],
        waiting=1,
        expected_after={"p0": "h1", "p1": "h2"},
    ),
    "a release in flight unseen too long is judged by the bus": Case(
        messages=[H1, workload(), admitted(("h1", 1)), gated(0)],
        memory=Memory(expectations={"pu0": expecting("h1", at=NOW - 31)}),
        intents=[
            ("notice", "release of pod team/p0 not seen within 30s; judging it by the bus"),
            ("release", "p0", "h1"),
        ],
        expected_after={"p0": "h1"},
    ),
    "a release seen on the bus is no longer in flight": Case(
        messages=[H1, workload(), admitted(("h1", 1)), released(0, "h1")],
        memory=Memory(expectations={"pu0": expecting("h1")}),
        intents=[],
        expected_after={},
    ),
    "a view behind the decision stream releases nothing and resumes nothing": Case(
        messages=[
            H1,
            workload(suspended=True, resume_on_admission=True),
            admitted(("h1", 1)),
            gated(0),
        ],
        releasing=False,
        intents=[],
    ),
    "a failed node's slots are asked for again, naming the node": Case(
        messages=[
            H1_DOWN,
            H2,
            workload(),
            admitted(("h1", 1), ("h2", 1)),
            released(0, "h1"),
            released(1, "h2"),
        ],
        intents=[("NodeFailed", 1, {"main": [("h1", 1)]}, ("n1",))],
    ),
    "a pod replaced after its node failed goes into the replacement slot": Case(
        # h1 failed; admission replaced its slot with one in h2; the Job controller
        # re-created the lost pod (p2, gated). p0 on the NotReady node holds no slot.
        messages=[
            H1_DOWN,
            H2,
            workload(),
            admitted(("h1", 1)),
            admitted(("h2", 1), sequence=2, replaces=1),
            released(0, "h1"),
            gated(2),
        ],
        intents=[("release", "p2", "h2")],
        expected_after={"p2": "h2"},
    ),
    "resume only the admitted owner uid: not a re-created object of the same name": Case(
        messages=[
            H1,
            workload(uid="u2", suspended=True, resume_on_admission=True),
            admitted(("h1", 1), uid="u1"),
        ],
        intents=[],
    ),
    "the admitted owner, suspended for tidegate, is resumed": Case(
        messages=[
            H1,
            workload(uid="u1", suspended=True, resume_on_admission=True),
            admitted(("h1", 1), uid="u1"),
        ],
        intents=[("resume", "u1")],
    ),
    "it is resumed once per admission": Case(
        messages=[
            H1,
            workload(uid="u1", suspended=True, resume_on_admission=True),
            admitted(("h1", 1), uid="u1"),
        ],
        memory=Memory(resumed=("u1", 1)),
        intents=[],
    ),
    "a re-queued owner is resumed only once its old pods are gone": Case(
        messages=[
            H1,
            workload(uid="u1", suspended=True, resume_on_admission=True),
            admitted(("h1", 1), uid="u1"),
            released(0, "h1"),
        ],
        intents=[],
    ),
    "a suspension someone else made is not undone": Case(
        messages=[H1, workload(uid="u1", suspended=True), admitted(("h1", 1), uid="u1")],
        intents=[],
    ),
    "the card model's product joins the selector": Case(
        messages=[H1, workload(), admitted(("h1", 1), card_model="NVIDIA-H200"), gated(0)],
        intents=[("release", "p0", "h1")],
    ),
    "a PodGroup's status is written once, then only when it changes": Case(
        messages=[H1, workload("PodGroup"), admitted(("h1", 1)), released(0, "h1")],
        intents=[("status", "Admitted", True)],  # 1 of its 2 pods runs
    ),
}
CASES["no room for a replacement: a PodGroup's released pods are evicted"] = Case(
    messages=[
        H1_DOWN,
        workload("PodGroup"),
        admitted(("h1", 2)),
        released(0, "h1"),
        released(1, "h1"),
        Released(workload=KEY, uid="u1", queue="q", reason="Evicted", sequence=2, evict_pods=True),
    ],
    intents=[("evict", "p0"), ("evict", "p1"), ("status", "Pending", True)],
)
CASES["no room for a replacement: a Job is re-queued, not its pods evicted"] = Case(
    messages=[
        H1_DOWN,
        workload("Job"),
        admitted(("h1", 2)),
        released(0, "h1"),
        released(1, "h1"),
        Released(workload=KEY, uid="u1", queue="q", reason="Evicted", sequence=2, evict_pods=True),
    ],
    intents=[("requeue", "u1", ("p0", "p1"))],
)


@pytest.mark.parametrize("name", list(CASES))
def test_situations_give_intents(name: str) -> None:
    case = CASES[name]
    planned = plan_of(case.messages, case.memory, releasing=case.releasing)
    assert [summary(intent) for intent in planned.intents] == case.intents
    assert planned.waiting == case.waiting
    if case.expected_after is not None:
        after = {f"p{uid[2:]}": e.domain[-1] for uid, e in planned.memory.expectations.items()}
        assert after == case.expected_after


def test_a_slot_is_never_filled_twice_across_plans() -> None:
    """Plan, then plan again before the bus shows anything: nothing more is released; a
    handover in between (a new releaser taking over the in-flight releases) neither."""
    view = view_of(
        [H1, H2, workload(), admitted(("h1", 1), ("h2", 1))] + [gated(i) for i in range(4)]
    )

    def again(memory: Memory) -> Plan:
        return release.plan(
            view, KEY, memory, releasing=True, now=NOW, wall_now=WALL, timing=TIMING, stamp="t"
        )

    first = again(EMPTY)
    assert [summary(i) for i in first.intents] == [("release", "p0", "h1"), ("release", "p1", "h2")]
    assert first.waiting == 2
    second = again(first.memory)
    assert second.intents == ()
    assert second.waiting == 2
    # The successor learns of the same releases from the API server (take-over).
    admission = view.verdict(KEY).admitted
    assert admission is not None
    successor = EMPTY
    for index, host in ((0, "h1"), (1, "h2")):
        selector = {"block": "b1", "rack": "r1", "host": host}
        taken = release.taken_over(admission, gated(index), selector, now=NOW)
        assert taken is not None
        successor = successor.with_expectation(f"pu{index}", taken)
    assert again(successor).intents == ()
    # A release refused (the pod changed meanwhile) frees its slot for the next plan.
    retried = again(first.memory.without_expectation("pu0"))
    assert [summary(i) for i in retried.intents] == [("release", "p0", "h1")]


def test_a_selector_outside_the_assignment_is_no_release_in_flight() -> None:
    admission = admitted(("h1", 1))
    elsewhere = {"block": "b1", "rack": "r1", "host": "h9"}
    assert release.taken_over(admission, gated(0), elsewhere, now=NOW) is None


def test_release_selector_names_every_level_and_the_card() -> None:
    planned = plan_of([H1, workload(), admitted(("h1", 1), card_model="NVIDIA-H200"), gated(0)])
    (intent,) = planned.intents
    assert isinstance(intent, release.ReleasePod)
    assert dict(intent.selector) == {
        "block": "b1",
        "rack": "r1",
        "host": "h1",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }


def test_replacement_requests_are_retried_after_the_retry_time_with_a_new_event_id() -> None:
    messages = [H1_DOWN, workload(), admitted(("h1", 1)), released(0, "h1")]
    first = plan_of(messages)
    (asked,) = first.intents
    assert isinstance(asked, release.RequestReplacement)
    assert plan_of(messages, first.memory, now=NOW + 5).intents == ()
    later = plan_of(messages, first.memory, now=NOW + 11)
    (again,) = later.intents
    assert isinstance(again, release.RequestReplacement)
    assert again.request == asked.request
    assert again.event_id != asked.event_id
    assert asked.event_id.startswith("ungater-replace-u1-1-")
    assert first.memory.due(now=NOW + 11, wall_now=WALL, timing=TIMING)
    assert not first.memory.due(now=NOW + 5, wall_now=WALL, timing=TIMING)


def test_a_request_not_sent_is_planned_again_at_once() -> None:
    messages = [H1_DOWN, workload(), admitted(("h1", 1)), released(0, "h1")]
    first = plan_of(messages)
    retried = plan_of(messages, first.memory.without_request(give_back=False), now=NOW + 1)
    assert [summary(i)[0] for i in retried.intents] == ["NodeFailed"]


def test_pods_unschedulable_too_long_have_their_slots_moved() -> None:
    stuck = released(0, "h1", phase="Pending", node_name=None, unschedulable_since=WALL - 61)
    fresh = released(1, "h2", phase="Pending", node_name=None, unschedulable_since=WALL - 10)
    planned = plan_of([H1, H2, workload(), admitted(("h1", 1), ("h2", 1)), stuck, fresh])
    assert [summary(i) for i in planned.intents] == [
        ("Unschedulable", 1, {"main": [("h1", 1)]}, ("n1",))
    ]
    # The other pod is due 50 s later: the workload is looked at again then.
    assert planned.memory.unschedulable_due == WALL + 50
    assert planned.memory.due(now=NOW, wall_now=WALL + 50, timing=TIMING)


def test_an_eviction_is_sent_once_and_again_after_it_failed() -> None:
    messages = [H1_DOWN, workload("PodGroup"), admitted(("h1", 1)), released(0, "h1")]
    messages.append(
        Released(workload=KEY, uid="u1", queue="q", reason="Evicted", sequence=2, evict_pods=True)
    )
    first = plan_of(messages)
    assert ("evict", "p0") in [summary(i) for i in first.intents]
    assert [summary(i) for i in plan_of(messages, first.memory).intents] == []
    failed = first.memory.without_eviction("pu0")
    assert [summary(i) for i in plan_of(messages, failed).intents] == [("evict", "p0")]


def test_a_job_is_re_queued_once_per_eviction_decision() -> None:
    messages = [H1_DOWN, workload("Job"), admitted(("h1", 1)), released(0, "h1")]
    messages.append(
        Released(workload=KEY, uid="u1", queue="q", reason="Evicted", sequence=2, evict_pods=True)
    )
    first = plan_of(messages)
    assert first.memory.requeuing == ("u1", 2)
    assert plan_of(messages, first.memory).intents == ()


def test_a_resumed_owner_seen_unsuspended_may_be_resumed_again_later() -> None:
    running = plan_of([H1, workload(uid="u1"), admitted(("h1", 1))], Memory(resumed=("u1", 1)))
    assert running.memory.resumed is None
    assert running.memory.is_empty()


def test_a_deleted_workload_leaves_nothing_to_remember() -> None:
    memory = Memory(
        expectations={"pu0": expecting("h1")},
        released_under={"pu0": 1},
        evicting=frozenset({"pu0"}),
        asked=release.Asked(1, "s", NOW, 1),
        resumed=("u1", 1),
        requeuing=("u1", 2),
        status={"phase": "Running"},
    )
    assert plan_of([H1], memory).memory.is_empty()


def test_an_unchanged_podgroup_status_is_not_written_again() -> None:
    messages = [H1, workload("PodGroup"), admitted(("h1", 1)), released(0, "h1")]
    first = plan_of(messages)
    assert plan_of(messages, first.memory).intents == ()


def test_a_shrunk_elastic_workload_gives_free_slots_back() -> None:
    shrunk = workload(podsets=[PodSetSpec(name="main", count=1, min_count=1)])
    planned = plan_of([H1, H2, shrunk, admitted(("h1", 1), ("h2", 1)), released(0, "h1")])
    kinds = [summary(i) for i in planned.intents]
    assert kinds == [("give-back", 1, {"main": [("h2", 1)]}, ())]
    assert (
        plan_of(
            [H1, H2, shrunk, admitted(("h1", 1), ("h2", 1)), released(0, "h1")], planned.memory
        ).intents
        == ()
    )
