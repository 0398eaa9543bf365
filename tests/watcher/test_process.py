"""The watcher as a real process: settings from the environment, /readyz, /metrics, SIGTERM."""

from pathlib import Path

import aiohttp

from tidegate.kube import PODS
from tidegate.model import WorkloadState
from tidegate.testing import run_to_exit, service_process

from .conftest import Harness, k8s


async def test_the_watcher_process_serves_health_and_stops_on_sigterm(
    harness: Harness, tmp_path: Path, nats_url: str
) -> None:
    settings = {
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_KUBECONFIG": str(harness.sim.write_kubeconfig(tmp_path / "kc")),
        "TIDEGATE_KUEUE_TOPOLOGY_VERSION": "v1alpha1",
    }
    async with (
        service_process("watcher", settings, logs=tmp_path) as process,
        aiohttp.ClientSession() as http,
    ):
        await process.ready(http)
        await harness.create(PODS, k8s.pod("solo", labels={"tidegate.io/queue": "q"}))
        await harness.until(
            lambda: isinstance(harness.workload("solo"), WorkloadState), what="workload"
        )
        metrics = await process.metrics(http)
        assert 'tidegate_watcher_published_total{type="snapshot"}' in metrics
        assert 'tidegate_watcher_events_total{kind="Pod"}' in metrics
        assert 'tidegate_watcher_resource_unavailable{kind="JobSet"} 0.0' in metrics
        process.signal()
        assert await process.wait() == 0


async def test_a_bad_setting_exits_2_naming_it() -> None:
    code, stderr = await run_to_exit("watcher", {"TIDEGATE_OWNER_KIND_SERVICE_TYPES": "Job=batch"})
    assert code == 2
    assert "TIDEGATE_OWNER_KIND_SERVICE_TYPES" in stderr
    assert "'batch' is not a service type" in stderr
