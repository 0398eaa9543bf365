"""The ungater's Reporter writes to a workload's top owner only while it is the object the
decision is about: its annotations carry the owner's uid as precondition, so a Job deleted and
submitted again under its name is never marked by a decision about the old one."""

import asyncio
from typing import Any

from tidegate.kube import JOBS
from tidegate.model.names import RESUME_ANNOTATION

from .conftest import NAMESPACE, Env, gated

KUEUE = {"kueue.x-k8s.io/queue-name": "q"}


async def test_a_decision_about_a_deleted_job_does_not_mark_its_successor_as_handed_back(
    env: Env,
) -> None:
    """A late decision about a Job (here the move of its slots) reaches the ungater after
    the user deleted the Job and submitted it again, suspended for tidegate (Kueue style),
    before the ungater's view saw the new one. A Reporter that annotated
    ``tidegate.io/resume: manual`` by name would mark the new Job: read as suspended by its
    user, it would never be admitted."""
    await env.start_ungater()
    old = await env.job("kq", 2)
    old_uid = old["metadata"]["uid"]
    admitted = await env.admit("team/kq", old_uid, {"main": [(env.host(0, 0), 2)]})

    async def running() -> bool:
        pods = await env.pods("job-name=kq")
        return len(pods) == 2 and all(
            not gated(p) and p.get("status", {}).get("phase") == "Running" for p in pods
        )

    await env.until_async(running, what="the first Job's pods running", within=30)

    # The ungater's view stops here (no watcher): the user deletes the Job and submits it
    # again, suspended, for tidegate to admit.
    await env.stop("watcher")
    await env.kube.delete(JOBS, "kq", namespace=NAMESPACE)
    new = await env.job("kq", 2, job_labels=KUEUE, suspend=True)
    new_uid = new["metadata"]["uid"]
    assert new_uid != old_uid

    # A decision about the old Job arrives late: its slots moved.
    await env.admit("team/kq", old_uid, {"main": [(env.host(0, 1), 2)]}, replaces=admitted.sequence)

    async def replaced() -> bool:
        return "Replaced" in await env.events("kq")

    await env.until_async(replaced, what="the Replaced Event of the old Job")

    async def marked() -> dict[str, Any] | None:
        stored = await env.kube.get(JOBS, "kq", namespace=NAMESPACE)
        annotations = stored["metadata"].get("annotations") or {}
        return dict(stored) if RESUME_ANNOTATION in annotations else None

    for _ in range(10):  # the annotation follows the Event at once, if it is written
        found = await marked()
        assert found is None, f"the new Job was marked: {found['metadata']}"
        await asyncio.sleep(0.1)

    # Seen again, the new Job is one queued for tidegate, not one its user suspended.
    await env.start_watcher()
    state = await env.workload_state("kq")
    assert state.uid == new_uid
    assert (state.suspended, state.resume_on_admission) == (True, True)
