"""Released pods the scheduler finds no room for, with the whole pipeline.

Admission placed a gang by a capacity view that was behind: pods tidegate does not manage had
filled the node meanwhile. The released pod stays Pending (``PodScheduled=False``,
``Unschedulable``); after ``unschedulable_seconds`` the ungater asks admission to place its
slot again away from that node, evicts the stranded pod once the slot moved, and releases the
pod the Job controller re-creates into the new slot.
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import NODES, PODS
from tidegate.model import Admitted, ReplaceRequested
from tidegate.sim import SimSettings
from tidegate.testing import bound_pod

from .conftest import Env, environment, start_pipeline, start_topology_cache
from .test_node_failure import has_reasons, running_pods

RACK = "tidegate.io/rack"
TENANT = {"nvidia.com/gpu": "8"}
"""What each pod no queue names takes of its node: all 8 GPUs."""
"""What each pod no queue names takes of its node: all 8 GPUs."""


@pytest.fixture
async def pipeline(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    """Every service but preemption; a released pod is judged stuck after 1 s."""
    settings = SimSettings(nodes="1x2x4x8gpu", time_scale=0.01)
    async with environment(tmp_path, nats_url, cluster_id, settings) as env:
        await start_pipeline(env, unschedulable_seconds=1.0, replace_retry_seconds=5.0)
        yield env


async def test_a_slot_the_scheduler_finds_full_is_placed_again_and_its_pod_runs(
    pipeline: Env,
) -> None:
    env = pipeline
    nodes = sorted(
        (dict(n) for n in (await env.kube.list_objects(NODES)).items),
        key=lambda n: n["metadata"]["name"],
    )
    racks: dict[str, list[str]] = {}
    for node in nodes:
        racks.setdefault(node["metadata"]["labels"][RACK], []).append(node["metadata"]["name"])
    free = {names[-1] for names in racks.values()}  # one node of each rack stays free

    # The capacity view stops moving while the other tenants fill every other node.
    await env.stop("topology-cache")
    full = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] not in free]
    for index, node in enumerate(full):
        await env.create(PODS, bound_pod(f"tenant-{index}", node, TENANT))

    async def tenants_running() -> bool | None:
        pods = await env.pods()
        running = [p for p in pods if p["metadata"]["name"].startswith("tenant-")]
        return len([p for p in running if p["status"].get("phase") == "Running"]) == len(full)

    await env.until_async(tenants_running, within=30, what="the tenants running")

    await env.job("train", 1, gpus=8, job_annotations={"tidegate.io/topology-required": RACK})
    await env.until(lambda: env.of(Admitted, "team/train"), within=30, what="the Job admitted")
    admitted = env.of(Admitted, "team/train")[0]
    (domain,) = admitted.assignments["main"].domains
    stale = domain.values[-1]
    assert stale in full, f"admission placed by its stale view on a node tenants filled: {stale}"
    (first,) = await env.until_async(
        lambda: _unschedulable(env, "train"), within=30, what="the pod unschedulable"
    )

    # The view catches up; the stuck slot goes to the free node of its rack.
    await start_topology_cache(env)
    pods = await env.until_async(
        lambda: running_pods(env, "train", 1), within=40, what="the pod running elsewhere"
    )
    assert pods[0]["spec"]["nodeName"] in free
    assert pods[0]["metadata"]["uid"] != first["metadata"]["uid"]
    requests = [r for r in env.of(ReplaceRequested, "team/train") if r.cause == "Unschedulable"]
    assert requests, "the ungater asked admission to place the stuck slot again"
    assert requests[0].admitted_sequence == admitted.sequence
    assert requests[0].nodes == [stale]
    assert requests[0].lost["main"][0].values[-1] == stale
    moved = [a for a in env.of(Admitted, "team/train") if a.replaces is not None]
    assert moved[0].replace_cause == "Unschedulable"
    assert moved[0].replaces == admitted.sequence
    assert [d.values[-1] for d in moved[-1].assignments["main"].domains] == [
        pods[0]["spec"]["nodeName"]
    ]
    events = await env.until_async(
        lambda: has_reasons(env, "train", {"Replaced"}), what="Replaced event"
    )
    assert "slots the scheduler found no room in moved" in events["Replaced"]["message"]
    # The stranded pod was evicted, never left Pending beside its replacement.
    left = [
        p for p in await env.pods("job-name=train") if not p["metadata"].get("deletionTimestamp")
    ]
    assert [p["metadata"]["uid"] for p in left] == [pods[0]["metadata"]["uid"]]


async def _unschedulable(env: Env, job: str) -> list[dict[str, Any]] | None:
    """The Job's pods once one is released and marked unschedulable by the scheduler."""
    pods = await env.pods(f"job-name={job}")
    for pod in pods:
        for condition in pod.get("status", {}).get("conditions", []):
            if condition.get("type") == "PodScheduled" and condition.get("reason") == (
                "Unschedulable"
            ):
                return [pod]
    return None
