"""End to end: two training teams share a cohort beside inference, with the queue tree's
invariants checked throughout.

The whole system runs as in production (a nats-server, the five services as processes, the
simulated cluster of 64 GPUs speaking the Kubernetes API). Cohort ``research`` holds Queues
``team-a`` and ``team-b`` of 16 GPUs nominal each, both opted in to reclaim among training
(``reclaimWithinCohort: Any``); inference runs in its own queue ``online``:

1. team-b runs a gang within its nominal and a second one on team-a's idle GPUs (borrowing);
2. team-a submits a gang within its nominal: it asks to reclaim, team-b's borrowing gang is
   preempted whole, team-a's gang runs, team-b's waits on its quota and never preempts back;
3. inference arrives short of room and takes a whole training gang by the tidal rules.

Besides the sampled invariants (whole gangs, evicted whole, no overcommit, …), the queue
tree's are checked on the decision log against the Queue and Cohort objects listed from the
API (tests/e2e/invariants.py): no queue above its ceiling or what its path allows at any point,
and the lender given back what it lent within one nomination round — shown not to be vacuous
here: the same log with the preemption left out is named.
"""

from pathlib import Path

import pytest

from tidegate.cli.demo_trace import CohortEntry, QueueEntry, WorkloadEntry
from tidegate.model import Admitted, Pending, Preempted, PreemptRequested, Released

from .invariants import lender_problems, quota_problems
from .system import running_system

TIME_SCALE = 0.02
NAMESPACE = "teams"
GPU = "nvidia.com/gpu"
TEAM = {"nominalQuota": {GPU: "16"}, "preemption": {"reclaimWithinCohort": "Any"}}
QUEUES = [
    QueueEntry(name="team-a", spec={"cohort": "research", "priority": 10, **TEAM}),
    QueueEntry(name="team-b", spec={"cohort": "research", "priority": 10, **TEAM}),
    QueueEntry(name="online", spec={"priority": 100, "reclaimable": False}),
]
PRIORITY_CLASSES = {"serving": 100_000, "batch": 10_000}


def gang(name: str, queue: str) -> WorkloadEntry:
    """A training Job of 2 pods of 8 GPUs in ``queue``, running until deleted."""
    return WorkloadEntry(
        name=name,
        queue=queue,
        priority_class="batch",
        pods=2,
        requests={"cpu": "4", GPU: 8},
    )


@pytest.mark.slow(40)
@pytest.mark.timeout(300)
async def test_two_teams_borrow_and_reclaim_beside_inference_and_the_tree_holds(
    tmp_path: Path,
) -> None:
    async with running_system(
        tmp_path,
        nodes="1x2x4x8gpu",
        time_scale=TIME_SCALE,
        namespace=NAMESPACE,
        # A reclaim request is answered within its round even on a loaded machine.
        env={"TIDEGATE_PREEMPTION_TIMEOUT_SECONDS": "15"},
    ) as system:
        await system.set_up(
            priority_classes=PRIORITY_CLASSES,
            queues=QUEUES,
            cohorts=[CohortEntry(name="research")],
        )
        assert {q["metadata"]["name"] for q in system.queue_objects} >= {"team-a", "team-b"}
        assert [c["metadata"]["name"] for c in system.cohort_objects] == ["research"]

        # 1. team-b: one gang within its nominal, one on team-a's idle GPUs.
        await system.submit(gang("b-own", "team-b"))
        await system.until(lambda: system.running("b-own", 2), within=60, what="b-own running")
        await system.submit(gang("b-borrow", "team-b"))
        await system.until(
            lambda: system.running("b-borrow", 2), within=60, what="b-borrow running"
        )
        (borrow,) = system.of(Admitted, "b-borrow")
        assert (borrow.borrowed, borrow.cohort) == ({GPU: 16}, "research")
        system.assert_healthy("team-b borrowing")

        # 2. team-a within its nominal: reclaims team-b's borrowing gang, whole.
        await system.submit(gang("a-job", "team-a"))
        await system.until(lambda: system.running("a-job", 2), within=60, what="a-job running")
        (preempted,) = system.of(Preempted)
        assert (preempted.preemptor, preempted.victims) == (
            f"{NAMESPACE}/a-job",
            [f"{NAMESPACE}/b-borrow"],
        )
        assert preempted.reclaimed == {f"{NAMESPACE}/b-borrow": "InCohortReclamation"}
        (asked,) = system.of(PreemptRequested, "a-job")
        assert asked.reclaim
        assert preempted.request_sequence == asked.sequence
        await system.until(
            lambda: any(p.reason == "ExceedsQuota" for p in system.of(Pending, "b-borrow")),
            within=30,
            what="b-borrow waiting on its quota",
        )
        assert system.of(PreemptRequested, "b-borrow") == []
        system.assert_healthy("team-a reclaiming")

        # 3. Inference (5 x 8 GPUs; 32 free) takes a whole training gang by the tidal rules.
        serve = WorkloadEntry(
            name="serve",
            kind="Deployment",
            queue="online",
            priority_class="serving",
            pods=5,
            requests={"cpu": "4", GPU: 8},
            annotations={"volcano.sh/service.type": "inference"},
        )
        await system.submit(serve)
        await system.until(lambda: system.running("serve", 5), within=90, what="serve running")
        tidal = [p for p in system.of(Preempted) if p.preemptor == f"{NAMESPACE}/serve"]
        assert tidal
        assert all(not p.reclaimed for p in tidal)
        assert {v for p in tidal for v in p.victims} <= {
            f"{NAMESPACE}/a-job",
            f"{NAMESPACE}/b-own",
        }
        await system.until(
            lambda: all(
                any(r.reason == "Evicted" for r in system.of(Released, v.split("/")[1]))
                for p in system.of(Preempted)
                for v in p.victims
            ),
            within=30,
            what="every victim released",
        )
        system.assert_healthy("inference reclaiming")
        assert system.admission_problems() == [], system.report()

        # The lender invariant engages on this run: had it stopped at the request, with no
        # answer, the request would be named.
        unanswered = system.decisions[: system.decisions.index(asked) + 1]
        queues, cohorts = system.queue_objects, system.cohort_objects
        assert lender_problems(
            queues, cohorts, unanswered, system.requests, system.training, settled=True
        ) == [f"{NAMESPACE}/a-job: reclaim request {asked.sequence} never answered"]
        # And the quota one: had team-b's gang not been released, team-a's admission would
        # have taken the cohort above its pool.
        kept = [
            d
            for d in system.decisions
            if not (isinstance(d, Released) and d.workload == f"{NAMESPACE}/b-borrow")
        ]
        assert any(
            "cohort research" in p and "its subtree quota" in p
            for p in quota_problems(queues, cohorts, kept)
        )
