"""The contract of the decisions in force: sequences of bus messages in, verdicts and queue
usage out (docs/architecture.md, "The decisions in force"). Every consumer reads the
:class:`~tidegate.model.replica.Replica`, so each row holds for all of them; the rows marked
with a defect failed for at least one of the copies the replica replaced."""

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.model import (
    LostAdmission,
    Message,
    Pending,
    PodState,
    Preempted,
    Released,
    Tombstone,
    WorkloadKey,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.model.replica import GONE_KEPT, Replica, Seen
from tidegate.testing.messages import Messages

KEY = WorkloadKey("team/train")
OTHER = WorkloadKey("team/other")
GPU = "nvidia.com/gpu"

msg = Messages(
    namespace="team",
    defaults={
        "workload": {"uid": "u1", "queue": None},
        "admitted": {"uid": "u1", "charged": {GPU: 8}, "charged_cards": {"H200": 8}},
        "released": {"uid": "u1", "reason": "Evicted"},
        "pending": {"uid": "u1"},
        "preempt_requested": {"uid": "u1"},
        "preempted": {"uid": "p", "mode": {KEY: "restart"}},
    },
)
"""Messages about team/train (uid u1, 8 GPUs charged), preempted by team/serve."""


@dataclass(frozen=True)
class Row:
    """Messages in (in stream order, with their envelope times) → expected verdict and usage."""

    messages: list[Message | tuple[Message, float]]
    state: str
    in_force: int | None
    """The sequence of the admission in force (None: none)."""
    usage: dict[str, int] = field(default_factory=dict)
    """Queue ``q``'s charged resources."""
    admitted: int = 0
    pending: dict[str, int] = field(default_factory=dict)
    """Queue → waiting workloads (any reason)."""


ROWS: dict[str, Row] = {
    "admitted": Row(
        [msg.workload("train"), msg.admitted(KEY, sequence=5)],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "nothing-decided": Row([msg.workload("train")], "Submitted", None),
    "redelivered-admission-counts-once": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.admitted(KEY, sequence=5),
            msg.admitted(KEY, sequence=5),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "reordered-replacement-before-its-original": Row(
        [
            msg.workload("train"),
            msg.admitted(
                KEY, sequence=8, charged={GPU: 4}, charged_cards={"H200": 4}, replaces=5, origin=5
            ),
            msg.admitted(KEY, sequence=5),
        ],
        "Admitted",
        8,
        {"nvidia.com/gpu": 4},
        1,
    ),
    "released": Row(
        [msg.workload("train"), msg.admitted(KEY, sequence=5), msg.released(KEY, sequence=7)],
        "Released",
        None,
    ),
    "replay-meets-the-release-before-a-republished-admission": Row(
        [msg.workload("train"), msg.released(KEY, sequence=7), msg.admitted(KEY, sequence=5)],
        "Released",
        None,
    ),
    "release-before-a-readmission-ends-nothing": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.released(KEY, sequence=7),
            msg.pending(KEY, sequence=8),
            msg.admitted(KEY, sequence=9),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "release-of-another-object-ends-nothing": Row(
        [
            msg.workload("train", uid="u2"),
            msg.admitted(KEY, sequence=5, uid="u2"),
            msg.released(KEY, sequence=9, uid="u1"),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    # The superseded outbox entry republished at takeover is the newest message.
    "failover-republishes-a-superseded-admission": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5, charged={GPU: 8}, charged_cards={"H200": 8}),
            msg.admitted(
                KEY,
                sequence=9,
                charged={GPU: 4},
                charged_cards={"H200": 4},
                replaces=5,
                origin=5,
                resized=True,
                epoch=2,
            ),
            msg.admitted(KEY, sequence=5, charged={GPU: 8}, charged_cards={"H200": 8}),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 4},
        1,
    ),
    # The ungater ordered by (epoch, sequence): a copy from an older leader stored after a
    # newer leader's decision must not win, nor one with a higher epoch and older sequence.
    "sequence-not-epoch-orders-admissions": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=9, charged={GPU: 4}, charged_cards={"H200": 4}, epoch=1),
            msg.admitted(KEY, sequence=7, epoch=2),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 4},
        1,
    ),
    # busview: "the newest decision is an Admitted" showed this as Pending, and queues
    # dropped its usage.
    "elastic-growth-waits-while-admitted": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.pending(KEY, sequence=6, reason="ExceedsQuota"),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "elastic-growth-asks-for-preemption-while-admitted": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempt_requested(KEY, sequence=6, admitted_sequence=5),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "elastic-growth-admitted": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.pending(KEY, sequence=6),
            msg.admitted(
                KEY,
                sequence=7,
                charged={GPU: 12},
                charged_cards={"H200": 12},
                replaces=5,
                origin=5,
                resized=True,
            ),
        ],
        "Admitted",
        7,
        {"nvidia.com/gpu": 12},
        1,
    ),
    "preemption-ends-the-named-admission": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
        ],
        "Preempted",
        None,
    ),
    "preemption-ends-the-replacement-that-continues-it": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.admitted(KEY, sequence=7, replaces=5, origin=5),
            msg.preempted(
                "serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5, origin=5)}
            ),
        ],
        "Preempted",
        None,
    ),
    "preemption-of-an-older-admission-leaves-the-readmission": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
            msg.released(KEY, sequence=6),
            msg.pending(KEY, sequence=7),
            msg.admitted(KEY, sequence=9),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "repeated-preemption-leaves-the-readmission": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
            msg.released(KEY, sequence=6),
            msg.admitted(KEY, sequence=9),
            msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "preemption-of-another-object-ends-nothing": Row(
        [
            msg.workload("train", uid="u2"),
            msg.admitted(KEY, sequence=5, uid="u2"),
            msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "preemption-from-an-older-writer-ends-what-came-before-it": Row(
        [msg.workload("train"), msg.admitted(KEY, sequence=5), msg.preempted("serve", [KEY])],
        "Preempted",
        None,
    ),
    "preemption-from-an-older-writer-leaves-a-later-admission": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempted("serve", [KEY]),
            msg.released(KEY, sequence=6),
            msg.admitted(KEY, sequence=9),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    # preemption's view read sequence 0 as "any admission", a later one included.
    "unsequenced-release-ends-what-came-before-it": Row(
        [msg.workload("train"), msg.admitted(KEY, sequence=5), msg.released(KEY, sequence=0)],
        "Released",
        None,
    ),
    "unsequenced-release-leaves-a-later-admission": Row(
        [msg.workload("train"), msg.released(KEY, sequence=0), msg.admitted(KEY, sequence=9)],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    # preemption's view ignored `finished`.
    "finished-holds-nothing": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.workload("train", finished="Completed"),
        ],
        "Finished",
        None,
    ),
    "finished-holds-nothing-whatever-came-later": Row(
        [msg.workload("train", finished="Failed"), msg.admitted(KEY, sequence=5)], "Finished", None
    ),
    "deleted-holds-nothing": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            Tombstone(object_kind="workload", name="train", namespace="team", uid="u1"),
        ],
        "Deleted",
        None,
    ),
    "recreated-under-the-name-holds-nothing-yet": Row(
        [msg.workload("train"), msg.admitted(KEY, sequence=5), msg.workload("train", uid="u2")],
        "Submitted",
        None,
    ),
    "recreated-and-admitted": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.workload("train", uid="u2"),
            msg.released(KEY, sequence=6),
            msg.admitted(KEY, sequence=9, uid="u2"),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "replayed-admission-of-a-deleted-object": Row(
        [
            (msg.workload("train", uid="u2", created_at=100.0), 0.0),
            (msg.admitted(KEY, sequence=5, uid="u1"), 50.0),
        ],
        "Submitted",
        None,
    ),
    "new-object-admitted-before-its-state-arrives": Row(
        [
            (msg.workload("train", uid="u1", created_at=10.0), 0.0),
            (msg.admitted(KEY, sequence=5), 20.0),
            (msg.released(KEY, sequence=6, reason="Deleted"), 30.0),
            (msg.admitted(KEY, sequence=9, uid="u2"), 40.0),
        ],
        "Admitted",
        9,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "decisions-without-state": Row(
        [msg.admitted(KEY, sequence=5)], "Admitted", 5, {"nvidia.com/gpu": 8}, 1
    ),
    "waits-in-the-queue-admission-chose": Row(
        [msg.workload("train"), msg.pending(KEY, sequence=3, queue="default")],
        "Pending",
        None,
        pending={"default": 1},
    ),
    "waits-for-preemption": Row(
        [msg.workload("train"), msg.preempt_requested(KEY, sequence=3)],
        "Pending",
        None,
        pending={"q": 1},
    ),
    "pending-older-than-the-admission-is-not-waiting": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.pending(KEY, sequence=3),
            msg.released(KEY, sequence=7),
        ],
        "Released",
        None,
    ),
    "evicted-and-told-why-it-waits": Row(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.released(KEY, sequence=7),
            msg.pending(KEY, sequence=8),
        ],
        "Pending",
        None,
        pending={"q": 1},
    ),
    "bypassed-pods-of-a-waiting-workload-count-in-its-queue": Row(
        [
            msg.workload(
                "train", queue="q", bypassed_pods=2, bypassed_requests={"nvidia.com/gpu": 2}
            ),
            msg.pending(KEY, sequence=3),
        ],
        "Pending",
        None,
        {"nvidia.com/gpu": 2},
        pending={"q": 1},
    ),
    "bypassed-pods-of-an-admitted-workload-are-its-admission": Row(
        [
            msg.workload(
                "train", queue="q", bypassed_pods=2, bypassed_requests={"nvidia.com/gpu": 2}
            ),
            msg.admitted(KEY, sequence=5),
        ],
        "Admitted",
        5,
        {"nvidia.com/gpu": 8},
        1,
    ),
    "finished-does-not-wait": Row(
        [msg.workload("train", finished="Completed"), msg.pending(KEY, sequence=3)],
        "Finished",
        None,
    ),
}


def _replay(row: Row) -> Replica:
    replica = Replica()
    for number, item in enumerate(row.messages, start=1):
        body, at = item if isinstance(item, tuple) else (item, 0.0)
        replica.apply(body, stream_sequence=number, time=at)
    return replica


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_decision_sequences(row: Row) -> None:
    replica = _replay(row)
    verdict = replica.verdict(KEY)
    assert verdict.state == row.state
    in_force = verdict.admitted
    assert (in_force.sequence if in_force is not None else None) == row.in_force
    assert replica.in_force(KEY) == in_force
    tally = replica.tally("q")
    assert tally.usage == row.usage
    assert tally.cards == ({"H200": row.usage["nvidia.com/gpu"]} if row.admitted else {})
    assert tally.admitted == row.admitted
    assert {
        q: replica.tally(q).pending_count for q in replica.queues() if replica.tally(q).pending
    } == row.pending
    assert set(replica.admissions()) == ({KEY} if row.in_force is not None else set())


def test_cards_of_bypassed_pods_count_in_their_queue_until_an_admission_replaces_them() -> None:
    replica = Replica()
    bypassing = msg.workload(
        "train",
        queue="q",
        bypassed_pods=2,
        bypassed_requests={GPU: 2},
        bypassed_cards={"H200": 2},
    )
    replica.apply_all([bypassing, msg.pending(KEY, sequence=3)])
    assert (replica.tally("q").usage, replica.tally("q").cards) == ({GPU: 2}, {"H200": 2})
    replica.apply(msg.admitted(KEY, sequence=5), stream_sequence=3)
    assert replica.tally("q").cards == {"H200": 8}  # the admission's charge, not added to


def test_queue_usage_sums_workloads_and_follows_each_change() -> None:
    replica = Replica()
    replica.apply_all(
        [
            msg.workload("train"),
            msg.workload("other", uid="v1"),
            msg.admitted(KEY, sequence=5, charged={GPU: 8}, charged_cards={"H200": 8}),
            msg.admitted(OTHER, sequence=6, charged={GPU: 2}, charged_cards={"H200": 2}, uid="v1"),
        ]
    )
    assert replica.tally("q").usage == {"nvidia.com/gpu": 10}
    assert replica.tally("q").admitted == 2
    replica.apply(
        msg.preempted("serve", [KEY], lost={KEY: LostAdmission(uid="u1", sequence=5)}),
        stream_sequence=10,
    )
    assert replica.tally("q").usage == {"nvidia.com/gpu": 2}
    assert replica.share(KEY) is None
    assert replica.queues() == ["q"]


def test_pods_are_members_and_a_gate_never_comes_back() -> None:
    replica = Replica()
    gated = PodState(
        namespace="team", name="p0", uid="pu", workload=KEY, scheduling_gates=[ADMISSION_GATE]
    )
    released_pod = PodState(namespace="team", name="p0", uid="pu", workload=KEY)
    assert replica.apply(gated) == {KEY}
    replica.apply(released_pod)
    assert replica.apply(gated) == set()  # an older snapshot
    assert replica.members(KEY) == [released_pod]
    replica.apply(Tombstone(object_kind="pod", name="p0", namespace="team"))
    assert replica.member_count(KEY) == 0


def test_a_forgotten_workload_ignores_its_late_decisions_and_memory_is_bounded() -> None:
    replica = Replica()
    replica.apply_all(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.released(KEY, sequence=6),
            Tombstone(object_kind="workload", name="train", namespace="team", uid="u1"),
        ]
    )
    assert replica.forget(KEY)
    replica.apply(
        msg.admitted(KEY, sequence=5), stream_sequence=99
    )  # redelivered after the record went
    assert replica.recorded() == []
    assert replica.in_force(KEY) is None
    for n in range(GONE_KEPT + 10):
        key = WorkloadKey(f"team/w{n}")
        replica.apply(Tombstone(object_kind="workload", name=f"w{n}", namespace="team", uid="x"))
        assert replica.forget(key)
    assert len(replica._departed) == GONE_KEPT
    assert replica.recorded() == []


def test_an_admission_in_force_is_not_forgotten() -> None:
    replica = Replica()
    replica.apply_all([msg.admitted(KEY, sequence=5)])
    assert not replica.forget(KEY)
    assert replica.in_force(KEY) is not None


def test_the_preemption_that_ends_it_is_named() -> None:
    replica = Replica()
    replica.apply_all(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            msg.preempted(
                "serve", [KEY], mode={KEY: "abort"}, lost={KEY: LostAdmission(uid="u1", sequence=5)}
            ),
        ]
    )
    verdict = replica.verdict(KEY)
    assert verdict.ended_by is not None
    assert isinstance(verdict.ended_by, Seen)
    assert verdict.ended_by.body.aborts(KEY, uid="u1")
    assert [p.stream_sequence for p in replica.preemptions_of(KEY)] == [3]


_KEYS = ["team/a", "team/b", "team/c"]


@st.composite
def _messages(draw: st.DrawFn) -> Message:
    key = draw(st.sampled_from(_KEYS))
    name = key.split("/")[1]
    uid = draw(st.sampled_from(["u1", "u2"]))
    sequence = draw(st.integers(0, 12))
    queue = draw(st.sampled_from(["q1", "q2"]))
    kind = draw(
        st.sampled_from(["state", "tombstone", "admitted", "released", "pending", "preempted"])
    )
    if kind == "state":
        finished = draw(st.sampled_from([None, None, "Completed"]))
        return msg.workload(name, uid=uid, queue=queue, finished=finished)
    if kind == "tombstone":
        return Tombstone(object_kind="workload", name=name, namespace="team", uid=uid)
    if kind == "admitted":
        return msg.admitted(
            key,
            sequence=sequence,
            charged={GPU: draw(st.integers(1, 8))},
            charged_cards={"H200": draw(st.integers(1, 8))},
            uid=uid,
            queue=queue,
        )
    if kind == "released":
        return Released(workload=key, uid=uid, queue=queue, reason="Evicted", sequence=sequence)
    if kind == "pending":
        return Pending(
            workload=key, uid=uid, queue=queue, reason="ExceedsQuota", message="", sequence=sequence
        )
    return Preempted(
        preemptor="team/serve",
        preemptor_uid="p",
        victims=[key],
        lost={key: LostAdmission(uid=uid, sequence=sequence)},
    )


@given(st.lists(_messages(), max_size=40))
def test_queue_tallies_always_equal_a_recount_of_the_verdicts(messages: list[Message]) -> None:
    """The replica sums shares incrementally; after any sequence they equal a recount."""
    replica = Replica()
    replica.apply_all(messages)
    for queue in ("q1", "q2"):
        admitted_here = [
            a
            for k in replica.recorded()
            if (a := replica.in_force(k)) is not None and a.queue == queue
        ]
        waiting: dict[str, int] = {}
        for key in replica.recorded():
            verdict = replica.verdict(key)
            why = verdict.waiting
            if verdict.workload is not None and why is not None and why.queue == queue:
                reason = why.reason if isinstance(why, Pending) else "WaitingForPreemption"
                waiting[reason] = waiting.get(reason, 0) + 1
        tally = replica.tally(queue)
        assert tally.admitted == len(admitted_here)
        assert tally.pending == waiting
        gpus = sum(a.charged["nvidia.com/gpu"] for a in admitted_here)
        assert tally.usage == ({"nvidia.com/gpu": gpus} if gpus else {})
    recount = {k: a for k in sorted(replica.recorded()) if (a := replica.in_force(k)) is not None}
    assert replica.admissions() == recount
    assert replica.admitted_keys() == list(recount)


def test_a_workload_never_deleted_is_not_forgotten_and_a_new_objects_decisions_count() -> None:
    replica = Replica()
    replica.apply_all([msg.pending(KEY, sequence=3, uid="u9")])
    assert not replica.forget(KEY)  # no tombstone: its state may still be on its way
    replica.apply_all(
        [
            msg.workload("train"),
            msg.admitted(KEY, sequence=5),
            Tombstone(object_kind="workload", name="train", namespace="team", uid="u1"),
        ]
    )
    assert replica.forget(KEY)
    replica.apply(
        msg.admitted(KEY, sequence=9, uid="u2")
    )  # the re-created object's, before its state
    assert replica.in_force(KEY) is not None
