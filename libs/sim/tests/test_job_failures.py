"""The simulated Job controller counts failures and backs off as kube-controller-manager does.

These rules decide how soon an evicted gang's pods come back and whether its Job fails for
good, so the simulator must not be kinder than Kubernetes: evicted pods are failures
(10 s backoff doubling per failure, ``backoffLimit``), a pod failure policy can ignore them or
fail the Job, ``backoffLimitPerIndex`` counts per index, and pods the controller deletes itself
on suspend are never counted.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.jobfailure import BackoffRecord, backoff_seconds, failure_action
from tidegate.sim.store import WatchEvent
from tidegate.testing import until

from .test_control_plane import EIGHT_GPUS, JOBS, MERGE, ONE_GPU, PODS, k8s, pods_of


def test_backoff_doubles_per_failure_up_to_ten_minutes() -> None:
    assert [backoff_seconds(n) for n in range(6)] == [0, 10, 20, 40, 80, 160]
    assert backoff_seconds(7) == 600  # 640 capped
    assert backoff_seconds(16) == 600
    record = BackoffRecord()
    record.note(failed=[100.0] * 8, succeeded=[])
    assert record.remaining(100.0) == 600
    assert record.remaining(400.0) == 300
    record.note(failed=[], succeeded=[500.0])
    assert record.remaining(500.0) == 0


def test_pod_failure_policy_rules_in_order() -> None:
    evicted = {
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 137}}},
            ],
        }
    }
    crashed = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 42}}}],
        }
    }
    policy = {
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]
        }
    }
    assert failure_action(policy, crashed) == ("FailJob", 0)
    assert failure_action(policy, evicted) == ("Ignore", 1)
    assert failure_action({}, evicted) == ("Count", None)
    not_in = {
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Count",
                    "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [42]},
                }
            ]
        }
    }
    assert failure_action(not_in, crashed) == ("Count", None)
    assert failure_action(not_in, evicted) == ("Count", 0)


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    """1 rack × 4 nodes of 8 GPUs, 100× faster than real time (the Job backoff is not)."""
    settings = SimSettings(nodes="1x1x4x8gpu", time_scale=0.01, scheduler_interval_seconds=0.01)
    async with SimCluster.running(settings) as running:
        yield running


@pytest.fixture
async def http(cluster: SimCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cluster.url) as session:
        yield session


RUNS_LONG = k8s.runs(1e6)
"""A pod that runs for a long while."""


def job_status(cluster: SimCluster, name: str) -> dict[str, Any]:
    found = cluster.store.get(("batch", "jobs"), "default", name)
    assert found is not None
    status = found.get("status", {})
    assert isinstance(status, dict)
    return status


def live(cluster: SimCluster, name: str) -> list[dict[str, Any]]:
    return [
        p  # type: ignore[misc]
        for p in pods_of(cluster, f"app={name}")
        if not p["metadata"].get("deletionTimestamp")  # type: ignore[union-attr]
        and p["status"].get("phase") not in ("Succeeded", "Failed")  # type: ignore[union-attr]
    ]


def running(cluster: SimCluster, name: str, count: int) -> list[dict[str, Any]]:
    pods = [p for p in live(cluster, name) if p["status"].get("phase") == "Running"]
    return pods if len(pods) == count else []


async def evict_all(http: aiohttp.ClientSession, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        name = pod["metadata"]["name"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
        async with http.post(f"{PODS}/{name}/eviction", json=body) as response:
            assert response.status == 201, await response.text()


def failed_condition(cluster: SimCluster, name: str) -> str | None:
    for condition in job_status(cluster, name).get("conditions", []):
        if condition["type"] == "Failed" and condition["status"] == "True":
            return str(condition["reason"])
    return None


async def test_evicted_pods_are_failures_that_back_off_and_spend_the_backoff_limit(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    await http.post(
        JOBS,
        json=k8s.job(
            "plain",
            parallelism=4,
            completions=4,
            template=k8s.template(
                labels={"app": "plain"},
                annotations=RUNS_LONG,
                containers=EIGHT_GPUS,
                restartPolicy="Never",
            ),
        ),
    )
    first = await until(lambda: running(cluster, "plain", 4), within=10)
    marked: set[str] = set()

    def seen(event: WatchEvent) -> None:
        for condition in event.obj.get("status", {}).get("conditions", []):  # type: ignore[union-attr]
            if condition.get("reason") == "EvictionByEvictionAPI":
                marked.add(str(event.obj["metadata"]["name"]))  # type: ignore[index]

    unsubscribe = cluster.store.subscribe(("", "pods"), seen)
    await evict_all(http, first)
    unsubscribe()
    # The Eviction API marks each pod DisruptionTarget before deleting it.
    assert marked == {p["metadata"]["name"] for p in first}
    await until(lambda: job_status(cluster, "plain").get("failed") == 4, within=10)
    # 4 failures: 80 s before any replacement (the simulator replaced them at once before).
    for _ in range(20):
        assert not live(cluster, "plain"), "replaced during the pod failure backoff"
        await asyncio.sleep(0.1)
    assert failed_condition(cluster, "plain") is None  # 4 of backoffLimit 6 spent


async def test_a_pod_failure_policy_ignoring_disruptions_spends_no_limit_but_still_backs_off(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    ignore = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    await http.post(
        JOBS,
        json=k8s.job(
            "tolerant",
            parallelism=2,
            completions=2,
            template=k8s.template(
                labels={"app": "tolerant"},
                annotations=RUNS_LONG,
                containers=EIGHT_GPUS,
                restartPolicy="Never",
            ),
            backoffLimit=0,
            podFailurePolicy=ignore,
        ),
    )
    first = await until(lambda: running(cluster, "tolerant", 2), within=10)
    evicted_at = time.monotonic()
    await evict_all(http, first)
    replaced = await until(lambda: running(cluster, "tolerant", 2), within=40)
    waited = time.monotonic() - evicted_at
    # Two ignored failures still feed the backoff: 20 s (kubernetes/kubernetes#130881).
    assert waited >= 19, f"replaced after {waited:.1f} s"
    assert {p["metadata"]["uid"] for p in replaced}.isdisjoint(p["metadata"]["uid"] for p in first)
    assert failed_condition(cluster, "tolerant") is None
    assert job_status(cluster, "tolerant").get("failed", 0) == 0


async def test_pods_deleted_by_suspending_the_job_are_not_failures(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    await http.post(
        JOBS,
        json=k8s.job(
            "queued",
            parallelism=4,
            completions=4,
            template=k8s.template(
                labels={"app": "queued"},
                annotations=RUNS_LONG,
                containers=EIGHT_GPUS,
                restartPolicy="Never",
            ),
            backoffLimit=0,
        ),
    )
    await until(lambda: running(cluster, "queued", 4), within=10)
    for suspend in (True, False):
        async with http.patch(
            f"{JOBS}/queued", data=json.dumps({"spec": {"suspend": suspend}}), headers=MERGE
        ) as response:
            assert response.status == 200
        if suspend:
            await until(lambda: not live(cluster, "queued"), within=10)
    # Back at once: no failure was counted, so no backoff and no BackoffLimitExceeded.
    await until(lambda: running(cluster, "queued", 4), within=5)
    assert job_status(cluster, "queued").get("failed", 0) == 0
    assert failed_condition(cluster, "queued") is None


async def test_fail_job_rule_and_per_index_limits(
    cluster: SimCluster, http: aiohttp.ClientSession
) -> None:
    fail_on_42 = {
        "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
    }
    body = k8s.job(
        "fatal",
        parallelism=1,
        completions=1,
        template=k8s.template(
            labels={"app": "fatal"},
            annotations=RUNS_LONG,
            containers=EIGHT_GPUS,
            restartPolicy="Never",
        ),
        podFailurePolicy=fail_on_42,
    )
    body["spec"]["template"] = k8s.template(
        labels={"app": "fatal"},
        annotations=k8s.runs(1, exit_code=42),
        containers=ONE_GPU,
        restartPolicy="Never",
    )
    await http.post(JOBS, json=body)
    assert await until(lambda: failed_condition(cluster, "fatal"), within=10) == "PodFailurePolicy"

    body = k8s.job(
        "perindex",
        parallelism=2,
        completions=2,
        template=k8s.template(
            labels={"app": "perindex"},
            annotations=RUNS_LONG,
            containers=EIGHT_GPUS,
            restartPolicy="Never",
        ),
        completionMode="Indexed",
        backoffLimitPerIndex=0,
        maxFailedIndexes=0,
    )
    body["spec"]["template"] = k8s.template(
        labels={"app": "perindex"},
        annotations=k8s.runs(1, exit_code=3),
        containers=ONE_GPU,
        restartPolicy="Never",
    )
    await http.post(JOBS, json=body)
    reason = await until(lambda: failed_condition(cluster, "perindex"), within=10)
    assert reason == "MaxFailedIndexesExceeded"
    assert job_status(cluster, "perindex")["failedIndexes"] in ("0", "1", "0-1")
    counts = {
        p["metadata"]["annotations"].get("batch.kubernetes.io/job-index-failure-count")  # type: ignore[index,union-attr]
        for p in pods_of(cluster, "app=perindex")
    }
    assert counts == {"0"}
