"""An upgrade of the chart never runs two instances of a single writer at once.

The watcher and the topology-cache each publish one view of the cluster to the bus and hold no
lease: two of them at once (the old pod still draining while the new one starts) publish over
each other. Their Deployments, as the chart renders them, are rolled on the simulated cluster
(whose Deployment controller paces ``Recreate`` and ``RollingUpdate`` as kube-controller-manager
does) by the change an upgrade makes (the settings checksum), and every pod event is recorded:
no old pod, Terminating ones included, may exist beside a new one. The same Deployment with the
default rolling update shows that the check catches an overlap.
"""

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidegate.kube import DEPLOYMENTS, NAMESPACES, PODS, Informer, KubeEvent, KubeSettings, connect
from tidegate.sim import SimCluster, SimSettings

from .conftest import NAMESPACE, Manifest, Render

SINGLE_WRITERS = ("watcher", "topology-cache")
HASH = "pod-template-hash"

PodEvent = tuple[str, str, str, str]
"""(event type, pod name, pod-template-hash, phase)."""
ENDED = ("Succeeded", "Failed")


def _deployment(documents: list[Manifest], component: str) -> Manifest:
    (found,) = (
        d
        for d in documents
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    )
    return copy.deepcopy(found)


def overlaps(events: list[PodEvent], old: str) -> list[str]:
    """Moments, replayed from pod watch events, at which a pod of template hash ``old`` whose
    containers may still run (Terminating ones included, until it has ended or is gone)
    existed beside a pod of another hash."""
    live: dict[str, str] = {}
    found = []
    for kind, name, template, phase in events:
        if kind == "DELETED" or phase in ENDED:
            live.pop(name, None)
        else:
            live[name] = template
        hashes = set(live.values())
        if old in hashes and len(hashes) > 1:
            found.append(f"{kind} {name}: {sorted(live.items())}")
    return found


def test_the_overlap_check_fires_on_a_hand_made_overlap() -> None:
    events = [("ADDED", "a", "1", "Running"), ("ADDED", "b", "2", "Pending")]
    assert overlaps([*events, ("DELETED", "a", "1", "Running")], "1") == [
        "ADDED b: [('a', '1'), ('b', '2')]"
    ]
    ended = [("MODIFIED", "a", "1", "Failed"), ("ADDED", "b", "2", "Pending")]
    assert overlaps([events[0], *ended], "1") == []


async def _roll(deployment: Manifest, tmp_path: Path, *, until_seconds: float = 60.0) -> list[str]:
    """Create ``deployment`` on a simulated cluster, wait for its pod to run, change its
    template as an upgrade does, and return the overlaps seen until the new pod runs alone."""
    settings = SimSettings(nodes="1x1x2x8gpu", time_scale=0.05)
    async with SimCluster.running(settings) as sim:
        kube_settings = KubeSettings(
            source="kubeconfig", kubeconfig=sim.write_kubeconfig(tmp_path / "sim.kubeconfig")
        )
        async with await connect(kube_settings) as kube:
            await kube.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            await kube.create(DEPLOYMENTS, deployment, namespace=NAMESPACE)
            selector = ",".join(
                f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
            )

            async def pods() -> list[dict[str, Any]]:
                listed = await kube.list_objects(PODS, namespace=NAMESPACE, label_selector=selector)
                return list(listed.items)

            async def until(check: Callable[[list[dict[str, Any]]], bool], what: str) -> None:
                deadline = asyncio.get_running_loop().time() + until_seconds
                while not check(await pods()):
                    if asyncio.get_running_loop().time() > deadline:
                        pytest.fail(f"{what} within {until_seconds}s: {await pods()}")
                    await asyncio.sleep(0.05)

            def running(items: list[dict[str, Any]]) -> bool:
                return [p["status"].get("phase") for p in items] == ["Running"]

            await until(running, "one pod running")
            (first,) = await pods()
            old = first["metadata"]["labels"][HASH]
            events: list[PodEvent] = []
            informer = Informer(kube, PODS, namespace=NAMESPACE, label_selector=selector)

            async def follow() -> None:
                async for item in informer:
                    if isinstance(item, KubeEvent):
                        meta = item.obj["metadata"]
                        phase = item.obj.get("status", {}).get("phase", "")
                        events.append((item.type, meta["name"], meta["labels"][HASH], phase))

            watching = asyncio.create_task(follow())
            try:
                await informer.wait_synced()
                await kube.patch(
                    DEPLOYMENTS,
                    deployment["metadata"]["name"],
                    {"spec": {"template": {"metadata": {"annotations": {"checksum/config": "2"}}}}},
                    namespace=NAMESPACE,
                )

                def renewed(items: list[dict[str, Any]]) -> bool:
                    return running(items) and items[0]["metadata"]["labels"][HASH] != old

                await until(renewed, "the new pod running alone")
                await asyncio.sleep(0.5)  # the watch delivers the last events
            finally:
                watching.cancel()
            return overlaps(events, old)


@pytest.mark.slow(20)
@pytest.mark.parametrize("component", SINGLE_WRITERS)
async def test_an_upgrade_never_runs_an_old_and_a_new_single_writer_at_once(
    render: Render, component: str, tmp_path: Path
) -> None:
    deployment = _deployment(render({}), component)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert await _roll(deployment, tmp_path) == []


@pytest.mark.slow(10)
async def test_a_rolling_update_would_run_both(render: Render, tmp_path: Path) -> None:
    deployment = _deployment(render({}), "watcher")
    del deployment["spec"]["strategy"]
    assert await _roll(deployment, tmp_path) != []
