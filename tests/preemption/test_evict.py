"""The evictor against the simulated API server over HTTP: eviction by UID, idempotence, and
abort mode's suspension and mark."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.bus import BusSettings, Lease, LeaseLost, LeaseSettings
from tidegate.bus import connect as connect_bus
from tidegate.kube import JOBS, NAMESPACES, PDBS, PODS, KubeClient, KubeSettings, NotFound
from tidegate.kube import connect as connect_kube
from tidegate.model.ledger import PodRef, VictimRecord
from tidegate.model.names import PREEMPTED_BY_ANNOTATION, REQUEUE_ANNOTATION, RESUME_ANNOTATION
from tidegate.preemption.evict import (
    AbortFailed,
    EvictionFailed,
    EvictionRefused,
    EvictionSettings,
    Evictor,
)
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing.faultproxy import Refuse, kube_fault_proxy

NAMESPACE = "team"


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeClient]:
    """A client of a bare simulated API server (no controllers), with namespace ``team``."""
    settings = SimSettings(nodes="1x1x2x8gpu", scheduler=False, kubelet=False, controllers=False)
    async with SimCluster.running(settings) as sim:
        client = await connect_kube(
            KubeSettings(kubeconfig=sim.write_kubeconfig(tmp_path / "kc"), max_attempts=1)
        )
        await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        try:
            yield client
        finally:
            await client.close()


def train_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "containers": [{"name": "main", "image": "trainer:1"}],
                    "restartPolicy": "Never",
                }
            },
        },
    }


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "block0-rack0-node0",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "trainer:1"}],
        },
    }


def ref(obj: dict[str, Any]) -> PodRef:
    meta = obj["metadata"]
    return PodRef(namespace=NAMESPACE, name=meta["name"], uid=meta["uid"])


async def exists(kube: KubeClient, name: str) -> dict[str, Any] | None:
    try:
        return dict(await kube.get(PODS, name, namespace=NAMESPACE))
    except NotFound:
        return None


async def test_a_pod_is_evicted_once_and_a_replacement_of_the_same_name_never(
    kube: KubeClient,
) -> None:
    outcomes: list[str] = []
    evictor = Evictor(kube, EvictionSettings(), observe=outcomes.append)
    old = ref(dict(await kube.create(PODS, pod("worker-0"), namespace=NAMESPACE)))
    assert await evictor.evict(old) == "evicted"
    assert await exists(kube, "worker-0") is None
    restarted = Evictor(kube, EvictionSettings(), observe=outcomes.append)  # remembers nothing
    assert await restarted.evict(old) == "gone"  # evicting again is a no-op

    replacement = dict(await kube.create(PODS, pod("worker-0"), namespace=NAMESPACE))
    assert await restarted.evict(old) == "gone"  # the old UID: the new pod stays
    still = await exists(kube, "worker-0")
    assert still is not None
    assert still["metadata"]["uid"] == replacement["metadata"]["uid"]
    assert outcomes == ["evicted", "gone", "gone"]


async def test_a_pod_evicted_once_is_not_evicted_again_while_it_terminates(
    kube: KubeClient,
) -> None:
    """A retried preemption (its other pods held by a budget) asks the same evictor again:
    the pod it evicted is still terminating (no kubelet here finishes it), and the API server
    would accept and count a second eviction; the evictor sends none."""
    outcomes: list[str] = []
    evictor = Evictor(kube, EvictionSettings(), observe=outcomes.append)
    slow = pod("worker-0")
    slow["spec"]["terminationGracePeriodSeconds"] = 30
    evicted = ref(dict(await kube.create(PODS, slow, namespace=NAMESPACE)))
    assert await evictor.evict(evicted) == "evicted"
    terminating = await exists(kube, "worker-0")
    assert terminating is not None
    assert terminating["metadata"].get("deletionTimestamp")

    assert await evictor.evict(evicted) == "gone"
    assert outcomes == ["evicted"]  # every request the evictor sends is observed
    assert await Evictor(kube, EvictionSettings(), observe=outcomes.append).evict(evicted) == (
        "evicted"
    )  # another process asks, and the server accepts it again


async def test_abort_suspends_and_marks_the_job_then_evicts_its_pods(kube: KubeClient) -> None:
    job = await kube.create(JOBS, train_job(), namespace=NAMESPACE)
    pods = [
        ref(dict(await kube.create(PODS, pod(f"train-{i}"), namespace=NAMESPACE))) for i in range(2)
    ]
    victim = VictimRecord(
        key=f"{NAMESPACE}/train",
        uid=str(job["metadata"]["uid"]),
        mode="abort",
        owner_kind="Job",
        pods=pods,
    )
    results = await Evictor(kube, EvictionSettings()).preempt(
        victim, pods, preemptor=f"{NAMESPACE}/serve"
    )
    assert results == {"train-0": "evicted", "train-1": "evicted"}
    stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["annotations"][PREEMPTED_BY_ANNOTATION] == f"{NAMESPACE}/serve"
    # Suspended by tidegate for good: never taken for a Job queued for tidegate to resume.
    assert stored["metadata"]["annotations"][RESUME_ANNOTATION] == "manual"
    assert [await exists(kube, p.name) for p in pods] == [None, None]

    # The Job gone meanwhile (a restarted preemption) is not an error either.
    await kube.delete(JOBS, "train", namespace=NAMESPACE)
    again = await Evictor(kube, EvictionSettings()).preempt(
        victim, pods, preemptor=f"{NAMESPACE}/serve"
    )
    assert again == {"train-0": "gone", "train-1": "gone"}


async def test_a_restarted_job_victim_is_suspended_for_tidegate_not_evicted(
    kube: KubeClient,
) -> None:
    """Restart mode re-queues a Job by suspending it (its controller then deletes the pods
    without counting failures): one merge patch with the uid as precondition, the requeue
    mark, ``tidegate.io/resume`` removed; no pod is evicted by tidegate."""
    body = train_job()
    body["metadata"]["annotations"] = {RESUME_ANNOTATION: "manual"}
    job = await kube.create(JOBS, body, namespace=NAMESPACE)
    pods = [
        ref(dict(await kube.create(PODS, pod(f"train-{i}"), namespace=NAMESPACE))) for i in range(2)
    ]
    victim = VictimRecord(
        key=f"{NAMESPACE}/train", uid=job["metadata"]["uid"], mode="restart", owner_kind="Job"
    )
    outcomes: list[str] = []
    evictor = Evictor(kube, EvictionSettings(), observe=outcomes.append)
    results = await evictor.preempt(victim, pods, preemptor=f"{NAMESPACE}/serve")
    assert results == {"train-0": "evicted", "train-1": "evicted"}
    assert outcomes == ["requeued", "requeued"]
    stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
    assert stored["spec"]["suspend"] is True
    annotations = stored["metadata"]["annotations"]
    assert annotations[REQUEUE_ANNOTATION] == f"preempted by {NAMESPACE}/serve"
    assert RESUME_ANNOTATION not in annotations
    assert PREEMPTED_BY_ANNOTATION not in annotations
    # No controller here: the pods are still there, tidegate did not delete them.
    assert all([await exists(kube, p.name) for p in pods])
    # Nothing live any more (a retry after the suspension took effect): nothing is written.
    assert await evictor.preempt(victim, [], preemptor=f"{NAMESPACE}/serve") == {}

    # A Job re-created under the same name is never suspended for the old one.
    await kube.delete(JOBS, "train", namespace=NAMESPACE)
    await kube.create(JOBS, train_job(), namespace=NAMESPACE)
    again = await evictor.preempt(victim, pods, preemptor=f"{NAMESPACE}/serve")
    assert again == {"train-0": "gone", "train-1": "gone"}
    fresh = await kube.get(JOBS, "train", namespace=NAMESPACE)
    assert not fresh["spec"].get("suspend")


async def test_a_budget_refusing_a_job_victims_pod_holds_its_suspension(
    kube: KubeClient,
) -> None:
    """The dry-run eviction of every pod comes first: a budget that refuses one leaves the Job
    running (not suspended) and names the pod, as a refused eviction would."""
    job = await kube.create(JOBS, train_job(), namespace=NAMESPACE)
    body = pod("train-0")
    body["metadata"]["labels"] = {"app": "train"}
    created = dict(await kube.create(PODS, body, namespace=NAMESPACE))
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    await kube.patch(PODS, "train-0", {"status": status}, namespace=NAMESPACE, subresource="status")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-it"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    await kube.create(PDBS, budget, namespace=NAMESPACE)
    victim = VictimRecord(
        key=f"{NAMESPACE}/train", uid=job["metadata"]["uid"], mode="restart", owner_kind="Job"
    )
    with pytest.raises(EvictionRefused) as refused:
        await Evictor(kube, EvictionSettings()).preempt(
            victim, [ref(created)], preemptor=f"{NAMESPACE}/serve"
        )
    assert refused.value.pods == ["train-0"]
    stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
    assert not stored["spec"].get("suspend")
    assert await exists(kube, "train-0") is not None


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        ("Deployment", "1 of 1 pods of team/train not evicted"),
        ("Job", "cannot suspend the Job of team/train to re-queue it"),
    ],
)
async def test_an_unreachable_api_server_fails_the_eviction_for_a_later_retry(
    tmp_path: Path, kind: str, failure: str
) -> None:
    async with SimCluster.running(SimSettings(nodes=None)) as sim:
        path = sim.write_kubeconfig(tmp_path / "kc")
    # The server is gone now: every request is refused.
    kube = await connect_kube(KubeSettings(kubeconfig=path, max_attempts=1))
    try:
        evictor = Evictor(kube, EvictionSettings(retry_seconds=0.2, retry_delay_seconds=0.05))
        victim = VictimRecord(key=f"{NAMESPACE}/train", uid="u", mode="restart", owner_kind=kind)
        with pytest.raises(EvictionFailed, match=failure):
            await evictor.preempt(
                victim, [PodRef(namespace=NAMESPACE, name="p", uid="x")], preemptor="team/s"
            )
    finally:
        await kube.close()


async def test_an_expired_lease_evicts_nothing(
    kube: KubeClient, nats_url: str, cluster_id: str
) -> None:
    """The API server cannot check a fencing token: the evictor's guard (the service passes
    ``Lease.ensure_held``) stops every eviction once the lease may have expired, as after a
    pause (SIGSTOP) past the TTL."""
    bus = await connect_bus(BusSettings(servers=(nats_url,), wait_for_server_seconds=5))
    try:
        await bus.ensure_layout(cluster_id)
        lease = Lease(
            bus,
            cluster=cluster_id,
            settings=LeaseSettings(name="preemption", holder="paused", ttl_seconds=1),
        )
        assert await lease.try_acquire()
        evictor = Evictor(kube, EvictionSettings(), guard=lease.ensure_held)
        first = ref(dict(await kube.create(PODS, pod("worker-0"), namespace=NAMESPACE)))
        second = ref(dict(await kube.create(PODS, pod("worker-1"), namespace=NAMESPACE)))
        assert await evictor.evict(first) == "evicted"
        await asyncio.sleep(1.2)  # no renewal: the TTL passes
        with pytest.raises(LeaseLost):
            await evictor.evict(second)
        victim = VictimRecord(
            key=f"{NAMESPACE}/train", uid="u", mode="abort", owner_kind="Job", pods=[second]
        )
        with pytest.raises(LeaseLost):
            await evictor.preempt(victim, [second], preemptor=f"{NAMESPACE}/serve")
        assert await exists(kube, "worker-1") is not None
    finally:
        await bus.close()


async def test_a_budget_refusal_is_not_retried_and_names_the_refused_pods(
    kube: KubeClient,
) -> None:
    """Two running pods under a budget that spares one: one is evicted, the other refused with
    429; the evictor says which and why at once instead of retrying for ``retry_seconds``."""
    created = []
    for i in range(2):
        body = pod(f"guarded-{i}")
        body["metadata"]["labels"] = {"app": "guarded"}
        created.append(dict(await kube.create(PODS, body, namespace=NAMESPACE)))
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        await kube.patch(
            PODS, f"guarded-{i}", {"status": status}, namespace=NAMESPACE, subresource="status"
        )
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "spare-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await kube.create(PDBS, budget, namespace=NAMESPACE)
    pods = [ref(p) for p in created]
    # A Deployment's pods are evicted one by one (a Job or JobSet victim is re-queued instead).
    victim = VictimRecord(
        key=f"{NAMESPACE}/guarded", uid="u", mode="restart", owner_kind="Deployment"
    )
    outcomes: list[str] = []
    evictor = Evictor(
        kube,
        EvictionSettings(retry_seconds=60, concurrency=1),
        observe=outcomes.append,
    )
    with pytest.raises(EvictionRefused) as refused:
        await evictor.preempt(victim, pods, preemptor=f"{NAMESPACE}/serve")
    assert refused.value.pods == ["guarded-1"]
    assert "spare-one needs 1 healthy pods and has 1 currently" in refused.value.why
    assert sorted(outcomes) == ["evicted", "refused"]
    assert await exists(kube, "guarded-0") is None
    assert await exists(kube, "guarded-1") is not None


async def test_an_abort_the_api_server_refuses_still_evicts_every_pod(tmp_path: Path) -> None:
    """The victim's quota is released once the decision is out, so a lasting failure of the
    abort (403 on the Job's patch, from a fault proxy in front of the API server) must not
    keep its pods running: they are evicted, and :class:`AbortFailed` says the abort is left
    to retry; once the API server allows it, the retry suspends and marks the Job."""
    settings = SimSettings(nodes="1x1x2x8gpu", scheduler=False, kubelet=False, controllers=False)
    async with SimCluster.running(settings) as sim, kube_fault_proxy(sim.url) as proxy:
        kube = await connect_kube(
            KubeSettings(kubeconfig=proxy.write_kubeconfig(tmp_path / "kc"), max_attempts=1)
        )
        try:
            await kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
            job = await kube.create(JOBS, train_job(), namespace=NAMESPACE)
            pods = [
                ref(dict(await kube.create(PODS, pod(f"train-{i}"), namespace=NAMESPACE)))
                for i in range(2)
            ]
            victim = VictimRecord(
                key=f"{NAMESPACE}/train",
                uid=str(job["metadata"]["uid"]),
                mode="abort",
                owner_kind="Job",
                pods=pods,
            )
            proxy.arm("PATCH", f"/namespaces/{NAMESPACE}/jobs/train", Refuse(403), times=1000)
            evictor = Evictor(kube, EvictionSettings())
            with pytest.raises(AbortFailed, match="cannot suspend or mark the Job of team/train"):
                await evictor.preempt(victim, pods, preemptor=f"{NAMESPACE}/serve")
            assert [await exists(kube, p.name) for p in pods] == [None, None]
            stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
            assert not stored["spec"].get("suspend")
            assert proxy.injected >= 1

            proxy.disarm()
            again = await evictor.preempt(victim, pods, preemptor=f"{NAMESPACE}/serve")
            assert again == {"train-0": "gone", "train-1": "gone"}
            stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
            assert stored["spec"]["suspend"] is True
            assert stored["metadata"]["annotations"][PREEMPTED_BY_ANNOTATION] == "team/serve"
        finally:
            await kube.close()


async def test_an_abort_retried_after_the_job_was_recreated_leaves_the_new_job_alone(
    kube: KubeClient,
) -> None:
    """The abort's patch goes by uid. One by name, retried (the reconcile loop retries an
    abort that failed) after the victim's user deleted the Job and submitted it again, would
    suspend the new Job and mark it ``tidegate.io/resume: manual``: never admitted again."""
    old = await kube.create(JOBS, train_job(), namespace=NAMESPACE)
    victim = VictimRecord(
        key=f"{NAMESPACE}/train", uid=str(old["metadata"]["uid"]), mode="abort", owner_kind="Job"
    )
    await kube.delete(JOBS, "train", namespace=NAMESPACE)
    new = await kube.create(JOBS, train_job(), namespace=NAMESPACE)

    await Evictor(kube, EvictionSettings()).abort(victim, preemptor=f"{NAMESPACE}/serve")

    stored = await kube.get(JOBS, "train", namespace=NAMESPACE)
    assert stored["metadata"]["uid"] == new["metadata"]["uid"]
    assert not stored["spec"].get("suspend")
    annotations = stored["metadata"].get("annotations") or {}
    assert PREEMPTED_BY_ANNOTATION not in annotations
    assert RESUME_ANNOTATION not in annotations


async def test_an_abort_marks_a_victim_of_another_kind_only_while_it_is_the_same_object(
    kube: KubeClient,
) -> None:
    """The same for the owner kinds an abort only annotates (a bare Pod here)."""
    old = await kube.create(PODS, pod("solo"), namespace=NAMESPACE)
    victim = VictimRecord(
        key=f"{NAMESPACE}/solo",
        uid=str(old["metadata"]["uid"]),
        mode="abort",
        owner_kind="Pod",
        owner_api_version="v1",
    )
    await kube.delete(PODS, "solo", namespace=NAMESPACE, grace_seconds=0)
    await kube.create(PODS, pod("solo"), namespace=NAMESPACE)
    await Evictor(kube, EvictionSettings()).abort(victim, preemptor=f"{NAMESPACE}/serve")
    stored = await kube.get(PODS, "solo", namespace=NAMESPACE)
    assert PREEMPTED_BY_ANNOTATION not in (stored["metadata"].get("annotations") or {})
