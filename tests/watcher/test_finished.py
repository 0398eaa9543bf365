"""Workloads that run to the end on the simulated control plane are published ``finished``.

The simulator's Job controller, scheduler and kubelets run; its webhook emulation gates the
pods; the test plays the ungater (removes the gate) so the pods run for their
``tidegate.io/sim-duration-seconds``, exit, and the Job controller sets ``Complete`` or
``Failed`` as the real one does. The watcher reads that from the Job's status.
"""

from tidegate.kube import JOBS, PODS
from tidegate.model import WorkloadState
from tidegate.model.names import ADMISSION_GATE as GATE

from .conftest import NAMESPACE, Harness, k8s

RUN = {"tidegate.io/queue": "q", "tidegate.io/sim-duration-seconds": "0.2"}
"""Annotations of a managed pod (the webhook gates it) that runs for 0.2 s."""


def published(harness: Harness, name: str) -> WorkloadState:
    message = harness.workload(name)
    assert isinstance(message, WorkloadState), f"workload {name}: {message!r}"
    return message


async def ungate_all(harness: Harness) -> int:
    """Remove tidegate's gate from every gated pod of the namespace (the ungater's job)."""
    pods = await harness.kube.list_objects(PODS, namespace=NAMESPACE)
    ungated = 0
    for pod in pods.items:
        gates = pod.get("spec", {}).get("schedulingGates") or []
        if any(gate.get("name") == GATE for gate in gates):
            name = pod["metadata"]["name"]
            await harness.kube.ungate_pod(NAMESPACE, name, gate=GATE, node_selector={})
            ungated += 1
    return ungated


async def test_jobs_and_a_bare_pod_that_run_to_the_end_are_published_finished(
    live_harness: Harness,
) -> None:
    harness = live_harness
    await harness.start_watcher()
    for name, completions, exit_code in (("train", 2, 0), ("crash", 1, 1)):
        annotations = {**RUN, "tidegate.io/sim-exit-code": str(exit_code)}
        template = k8s.template(
            annotations=annotations,
            containers=[k8s.container(memory=None)],
            restartPolicy="Never",
        )
        job = k8s.job(
            name,
            parallelism=completions,
            completions=completions,
            template=template,
            completionMode="Indexed",
            backoffLimit=0,
        )
        await harness.create(JOBS, job)
    # "Always" (a pod's default restartPolicy) would never finish
    solo = k8s.pod("solo", annotations=RUN, gated=False, restartPolicy="Never")
    await harness.create(PODS, solo)
    names = ("train", "crash", "solo")
    await harness.until(
        lambda: all(published(harness, n).finished is None for n in names),
        what="three unfinished workloads (gated pods hold them)",
    )
    assert await ungate_all(harness) == 4
    await harness.until(
        lambda: (
            [published(harness, n).finished for n in names] == ["Completed", "Failed", "Completed"]
        ),
        within=20,
        what="the Jobs' Complete/Failed conditions and the pod's phase",
    )
    train = published(harness, "train")
    assert (train.owner_kind, train.podsets[0].count, train.invalid_reason) == ("Job", 2, None)
