"""End to end: every service SIGKILLed in turn in the middle of a tidal run, and restarted.

The whole system runs as in production (a nats-server, the five services as separate processes,
the simulated cluster speaking the Kubernetes API). Training gangs fill the cluster, one waits;
an inference Deployment arrives and reclaims a whole training gang. Each service is SIGKILLed
when its work matters most, and started again:

==============  ======================================================================
service         killed
==============  ======================================================================
ungater         when the first gang is admitted (before or while it releases the pods)
watcher         right after, while the gangs bind and start running
preemption      before the inference workload arrives: admission's request waits for it
admission       once it has asked for preemption, so the eviction happens while it is
                down and its successor must release the victim's quota and admit the
                inference workload on the room nominated for it
topology-cache  when the inference workload is admitted (its pods are being placed, a
                waiting gang takes the room left)
==============  ======================================================================

Then the run goes on to its end. The invariants are checked throughout, and the test fails at
once, naming the one that broke: sampled several times a second (no gang partly released, no
released pod left unscheduled, no node overcommitted, no pod of a preempted gang released
before its new admission, never more pods released than assigned) and from the decision log
(no double admission). At the end: every Job completed and gave its quota back, the inference
pods run, the victim was admitted a second time, every victim was released, and the capacity
view and the pod mirror on the bus equal the simulator's own state. See
:mod:`tests.e2e.invariants` for each check.
"""

from pathlib import Path

import pytest

from tidegate.cli.stack import SERVICES
from tidegate.model import Admitted, Preempted, PreemptRequested, Released

from .system import System, running_system
from .tidal import PRIORITY_CLASSES, QUEUES, inference, training

TIME_SCALE = 0.02
"""Wall seconds per simulated second: a 600 s training run takes 12 s."""
NAMESPACE = "tide"
SERVE = inference("serve", pods=2)
JOBS = ("train-a", "train-b", "train-c")


@pytest.mark.slow(35)
@pytest.mark.timeout(240)
async def test_every_service_killed_mid_run_and_the_invariants_hold(tmp_path: Path) -> None:
    # 1 block x 2 racks x 4 nodes x 8 GPUs: train-a and train-b fill a rack each.
    async with running_system(
        tmp_path, nodes="1x2x4x8gpu", time_scale=TIME_SCALE, namespace=NAMESPACE
    ) as system:
        await system.set_up(priority_classes=PRIORITY_CLASSES, queues=QUEUES)
        await system.submit(
            training("train-a", pods=4, duration=600),
            training("train-b", pods=4, duration=600),
            training("train-c", pods=2, duration=150),
        )
        await system.until(lambda: system.of(Admitted), within=30, what="a first admission")
        await system.crash("ungater")
        await system.crash("watcher")
        await system.until(
            lambda: system.running("train-a", 4) and system.running("train-b", 4),
            within=30,
            what="train-a and train-b running",
        )

        # Preemption is down when the inference workload arrives: the request waits for it.
        await system.kill("preemption")
        await system.submit(SERVE)
        await system.until(
            lambda: system.of(PreemptRequested, "serve"), within=30, what="a preemption request"
        )
        # Admission dies before preemption answers: its successor must take the answer
        # (release the victim, admit serve on the room nominated for it).
        await system.kill("admission")
        await system.start("preemption")
        await system.until(lambda: system.of(Preempted), within=30, what="a victim evicted")
        await system.start("admission")
        await system.until(lambda: system.of(Admitted, "serve"), within=30, what="serve admitted")
        await system.crash("topology-cache")

        await run_to_the_end(system)
        check_invariants(system)


async def run_to_the_end(system: System) -> None:
    """Wait until every Job completed and the inference pods run, then until the bus agrees
    with the simulator (the capacity view and the pod mirror)."""
    await system.until(lambda: system.running("serve", 2), within=30, what="serve running")

    async def all_completed() -> bool:
        return set(JOBS) <= await system.completed_jobs()

    await system.until_async(all_completed, within=90, what=f"the Jobs {JOBS} to complete")
    # Admission gives the quota back once the watcher saw the Job finish: a moment later.
    await system.until(
        lambda: all(
            (released := system.of(Released, name)) and released[-1].reason == "Completed"
            for name in JOBS
        ),
        within=20,
        what="every Job's quota released as Completed",
    )
    await system.until_bus_agrees(within=20)


def check_invariants(system: System) -> None:
    """Every invariant, with the evidence when one is broken."""
    assert sorted(name for name, _, _ in system.crashes) == sorted(SERVICES)
    assert all(old != new for _, old, new in system.crashes)
    assert system.checks.samples > 50, "the cluster was hardly sampled"
    assert system.violations == [], system.report()
    assert system.admission_problems() == [], system.report()

    # The tide: one whole training gang reclaimed for the inference workload, never the reverse.
    preemptions = system.of(Preempted)
    assert {p.preemptor for p in preemptions} == {f"{NAMESPACE}/serve"}
    victims = {v for p in preemptions for v in p.victims}
    assert len(victims) == 1, preemptions
    assert victims <= {f"{NAMESPACE}/train-a", f"{NAMESPACE}/train-b"}
    (victim,) = victims
    victim_name = victim.split("/")[1]
    assert system.of(Released, victim_name)[0].reason == "Evicted"
    assert len({a.sequence for a in system.of(Admitted, victim_name)}) == 2
    assert system.of(PreemptRequested, victim_name) == []
    # Every Job gave its quota back when it completed (no quota leaked across the crashes).
    for name in JOBS:
        released = system.of(Released, name)
        assert released, f"{name} never released"
        assert released[-1].reason == "Completed", (name, released)
