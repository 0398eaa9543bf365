"""A Job created suspended with Kueue's queue label: admitted, the ungater unsuspends it (and
marks it ``tidegate.io/resume: manual``), its pods are created gated and released."""

from typing import Any

from tidegate.kube import JOBS, JOBSETS
from tidegate.model import Released, subjects
from tidegate.model.names import REQUEUE_ANNOTATION, RESUME_ANNOTATION

from .conftest import NAMESPACE, Env, gated, k8s

KUEUE = {"kueue.x-k8s.io/queue-name": "q"}


async def test_a_kueue_style_suspended_job_is_unsuspended_on_admission_and_runs(env: Env) -> None:
    await env.start_ungater()
    job = await env.job("kq", 2, job_labels=KUEUE, suspend=True)
    uid = job["metadata"]["uid"]
    workload = await env.workload_state("kq")
    assert (workload.suspended, workload.resume_on_admission) == (True, True)
    assert await env.pods("job-name=kq") == []  # suspended: the Job controller made none

    await env.admit("team/kq", uid, {"main": [(env.host(0, 0), 2)]})

    async def running() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=kq")
        ok = len(pods) == 2 and all(
            not gated(p) and p.get("status", {}).get("phase") == "Running" for p in pods
        )
        return pods if ok else None

    await env.until_async(running, what="the resumed Job's two pods running", within=30)
    stored = await env.kube.get(JOBS, "kq", namespace=NAMESPACE)
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
    # The watcher now publishes it as an ordinary running Job: a later suspension is a user's.
    await env.until_async(lambda: _resumed_state(env, "kq"), what="the workload published resumed")


async def _resumed_state(env: Env, name: str) -> bool:
    state = await env.workload_state(name)
    return not state.suspended and not state.resume_on_admission


async def test_a_kueue_style_suspended_jobset_is_unsuspended_on_admission_and_runs(
    env: Env,
) -> None:
    await env.start_ungater()
    template = {
        "metadata": {"labels": {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    workers = k8s.replicated_job(
        "workers", replicas=1, parallelism=2, template=template, completionMode="Indexed"
    )
    body = k8s.jobset("js", [workers], labels=dict(KUEUE), suspend=True)
    created = await env.create(JOBSETS, body)
    workload = await env.workload_state("js")
    assert (workload.suspended, workload.resume_on_admission) == (True, True)
    await env.admit("team/js", created["metadata"]["uid"], {"workers": [(env.host(0, 0), 2)]})

    async def running() -> bool:
        pods = [
            p
            for p in await env.pods()
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == "js"
        ]
        return len(pods) == 2 and all(
            not gated(p) and p.get("status", {}).get("phase") == "Running" for p in pods
        )

    await env.until_async(running, what="the resumed JobSet's two pods running", within=30)
    stored = await env.kube.get(JOBSETS, "js", namespace=NAMESPACE)
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"


async def test_a_jobset_requeued_by_tidegate_is_unsuspended_on_its_next_admission(
    env: Env,
) -> None:
    """Admission evicts a running JobSet (no room after a node failure): the ungater does not
    evict its pods but suspends it with ``tidegate.io/requeued``, so it is queued for tidegate
    even after its ``resume: manual`` and its Jobs' controller deletes the pods without
    counting failures; on the next admission the ungater unsuspends it and removes the mark,
    and the pods come back at once."""
    await env.start_ungater()
    template = {
        "metadata": {"labels": {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }
    workers = k8s.replicated_job(
        "workers", replicas=1, parallelism=2, template=template, completionMode="Indexed"
    )
    body = k8s.jobset("rq", [workers], labels=dict(KUEUE), suspend=True)
    created = await env.create(JOBSETS, body)
    uid = created["metadata"]["uid"]
    await env.workload_state("rq")

    async def running(besides: set[str]) -> set[str] | None:
        pods = [
            p
            for p in await env.pods()
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == "rq"
            and not p["metadata"].get("deletionTimestamp")
        ]
        uids = {p["metadata"]["uid"] for p in pods}
        ok = (
            len(pods) == 2
            and not uids & besides
            and all(not gated(p) and p.get("status", {}).get("phase") == "Running" for p in pods)
        )
        return uids if ok else None

    await env.admit("team/rq", uid, {"workers": [(env.host(0, 0), 2)]})
    first = await env.until_async(lambda: running(set()), what="two pods running", within=30)

    env.sequence += 1
    evicted = Released(
        workload="team/rq",
        uid=uid,
        queue="q",
        reason="Evicted",
        sequence=env.sequence,
        evict_pods=True,
    )
    await env.publish(subjects.decision(env.cluster, "released", NAMESPACE, "rq"), evicted)
    await env.until_async(
        lambda: _queued_state(env, "rq"), what="the JobSet queued for tidegate", within=20
    )
    await env.admit("team/rq", uid, {"workers": [(env.host(0, 1), 2)]})
    await env.until_async(lambda: running(first), what="two new pods running", within=20)
    stored = await env.kube.get(JOBSETS, "rq", namespace=NAMESPACE)
    assert stored["spec"]["suspend"] is False
    assert REQUEUE_ANNOTATION not in stored["metadata"]["annotations"]
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
    child = await env.kube.get(JOBS, "rq-workers-0", namespace=NAMESPACE)
    assert child.get("status", {}).get("failed", 0) == 0


async def _queued_state(env: Env, name: str) -> bool:
    state = await env.workload_state(name)
    return state.suspended and state.resume_on_admission
