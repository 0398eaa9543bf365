"""Growth of a Job's parallelism and a multi-replica rollout with surge and unavailability.

The other elastic kinds, beside tests/e2e/test_elastic.py's Deployment scaled 2→6→1
with the default 1-replica rollout, on two 8-GPU nodes and one queue:

1. an Indexed Job ``grow`` of 4 completions runs 2 at a time; its ``parallelism`` raised to 4
   (as Kueue's elastic Jobs and the Job API allow): the 2 new pods are admitted as growth and
   run beside the first 2; the queue's usage follows, 2 then 4 GPUs;
2. a Deployment ``wide`` of 3 replicas with ``maxSurge: 2, maxUnavailable: 1`` changes its
   template: the surge pods are growth admitted beside the old ones, the old pods leaving give
   their slots back, and the rollout completes with 3 pods of the new template; usage 7.

On the simulator and on the real control plane. Everything is read from the API server; the
sampled invariants and the decision log are checked throughout (tests/e2e/invariants.py).
"""

from pathlib import Path

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object
from tidegate.kube import DEPLOYMENTS, JOBS, QUEUES
from tidegate.model import Admitted

from .invariants import distinct
from .platform import Platform, submitted, wait
from .real import RealTidegate
from .system import running_system
from .test_elastic import NODES, POD, QUEUE_SPEC, resized, rolled_out, running, usage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def kinds_scenario(platform: Platform, queue: str) -> None:
    """Steps 1 and 2 of the module docstring."""
    kube, ns = platform.kube, platform.namespace

    # 1. a Job's parallelism grows.
    job = submitted(WorkloadEntry(name="grow", queue=queue, pods=4, requests=POD))
    job["spec"]["parallelism"] = 2
    await kube.create(JOBS, job, namespace=ns)
    await wait(platform, running(platform, "grow", 2), "2 pods of grow running")
    await wait(platform, usage(platform, queue, 2), "queue usage 2 GPUs")
    await kube.patch(JOBS, "grow", {"spec": {"parallelism": 4}}, namespace=ns)
    await wait(
        platform, running(platform, "grow", 4), "4 pods of grow running after its parallelism grew"
    )
    await wait(platform, usage(platform, queue, 4), "queue usage 4 GPUs")

    # 2. a 3-replica rollout that surges by 2 and may lose 1.
    wide = submitted(
        WorkloadEntry(name="wide", kind="Deployment", queue=queue, pods=3, requests=POD)
    )
    wide["spec"]["strategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1},
    }
    await kube.create(DEPLOYMENTS, wide, namespace=ns)
    await wait(platform, running(platform, "wide", 3), "3 pods of wide running")
    await wait(platform, usage(platform, queue, 7), "queue usage 7 GPUs")
    change = {"spec": {"template": {"metadata": {"annotations": {"revision": "2"}}}}}
    await kube.patch(DEPLOYMENTS, "wide", change, namespace=ns)
    await wait(
        platform, rolled_out(platform, "wide", 3), "the rollout of wide's new template completed"
    )
    await wait(
        platform,
        running(platform, "wide", 3, revision="2"),
        "wide's 3 pods are of the new template",
    )
    await wait(platform, usage(platform, queue, 7), "queue usage 7 GPUs after the rollout")
    platform.healthy("the end")


async def test_job_parallelism_growth_and_a_surging_rollout_on_the_simulator(
    tmp_path: Path,
) -> None:
    async with running_system(tmp_path, nodes=NODES, time_scale=0.02, namespace="kinds") as system:
        await system.set_up(
            priority_classes={}, queues=[QueueEntry(name="q", spec=dict(QUEUE_SPEC))]
        )
        await kinds_scenario(Platform.of_sim(system), "q")
        await system.until_bus_agrees(within=30.0)
        for name in ("grow", "wide"):
            admissions = system.of(Admitted, name)
            assert admissions[0].replaces is None, system.report()
            assert len(resized(admissions)) == len(admissions) - 1 >= 1, system.report()
        assert system.admission_problems() == [], system.report()


@pytest.mark.real_k8s
async def test_job_parallelism_growth_and_a_surging_rollout_on_real_kubernetes(
    real_tidegate: RealTidegate,
) -> None:
    async with real_tidegate(nodes=NODES) as system:
        queue = f"q-{system.cluster}"
        await system.admin.create(
            QUEUES, queue_object(QueueEntry(name=queue, spec=dict(QUEUE_SPEC)))
        )
        async with system.observing():
            await kinds_scenario(Platform.of_real(system), queue)
        assert system.problems() == []
        admissions = [a for a in distinct(system.decisions) if isinstance(a, Admitted)]
        for name in ("grow", "wide"):
            mine = [a for a in admissions if a.workload == f"{system.namespace}/{name}"]
            assert mine, admissions
            assert mine[0].replaces is None, admissions
            assert len(resized(mine)) == len(mine) - 1 >= 1, admissions
