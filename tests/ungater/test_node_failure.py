"""Node failures with the whole pipeline: watcher, topology-cache, admission and ungater.

Nodes holding slots of an admitted Job are deleted or go NotReady; the ungater asks admission
for replacement slots inside the Job's required rack, and releases the replacement pods the
Job controller creates there. Without room in the rack the Job is evicted whole, re-queued and
admitted again elsewhere.
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import NODES
from tidegate.model import Admitted, Released, ReplaceRequested
from tidegate.sim import SimSettings

from .conftest import Env, environment, gated, start_pipeline

RACK = "tidegate.io/rack"
HOST = "kubernetes.io/hostname"


@pytest.fixture
async def pipeline(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    """The simulated cluster (time 100× faster, so the 300 s not-ready toleration is 3 s) with
    every service but preemption, and the queue ``q``."""
    settings = SimSettings(nodes="1x2x4x8gpu", time_scale=0.01)
    async with environment(tmp_path, nats_url, cluster_id, settings) as env:
        # The default 1 s batch window, not the suite's 50 ms: the test's two node failures
        # must reach the ungater inside one window to be asked for in one request, and on a
        # loaded machine the watcher can publish them more than 50 ms apart.
        await start_pipeline(env, replace_retry_seconds=5.0, batch_window_seconds=1.0)
        yield env


async def running_pods(env: Env, job: str, count: int) -> list[dict[str, Any]] | None:
    """The Job's live running pods, once there are exactly ``count``."""
    pods = [
        p
        for p in await env.pods(f"job-name={job}")
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return pods if len(pods) == count else None


async def test_pods_on_failed_nodes_are_replaced_inside_the_required_rack(pipeline: Env) -> None:
    env = pipeline
    # The pods lost with the nodes are failures to the Job controller (pod GC, the taint
    # manager): counted per index their replacements wait 10 s, counted for the whole Job
    # 80 s (4 failures).
    await env.job(
        "train",
        4,
        gpus=4,
        job_annotations={"tidegate.io/topology-required": RACK},
        backoff_limit_per_index=6,
    )
    first = await env.until_async(
        lambda: running_pods(env, "train", 4), within=30, what="4 running"
    )
    rack = {p["spec"]["nodeSelector"][RACK] for p in first}
    assert len(rack) == 1
    hosts = sorted({p["spec"]["nodeName"] for p in first})
    assert len(hosts) == 2  # best fit: two nodes of 8 GPUs
    (admitted,) = env.of(Admitted, "team/train")

    # One node disappears, the other goes NotReady: every slot of the Job is lost.
    await env.kube.delete(NODES, hosts[0])
    await env.kube.patch(
        NODES,
        hosts[1],
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}]}},
        subresource="status",
        patch_type="strategic",
    )

    async def replaced() -> list[dict[str, Any]] | None:
        pods = await running_pods(env, "train", 4)
        if pods is None or {p["spec"]["nodeName"] for p in pods} & set(hosts):
            return None
        return pods

    pods = await env.until_async(replaced, within=40, what="4 replacements running")
    assert {p["spec"]["nodeSelector"][RACK] for p in pods} == rack
    requests = env.of(ReplaceRequested, "team/train")
    assert requests, "the ungater asked admission for replacements"
    assert set(requests[-1].nodes) == set(hosts)
    assert requests[0].admitted_sequence == admitted.sequence
    replacements = [a for a in env.of(Admitted, "team/train") if a.replaces is not None]
    assert replacements[-1].replaces == admitted.sequence
    domains = replacements[-1].assignments["main"].domains
    assert sum(d.count for d in domains) == 4
    assert not {d.values[-1] for d in domains} & set(hosts)
    events = await env.until_async(
        lambda: has_reasons(env, "train", {"Replaced"}), what="Replaced event"
    )
    assert "slots lost to failed nodes moved" in events["Replaced"]["message"]


async def test_without_room_in_the_rack_the_gang_is_evicted_and_admitted_again(
    pipeline: Env,
) -> None:
    env = pipeline
    await env.job("wide", 4, gpus=8, job_annotations={"tidegate.io/topology-required": RACK})
    first = await env.until_async(lambda: running_pods(env, "wide", 4), within=30, what="4 running")
    (rack,) = {p["spec"]["nodeSelector"][RACK] for p in first}
    uids = {p["metadata"]["uid"] for p in first}
    lost = first[0]["spec"]["nodeName"]
    await env.kube.delete(NODES, lost)  # the rack has no other free node: no room

    async def elsewhere() -> list[dict[str, Any]] | None:
        pods = await running_pods(env, "wide", 4)
        if pods is None or {p["metadata"]["uid"] for p in pods} & uids:
            return None
        return pods

    pods = await env.until_async(elsewhere, within=40, what="the gang running again")
    assert {p["spec"]["nodeSelector"][RACK] for p in pods} != {rack}
    evicted = [r for r in env.of(Released, "team/wide") if r.evict_pods]
    assert evicted
    assert evicted[0].reason == "Evicted"
    assert "no room for 1 replacement pods" in evicted[0].message
    events = await env.until_async(
        lambda: has_reasons(env, "wide", {"Evicted"}), what="Evicted event"
    )
    assert events["Evicted"]["type"] == "Warning"
    # Every old pod was evicted (the ones on healthy nodes too): none is left running.
    for pod in await env.pods("job-name=wide"):
        if pod["metadata"]["uid"] in uids:
            assert pod["metadata"].get("deletionTimestamp") or pod["status"]["phase"] != "Running"
    assert not any(gated(p) for p in pods)


async def has_reasons(env: Env, name: str, wanted: set[str]) -> dict[str, dict[str, Any]] | None:
    """Events about ``name`` by reason, once all ``wanted`` exist."""
    events = await env.events(name)
    return events if wanted <= set(events) else None
