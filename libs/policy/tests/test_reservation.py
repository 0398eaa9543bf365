"""Table tests of reservations and backfill (tidegate.policy.reservation, docs/reservations.md).

The cluster: one block b1 of three racks r1..r3, four 8-GPU hosts each (32 GPUs a rack). The
head gang is 32 one-GPU pods that require a rack; running gangs hold whole hosts.
"""

from collections.abc import Mapping, Sequence

import pytest

from tidegate.model import (
    PodSetSpec,
    QueueConfig,
    Reserved,
    TopologyRequest,
    WorkloadState,
)
from tidegate.placement import CapacityView, NodeCapacity, PlacementRequest, place
from tidegate.policy.cards import GPU_PRODUCT_LABEL, card_demand
from tidegate.policy.reservation import (
    NoEstimate,
    Occupant,
    ReservationPlan,
    ReservationSettings,
    blocking,
    declared_runtime,
    drop_reason,
    expected_end,
    may_backfill,
    plan_reservation,
    replan_due,
    reservation_allowed,
    reserved_message,
    same_reservation,
    view_without_reserved,
)

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0
HOUR = 3600.0


def host(rack: str, i: int) -> str:
    return f"{rack}-h{i}"


def cluster(products: Mapping[str, str] | None = None) -> CapacityView:
    """Three racks of four 8-GPU hosts; ``products``: rack → GPU product label."""
    nodes: list[NodeCapacity] = []
    for rack in ("r1", "r2", "r3"):
        extra = {GPU_PRODUCT_LABEL: products[rack]} if products else {}
        nodes.extend(
            NodeCapacity(
                name=host(rack, i),
                labels={BLOCK: "b1", RACK: rack, HOST: host(rack, i), **extra},
                allocatable={GPU: 8, "pods": 110, "cpu": 96_000},
            )
            for i in range(1, 5)
        )
    return CapacityView(LEVELS, nodes)


def gang(
    key: str, rack: str, hosts: Sequence[int], *, hours: float | None, started: float = NOW
) -> Occupant:
    """A gang holding whole hosts of ``rack``, started at ``started``, declaring ``hours``."""
    return Occupant(
        key=key,
        started_at=started,
        runtime_seconds=None if hours is None else hours * HOUR,
        usage={host(rack, i): {GPU: 8, "pods": 8} for i in hosts},
    )


def occupied(view: CapacityView, occupants: Sequence[Occupant]) -> CapacityView:
    """``view`` with the occupants' pods bound (their usage counted as used)."""
    for occupant in occupants:
        for node, amount in occupant.usage.items():
            used = dict(view.used(node))
            for resource, value in amount.items():
                used[resource] = used.get(resource, 0) + value
            view.set_used(node, used)
    return view


def big_gang(*, required: str | None = RACK, card: str | None = None) -> PlacementRequest:
    podset = PodSetSpec(
        name="workers",
        count=32,
        requests={GPU: 1},
        topology=TopologyRequest(required=required),
        card_name=card,
    )
    if card is not None:
        workload = WorkloadState(
            namespace="research", name="pretrain", uid="u", owner_kind="Job", podsets=[podset]
        )
        return PlacementRequest(podsets=card_demand(workload).restrict([podset]))
    return PlacementRequest(podsets=[podset])


# The day's situation: r1 half frees in 1 h, the rest in 4 h; r2 frees in 2 h and 2.5 h;
# r3 runs a gang that declares no runtime.
A = gang("team/a", "r1", [1, 2], hours=1)
E = gang("team/e", "r1", [3, 4], hours=4)
B = gang("research/sft-12", "r2", [1, 2], hours=2)
C = gang("team/c", "r2", [3, 4], hours=2.5)
D = gang("team/d", "r3", [1, 2, 3, 4], hours=None)
RUNNING = (A, E, B, C, D)


def plan(
    request: PlacementRequest, running: Sequence[Occupant] = RUNNING, **kw: object
) -> ReservationPlan:
    outcome = plan_reservation(occupied(cluster(), running), request, running, now=NOW, **kw)  # type: ignore[arg-type]
    assert isinstance(outcome, ReservationPlan), outcome
    return outcome


def reserved(
    p: ReservationPlan, workload: str = "research/pretrain", queue: str = "train"
) -> Reserved:
    namespace, name = workload.split("/")
    head = WorkloadState(namespace=namespace, name=name, uid="u-" + name, owner_kind="Job")
    return reserved_message(p, workload=head, queue=queue, topology="default", sequence=7, now=NOW)


# --------------------------------------------------------------------------- where and when


def test_the_32_pod_gang_gets_the_rack_whose_gangs_end_soonest() -> None:
    p = plan(big_gang())
    # At +2 h 32 GPUs are free, but split over r1 and r2; the rack required is whole at +2.5 h.
    assert (p.level, p.domain) == (RACK, ("b1", "r2"))
    assert p.expected_start == NOW + 2.5 * HOUR
    assert [w.key for w in p.waits_for] == ["research/sft-12", "team/c"]
    assert p.nodes == {host("r2", i) for i in range(1, 5)}
    assert reserved(p).message == (  # NOW is 08:00 UTC
        "rack r2 reserved; expected start 10:30 UTC (in 2h30m) when research/sft-12, team/c end"
    )


def test_without_a_required_level_the_gang_starts_sooner_over_two_racks() -> None:
    p = plan(big_gang(required=None))
    assert p.expected_start == NOW + 2 * HOUR
    assert (p.level, p.domain) == (BLOCK, ("b1",))
    assert sorted(w.key for w in p.waits_for) == ["research/sft-12", "team/a"]


def test_a_gang_preferring_a_host_reserves_only_that_host() -> None:
    podset = PodSetSpec(
        name="workers",
        count=8,
        requests={GPU: 1},
        topology=TopologyRequest(required=RACK, preferred=HOST),
    )
    p = plan(PlacementRequest(podsets=[podset]))
    assert p.expected_start == NOW + HOUR  # team/a's hosts free first
    assert (p.level, p.domain, p.nodes) == (HOST, ("b1", "r1", "r1-h1"), {"r1-h1"})
    assert [w.key for w in p.waits_for] == ["team/a"]
    assert reserved(p).message.startswith("node r1-h1 reserved; ")


def test_a_gang_that_fits_now_is_planned_to_start_now_waiting_for_no_one() -> None:
    p = plan(big_gang(), running=(B, C, D))
    assert (p.domain, p.expected_start, p.waits_for) == (("b1", "r1"), NOW, ())


def test_the_card_model_is_respected_even_when_another_rack_frees_sooner() -> None:
    products = {"r1": "NVIDIA-H100", "r2": "NVIDIA-H100", "r3": "NVIDIA-H200"}
    r3_gang = gang("team/d", "r3", [1, 2, 3, 4], hours=6)
    running = (A, E, B, C, r3_gang)
    view = occupied(cluster(products), running)
    outcome = plan_reservation(view, big_gang(card="NVIDIA-H200"), running, now=NOW)
    assert isinstance(outcome, ReservationPlan)
    assert outcome.domain == ("b1", "r3")
    assert outcome.expected_start == NOW + 6 * HOUR
    assert [w.key for w in outcome.waits_for] == ["team/d"]


def test_no_estimate_when_the_only_room_is_held_by_gangs_without_a_declared_runtime() -> None:
    products = {"r1": "NVIDIA-H100", "r2": "NVIDIA-H100", "r3": "NVIDIA-H200"}
    view = occupied(cluster(products), RUNNING)
    outcome = plan_reservation(view, big_gang(card="NVIDIA-H200"), RUNNING, now=NOW)
    assert isinstance(outcome, NoEstimate)
    assert "1 running gangs declare no runtime" in outcome.message


def test_a_second_reservation_does_not_take_the_first_ones_domain() -> None:
    first = reserved(plan(big_gang()))
    second = plan(big_gang(), others=[first])
    assert second.domain == ("b1", "r1")
    assert second.expected_start == NOW + 4 * HOUR
    assert not second.nodes & set(first.nodes)


# --------------------------------------------------------------------------- backfill


@pytest.mark.parametrize(
    ("runtime", "allowed"),
    [
        (30 * 60.0, True),  # ends at +30 min, long before +2.5 h
        (2.5 * HOUR - 1, True),  # ends one second before the expected start
        (2.5 * HOUR, False),  # ends exactly at the expected start: not before
        (3 * HOUR, False),  # ends after the expected start: it would delay the gang
        (None, False),  # no declared runtime: never backfills
    ],
)
def test_backfill_only_when_the_declared_end_is_before_the_expected_start(
    runtime: float | None, allowed: bool
) -> None:
    r = reserved(plan(big_gang()))
    assert may_backfill(r, runtime_seconds=runtime, now=NOW) is allowed
    blockers = blocking([r], workload="team/small", runtime_seconds=runtime, now=NOW)
    assert blockers == ([] if allowed else [r])


def test_a_small_job_backfills_onto_reserved_nodes_and_one_without_runtime_is_kept_off() -> None:
    running = (A, E, C, D)  # research/sft-12 ended early: r2-h1, r2-h2 are free
    view = occupied(cluster(), running)
    r = reserved(plan(big_gang()))
    small = PlacementRequest(podsets=[PodSetSpec(name="main", count=8, requests={GPU: 1})])
    short = view_without_reserved(
        view, blocking([r], workload="team/small", runtime_seconds=HOUR, now=NOW)
    )
    placed = place(short, small)
    assert placed.fits
    assert set().union(*placed.node_counts.values()) <= set(r.nodes)

    forever = view_without_reserved(
        view, blocking([r], workload="team/small", runtime_seconds=None, now=NOW)
    )
    assert not place(forever, small).fits


def test_the_reserved_gang_is_not_kept_off_its_own_reservation() -> None:
    r = reserved(plan(big_gang()))
    assert blocking([r], workload="research/pretrain", runtime_seconds=None, now=NOW) == []


@pytest.mark.parametrize(
    ("started", "runtime", "allowed"),
    [
        (NOW - HOUR, 2 * HOUR, True),  # running for 1 h of 2: it ends at +1 h, before +2.5 h
        (NOW - HOUR, 3.5 * HOUR, False),  # it ends exactly at the expected start
        (NOW - HOUR, 0.5 * HOUR, False),  # overdue: its end is no longer known
        (NOW - HOUR, HOUR, False),  # due right now: overdue as well
        (NOW - HOUR, None, False),
    ],
)
def test_a_running_workload_backfills_its_growth_by_its_own_declared_end(
    started: float, runtime: float | None, allowed: bool
) -> None:
    """The growth and the replacement slots of a running workload end with it: its declared
    end counts from its admission (``started_at``), and an overdue one never backfills."""
    r = reserved(plan(big_gang()))
    assert r.expected_start == NOW + 2.5 * HOUR
    assert may_backfill(r, runtime_seconds=runtime, now=NOW, started_at=started) is allowed
    blockers = blocking(
        [r], workload="team/web", runtime_seconds=runtime, now=NOW, started_at=started
    )
    assert blockers == ([] if allowed else [r])


def test_the_room_preemption_freed_for_a_workload_is_open_to_it_though_reserved() -> None:
    r = reserved(plan(big_gang()))
    some = r.nodes[:2]
    (narrowed,) = blocking(
        [r], workload="serve/chat", runtime_seconds=None, now=NOW, opened={some[0]: {}}
    )
    assert narrowed.nodes == r.nodes[1:]
    assert blocking([r], workload="serve/chat", runtime_seconds=None, now=NOW, opened=r.nodes) == []


# --------------------------------------------------------------------------- expected ends


def test_declared_runtime_comes_from_the_workload_else_its_queue() -> None:
    own = WorkloadState(
        namespace="n", name="w", uid="u", owner_kind="Job", max_runtime_seconds=60.0
    )
    bare = WorkloadState(namespace="n", name="w", uid="u", owner_kind="Job")
    queue = QueueConfig(name="q", default_max_runtime_seconds=7200.0)
    assert declared_runtime(own, queue) == 60.0
    assert declared_runtime(bare, queue) == 7200.0
    assert declared_runtime(bare, QueueConfig(name="q")) is None
    assert declared_runtime(bare, None) is None


@pytest.mark.parametrize(
    ("started", "hours", "expected"),
    [
        (NOW, 2.0, (NOW + 2 * HOUR, False)),
        (NOW - 3 * HOUR, 2.0, (NOW + 300.0, True)),  # outlived its declaration by 1 h
        (NOW - 2 * HOUR, 2.0, (NOW + 300.0, True)),  # due exactly now
        (NOW, None, None),
    ],
)
def test_expected_end(
    started: float, hours: float | None, expected: tuple[float, bool] | None
) -> None:
    occupant = gang("team/x", "r1", [1], hours=hours, started=started)
    assert expected_end(occupant, now=NOW) == expected


def test_the_estimate_moves_when_a_gang_outlives_its_declaration() -> None:
    late = gang("research/sft-12", "r2", [1, 2], hours=1, started=NOW - 2 * HOUR)  # due 1 h ago
    early = gang("team/c", "r2", [3, 4], hours=0.05)  # ends in 3 min
    running = (A, E, late, early, D)
    first = plan(big_gang(), running=running)
    assert first.domain == ("b1", "r2")
    assert first.expected_start == NOW + 300.0
    assert [(w.key, w.overdue) for w in first.waits_for] == [
        ("team/c", False),
        ("research/sft-12", True),
    ]
    assert "research/sft-12 outlived its declared runtime" in reserved(first).message

    later = NOW + 1800.0  # team/c ended on time and left; research/sft-12 still runs
    view = occupied(cluster(), (A, E, late, D))
    moved = plan_reservation(view, big_gang(), (A, E, late, D), now=later)
    assert isinstance(moved, ReservationPlan)
    assert moved.expected_start == later + 300.0
    assert not same_reservation(reserved(first), reserved(moved))

    # Recomputed within the same step, the estimate does not move (nothing to republish).
    again = plan_reservation(view, big_gang(), (A, E, late, D), now=later + 299.0)
    assert isinstance(again, ReservationPlan)
    assert again.expected_start == later + 300.0
    assert same_reservation(reserved(moved), reserved(again))


@pytest.mark.parametrize(
    ("now", "estimate"),
    [
        (NOW + 0.5 * HOUR, (NOW + HOUR, False)),
        (NOW + HOUR, (NOW + HOUR + 300.0, True)),  # due now: overdue
        (NOW + HOUR + 1.0, (NOW + HOUR + 300.0, True)),
        (NOW + HOUR + 299.0, (NOW + HOUR + 300.0, True)),
        (NOW + HOUR + 300.0, (NOW + HOUR + 600.0, True)),
    ],
)
def test_an_overdue_estimate_moves_in_steps_of_the_overrun(
    now: float, estimate: tuple[float, bool]
) -> None:
    one_hour = gang("research/sft-12", "r2", [1], hours=1)
    assert expected_end(one_hour, now=now, overrun_seconds=300.0) == estimate


def test_time_alone_makes_a_plan_due_when_a_gang_it_waits_for_outlives_its_estimate() -> None:
    r = reserved(plan(big_gang()))
    waited = {w.workload: w.expected_end for w in r.waits_for}
    first = min(waited.values())
    running = set(waited)
    assert not replan_due(r, running, now=first - 1.0)
    assert replan_due(r, running, now=first)
    # A gang that has already ended (its room is coming free) makes nothing due.
    ended = {k for k, end in waited.items() if end != first}
    assert not replan_due(r, ended, now=first)


# --------------------------------------------------------------------------- limits and drops


def _held(queue: str, n: int) -> list[Reserved]:
    p = plan(big_gang())
    return [reserved(p, workload=f"ns/g{i}", queue=queue) for i in range(n)]


@pytest.mark.parametrize(
    ("max_per_queue", "mine", "theirs", "max_per_cluster", "why"),
    [
        (1, 0, 0, 4, None),
        (1, 1, 0, 4, "queue train holds 1 reservations, its maxReservations is 1"),
        (0, 0, 0, 4, "queue train holds 0 reservations, its maxReservations is 0"),
        (2, 1, 0, 4, None),
        (2, 1, 3, 4, "the cluster holds 4 reservations, at most 4 are allowed"),
        (1, 0, 0, 0, "the cluster holds 0 reservations, at most 0 are allowed"),
    ],
)
def test_limits_per_queue_and_per_cluster(
    max_per_queue: int, mine: int, theirs: int, max_per_cluster: int, why: str | None
) -> None:
    queue = QueueConfig(name="train", max_reservations=max_per_queue)
    held = _held("train", mine) + _held("other", theirs)
    settings = ReservationSettings(max_per_cluster=max_per_cluster)
    assert reservation_allowed(queue, held, settings=settings) == why


HEAD = WorkloadState(namespace="research", name="pretrain", uid="u-pretrain", owner_kind="Job")
QUEUE = QueueConfig(name="train")


@pytest.mark.parametrize(
    ("workload", "queue", "admitted", "head", "reason"),
    [
        (HEAD, QUEUE, False, True, None),
        (HEAD, QUEUE, True, True, "Started"),
        (None, QUEUE, False, True, "Deleted"),
        (
            WorkloadState(namespace="research", name="pretrain", uid="new", owner_kind="Job"),
            QUEUE,
            False,
            True,
            "Deleted",
        ),
        (
            WorkloadState(
                namespace="research",
                name="pretrain",
                uid="u-pretrain",
                owner_kind="Job",
                finished="Completed",
            ),
            QUEUE,
            False,
            True,
            "Deleted",
        ),
        (HEAD, None, False, True, "QueueDisallows"),
        (HEAD, QueueConfig(name="train", max_reservations=0), False, True, "QueueDisallows"),
        (HEAD, QueueConfig(name="train", invalid_reason="bad"), False, True, "QueueDisallows"),
        (HEAD, QueueConfig(name="elsewhere"), False, True, "QueueDisallows"),
        (HEAD, QUEUE, False, False, "QueueDisallows"),
    ],
)
def test_when_a_reservation_is_dropped(
    workload: WorkloadState | None,
    queue: QueueConfig | None,
    admitted: bool,
    head: bool,
    reason: str | None,
) -> None:
    r = reserved(plan(big_gang()))
    assert drop_reason(r, workload=workload, queue=queue, admitted=admitted, head=head) == reason


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="overrun_seconds"):
        ReservationSettings(overrun_seconds=0)
    with pytest.raises(ValueError, match="max_per_cluster"):
        ReservationSettings(max_per_cluster=-1)
