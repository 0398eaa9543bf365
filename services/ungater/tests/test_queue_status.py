"""Queue status from the view: who counts as admitted or pending (the replica's shares, fed
through the ungater's followers' handlers), the status, the patch. That the replica's sums
always equal a recount is libs/model/tests/test_replica_contract.py's."""

import msgspec

from tidegate.bus import Received
from tidegate.model import (
    Admitted,
    Message,
    Pending,
    Preempted,
    Released,
    Tombstone,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.replica import QueueTally, Share
from tidegate.policy.clusterview import ClusterView
from tidegate.testing.harness import received
from tidegate.ungater import handlers

KEY = WorkloadKey("team/train")


class Feed:
    """Feeds a view in stream order, numbering messages like JetStream does."""

    def __init__(self) -> None:
        self.view = ClusterView()
        self.feed = handlers.Feed(self.view)
        self.sequence = 0

    def received(self, body: Message) -> Received:
        self.sequence += 1
        return received("c", body, stream_sequence=self.sequence, event_id=f"e{self.sequence}")

    async def state(self, body: Message) -> None:
        await self.feed.on_state(self.received(body))

    async def decide(self, body: Message) -> None:
        await self.feed.on_decision(self.received(body))

    def share(self) -> Share | None:
        return self.view.replica.share(KEY)


def workload(uid: str = "u1", **changes: object) -> WorkloadState:
    return WorkloadState(namespace="team", name="train", uid=uid, owner_kind="Job", **changes)  # type: ignore[arg-type]


def admitted(sequence: int, uid: str = "u1", queue: str = "offline") -> Admitted:
    return Admitted(
        workload=KEY,
        uid=uid,
        queue=queue,
        sequence=sequence,
        epoch=1,
        assignments={},
        charged={"cpu": 4000, "nvidia.com/gpu": 2},
        charged_cards={"NVIDIA-H200": 2},
    )


def pending(sequence: int, uid: str = "u1", queue: str | None = "offline") -> Pending:
    return Pending(
        workload=KEY,
        uid=uid,
        queue=queue,
        reason="WaitingForCapacity",
        message="",
        sequence=sequence,
    )


ADMITTED = Share(
    queue="offline",
    admitted=True,
    resources={"cpu": 4000, "nvidia.com/gpu": 2},
    cards={"NVIDIA-H200": 2},
)
PENDING = Share(queue="offline", admitted=False, reason="WaitingForCapacity")


async def test_pending_then_admitted_then_completed() -> None:
    feed = Feed()
    await feed.decide(pending(1))
    assert feed.share() is None  # workload not known (yet, or any more)
    await feed.state(workload())
    assert feed.share() == PENDING
    await feed.decide(admitted(2))
    assert feed.share() == ADMITTED
    await feed.decide(
        Released(workload=KEY, uid="u1", queue="offline", reason="Completed", sequence=3)
    )
    assert feed.share() is None  # the pending decision is older than the admission


async def test_evicted_counts_again_once_admission_says_why_it_waits() -> None:
    feed = Feed()
    await feed.state(workload())
    await feed.decide(pending(1))
    await feed.decide(admitted(2))
    await feed.decide(Preempted(preemptor="team/infer", preemptor_uid="p", victims=[KEY]))
    assert feed.share() is None  # admission has not answered yet
    await feed.decide(
        Released(workload=KEY, uid="u1", queue="offline", reason="Evicted", sequence=3)
    )
    assert feed.share() is None
    await feed.decide(pending(4))
    assert feed.share() == PENDING


async def test_finished_gone_recreated_and_queueless_workloads_are_not_pending() -> None:
    feed = Feed()
    await feed.state(workload())
    await feed.decide(pending(1, queue=None))
    assert feed.share() is None
    await feed.decide(pending(2))
    await feed.state(workload(finished="Failed"))
    assert feed.share() is None
    await feed.state(workload(uid="u2"))
    assert feed.share() is None  # the pending decision was about the old object
    await feed.decide(pending(3, uid="u2", queue="online"))
    assert feed.share() == Share(queue="online", admitted=False, reason="WaitingForCapacity")
    await feed.state(Tombstone(object_kind="workload", name="train", namespace="team"))
    assert feed.share() is None


async def test_the_view_sums_shares_per_queue() -> None:
    feed = Feed()
    await feed.state(workload())
    await feed.decide(admitted(2))
    other = WorkloadState(namespace="team", name="b", uid="b1", owner_kind="Job")
    await feed.state(other)
    await feed.decide(msgspec.structs.replace(admitted(3, uid="b1"), workload="team/b"))
    assert feed.view.replica.tally("offline") == QueueTally(
        admitted=2, usage={"cpu": 8000, "nvidia.com/gpu": 4}, cards={"NVIDIA-H200": 4}
    )
    await feed.decide(
        Released(workload=KEY, uid="u1", queue="offline", reason="Evicted", sequence=4)
    )
    await feed.decide(pending(5, queue="online"))
    assert feed.view.replica.tally("online") == QueueTally(pending={"WaitingForCapacity": 1})
    assert feed.view.replica.queues() == ["offline", "online"]
