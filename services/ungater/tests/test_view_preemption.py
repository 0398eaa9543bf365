"""The ungater's view (its followers' handlers into the replica of the decisions in force)
ends a workload's admission when preemption names it a victim.

Preemption publishes ``preempted`` once the victim's pods are evicted; admission answers with
``released`` — but admission may be down (crashed, or a successor waiting for its lease)
meanwhile. The victim's controller re-creates its pods at once, gated; had the view still
counted the old admission in force, the releaser would have put them straight back into the
slots just freed for the preemptor (found by tests/e2e/test_crash_restart.py).
"""

from tidegate.bus import Received
from tidegate.model import (
    Admitted,
    LostAdmission,
    Message,
    Preempted,
    Released,
    WorkloadKey,
    WorkloadState,
)
from tidegate.policy.clusterview import ClusterView
from tidegate.testing.harness import received
from tidegate.testing.messages import Messages
from tidegate.ungater.handlers import Feed

msg = Messages(
    levels=["kubernetes.io/hostname"],
    queue="offline",
    defaults={"admitted": {"uid": "u1", "podset": "main"}},
)
ON_N1 = {("n1",): 2}
"""The victim's admission: two pods on n1."""


VICTIM = WorkloadKey("team/train")


class View(Feed):
    """The ungater's followers' handlers over a fresh view."""

    def __init__(self) -> None:
        super().__init__(ClusterView())

    def admission(self, key: WorkloadKey) -> Admitted | None:
        return self.view.admission(key)


class Stream:
    """Feeds a view in decision-stream order, numbering messages like JetStream does."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.sequence = 0

    def received(self, body: Message) -> Received:
        self.sequence += 1
        return received("c", body, stream_sequence=self.sequence, event_id=f"e{self.sequence}")

    async def decide(self, body: Message) -> None:
        await self.view.on_decision(self.received(body))


async def test_a_preempted_victim_has_no_admission_in_force_until_admitted_again() -> None:
    view = View()
    stream = Stream(view)
    await view.on_state(
        stream.received(WorkloadState(namespace="team", name="train", uid="u1", owner_kind="Job"))
    )
    await stream.decide(msg.admitted(VICTIM, ON_N1, sequence=1))
    assert view.admission(VICTIM) == msg.admitted(VICTIM, ON_N1, sequence=1)

    await stream.decide(Preempted(preemptor="team/serve", preemptor_uid="u2", victims=[VICTIM]))
    assert view.admission(VICTIM) is None

    await stream.decide(
        Released(workload=VICTIM, uid="u1", queue="offline", reason="Evicted", sequence=2)
    )
    assert view.admission(VICTIM) is None
    await stream.decide(msg.admitted(VICTIM, ON_N1, sequence=3))
    assert view.admission(VICTIM) == msg.admitted(VICTIM, ON_N1, sequence=3)


async def test_a_preemption_older_than_the_admission_does_not_end_it() -> None:
    view = View()
    stream = Stream(view)
    await view.on_state(
        stream.received(WorkloadState(namespace="team", name="train", uid="u1", owner_kind="Job"))
    )
    await stream.decide(Preempted(preemptor="team/serve", preemptor_uid="u2", victims=[VICTIM]))
    await stream.decide(msg.admitted(VICTIM, ON_N1, sequence=4))
    assert view.admission(VICTIM) == msg.admitted(VICTIM, ON_N1, sequence=4)
    # A preemption of someone else leaves it alone.
    await stream.decide(
        Preempted(preemptor="team/serve", preemptor_uid="u2", victims=["team/other"])
    )
    assert view.admission(VICTIM) == msg.admitted(VICTIM, ON_N1, sequence=4)


async def test_a_repeated_preemption_does_not_end_the_victims_later_admission() -> None:
    """A ``preempted`` stored twice (or re-published after a preemption failover) comes later
    in the stream than the victim's re-admission; ending that admission would keep the
    re-created pods gated although admission admitted them."""
    view = View()
    stream = Stream(view)
    await view.on_state(
        stream.received(WorkloadState(namespace="team", name="train", uid="u1", owner_kind="Job"))
    )
    await stream.decide(msg.admitted(VICTIM, ON_N1, sequence=1))
    event = Preempted(
        preemptor="team/serve",
        preemptor_uid="u2",
        victims=[VICTIM],
        lost={VICTIM: LostAdmission(uid="u1", sequence=1)},
    )
    await stream.decide(event)
    assert view.admission(VICTIM) is None
    await stream.decide(msg.admitted(VICTIM, ON_N1, sequence=3))
    await stream.decide(event)
    assert view.admission(VICTIM) == msg.admitted(VICTIM, ON_N1, sequence=3)
    # A preemption naming that admission ends it.
    await stream.decide(
        Preempted(
            preemptor="team/serve",
            preemptor_uid="u2",
            victims=[VICTIM],
            lost={VICTIM: LostAdmission(uid="u1", sequence=3)},
        )
    )
    assert view.admission(VICTIM) is None
    await stream.decide(event)
    assert view.admission(VICTIM) is None
