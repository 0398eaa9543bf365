"""A Job created suspended with Kueue's queue label: admitted, the ungater unsuspends it (and
marks it ``tidegate.io/resume: manual``), its pods are created gated and released."""

from typing import Any

from tidegate.kube import JOBS, JOBSETS
from tidegate.model.names import RESUME_ANNOTATION

from .conftest import NAMESPACE, Env, gated

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
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": dict(KUEUE)},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "completionMode": "Indexed",
                            "template": template,
                        }
                    },
                }
            ],
        },
    }
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
