"""Custom resources, annotations, Job and JobSet suspension, optimistic concurrency."""

import asyncio

import pytest

from tidegate.kube import (
    JOBS,
    JOBSETS,
    PODGROUPS,
    PODS,
    QUEUES,
    AlreadyExists,
    Conflict,
    NotFound,
    Unsupported,
)

from .conftest import CONTRACT_LABEL, INERT, ContractEnv, k8s

pytestmark = pytest.mark.kube_contract


async def test_custom_status_merge_patch(env: ContractEnv) -> None:
    await env.client.create(PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace)
    first = await env.client.patch_custom_status(
        "tidegate.io",
        "v1alpha1",
        "podgroups",
        "g",
        {"phase": "Pending", "admitted": 0},
        namespace=env.namespace,
    )
    assert first["status"] == {"phase": "Pending", "admitted": 0}
    second = await env.client.patch_custom_status(
        "tidegate.io", "v1alpha1", "podgroups", "g", {"admitted": 2}, namespace=env.namespace
    )
    # merged, not replaced; and the status subresource leaves spec alone
    assert second["status"] == {"phase": "Pending", "admitted": 2}
    assert second["spec"] == {"minMember": 2, "queue": "default"}

    cluster_scoped = f"tg-contract-{env.run_id}"
    await env.create_cluster_object(
        QUEUES,
        {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": cluster_scoped, "labels": {CONTRACT_LABEL: env.run_id}},
            "spec": {"priority": 1},
        },
    )
    queue = await env.client.patch_custom_status(
        "tidegate.io", "v1alpha1", "queues", cluster_scoped, {"pending": 3}
    )
    assert queue["status"] == {"pending": 3}


async def test_status_subresource_ignores_spec_and_main_resource_ignores_status(
    env: ContractEnv,
) -> None:
    await env.client.create(PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace)
    await env.client.patch_custom(
        "tidegate.io",
        "v1alpha1",
        "podgroups",
        "g",
        {"spec": {"minMember": 3}, "status": {"phase": "Sneaky"}},
        namespace=env.namespace,
    )
    stored = await env.client.get(PODGROUPS, "g", namespace=env.namespace)
    assert stored["spec"]["minMember"] == 3  # type: ignore[index]
    assert "phase" not in (stored.get("status") or {})  # type: ignore[operator]


async def test_strategic_merge_on_a_custom_resource_is_unsupported(env: ContractEnv) -> None:
    await env.client.create(PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace)
    with pytest.raises(Unsupported) as info:
        await env.client.patch(
            PODGROUPS,
            "g",
            {"spec": {"minMember": 4}},
            namespace=env.namespace,
            patch_type="strategic",
        )
    assert info.value.status == 415
    # strategic merge is fine on built-in kinds
    await env.create_pod("p")
    await env.client.patch(
        PODS,
        "p",
        {"metadata": {"labels": {"x": "y"}}},
        namespace=env.namespace,
        patch_type="strategic",
    )


async def test_stale_resource_version_is_a_conflict(env: ContractEnv) -> None:
    created = await env.client.create(
        PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace
    )
    stale = created["metadata"]["resourceVersion"]  # type: ignore[index]
    await env.client.patch_custom(
        "tidegate.io",
        "v1alpha1",
        "podgroups",
        "g",
        {"spec": {"minMember": 5}},
        namespace=env.namespace,
    )
    with pytest.raises(Conflict) as info:
        await env.client.patch(
            PODGROUPS,
            "g",
            {"metadata": {"resourceVersion": stale}, "spec": {"minMember": 6}},
            namespace=env.namespace,
        )
    assert info.value.status == 409
    stored = await env.client.get(PODGROUPS, "g", namespace=env.namespace)
    assert stored["spec"]["minMember"] == 5  # type: ignore[index]


async def test_create_twice_is_already_exists_and_missing_is_not_found(env: ContractEnv) -> None:
    await env.client.create(PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace)
    with pytest.raises(AlreadyExists):
        await env.client.create(
            PODGROUPS, k8s.podgroup("g", queue="default"), namespace=env.namespace
        )
    with pytest.raises(NotFound):
        await env.client.get(PODGROUPS, "nope", namespace=env.namespace)
    with pytest.raises(NotFound):
        await env.client.patch_custom_status(
            "tidegate.io", "v1alpha1", "podgroups", "nope", {"phase": "X"}, namespace=env.namespace
        )


async def test_annotate_sets_and_removes(env: ContractEnv) -> None:
    await env.create_pod("p")
    pod = await env.client.annotate(
        "Pod", env.namespace, "p", {"a.example.com/x": "1", "b.example.com/y": "2"}
    )
    assert pod["metadata"]["annotations"] == {"a.example.com/x": "1", "b.example.com/y": "2"}  # type: ignore[index]
    pod = await env.client.annotate(PODS, env.namespace, "p", {"a.example.com/x": None})
    assert pod["metadata"]["annotations"] == {"b.example.com/y": "2"}  # type: ignore[index]


async def test_a_patch_by_uid_reaches_only_that_object(env: ContractEnv) -> None:
    first = await env.client.create(
        JOBS, k8s.job("j", parallelism=None, template=INERT, suspend=True), namespace=env.namespace
    )
    uid = str(first["metadata"]["uid"])  # type: ignore[index]
    marked = await env.client.annotate(JOBS, env.namespace, "j", {"a.example.com/x": "1"}, uid=uid)
    assert marked["metadata"]["annotations"] == {"a.example.com/x": "1"}  # type: ignore[index]
    await env.client.delete(JOBS, "j", namespace=env.namespace, propagation="Background")
    async with asyncio.timeout(30):
        while True:
            try:
                await env.client.get(JOBS, "j", namespace=env.namespace)
            except NotFound:
                break
            await asyncio.sleep(0.1)
    await env.client.create(
        JOBS, k8s.job("j", parallelism=None, template=INERT, suspend=True), namespace=env.namespace
    )
    with pytest.raises(Conflict):
        await env.client.annotate(JOBS, env.namespace, "j", {"a.example.com/x": "2"}, uid=uid)
    with pytest.raises(Conflict):
        await env.client.patch(
            JOBS, "j", {"spec": {"parallelism": 2}}, namespace=env.namespace, uid=uid
        )
    again = await env.client.get(JOBS, "j", namespace=env.namespace)
    assert not again["metadata"].get("annotations")  # type: ignore[union-attr]


async def test_suspend_job_and_jobset(env: ContractEnv) -> None:
    body = k8s.job("j", parallelism=None, template=INERT, suspend=True)
    body["spec"]["suspend"] = False  # type: ignore[index]
    await env.client.create(JOBS, body, namespace=env.namespace)
    job = await env.client.suspend_job(env.namespace, "j")
    assert job["spec"]["suspend"] is True  # type: ignore[index]

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "suspend": False,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"suspend": True, "template": INERT}},
                }
            ],
        },
    }
    await env.client.create(JOBSETS, jobset, namespace=env.namespace)
    stored = await env.client.suspend_jobset(env.namespace, "js")
    assert stored["spec"]["suspend"] is True  # type: ignore[index]
    assert stored["spec"]["replicatedJobs"][0]["name"] == "workers"  # type: ignore[index]
