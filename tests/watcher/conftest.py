"""A simulated cluster, a real nats-server and a watcher between them, for end-to-end tests.

Fixture ``harness`` runs the simulator as a bare API server (no controllers, scheduler or
kubelet), so the tests create the pods a controller would (with ownerReferences and the
admission gate) and nothing else changes behind their back; ``live_harness`` runs the full
simulated control plane, for tests that need pods to run and Jobs to finish. :class:`Harness` follows the state stream like any consumer
would and waits for conditions on it.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidegate.bus import Received, layout
from tidegate.kube import NAMESPACES, KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.model import Message, subjects
from tidegate.placement import PROFILES
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing import connected, following, start_until
from tidegate.testing.harness import ServiceHarness
from tidegate.testing.manifests import Builders
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import WatcherSettings

NAMESPACE = "team"


k8s = Builders(server_fields=False)
"""What the tests create on the simulated API server."""

TEMPLATE = k8s.template(containers=[k8s.container(memory=None)], restartPolicy="Never")
"""The pod template of the tests' controllers: one container asking for one cpu."""


@dataclass
class Harness(ServiceHarness):
    """Everything an end-to-end watcher test touches."""

    sim: SimCluster = field(kw_only=True)
    last: dict[str, Message] = field(default_factory=dict)
    """Last message per state subject, as a consumer following the stream sees it."""
    published: dict[str, int] = field(default_factory=dict)
    """How many messages each subject has received since the harness started."""
    watcher: Watcher | None = None
    _task: "asyncio.Task[None] | None" = None

    async def start_watcher(self) -> Watcher:
        """Start a watcher and wait until it reports ready."""
        assert self.kube is not None
        watcher = Watcher(
            bus=self.bus,
            kube=self.kube,
            settings=WatcherSettings(
                cluster=self.cluster, absent_retry_seconds=0.5, kueue_topology_version="v1alpha1"
            ),
            profiles=frozenset(PROFILES),
        )
        self.watcher = watcher
        self._task = await start_until(watcher.run(), watcher.ready, within=20, what="the watcher")
        return watcher

    async def stop_watcher(self) -> None:
        """Cancel the running watcher (as SIGTERM would)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def alive(self) -> None:
        """Fail at once if the watcher stopped by itself."""
        if self._task is not None and self._task.done():
            self._task.result()

    def workload(self, name: str, namespace: str = NAMESPACE) -> Message | None:
        """Last message on a workload's subject."""
        return self.last.get(subjects.workload(self.cluster, namespace, name))

    def pod(self, name: str, namespace: str = NAMESPACE) -> Message | None:
        """Last message on a pod's subject."""
        return self.last.get(subjects.pod(self.cluster, namespace, name))


@contextlib.asynccontextmanager
async def harness_on(
    sim: SimCluster, tmp_path: Path, nats_url: str, cluster_id: str
) -> AsyncIterator[Harness]:
    """A harness on a running simulated cluster: a kube client, a bus connection, the
    namespace ``team`` and a state-stream follower; no watcher yet."""
    kube = await connect_kube(
        KubeSettings(
            kubeconfig=sim.write_kubeconfig(tmp_path / "kubeconfig"), backoff_max_seconds=0.3
        )
    )
    try:
        async with connected(nats_url, cluster_id, name="watcher-test") as bus:
            harness = Harness(
                bus=bus,
                cluster=cluster_id,
                nats_url=nats_url,
                kube=kube,
                namespace=NAMESPACE,
                interval=0.05,
                sim=sim,
            )
            await harness.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})

            async def remember(received: Received) -> None:
                harness.last[received.subject] = received.envelope.body
                count = harness.published.get(received.subject, 0)
                harness.published[received.subject] = count + 1

            async with following(
                bus,
                stream=layout.state_stream(cluster_id),
                subjects=subjects.state_wildcards(cluster_id),
                handler=remember,
            ):
                try:
                    yield harness
                finally:
                    await harness.stop_watcher()
    finally:
        await kube.close()


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Harness]:
    """A bare simulated API server, a bus connection, a state-stream follower; no watcher yet."""
    settings = SimSettings(
        nodes="1x2x2x8gpu", controllers=False, scheduler=False, kubelet=False, admission_gate=False
    )
    async with (
        SimCluster.running(settings) as sim,
        harness_on(sim, tmp_path, nats_url, cluster_id) as harness,
    ):
        yield harness


@pytest.fixture
async def live_harness(
    sim: SimCluster, tmp_path: Path, nats_url: str, cluster_id: str
) -> AsyncIterator[Harness]:
    """A harness on the full simulated control plane (controllers, scheduler, kubelets, the
    webhook's gate): pods run and finish; the test plays the ungater."""
    async with harness_on(sim, tmp_path, nats_url, cluster_id) as harness:
        yield harness
