"""The simulated control plane end to end over HTTP: controllers, scheduler, kubelets."""

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from tidegate.sim import SimCluster, SimSettings
from tidegate.testing import until
from tidegate.testing.manifests import Builders

PODS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
MERGE = {"Content-Type": "application/merge-patch+json"}
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    """2 racks x 2 nodes x 8 GPUs, everything on, 100x faster than real time."""
    settings = SimSettings(nodes="1x2x2x8gpu", time_scale=0.01, scheduler_interval_seconds=0.01)
    async with SimCluster.running(settings) as running:
        yield running


@pytest.fixture
async def http(cluster: SimCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cluster.url) as session:
        yield session


async def eventually(check: Callable[[], object], *, within: float = 5.0) -> object:
    """Poll until ``check()`` is truthy (the control plane is asynchronous, like a real one)."""
    return await until(check, within=within)


def pods_of(cluster: SimCluster, label: str) -> list[dict[str, object]]:
    key, _, value = label.partition("=")
    return [
        p
        for p in cluster.store.objects(("", "pods"), "default")
        if p["metadata"].get("labels", {}).get(key) == value  # type: ignore[union-attr]
    ]


k8s = Builders(server_fields=False)
EIGHT_GPUS = [k8s.container(None, None, limits=True, image="trainer", gpu="8")]
ONE_GPU = [k8s.container(None, None, limits=True, image="trainer", gpu="1")]
NO_GPU = [k8s.container(None, None, limits=True, image="trainer", gpu="0")]
"""Containers asking for a whole node's GPUs, one GPU, none."""


async def ungate(http: aiohttp.ClientSession, name: str, selector: dict[str, str]) -> None:
    body = {
        "spec": {
            "schedulingGates": [{"$patch": "delete", "name": "tidegate.io/admission"}],
            "nodeSelector": selector,
        }
    }
    async with http.patch(f"{PODS}/{name}", data=json.dumps(body), headers=SMP) as response:
        assert response.status == 200, await response.text()


async def test_indexed_job_gated_then_runs_to_completion(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": k8s.template(
                labels={"tidegate.io/queue": "research", "app": "train"},
                annotations=k8s.runs(20),
                containers=EIGHT_GPUS,
                restartPolicy="Never",
            ),
        },
    }
    async with http.post(JOBS, json=job) as response:
        assert response.status == 201
        uid = (await response.json())["metadata"]["uid"]
    pods = await eventually(
        lambda: len(pods_of(cluster, "app=train")) == 2 and pods_of(cluster, "app=train")
    )
    assert isinstance(pods, list)
    indexes = set()
    for pod in pods:
        meta = pod["metadata"]
        assert pod["spec"]["schedulingGates"] == [{"name": "tidegate.io/admission"}]
        assert meta["ownerReferences"][0]["uid"] == uid
        assert meta["ownerReferences"][0]["controller"] is True
        index = meta["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert meta["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert meta["name"].startswith(f"train-{index}-")
        indexes.add(index)
    assert indexes == {"0", "1"}
    await asyncio.sleep(0.2)
    assert all(not p["spec"].get("nodeName") for p in pods_of(cluster, "app=train")), (
        "gated pods stay unbound"
    )
    for pod in pods:
        await ungate(http, pod["metadata"]["name"], {"tidegate.io/rack": "block0-rack1"})
    bound = await eventually(
        lambda: (
            all(p["spec"].get("nodeName") for p in pods_of(cluster, "app=train"))
            and pods_of(cluster, "app=train")
        )
    )
    assert isinstance(bound, list)
    assert {p["spec"]["nodeName"] for p in bound} == {"block0-rack1-node0", "block0-rack1-node1"}

    def job_status() -> dict[str, object]:
        found = cluster.store.get(("batch", "jobs"), "default", "train")
        assert found is not None
        return found.get("status", {})  # type: ignore[return-value]

    await eventually(lambda: job_status().get("active") == 2)
    await eventually(lambda: job_status().get("succeeded") == 2, within=8)
    status = job_status()
    assert status["completedIndexes"] == "0-1"
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"])  # type: ignore[union-attr]
    assert all(p["status"]["phase"] == "Succeeded" for p in pods_of(cluster, "app=train"))


async def test_scheduler_respects_capacity_and_retries(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    for i in range(5):
        body = k8s.pod(
            f"g{i}",
            gated=False,
            labels={"app": "cap"},
            containers=EIGHT_GPUS,
            restartPolicy="Never",
        )
        async with http.post(PODS, json=body) as response:
            assert response.status == 201
    await eventually(
        lambda: sum(1 for p in pods_of(cluster, "app=cap") if p["spec"].get("nodeName")) == 4
    )

    def unschedulable() -> dict[str, object] | None:
        for pod in pods_of(cluster, "app=cap"):
            for condition in pod["status"].get("conditions", []):  # type: ignore[union-attr]
                if condition.get("reason") == "Unschedulable":
                    return pod
        return None

    waiting = await eventually(unschedulable)
    assert isinstance(waiting, dict)
    message = next(
        c["message"] for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert len({p["spec"].get("nodeName") for p in pods_of(cluster, "app=cap")} - {None}) == 4
    victim = next(p for p in pods_of(cluster, "app=cap") if p["spec"].get("nodeName"))
    async with http.delete(
        f"{PODS}/{victim['metadata']['name']}", params={"gracePeriodSeconds": "0"}
    ) as r:
        assert r.status == 200
    await eventually(
        lambda: (
            (pod := cluster.store.get(("", "pods"), "default", waiting["metadata"]["name"]))
            and pod["spec"].get("nodeName") == victim["spec"]["nodeName"]
        )
    )


async def test_taints_tolerations_and_node_selector(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    taint = {"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}
    for node in ("block0-rack0-node0", "block0-rack0-node1"):
        async with http.patch(f"/api/v1/nodes/{node}", data=json.dumps(taint), headers=MERGE) as r:
            assert r.status == 200
    plain = k8s.pod("plain", gated=False, containers=ONE_GPU, restartPolicy="Never")
    plain["spec"]["nodeSelector"] = {"tidegate.io/rack": "block0-rack0"}  # type: ignore[index]
    tolerant = k8s.pod("tolerant", gated=False, containers=ONE_GPU, restartPolicy="Never")
    tolerant["spec"]["nodeSelector"] = {"tidegate.io/rack": "block0-rack0"}  # type: ignore[index]
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "infer"}]  # type: ignore[index]
    for body in (plain, tolerant):
        async with http.post(PODS, json=body) as response:
            assert response.status == 201
    placed = await eventually(
        lambda: (
            (pod := cluster.store.get(("", "pods"), "default", "tolerant"))
            and pod["spec"].get("nodeName")
        )
    )
    assert str(placed).startswith("block0-rack0-")

    def reason() -> str | None:
        pod = cluster.store.get(("", "pods"), "default", "plain")
        assert pod is not None
        for condition in pod["status"].get("conditions", []):  # type: ignore[union-attr]
            if condition.get("reason") == "Unschedulable":
                return str(condition["message"])
        return None

    message = await eventually(reason)
    assert "2 node(s) had untolerated taint {dedicated: infer}" in str(message)
    assert "2 node(s) didn't match Pod's node affinity/selector" in str(message)


async def test_failed_pods_are_replaced_until_backoff_limit(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "flaky"},
        "spec": {
            "backoffLimit": 1,
            "template": k8s.template(
                labels={"app": "flaky"},
                annotations=k8s.runs(1, exit_code=3),
                containers=ONE_GPU,
                restartPolicy="Never",
            ),
        },
    }
    async with http.post(JOBS, json=job) as response:
        assert response.status == 201

    def status() -> dict[str, object]:
        found = cluster.store.get(("batch", "jobs"), "default", "flaky")
        assert found is not None
        return found.get("status", {})  # type: ignore[return-value]

    started = asyncio.get_running_loop().time()
    await eventually(lambda: status().get("failed") == 1)
    # The replacement waits for the pod failure backoff (10 s after one failure, wall clock).
    await eventually(
        lambda: any(
            c.get("reason") == "BackoffLimitExceeded" for c in status().get("conditions", [])
        ),  # type: ignore[union-attr]
        within=20,
    )
    assert asyncio.get_running_loop().time() - started >= 9.5
    assert status()["failed"] == 2
    failed = [p for p in pods_of(cluster, "app=flaky") if p["status"]["phase"] == "Failed"]  # type: ignore[index]
    assert len(failed) == 2
    terminated = failed[0]["status"]["containerStatuses"][0]["state"]["terminated"]  # type: ignore[index]
    assert terminated["exitCode"] == 3


async def test_suspend_deletes_active_pods_and_resume_recreates(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pausable"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": k8s.template(
                labels={"app": "pause"}, containers=ONE_GPU, restartPolicy="Never"
            ),
        },
    }
    async with http.post(JOBS, json=job) as response:
        assert response.status == 201
    await eventually(lambda: len(pods_of(cluster, "app=pause")) == 2)
    async with http.patch(
        f"{JOBS}/pausable", data=json.dumps({"spec": {"suspend": True}}), headers=MERGE
    ) as r:
        assert r.status == 200
    await eventually(lambda: not pods_of(cluster, "app=pause"), within=8)
    job_now = cluster.store.get(("batch", "jobs"), "default", "pausable")
    assert job_now is not None
    conditions = job_now["status"]["conditions"]  # type: ignore[index]
    assert any(c["type"] == "Suspended" and c["status"] == "True" for c in conditions)
    async with http.patch(
        f"{JOBS}/pausable", data=json.dumps({"spec": {"suspend": False}}), headers=MERGE
    ) as r:
        assert r.status == 200
    await eventually(lambda: len(pods_of(cluster, "app=pause")) == 2)


async def test_deployment_scale_and_cascading_delete(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}
                    ]
                },
            },
        },
    }
    async with http.post(DEPLOYMENTS, json=deployment) as response:
        assert response.status == 201
    await eventually(
        lambda: (
            sum(1 for p in pods_of(cluster, "app=web") if p["status"]["phase"] == "Running") == 2
        )  # type: ignore[index]
    )

    def ready() -> object:
        found = cluster.store.get(("apps", "deployments"), "default", "web")
        return found is not None and found.get("status", {}).get("readyReplicas")  # type: ignore[union-attr]

    assert await eventually(ready) == 2
    async with http.patch(
        f"{DEPLOYMENTS}/web/scale", data=json.dumps({"spec": {"replicas": 3}}), headers=MERGE
    ) as response:
        assert response.status == 200
        assert (await response.json())["spec"]["replicas"] == 3
    await eventually(lambda: len(pods_of(cluster, "app=web")) == 3)
    replica_sets = list(cluster.store.objects(("apps", "replicasets"), "default"))
    assert len(replica_sets) == 1
    assert replica_sets[0]["metadata"]["labels"]["pod-template-hash"]  # type: ignore[index]
    async with http.delete(f"{DEPLOYMENTS}/web") as response:
        assert response.status == 200
    await eventually(lambda: not list(cluster.store.objects(("apps", "replicasets"), "default")))
    # Running pods are deleted gracefully (30 s scaled to 0.3 s) by their kubelet.
    await eventually(lambda: not pods_of(cluster, "app=web"), within=8)


async def test_job_delete_orphans_by_default_and_cascades_in_background(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    for name in ("kept", "gone"):
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "template": k8s.template(
                    labels={"app": name}, containers=ONE_GPU, restartPolicy="Never"
                )
            },
        }
        async with http.post(JOBS, json=job) as response:
            assert response.status == 201
    await eventually(lambda: pods_of(cluster, "app=kept") and pods_of(cluster, "app=gone"))
    async with http.delete(f"{JOBS}/kept") as response:
        assert response.status == 200
        assert "child pods are preserved" in response.headers["Warning"]
    async with http.delete(f"{JOBS}/gone", json={"propagationPolicy": "Background"}) as response:
        assert response.status == 200
    await eventually(lambda: not pods_of(cluster, "app=gone"), within=8)
    orphan = await eventually(
        lambda: (
            (p := pods_of(cluster, "app=kept"))
            and not p[0]["metadata"].get("ownerReferences")
            and p
        )
    )  # type: ignore[index]
    assert isinstance(orphan, list)


async def test_node_not_ready_taints_and_evicts_and_node_delete_frees_pods(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    body = k8s.pod("on-node", gated=False, containers=ONE_GPU, restartPolicy="Never")
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "block0-rack0-node0"}  # type: ignore[index]
    async with http.post(PODS, json=body) as response:
        assert response.status == 201
    await eventually(
        lambda: (
            (p := cluster.store.get(("", "pods"), "default", "on-node"))
            and p["status"]["phase"] == "Running"
        )  # type: ignore[index]
    )
    not_ready = {
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}]}
    }
    async with http.patch(
        "/api/v1/nodes/block0-rack0-node0/status", data=json.dumps(not_ready), headers=SMP
    ) as response:
        assert response.status == 200

    def taints() -> list[dict[str, object]]:
        node = cluster.store.get(("", "nodes"), "", "block0-rack0-node0")
        assert node is not None
        return node["spec"].get("taints", [])  # type: ignore[union-attr,no-any-return]

    await eventually(
        lambda: (
            {(t["key"], t["effect"]) for t in taints()}
            == {
                ("node.kubernetes.io/not-ready", "NoSchedule"),
                ("node.kubernetes.io/not-ready", "NoExecute"),
            }
        )
    )
    # The pod tolerates not-ready for 300 s (default toleration), scaled to 3 s; then it is
    # deleted, but stays Terminating: its kubelet is unreachable.
    await eventually(
        lambda: (
            (p := cluster.store.get(("", "pods"), "default", "on-node"))
            and p["metadata"].get("deletionTimestamp")
        ),  # type: ignore[index]
        within=8,
    )
    async with http.delete("/api/v1/nodes/block0-rack0-node0") as response:
        assert response.status == 200
    await eventually(lambda: cluster.store.get(("", "pods"), "default", "on-node") is None)


async def test_namespace_deletion_empties_it(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    async with http.post("/api/v1/namespaces", json={"metadata": {"name": "scratch"}}) as response:
        assert response.status == 201
    held = k8s.pod("p", gated=False, containers=NO_GPU, restartPolicy="Never")
    held["metadata"]["finalizers"] = ["example.com/hold"]  # type: ignore[index]
    async with http.post("/api/v1/namespaces/scratch/pods", json=held) as response:
        assert response.status == 201
    async with http.delete("/api/v1/namespaces/scratch") as response:
        assert response.status == 200
        assert (await response.json())["status"]["phase"] == "Terminating"
    async with http.post(
        "/api/v1/namespaces/scratch/pods",
        json=k8s.pod("q", gated=False, containers=NO_GPU, restartPolicy="Never"),
    ) as response:
        assert response.status == 403
    # The finalizer holds the pod (marked for deletion) and with it the namespace.
    await eventually(
        lambda: (
            (p := cluster.store.get(("", "pods"), "scratch", "p"))
            and p["metadata"].get("deletionTimestamp")
        )  # type: ignore[index]
    )
    assert cluster.store.get(("", "namespaces"), "", "scratch") is not None
    release = json.dumps({"metadata": {"finalizers": None}})
    async with http.patch("/api/v1/namespaces/scratch/pods/p", data=release, headers=MERGE) as r:
        assert r.status == 200
    await eventually(lambda: cluster.store.get(("", "namespaces"), "", "scratch") is None, within=8)
    assert cluster.store.count(("", "pods"), "scratch") == 0


async def test_bare_cluster_runs_nothing(bare: SimCluster) -> None:
    async with aiohttp.ClientSession(bare.url) as http:
        body = k8s.pod(
            "idle",
            gated=False,
            labels={"tidegate.io/queue": "q"},
            containers=ONE_GPU,
            restartPolicy="Never",
        )
        async with http.post(PODS, json=body) as response:
            created = await response.json()
    # No webhook emulation, no scheduler: the pod is neither gated nor bound.
    assert "schedulingGates" not in created["spec"]
    await asyncio.sleep(0.3)
    stored = bare.store.get(("", "pods"), "default", "idle")
    assert stored is not None
    assert not stored["spec"].get("nodeName")  # type: ignore[union-attr]


async def test_set_node_ready_toggles_taints(cluster: SimCluster) -> None:
    def taint_keys() -> set[str]:
        node = cluster.store.get(("", "nodes"), "", "block0-rack1-node1")
        assert node is not None
        return {str(t["key"]) for t in node["spec"].get("taints", [])}  # type: ignore[union-attr]

    cluster.set_node_ready("block0-rack1-node1", False)
    await eventually(lambda: taint_keys() == {"node.kubernetes.io/not-ready"})
    cluster.set_node_ready("block0-rack1-node1", True)
    await eventually(lambda: not taint_keys())


async def test_jobset_creates_jobs_and_completes(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "template": k8s.template(
                                labels={"app": "js"},
                                annotations=k8s.runs(10),
                                containers=ONE_GPU,
                                restartPolicy="Never",
                            ),
                        }
                    },
                }
            ]
        },
    }
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    async with http.post(path, json=jobset) as response:
        assert response.status == 201
    await eventually(lambda: len(pods_of(cluster, "app=js")) == 2)
    jobs = sorted(
        j["metadata"]["name"] for j in cluster.store.objects(("batch", "jobs"), "default")
    )  # type: ignore[index]
    assert jobs == ["js-workers-0", "js-workers-1"]
    pod_labels = pods_of(cluster, "app=js")[0]["metadata"]["labels"]  # type: ignore[index]
    assert pod_labels["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert pod_labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"

    def conditions() -> list[dict[str, object]]:
        found = cluster.store.get(("jobset.x-k8s.io", "jobsets"), "default", "js")
        assert found is not None
        return found.get("status", {}).get("conditions", [])  # type: ignore[union-attr,no-any-return]

    await eventually(lambda: any(c["type"] == "Completed" for c in conditions()), within=8)


async def test_a_jobs_pod_events_are_synced_in_batches(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    # As kube-controller-manager's syncJobBatchPeriod: 16 pods going through creation,
    # binding, running and success (~64 pod events) rewrite the Job's status a few times, not
    # once per event; the Job still completes.
    updates: list[str] = []
    unsubscribe = cluster.store.subscribe(
        ("batch", "jobs"), lambda event: updates.append(event.type)
    )
    try:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "many"},
            "spec": {
                "parallelism": 16,
                "completions": 16,
                "template": k8s.template(
                    labels={"app": "many"},
                    annotations=k8s.runs(20),
                    containers=ONE_GPU,
                    restartPolicy="Never",
                ),
            },
        }
        async with http.post(JOBS, json=job) as response:
            assert response.status == 201

        def complete() -> bool:
            found = cluster.store.get(("batch", "jobs"), "default", "many")
            assert found is not None
            conditions = found.get("status", {}).get("conditions", [])  # type: ignore[union-attr]
            return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

        await eventually(complete, within=15)
    finally:
        unsubscribe()
    assert all(p["status"]["phase"] == "Succeeded" for p in pods_of(cluster, "app=many"))
    assert len(pods_of(cluster, "app=many")) == 16
    assert updates.count("MODIFIED") <= 4, updates  # 7 when every pod event synced it
