"""Kueue's preemption policies through the services: every service as a real
process on a simulated cluster of 32 GPUs (4 nodes of 8), two training teams in cohort
``research``, gangs of one 8-GPU pod.

- fair-share preemption: a queue above its nominal but below its fair share takes from the
  queue above it (``InCohortFairSharing``), and the two then never evict each other back;
- ``borrowWithinCohort: LowerPriority``: a queue that still borrows after the preemption takes
  lower-priority gangs of a borrowing queue (``InCohortReclaimWhileBorrowing``);
- ``withinClusterQueue: LowerPriority``: a gang preempts a lower-priority gang of its own queue
  when the queue is at its quota (``InClusterQueue``).

Training preempts training in each only because the queue opts in with Kueue's policies (the
tidal rule); ``tidegate explain`` names the reason on both sides.
"""

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.busview import fill_view
from tidegate.cli.explain import explain, render
from tidegate.kube import JOBS
from tidegate.model import Admitted, Preempted, PreemptRequested, Released

from .conftest import GPU, NAMESPACE, Harness, environment
from .test_borrowing import create_queues, last_pending_reason, team_job
from .test_end_to_end import decisions_about, every_service, running


@pytest.fixture
async def cluster(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """The simulated cluster and the bus with every service running as a process."""
    async with environment(tmp_path, nats_url, cluster_id) as h:
        h.plays_topology_cache = False
        async with every_service(h, tmp_path):
            yield h


def gang(name: str, queue: str, priority_class: str = "low") -> dict[str, Any]:
    """A training Job of one pod of 8 GPUs (a whole node)."""
    return team_job(name, queue, pods=1, gpus=8, priority_class=priority_class)


async def run_gangs(h: Harness, queue: str, names: list[str]) -> None:
    """Create the gangs one after another, each running before the next is created (so their
    admissions are in this order, the last the youngest)."""
    for name in names:
        await h.create(JOBS, gang(name, queue))
        await h.until(partial(running, h, name, 1), within=30, what=f"{name} running")


async def preempted_for(h: Harness, preemptor: str) -> Preempted:
    """The one ``preempted`` decision made for ``preemptor``, once it runs."""
    await h.until(lambda: decisions_about(h, Preempted, preemptor), within=30, what="a preemption")
    await h.until(lambda: running(h, preemptor, 1), within=40, what=f"{preemptor} running")
    (found,) = decisions_about(h, Preempted, preemptor)
    assert isinstance(found, Preempted)
    return found


async def explained(h: Harness, name: str, field: str) -> dict[str, Any]:
    """``tidegate explain`` of ``team/<name>`` from the bus, once it has ``field``."""

    async def answer() -> dict[str, Any] | None:
        found = explain(await fill_view(h.bus, h.cluster), f"{NAMESPACE}/{name}")
        return found if found is not None and field in found else None

    found: dict[str, Any] = await h.until_async(answer, within=15, what=f"explain {name}")
    return found


def waits_on_quota(h: Harness, name: str) -> bool:
    return last_pending_reason(h, name) == "ExceedsQuota"


def team(name: str) -> str:
    return f"{NAMESPACE}/{name}"


@pytest.mark.slow
async def test_a_queue_below_its_fair_share_takes_from_the_queue_above_it_and_no_one_takes_back(
    cluster: Harness,
) -> None:
    h = cluster
    # A 32-GPU pool: 8 nominal per team, 16 the cohort's own; both teams opt in to reclaim.
    opted_in = {"nominalQuota": {GPU: "8"}, "preemption": {"reclaimWithinCohort": "Any"}}
    await create_queues(h, {"nominalQuota": {GPU: "16"}}, {"team-a": opted_in, "team-b": opted_in})
    # Team B takes the whole pool while team A is idle.
    await run_gangs(h, "team-b", ["b-0", "b-1", "b-2", "b-3"])

    # A's first gang is within its nominal: B's youngest borrowing gang goes (reclamation).
    await h.create(JOBS, gang("a-0", "team-a"))
    first = await preempted_for(h, "a-0")
    assert first.victims == [team("b-3")]
    assert first.reclaimed == {team("b-3"): "InCohortReclamation"}

    # A's second gang takes A above its nominal (8 borrowed) but not above its fair share:
    # B, borrowing 16, is above it. Kueue's fair sharing takes B's youngest running gang.
    await h.create(JOBS, gang("a-1", "team-a"))
    second = await preempted_for(h, "a-1")
    assert second.victims == [team("b-2")]
    assert second.reclaimed == {team("b-2"): "InCohortFairSharing"}
    assert second.cohort == "research"
    (asked,) = decisions_about(h, PreemptRequested, "a-1")
    assert isinstance(asked, PreemptRequested)
    assert asked.reclaim
    admitted = [a for a in decisions_about(h, Admitted, "a-1") if isinstance(a, Admitted)]
    assert [(a.borrowed, a.cohort) for a in admitted] == [({GPU: 8}, "research")]

    # Each team holds its fair share, 16 GPUs: A's third gang and B's evicted gangs wait on
    # quota, none asks for a preemption, nobody evicts anybody again.
    await h.create(JOBS, gang("a-2", "team-a"))
    for waiting in ("a-2", "b-2", "b-3"):
        await h.until(
            partial(waits_on_quota, h, waiting), within=30, what=f"{waiting} waiting on quota"
        )
    for never in ("a-2", "b-2", "b-3"):
        assert decisions_about(h, PreemptRequested, never) == []
    assert len(h.of(Preempted)) == 2
    released = [r for r in h.of(Released) if isinstance(r, Released)]
    assert sorted(r.workload for r in released if r.reason == "Evicted") == [
        team("b-2"),
        team("b-3"),
    ]

    # `tidegate explain` names the reason on both sides.
    victim = await explained(h, "b-2", "preempted_by")
    (by,) = victim["preempted_by"]
    assert (by["preemptor"], by["reclaimed"], by["cohort"]) == (
        team("a-1"),
        "InCohortFairSharing",
        "research",
    )
    why = (
        f"evicted by {team('a-1')}: its queue held more than its fair share of cohort research"
        " (InCohortFairSharing)"
    )
    assert by["why"] == why
    assert why in render(victim)
    preemptor = await explained(h, "a-1", "preempted")
    assert preemptor["preempted"]["reclaimed"] == {team("b-2"): "InCohortFairSharing"}


@pytest.mark.slow
async def test_a_borrowing_queue_preempts_lower_priority_borrowers_under_borrow_within_cohort(
    cluster: Harness,
) -> None:
    h = cluster
    # Nobody has a nominal: the cohort's 32 GPUs are all lent. Team A opts in to taking
    # lower-priority gangs while it borrows; team B never preempts.
    await create_queues(
        h,
        {"nominalQuota": {GPU: "32"}},
        {
            "team-a": {
                "nominalQuota": {GPU: "0"},
                "preemption": {
                    "reclaimWithinCohort": "LowerPriority",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                },
            },
            "team-b": {"nominalQuota": {GPU: "0"}},
        },
    )
    await run_gangs(h, "team-b", ["b-0", "b-1", "b-2", "b-3"])

    await h.create(JOBS, gang("a-urgent", "team-a", priority_class="high"))
    preempted = await preempted_for(h, "a-urgent")
    assert preempted.victims == [team("b-3")]
    assert preempted.reclaimed == {team("b-3"): "InCohortReclaimWhileBorrowing"}
    admitted = [a for a in decisions_about(h, Admitted, "a-urgent") if isinstance(a, Admitted)]
    assert [(a.borrowed, a.cohort) for a in admitted] == [({GPU: 8}, "research")]

    # B's evicted gang waits on quota and cannot take it back (lower priority, and B never
    # preempts); B's other gangs run on.
    await h.until(
        lambda: last_pending_reason(h, "b-3") == "ExceedsQuota", within=30, what="b-3 waiting"
    )
    assert decisions_about(h, PreemptRequested, "b-3") == []
    assert len(h.of(Preempted)) == 1
    for name in ("b-0", "b-1", "b-2"):
        assert running(h, name, 1)
    victim = await explained(h, "b-3", "preempted_by")
    (by,) = victim["preempted_by"]
    assert (by["reclaimed"], by["why"]) == (
        "InCohortReclaimWhileBorrowing",
        f"evicted by {team('a-urgent')}: quota of cohort research taken by a higher-priority"
        " borrower (InCohortReclaimWhileBorrowing)",
    )


@pytest.mark.slow
async def test_a_gang_preempts_a_lower_priority_gang_of_its_own_queue_under_within_cluster_queue(
    cluster: Harness,
) -> None:
    h = cluster
    # Team A may not borrow (borrowing limit 0) and opts in to preemption inside itself;
    # team B's 16 GPUs stay idle.
    await create_queues(
        h,
        {},
        {
            "team-a": {
                "nominalQuota": {GPU: "16"},
                "borrowingLimit": {GPU: "0"},
                "preemption": {"withinClusterQueue": "LowerPriority"},
            },
            "team-b": {"nominalQuota": {GPU: "16"}},
        },
    )
    await run_gangs(h, "team-a", ["a-low-0", "a-low-1"])

    await h.create(JOBS, gang("a-high", "team-a", priority_class="high"))
    preempted = await preempted_for(h, "a-high")
    assert preempted.victims == [team("a-low-1")]
    assert preempted.reclaimed == {team("a-low-1"): "InClusterQueue"}
    admitted = [a for a in decisions_about(h, Admitted, "a-high") if isinstance(a, Admitted)]
    assert [(a.borrowed, a.cohort) for a in admitted] == [({}, None)]

    # The evicted gang waits on its queue's quota; it never preempts the higher one back.
    await h.until(
        lambda: last_pending_reason(h, "a-low-1") == "ExceedsQuota",
        within=30,
        what="a-low-1 waiting",
    )
    assert decisions_about(h, PreemptRequested, "a-low-1") == []
    assert len(h.of(Preempted)) == 1
    victim = await explained(h, "a-low-1", "preempted_by")
    (by,) = victim["preempted_by"]
    assert (by["reclaimed"], by["why"]) == (
        "InClusterQueue",
        f"evicted by {team('a-high')}: its own queue's quota taken within the queue"
        " (InClusterQueue)",
    )
