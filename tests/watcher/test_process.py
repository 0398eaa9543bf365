"""The watcher as a real process: settings from the environment, /readyz, /metrics, SIGTERM."""

import asyncio
import os
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp

from tidegate.kube import PODS
from tidegate.model import WorkloadState

from .conftest import Harness, pod_body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_watcher_process_serves_health_and_stops_on_sigterm(
    harness: Harness, tmp_path: Path, nats_url: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_KUBECONFIG": str(harness.sim.write_kubeconfig(tmp_path / "kc")),
        "TIDEGATE_HTTP_PORT": str(port),
        "TIDEGATE_KUEUE_TOPOLOGY_VERSION": "v1alpha1",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.watcher", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 30
            status = 0
            while time.monotonic() < deadline and status != 200:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                        status = response.status
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            assert status == 200, "the watcher process never became ready"
            await harness.create(PODS, pod_body("solo", labels={"tidegate.io/queue": "q"}))
            await harness.until(
                lambda: isinstance(harness.workload("solo"), WorkloadState), what="workload"
            )
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                metrics = await response.text()
        assert 'tidegate_watcher_published_total{type="snapshot"}' in metrics
        assert 'tidegate_watcher_events_total{kind="Pod"}' in metrics
        assert 'tidegate_watcher_resource_unavailable{kind="JobSet"} 0.0' in metrics
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        assert process.stderr is not None
        await process.stderr.read()


async def test_a_bad_setting_exits_2_naming_it() -> None:
    env = {**os.environ, "TIDEGATE_OWNER_KIND_SERVICE_TYPES": "Job=batch"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.watcher", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "TIDEGATE_OWNER_KIND_SERVICE_TYPES" in stderr.decode()
    assert "'batch' is not a service type" in stderr.decode()
