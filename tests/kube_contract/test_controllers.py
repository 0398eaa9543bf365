"""What the controllers tidegate lives beside do, one test per behaviour, each run on the
simulator's control plane and on a real one (kube-controller-manager, kube-scheduler, fake
kubelets; tests/kube_contract/controllers.py).

Each assertion is what Kubernetes does: a Job keeps ``parallelism`` pods until
``completions`` succeeded, deletes its pods when suspended and recreates them when resumed, and
replaces an evicted pod; a Deployment scales through its ``scale`` subresource and rolls out
with ``maxSurge``/``maxUnavailable`` only as new pods become available; the Eviction API answers
429 with the disruption budget's numbers and marks what it evicts ``DisruptionTarget``; a pod
deleted with a grace period stays Terminating until its kubelet confirms; a namespace being
deleted refuses new content, empties itself and goes once the last finalizer is gone; a node
whose Ready condition is False is tainted not-ready and its pods leave after their
``tolerationSeconds``, Terminating until the kubelet is back; the scheduler marks a pod that
fits nowhere ``PodScheduled=False, Unschedulable`` and binds it once room is freed.
"""

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    Forbidden,
    NotFound,
    TooManyRequests,
)

from .conftest import ENV_KUBECONFIG, k8s
from .controllers import ControllerCluster, JsonObject, controller_cluster

pytestmark = [pytest.mark.kube_contract, pytest.mark.timeout(180)]

HOLD = "tidegate.io/test-hold"
NOT_READY = "node.kubernetes.io/not-ready"


def _backends() -> list[object]:
    backends: list[object] = [
        "sim",
        "sim-agent",
        pytest.param("real", marks=pytest.mark.real_k8s),
    ]
    if os.environ.get(ENV_KUBECONFIG):
        backends.append("external")
    return backends


@pytest.fixture(params=_backends())
async def cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ControllerCluster]:
    """A cluster with controllers: the simulator's (with its kubelets, or with the node
    agent's as on a real cluster), the session's real control plane, or
    TIDEGATE_TEST_KUBECONFIG's."""
    kubeconfig: Path | None = None
    if request.param == "real":
        kubeconfig = request.getfixturevalue("real_cluster").kubeconfig
    elif request.param == "external":
        kubeconfig = Path(os.environ[ENV_KUBECONFIG])
    async with controller_cluster(request.param, kubeconfig, tmp_path) as made:
        yield made


# --- helpers ------------------------------------------------------------------------------


def live(pods: list[JsonObject]) -> list[JsonObject]:
    """The pods not being deleted."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def running(pods: list[JsonObject]) -> list[JsonObject]:
    """The live pods reported Running."""
    return [p for p in live(pods) if p.get("status", {}).get("phase") == "Running"]


def condition(obj: JsonObject, kind: str) -> JsonObject | None:
    """The condition of type ``kind`` in ``obj``'s status, if any."""
    for item in obj.get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


async def job_pods(cluster: ControllerCluster, name: str) -> list[JsonObject]:
    """The pods of Job ``name`` (label ``app``), Terminating ones included."""
    return await cluster.pods(f"app={name}")


async def n_running(cluster: ControllerCluster, app: str, count: int) -> list[JsonObject] | None:
    """Exactly ``count`` live pods of ``app``, all Running (else None)."""
    pods = await cluster.pods(f"app={app}")
    up = running(pods)
    return up if len(up) == count and len(live(pods)) == count else None


# --- Job ----------------------------------------------------------------------------------


async def test_a_job_runs_parallelism_pods_at_a_time_until_completions(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        JOBS,
        k8s.job(
            "par",
            parallelism=2,
            completions=4,
            template=cluster.template("par", seconds=1),
            suspend=False,
            backoffLimit=6,
        ),
        namespace=ns,
    )
    most = 0

    async def complete() -> JsonObject | None:
        nonlocal most
        pods = await job_pods(cluster, "par")
        unfinished = [
            p for p in live(pods) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        most = max(most, len(unfinished))
        stored = await kube.get(JOBS, "par", namespace=ns)
        done = condition(stored, "Complete")
        return stored if done and done["status"] == "True" else None

    stored = await cluster.wait(complete, "the Job Complete")
    assert stored["status"]["succeeded"] == 4, stored["status"]
    assert 1 <= most <= 2, most  # never more than parallelism at once


async def test_a_suspended_job_deletes_its_pods_and_a_resumed_one_recreates_them(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        JOBS,
        k8s.job(
            "sus",
            parallelism=2,
            completions=2,
            template=cluster.template("sus"),
            suspend=False,
            backoffLimit=6,
        ),
        namespace=ns,
    )
    first = await cluster.wait(lambda: n_running(cluster, "sus", 2), "2 pods running")

    await kube.patch(JOBS, "sus", {"spec": {"suspend": True}}, namespace=ns)

    async def suspended() -> JsonObject | None:
        stored = await kube.get(JOBS, "sus", namespace=ns)
        cond = condition(stored, "Suspended")
        empty = not live(await job_pods(cluster, "sus"))
        active = stored.get("status", {}).get("active", 0)
        return cond if cond and cond["status"] == "True" and empty and not active else None

    cond = await cluster.wait(suspended, "the Job suspended, its pods deleted")
    assert cond["reason"] == "JobSuspended", cond

    await kube.patch(JOBS, "sus", {"spec": {"suspend": False}}, namespace=ns)
    again = await cluster.wait(lambda: n_running(cluster, "sus", 2), "2 new pods running")
    assert not {p["metadata"]["uid"] for p in again} & {p["metadata"]["uid"] for p in first}
    stored = await kube.get(JOBS, "sus", namespace=ns)
    resumed = condition(stored, "Suspended")
    assert resumed is not None, stored["status"]
    assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed"), resumed


async def test_a_jobs_evicted_pod_is_marked_and_replaced(cluster: ControllerCluster) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        JOBS,
        k8s.job(
            "ev",
            parallelism=2,
            completions=2,
            template=cluster.template("ev", grace=2),
            suspend=False,
            backoffLimit=6,
        ),
        namespace=ns,
    )
    pods = await cluster.wait(lambda: n_running(cluster, "ev", 2), "2 pods running")
    victim = pods[0]["metadata"]
    await kube.evict_pod(ns, victim["name"])

    evicted = await kube.get(PODS, victim["name"], namespace=ns)
    assert evicted["metadata"].get("deletionTimestamp"), evicted["metadata"]
    target = condition(evicted, "DisruptionTarget")
    assert target is not None, evicted["status"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )

    async def replaced() -> list[JsonObject] | None:
        up = await n_running(cluster, "ev", 2)
        if up is None or victim["uid"] in {p["metadata"]["uid"] for p in up}:
            return None
        return up

    await cluster.wait(replaced, "a replacement pod running")

    await cluster.wait_gone(
        PODS, victim["name"], "the evicted pod gone once its grace period passed", namespace=ns
    )


# --- ReplicaSet / Deployment --------------------------------------------------------------


async def test_a_deployment_scales_through_its_scale_subresource(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        DEPLOYMENTS,
        k8s.deployment(
            "web",
            replicas=2,
            selector={"app": "web"},
            template=cluster.template("web", restart="Always"),
        ),
        namespace=ns,
    )
    await cluster.wait(lambda: n_running(cluster, "web", 2), "2 pods running")
    for replicas in (3, 1):
        scale = await kube.patch(
            DEPLOYMENTS, "web", {"spec": {"replicas": replicas}}, namespace=ns, subresource="scale"
        )
        assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", replicas), scale

        async def settled(replicas: int = replicas) -> JsonObject | None:
            if await n_running(cluster, "web", replicas) is None:
                return None
            stored = await kube.get(DEPLOYMENTS, "web", namespace=ns)
            status = stored.get("status", {})
            return stored if status.get("availableReplicas") == replicas else None

        await cluster.wait(settled, f"{replicas} pods running and available")
    listed = await kube.list_objects(REPLICASETS, namespace=ns)
    assert [r["spec"]["replicas"] for r in listed.items] == [1]


async def test_a_rolling_update_waits_for_new_pods_to_be_available(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    await kube.create(
        DEPLOYMENTS,
        k8s.deployment(
            "roll",
            replicas=2,
            selector={"app": "roll"},
            template=cluster.template("roll", restart="Always"),
            strategy=strategy,
        ),
        namespace=ns,
    )
    old = await cluster.wait(lambda: n_running(cluster, "roll", 2), "2 pods running")

    # A new template whose pods can never run (no node has that label): one surge pod is
    # created and the old ones stay, however long it waits.
    nowhere = {"spec": {"template": {"spec": {"nodeSelector": {"tidegate.io/nowhere": "yes"}}}}}
    await kube.patch(DEPLOYMENTS, "roll", nowhere, patch_type="strategic", namespace=ns)

    async def surged() -> list[JsonObject] | None:
        pods = live(await cluster.pods("app=roll"))
        return pods if len(pods) == 3 else None

    await cluster.wait(surged, "one surge pod beside the 2 old ones")
    await asyncio.sleep(2.0)
    pods = live(await cluster.pods("app=roll"))
    assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
    assert {p["metadata"]["uid"] for p in running(pods)} == {p["metadata"]["uid"] for p in old}

    # A third template that runs (the first one again would be a rollback to the old
    # ReplicaSet): the rollout completes, one pod at a time.
    fixed = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"example.com/version": "3"}},
                "spec": {"nodeSelector": {"tidegate.io/nowhere": None}},
            }
        }
    }
    await kube.patch(DEPLOYMENTS, "roll", fixed, patch_type="strategic", namespace=ns)

    async def rolled() -> JsonObject | None:
        stored = await kube.get(DEPLOYMENTS, "roll", namespace=ns)
        status = stored.get("status", {})
        pods = await n_running(cluster, "roll", 2)
        if pods is None or status.get("updatedReplicas") != 2 or status.get("replicas") != 2:
            return None
        return stored if status.get("availableReplicas") == 2 else None

    await cluster.wait(rolled, "the rollout complete")
    now = running(await cluster.pods("app=roll"))
    assert not {p["metadata"]["uid"] for p in now} & {p["metadata"]["uid"] for p in old}
    listed = await kube.list_objects(REPLICASETS, namespace=ns)
    assert sorted(r["spec"]["replicas"] for r in listed.items) == [0, 0, 2]


# --- Eviction API and PodDisruptionBudgets ------------------------------------------------


async def test_an_eviction_a_budget_forbids_is_a_429_with_the_budgets_numbers(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        DEPLOYMENTS,
        k8s.deployment(
            "guarded",
            replicas=2,
            selector={"app": "guarded"},
            template=cluster.template("guarded", restart="Always"),
        ),
        namespace=ns,
    )
    pods = await cluster.wait(lambda: n_running(cluster, "guarded", 2), "2 pods running")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await kube.create(PDBS, budget, namespace=ns)

    async def computed(allowed: int) -> JsonObject | None:
        stored = await kube.get(PDBS, "guarded", namespace=ns)
        status = stored.get("status", {})
        fresh = status.get("observedGeneration") == stored["metadata"].get("generation")
        healthy = status.get("currentHealthy") == 2
        return status if fresh and healthy and status.get("disruptionsAllowed") == allowed else None

    status = await cluster.wait(lambda: computed(0), "the budget computed: nothing to spare")
    assert (status["desiredHealthy"], status["expectedPods"]) == (2, 2), status

    name = pods[0]["metadata"]["name"]
    with pytest.raises(TooManyRequests) as refused:
        await kube.evict_pod(ns, name)
    assert refused.value.reason == "TooManyRequests"
    assert refused.value.message == (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    assert [(c.reason, c.message) for c in refused.value.causes] == [
        (
            "DisruptionBudget",
            "The disruption budget guarded needs 2 healthy pods and has 2 currently",
        )
    ]
    stored = await kube.get(PODS, name, namespace=ns)
    assert not stored["metadata"].get("deletionTimestamp")
    assert condition(stored, "DisruptionTarget") is None

    await kube.patch(PDBS, "guarded", {"spec": {"minAvailable": 1}}, namespace=ns)
    await cluster.wait(lambda: computed(1), "the budget computed: one to spare")
    await kube.evict_pod(ns, name)
    with pytest.raises(NotFound):  # grace 0: gone at once
        await kube.get(PODS, name, namespace=ns)


# --- graceful deletion --------------------------------------------------------------------


async def test_a_pod_deleted_gracefully_stays_terminating_until_its_kubelet_confirms(
    cluster: ControllerCluster,
) -> None:
    # The API server never removes a bound pod by itself: its kubelet confirms (a grace-0
    # delete) once the containers are gone, however long after the grace period that is.
    kube, ns = cluster.kube, cluster.namespace
    node = cluster.nodes[0]
    await kube.create(PODS, cluster.pod("slow", grace=1, node=node), namespace=ns)
    await cluster.wait(lambda: n_running(cluster, "slow", 1), "the pod running")
    await cluster.kubelet_down(node)  # (pods tolerate not-ready for 300 s by default)
    await kube.delete(PODS, "slow", namespace=ns)
    stored = await kube.get(PODS, "slow", namespace=ns)
    assert stored["metadata"].get("deletionTimestamp"), stored["metadata"]
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 1
    await asyncio.sleep(3.0)  # well past the grace period
    stored = await kube.get(PODS, "slow", namespace=ns)
    assert stored["status"]["phase"] == "Running"  # a deletion does not change the phase
    assert condition(stored, "DisruptionTarget") is None  # a plain delete is no disruption

    await cluster.kubelet_up(node)

    await cluster.wait_gone(PODS, "slow", "the kubelet back, confirming the deletion", namespace=ns)


# --- namespace termination ----------------------------------------------------------------


async def test_a_namespace_being_deleted_refuses_new_content_and_empties_itself(
    cluster: ControllerCluster,
) -> None:
    kube = cluster.kube
    ns = f"{cluster.namespace}-doomed"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    try:
        held = k8s.job(
            "held",
            parallelism=1,
            completions=1,
            template=cluster.template("held"),
            suspend=True,
            backoffLimit=6,
        )
        held["metadata"]["finalizers"] = [HOLD]
        await kube.create(JOBS, held, namespace=ns)

        async def pod_created() -> JsonObject | None:
            try:  # a real server's ServiceAccount admission waits for "default"
                return await kube.create(PODS, cluster.pod("resident", grace=1), namespace=ns)
            except Forbidden:
                return None

        await cluster.wait(pod_created, "a pod created in the new namespace")
        await cluster.wait(lambda: n_running_in(cluster, ns, "resident"), "the pod running")

        await kube.delete(NAMESPACES, ns)
        stored = await kube.get(NAMESPACES, ns)
        assert stored["metadata"].get("deletionTimestamp")
        assert stored["status"]["phase"] == "Terminating"

        with pytest.raises(Forbidden) as refused:
            await kube.create(PODS, cluster.pod("late"), namespace=ns)
        assert refused.value.message == (
            f'pods "late" is forbidden: unable to create new content in namespace {ns} '
            "because it is being terminated"
        )
        assert "NamespaceTerminating" in {c.reason for c in refused.value.causes}

        async def emptied() -> JsonObject | None:
            pods = await kube.list_objects(PODS, namespace=ns)
            kept = await kube.get(JOBS, "held", namespace=ns)
            return kept if not pods.items and kept["metadata"].get("deletionTimestamp") else None

        kept = await cluster.wait(emptied, "the pod gone, the Job marked and kept")
        assert kept["metadata"]["finalizers"] == [HOLD]

        async def says_what_holds_it() -> JsonObject | None:
            stored = await kube.get(NAMESPACES, ns)
            remaining = condition(stored, "NamespaceContentRemaining") or {}
            held = condition(stored, "NamespaceFinalizersRemaining") or {}
            wanted = (
                remaining.get("message")
                == "Some resources are remaining: jobs.batch has 1 resource instances"
                and held.get("message")
                == f"Some content in the namespace has finalizers remaining: {HOLD} in 1 "
                "resource instances"
            )
            return stored if wanted else None

        stored = await cluster.wait(says_what_holds_it, "the namespace's conditions")
        assert stored["status"]["phase"] == "Terminating"
        held_by = condition(stored, "NamespaceFinalizersRemaining")
        assert held_by is not None
        assert (held_by["status"], held_by["reason"]) == ("True", "SomeFinalizersRemain")
    finally:
        with contextlib.suppress(NotFound):
            await kube.patch(JOBS, "held", {"metadata": {"finalizers": None}}, namespace=ns)

    await cluster.wait_gone(NAMESPACES, ns, "the namespace removed once its last finalizer went")


async def n_running_in(cluster: ControllerCluster, namespace: str, app: str) -> bool:
    """Whether the pods labelled ``app`` in ``namespace`` all run (at least one)."""
    listed = await cluster.kube.list_objects(PODS, namespace=namespace, label_selector=f"app={app}")
    return bool(listed.items) and all(p["status"].get("phase") == "Running" for p in listed.items)


# --- node lifecycle -----------------------------------------------------------------------


async def test_a_not_ready_node_is_tainted_and_its_pods_leave_after_their_toleration(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    node = cluster.nodes[0]
    brief = [
        {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
    ]
    forever = [{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"}]
    await kube.create(
        PODS, cluster.pod("brief", node=node, grace=1, tolerations=brief), namespace=ns
    )
    await kube.create(PODS, cluster.pod("stays", node=node, tolerations=forever), namespace=ns)
    await cluster.wait(lambda: n_running(cluster, "brief", 1), "brief running")
    await cluster.wait(lambda: n_running(cluster, "stays", 1), "stays running")

    await cluster.kubelet_down(node)

    async def tainted() -> set[tuple[str, str]] | None:
        stored = await kube.get(NODES, node)
        taints = {(t["key"], t["effect"]) for t in stored["spec"].get("taints") or []}
        wanted = {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
        return taints if wanted <= taints else None

    await cluster.wait(tainted, "the not-ready taints")

    async def evicted() -> JsonObject | None:
        stored = await kube.get(PODS, "brief", namespace=ns)
        return stored if stored["metadata"].get("deletionTimestamp") else None

    marked = await cluster.wait(evicted, "brief deleted after its tolerationSeconds")
    target = condition(marked, "DisruptionTarget")
    assert target is not None, marked["status"]
    assert (target["reason"], target["message"]) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    await asyncio.sleep(2.0)  # past its grace period: still Terminating, nobody confirms
    await kube.get(PODS, "brief", namespace=ns)
    stays = await kube.get(PODS, "stays", namespace=ns)
    assert not stays["metadata"].get("deletionTimestamp")

    await cluster.kubelet_up(node)

    async def recovered() -> bool:
        stored = await kube.get(NODES, node)
        keys = {t["key"] for t in stored["spec"].get("taints") or []}
        try:
            await kube.get(PODS, "brief", namespace=ns)
        except NotFound:
            return NOT_READY not in keys
        return False

    await cluster.wait(recovered, "the taints lifted and brief's deletion confirmed")
    assert await n_running(cluster, "stays", 1)


# --- the scheduler ------------------------------------------------------------------------


async def test_a_pod_that_fits_nowhere_is_unschedulable_until_room_is_freed(
    cluster: ControllerCluster,
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    await kube.create(
        JOBS,
        k8s.job(
            "full",
            parallelism=2,
            completions=2,
            template=cluster.template("full", gpus=8),
            suspend=False,
            backoffLimit=6,
        ),
        namespace=ns,
    )
    await cluster.wait(lambda: n_running(cluster, "full", 2), "both nodes full")
    await kube.create(PODS, cluster.pod("waiting", gpus=8), namespace=ns)

    async def unschedulable() -> JsonObject | None:
        stored = await kube.get(PODS, "waiting", namespace=ns)
        cond = condition(stored, "PodScheduled")
        return cond if cond and cond.get("reason") == "Unschedulable" else None

    cond = await cluster.wait(unschedulable, "PodScheduled=False, Unschedulable")
    assert cond["status"] == "False"
    message = str(cond["message"])
    assert message.startswith("0/"), message
    assert " nodes are available: " in message, message
    assert f"{len(cluster.nodes)} Insufficient nvidia.com/gpu" in message, message

    await kube.delete(JOBS, "full", namespace=ns, propagation="Background")
    await cluster.wait(lambda: n_running(cluster, "waiting", 1), "waiting scheduled and running")
    stored = await kube.get(PODS, "waiting", namespace=ns)
    scheduled = condition(stored, "PodScheduled")
    assert scheduled is not None, stored["status"]
    assert scheduled["status"] == "True", scheduled
