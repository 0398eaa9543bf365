"""Released pods the scheduler finds no room for, with the whole pipeline.

Admission placed a gang by a capacity view that was behind: pods tidegate does not manage had
filled the node meanwhile. The released pod stays Pending (``PodScheduled=False``,
``Unschedulable``); after ``unschedulable_seconds`` the ungater asks admission to place its
slot again away from that node, evicts the stranded pod once the slot moved, and releases the
pod the Job controller re-creates into the new slot.
"""

import time
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
    assert moved[0].unschedulable_moves == 1
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


async def test_each_further_move_waits_twice_as_long(pipeline: Env) -> None:
    """Every node is full and the capacity view stays stale, so each move lands on another
    full node: the moves go on, each after twice the previous wait (1 s, 2 s, 4 s, 8 s)."""
    env = pipeline
    await env.stop("topology-cache")
    names = sorted(n["metadata"]["name"] for n in (await env.kube.list_objects(NODES)).items)
    for index, node in enumerate(names):
        await env.create(PODS, bound_pod(f"tenant-{index}", node, TENANT))

    async def tenants_running() -> bool:
        pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("tenant-")]
        return len([p for p in pods if p["status"].get("phase") == "Running"]) == len(names)

    await env.until_async(tenants_running, within=30, what="the tenants running")
    await env.job("train", 1, gpus=8, job_annotations={"tidegate.io/topology-required": RACK})

    def requests() -> list[ReplaceRequested]:
        return [r for r in env.of(ReplaceRequested, "team/train") if r.cause == "Unschedulable"]

    seen_at: list[float] = []
    for count in (1, 2, 3, 4):
        await env.until(lambda n=count: len(requests()) >= n, within=40, what=f"move {count} asked")
        seen_at.append(time.monotonic())
    moves = [a.unschedulable_moves for a in env.of(Admitted, "team/train")]
    assert moves[:4] == [0, 1, 2, 3], moves
    # Request k+1 comes at least the k-th wait after the move that answered request k (less
    # up to 1 s: the scheduler's mark has whole seconds); without the doubling every gap is
    # about 2 s.
    assert seen_at[3] - seen_at[2] >= 6.0, seen_at
    events = await env.until_async(
        lambda: has_reasons(env, "train", {"Replaced"}), what="Replaced event"
    )
    assert "found no room in moved (move " in events["Replaced"]["message"]


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
