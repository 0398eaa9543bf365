"""The simulator through kubernetes-asyncio: the client tidegate's adapter uses.

Covers the paths kubectl also uses (discovery, list, watch with bookmarks, get) so that the
kubectl test, which only runs where kubectl is installed, adds no coverage of its own.
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tidegate.sim import SimCluster


@pytest.fixture
async def api_client(bare: SimCluster, tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    kubeconfig = bare.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


def pod_body(name: str, gates: list[str] | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "demo"}),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="busybox")],
            scheduling_gates=[client.V1PodSchedulingGate(name=g) for g in gates or []],
        ),
    )


async def test_discovery_and_typed_lists(api_client: client.ApiClient) -> None:
    versions = await client.CoreApi(api_client).get_api_versions()
    assert versions.versions == ["v1"]
    groups = await client.ApisApi(api_client).get_api_versions()
    assert "batch" in {g.name for g in groups.groups}
    nodes = await client.CoreV1Api(api_client).list_node(
        label_selector="tidegate.io/rack=block0-rack1"
    )
    assert [n.metadata.name for n in nodes.items] == ["block0-rack1-node0", "block0-rack1-node1"]
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "8"
    code = await client.VersionApi(api_client).get_code()
    assert code.major == "1"


async def test_create_patch_bind_delete(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    created = await core.create_namespaced_pod("default", pod_body("k1", ["tidegate.io/admission"]))
    assert created.status.phase == "Pending"
    patched = await core.patch_namespaced_pod(
        "k1",
        "default",
        {
            "spec": {
                "schedulingGates": [{"$patch": "delete", "name": "tidegate.io/admission"}],
                "nodeSelector": {"tidegate.io/rack": "block0-rack0"},
            }
        },
    )
    assert not patched.spec.scheduling_gates
    assert patched.spec.node_selector == {"tidegate.io/rack": "block0-rack0"}
    with pytest.raises(ApiException) as denied:
        await core.patch_namespaced_pod("k1", "default", {"spec": {"nodeSelector": {"x": "y"}}})
    assert denied.value.status == 422
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="k1"),
        target=client.V1ObjectReference(kind="Node", name="block0-rack0-node0"),
    )
    response = await core.create_namespaced_pod_binding(
        "k1", "default", binding, _preload_content=False
    )
    assert response.status == 201
    bound = await core.read_namespaced_pod("k1", "default")
    assert bound.spec.node_name == "block0-rack0-node0"
    deleted = await core.delete_namespaced_pod("k1", "default", grace_period_seconds=0)
    assert deleted.metadata.name == "k1"
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("k1", "default")
    assert missing.value.status == 404


async def test_watch_stream_with_bookmarks(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    listing = await core.list_namespaced_pod("default")
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        stream = watch.Watch()
        async with stream:
            async for event in stream.stream(
                core.list_namespaced_pod,
                "default",
                resource_version=listing.metadata.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=1,
            ):
                if event["type"] == "BOOKMARK":
                    seen.append(("BOOKMARK", event["object"]["metadata"]["resourceVersion"]))
                else:
                    seen.append((event["type"], event["object"].metadata.name))

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    await core.create_namespaced_pod("default", pod_body("k2"))
    await core.delete_namespaced_pod("k2", "default")
    await task
    assert seen[:2] == [("ADDED", "k2"), ("DELETED", "k2")]
    assert any(kind == "BOOKMARK" for kind, _ in seen)


async def test_watch_too_old_raises_410(bare: SimCluster, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    old = (await core.list_namespaced_pod("default")).metadata.resource_version
    for i in range(60):  # more than the history window of 50 events
        await core.create_namespaced_pod("default", pod_body(f"churn-{i}"))

    async def drain() -> None:
        stream = watch.Watch()
        async with stream:
            async for _ in stream.stream(
                core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=1
            ):
                pass

    with pytest.raises(ApiException) as gone:
        await drain()
    assert gone.value.status == 410


async def test_custom_objects(api_client: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g1"},
        "spec": {"minMember": 2},
    }
    await custom.create_namespaced_custom_object(
        "tidegate.io", "v1alpha1", "default", "podgroups", body
    )
    updated = await custom.patch_namespaced_custom_object_status(
        "tidegate.io",
        "v1alpha1",
        "default",
        "podgroups",
        "g1",
        {"status": {"phase": "Running"}},
        _content_type="application/merge-patch+json",
    )
    assert updated["status"] == {"phase": "Running"}
    with pytest.raises(ApiException) as unsupported:
        await custom.patch_namespaced_custom_object(
            "tidegate.io",
            "v1alpha1",
            "default",
            "podgroups",
            "g1",
            {"spec": {"minMember": 3}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert unsupported.value.status == 415
    listing = await custom.list_cluster_custom_object("tidegate.io", "v1alpha1", "podgroups")
    assert [item["metadata"]["name"] for item in listing["items"]] == ["g1"]


async def test_typed_models_accept_what_the_control_plane_writes(
    sim: SimCluster, tmp_path: Path
) -> None:
    """Objects written by the simulated kubelet and controllers deserialize into typed models."""
    configuration = client.Configuration()
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        core, batch, apps = client.CoreV1Api(api), client.BatchV1Api(api), client.AppsV1Api(api)
        job = client.V1Job(
            metadata=client.V1ObjectMeta(name="typed"),
            spec=client.V1JobSpec(
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(
                        annotations={"tidegate.io/sim-duration-seconds": "0.2"}
                    ),
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[client.V1Container(name="main", image="busybox")],
                    ),
                )
            ),
        )
        await batch.create_namespaced_job("default", job)
        deployment = client.V1Deployment(
            metadata=client.V1ObjectMeta(name="typed"),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels={"app": "typed"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": "typed"}),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
                ),
            ),
        )
        await apps.create_namespaced_deployment("default", deployment)
        for _ in range(100):
            done = await batch.read_namespaced_job_status("typed", "default")
            ready = await apps.read_namespaced_deployment_status("typed", "default")
            if done.status.succeeded == 1 and ready.status.ready_replicas == 1:
                break
            await asyncio.sleep(0.05)
        assert done.status.succeeded == 1
        assert done.status.conditions[-1].type == "Complete"
        assert ready.status.ready_replicas == 1
        pods = await core.list_namespaced_pod("default")
        phases = sorted(p.status.phase for p in pods.items)
        assert phases == ["Running", "Succeeded"]
        running = next(p for p in pods.items if p.status.phase == "Running")
        assert running.status.container_statuses[0].ready is True
        assert running.spec.node_name.startswith("block0-")
        replica_sets = await apps.list_namespaced_replica_set("default")
        assert replica_sets.items[0].status.ready_replicas == 1
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="typed."),
            involved_object=client.V1ObjectReference(kind="Job", name="typed", namespace="default"),
            reason="Admitted",
            message="admitted by tidegate",
            type="Normal",
        )
        created = await core.create_namespaced_event("default", event)
        listed = await core.list_namespaced_event(
            "default", field_selector="involvedObject.name=typed,reason=Admitted"
        )
        assert [e.metadata.name for e in listed.items] == [created.metadata.name]
