"""A simulated cluster with everything a service test talks to it through.

Service tests that drive real Kubernetes behaviour all start the same way: a running simulated
cluster, a kubeconfig for it, a tidegate.kube client with short retry backoff, and a bus
connection with the cluster's streams. :func:`simulated` starts all four and closes them in
reverse order; what the test then plays (services, followers) stays in the test.
"""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tidegate.bus import Bus
from tidegate.kube import KubeClient, KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing.bus import connected


@dataclass(frozen=True)
class Simulated:
    """The running parts :func:`simulated` yields."""

    sim: SimCluster
    kubeconfig: Path
    kube: KubeClient
    bus: Bus


@contextlib.asynccontextmanager
async def simulated(
    settings: SimSettings, *, workdir: Path, nats_url: str, cluster: str, name: str
) -> AsyncIterator[Simulated]:
    """Run a simulated cluster (kubeconfig written into ``workdir``), a kube client for it and a
    bus connection named ``name``; everything is closed when the block ends."""
    async with SimCluster.running(settings) as sim:
        kubeconfig = sim.write_kubeconfig(workdir / "kubeconfig")
        kube = await connect_kube(KubeSettings(kubeconfig=kubeconfig, backoff_max_seconds=0.3))
        try:
            async with connected(nats_url, cluster, name=name) as bus:
                yield Simulated(sim=sim, kubeconfig=kubeconfig, kube=kube, bus=bus)
        finally:
            await kube.close()
