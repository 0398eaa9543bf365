"""Simulated cluster → watcher → bus → topology-cache → capacity view, under churn.

The simulator runs the Lingjun production topology (847 GPU hosts, racks of 2 to 8 whose names
repeat under different blocks) with its scheduler, kubelets and node lifecycle. Pods are
created, finish, are deleted; nodes fail, are cordoned and removed; the watcher's pod watch
is cut and the API server's history compacted (a relist after 410 Gone); the watcher is
restarted with changes made while it is down. At the end the capacity view on the bus must
equal a recomputation from the simulator's own objects: per node, allocatable minus the
requests of its bound, non-terminal pods, and whether it is schedulable; per domain, the sums
over its schedulable nodes.
"""

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tidegate.kube import KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.model import CapacityNode
from tidegate.placement.accounting import NodeKey
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import NAMESPACES, NODES, PODS
from tidegate.testing import (
    capacity_differences,
    published_capacity,
    recompute_capacity,
    start_until,
    until,
)
from tidegate.testing.manifests import Builders
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import WatcherSettings

from .conftest import Harness

LINGJUN = Path(__file__).resolve().parents[2] / "libs/sim/tests/data/lingjun-topology.csv"
MERGE = "application/merge-patch+json"
NAMESPACE = "churn"
TOPOLOGY = "default"

k8s = Builders(server_fields=False)

pytestmark = pytest.mark.slow


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    """The Lingjun cluster, full control plane, no admission gate (pods schedule at once)."""
    settings = SimSettings(
        nodes=LINGJUN,
        admission_gate=False,
        time_scale=0.01,
        scheduler_interval_seconds=0.02,
    )
    async with SimCluster.running(settings) as cluster:
        cluster.api.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
        yield cluster


class WatcherRunner:
    """Starts and stops the watcher, as its Deployment would."""

    def __init__(self, harness: Harness, sim: SimCluster, kubeconfig: Path) -> None:
        self._harness = harness
        self._sim = sim
        self._kubeconfig = kubeconfig
        self._task: asyncio.Task[None] | None = None
        self.relists = 0
        """Relists after 410 Gone by the watchers stopped so far."""
        self._watcher: Watcher | None = None
        self._close: list[Any] = []

    async def start(self) -> None:
        kube = await connect_kube(
            KubeSettings(kubeconfig=self._kubeconfig, backoff_max_seconds=0.3)
        )
        self._close.append(kube)
        watcher = Watcher(
            bus=self._harness.bus,
            kube=kube,
            settings=WatcherSettings(
                cluster=self._harness.cluster,
                absent_retry_seconds=0.5,
                kueue_topology_version="v1alpha1",
            ),
        )
        self._watcher = watcher
        self._task = await start_until(watcher.run(), watcher.ready, within=30, what="the watcher")

    def relisted(self) -> int:
        """Relists after 410 Gone, counting the watchers stopped already."""
        current = self._watcher.stats.relists if self._watcher else {}
        return self.relists + sum(current.values())

    async def stop(self) -> None:
        if self._watcher is not None:
            self.relists += sum(self._watcher.stats.relists.values())
            self._watcher = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for kube in self._close:
            await kube.close()
        self._close.clear()


@pytest.fixture
async def watcher(
    harness: Harness, sim: SimCluster, tmp_path: Path
) -> AsyncIterator[WatcherRunner]:
    """A watcher runner, stopped before the simulator is."""
    runner = WatcherRunner(harness, sim, sim.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield runner
    finally:
        await runner.stop()


def random_pod(name: str, rng: random.Random) -> dict[str, Any]:
    """A pod of random size (cpu, GPUs), finishing on its own in three cases out of ten."""
    cpu = f"{rng.choice([100, 500, 2000])}m"
    gpus = rng.choice([0, 0, 1, 2, 4, 8])
    gpu = {"gpu": str(gpus)} if gpus else {}
    annotations = {}
    if rng.random() < 0.3:  # finishes after 0.5-2 s of wall time
        annotations["tidegate.io/sim-duration-seconds"] = str(rng.choice([50, 100, 200]))
    container = k8s.container(cpu, limits=True, **gpu)
    return k8s.pod(
        name, gated=False, annotations=annotations, containers=[container], restartPolicy="Never"
    )


def differences(sim: SimCluster, harness: Harness) -> list[str]:
    """Where the published view differs from the simulator's own objects."""
    want = recompute_capacity(sim.store, sim.levels, topology=TOPOLOGY)
    published = published_capacity(harness.capacity.values(), topology=TOPOLOGY)
    return capacity_differences(want, published)


async def until_equal(sim: SimCluster, harness: Harness, *, within: float = 30) -> None:
    def describe() -> str:
        found = differences(sim, harness)
        return f": {len(found)} differences, first: {found[:5]}"

    await until(
        lambda: not differences(sim, harness),
        within=within,
        interval=0.1,
        what="the view to equal the simulator's",
        describe=describe,
    )


async def until_scheduled(sim: SimCluster, *, within: float = 20) -> None:
    """Wait until the simulator's scheduler has bound every pod."""
    await until(
        lambda: all(p.get("spec", {}).get("nodeName") for p in sim.store.objects(PODS.key)),
        within=within,
        interval=0.05,
        what="the simulator's scheduler to bind every pod",
    )


def set_ready(sim: SimCluster, node: str, ready: bool) -> None:
    condition = {"type": "Ready", "status": "True" if ready else "False", "reason": "Test"}
    sim.api.patch(
        NODES, None, node, {"status": {"conditions": [condition]}}, MERGE, subresource="status"
    )


def delete_pod(sim: SimCluster, name: str, *, now: bool) -> None:
    options = {"gracePeriodSeconds": 0} if now else {}
    with contextlib.suppress(Exception):  # already gone (finished and collected, or evicted)
        sim.api.delete(PODS, NAMESPACE, name, options)


async def test_capacity_view_equals_the_simulators_own_state_after_churn(
    harness: Harness, sim: SimCluster, watcher: WatcherRunner
) -> None:
    rng = random.Random(5)
    await watcher.start()
    await harness.start_cache()
    nodes = sorted(n["metadata"]["name"] for n in sim.store.objects(NODES.key))
    assert len(nodes) == 847

    for i in range(300):
        sim.api.create(PODS, NAMESPACE, random_pod(f"p{i}", rng))
    await until_scheduled(sim)
    await until_equal(sim, harness)
    bound = [p for p in sim.store.objects(PODS.key) if p.get("spec", {}).get("nodeName")]
    assert len(bound) == 300

    # Deletions (graceful and immediate), more pods, failing, cordoned and removed nodes.
    for i in rng.sample(range(300), 60):
        delete_pod(sim, f"p{i}", now=rng.random() < 0.5)
    for i in range(300, 340):
        sim.api.create(PODS, NAMESPACE, random_pod(f"p{i}", rng))
    busy = sorted({p["spec"]["nodeName"] for p in bound})
    failed, cordoned, removed = busy[:4], busy[4:6], busy[6:9]
    for name in failed:
        set_ready(sim, name, False)
    for name in cordoned:
        sim.api.patch(NODES, None, name, {"spec": {"unschedulable": True}}, MERGE)
    for name in removed:
        sim.api.delete(NODES, None, name, {})
    await until_equal(sim, harness)

    # A relist after 410 Gone: the pod watch is cut and kept from reconnecting while pods are
    # deleted and the API server's history is compacted.
    async with aiohttp.ClientSession() as http:
        fault = {"code": 500, "count": 10_000, "method": "GET", "pathPrefix": "/api/v1/pods"}
        async with http.post(f"{sim.url}/sim/v1/faults", json=fault) as response:
            assert response.status == 201
        sim.api.store.close_watchers()
        for i in range(340, 360):
            sim.api.create(PODS, NAMESPACE, random_pod(f"p{i}", rng))
        for i in rng.sample(range(340), 30):
            delete_pod(sim, f"p{i}", now=True)
        async with http.post(f"{sim.url}/sim/v1/compact") as response:
            assert response.status == 200
        await asyncio.sleep(0.3)
        async with http.delete(f"{sim.url}/sim/v1/faults") as response:
            assert response.status == 200
    await until_equal(sim, harness)
    assert watcher.relisted() >= 1

    # A watcher restart, with changes while it is down.
    await watcher.stop()
    set_ready(sim, failed[0], True)
    sim.api.delete(NODES, None, busy[9], {})
    for i in rng.sample(range(360), 30):
        delete_pod(sim, f"p{i}", now=True)
    for i in range(360, 380):
        sim.api.create(PODS, NAMESPACE, random_pod(f"p{i}", rng))
    await asyncio.sleep(0.3)
    await watcher.start()
    await until_equal(sim, harness)
    record = harness.view()[NodeKey(TOPOLOGY, failed[1])]
    assert isinstance(record, CapacityNode)
    assert not record.schedulable
