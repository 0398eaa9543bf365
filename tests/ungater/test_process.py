"""The ungater as a real process: settings from the environment, release, /metrics, SIGTERM."""

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from tidegate.bus.server import free_port

from .conftest import Env, gated


async def test_the_ungater_process_releases_pods_and_stops_on_sigterm(
    env: Env, tmp_path: Path
) -> None:
    port = free_port()
    environ = {
        **os.environ,
        "TIDEGATE_CLUSTER": env.cluster,
        "TIDEGATE_NATS_URL": env.nats_url,
        "TIDEGATE_KUBECONFIG": str(env.kubeconfig),
        "TIDEGATE_HTTP_PORT": str(port),
        "TIDEGATE_BATCH_WINDOW_SECONDS": "0.05",
        # The chart without the webhook: no certificate mounted, so no webhook and no failure.
        "TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path / "absent"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.ungater", env=environ, stderr=asyncio.subprocess.PIPE
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
            assert status == 200, "the ungater process never became ready"
            job = await env.job("proc", 2)
            await env.admit("team/proc", job["metadata"]["uid"], {"main": [(env.host(0, 3), 2)]})

            async def released() -> list[dict[str, Any]] | None:
                pods = await env.pods("job-name=proc")
                return pods if len(pods) == 2 and not any(gated(p) for p in pods) else None

            await env.until_async(released, what="the process to release both pods")
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                metrics = await response.text()
        assert "tidegate_ungater_pods_released_total 2.0" in metrics
        assert "tidegate_ungater_releases_in_flight" in metrics
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        assert process.stderr is not None
        await process.stderr.read()


async def test_a_bad_setting_stops_the_process_with_exit_code_2(tmp_path: Path) -> None:
    environ = {
        **os.environ,
        "TIDEGATE_WEBHOOK": "on",
        "TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.ungater", env=environ, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert "TIDEGATE_WEBHOOK_CERT_DIR" in err.decode()
    assert "tls.crt does not exist" in err.decode()
