"""Preempted.ends / Preempted.aborts: the one rule every consumer uses to apply a preemption."""

from hypothesis import given
from hypothesis import strategies as st

from tidegate.model import LostAdmission, Preempted
from tidegate.testing.messages import Messages

VICTIM = "team/train"

msg = Messages(namespace="team", defaults={"preempted": {"uid": "p", "mode": {VICTIM: "restart"}}})


@given(
    named=st.integers(1, 50),
    held=st.integers(1, 50),
    replaces=st.one_of(st.none(), st.integers(1, 50)),
    same_uid=st.booleans(),
)
def test_only_the_named_admission_its_elders_and_its_replacement_end(
    named: int, held: int, replaces: int | None, same_uid: bool
) -> None:
    event = msg.preempted("serve", [VICTIM], lost={VICTIM: LostAdmission(uid="u1", sequence=named)})
    ends = event.ends(VICTIM, uid="u1" if same_uid else "u2", sequence=held, replaces=replaces)
    assert ends == (same_uid and (held <= named or replaces == named))


def test_a_later_admission_of_the_victim_never_ends() -> None:
    event = msg.preempted("serve", [VICTIM], lost={VICTIM: LostAdmission(uid="u1", sequence=5)})
    assert event.ends(VICTIM, uid="u1", sequence=5)
    assert not event.ends(VICTIM, uid="u1", sequence=9)  # admitted again since
    assert event.ends(VICTIM, uid="u1", sequence=9, replaces=5)  # the named one, moved
    assert not event.ends(VICTIM, uid="u2", sequence=5)  # re-created
    assert not event.ends("team/other", uid="u1", sequence=5)  # not a victim


def test_a_victim_not_named_in_lost_loses_whatever_it_holds() -> None:
    legacy = Preempted(preemptor="team/serve", preemptor_uid="p", victims=[VICTIM])
    assert legacy.ends(VICTIM, uid="any", sequence=99)
    assert not legacy.aborts(VICTIM, uid="any")  # restart by default


def test_abort_applies_to_the_named_object_only() -> None:
    event = msg.preempted(
        "serve",
        [VICTIM],
        mode={VICTIM: "abort"},
        lost={VICTIM: LostAdmission(uid="u1", sequence=5)},
    )
    assert event.aborts(VICTIM, uid="u1")
    assert not event.aborts(VICTIM, uid="u2")
    assert not msg.preempted(
        "serve", [VICTIM], lost={VICTIM: LostAdmission(uid="u1", sequence=5)}
    ).aborts(VICTIM, uid="u1")


def test_the_named_admission_ends_after_any_number_of_resizes() -> None:
    """Admitted at 5, resized at 7 (replaces 5) and again at 9 (replaces 7) before the
    preemption that named 5 arrives: the chain's origin says 9 continues 5. Knowing only one
    level of ``replaces`` would keep the victim's quota held while its pods went."""
    named_first = msg.preempted(
        "serve", [VICTIM], lost={VICTIM: LostAdmission(uid="u1", sequence=5)}
    )
    assert named_first.ends(VICTIM, uid="u1", sequence=9, replaces=7, origin=5)
    assert named_first.ends(VICTIM, uid="u1", sequence=13, replaces=11, origin=5)
    assert not named_first.ends(VICTIM, uid="u1", sequence=9, replaces=7, origin=8)
    assert not named_first.ends(VICTIM, uid="u2", sequence=9, replaces=7, origin=5)
    named_resize = Preempted(
        preemptor="team/serve",
        preemptor_uid="p",
        victims=[VICTIM],
        lost={VICTIM: LostAdmission(uid="u1", sequence=7, origin=5)},
    )
    assert named_resize.ends(VICTIM, uid="u1", sequence=11, replaces=9, origin=5)
    assert not named_resize.ends(VICTIM, uid="u1", sequence=11)  # a new first admission
