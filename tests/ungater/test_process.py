"""The ungater as a real process: settings from the environment, release, /metrics, SIGTERM."""

from pathlib import Path
from typing import Any

import aiohttp

from tidegate.testing import run_to_exit, service_process

from .conftest import Env, gated


async def test_the_ungater_process_releases_pods_and_stops_on_sigterm(
    env: Env, tmp_path: Path
) -> None:
    settings = {
        "TIDEGATE_CLUSTER": env.cluster,
        "TIDEGATE_NATS_URL": env.nats_url,
        "TIDEGATE_KUBECONFIG": str(env.kubeconfig),
        "TIDEGATE_BATCH_WINDOW_SECONDS": "0.05",
        # The chart without the webhook: no certificate mounted, so no webhook and no failure.
        "TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path / "absent"),
    }
    async with (
        service_process("ungater", settings, logs=tmp_path) as process,
        aiohttp.ClientSession() as http,
    ):
        await process.ready(http, within=30)
        job = await env.job("proc", 2)
        await env.admit("team/proc", job["metadata"]["uid"], {"main": [(env.host(0, 3), 2)]})

        async def released() -> list[dict[str, Any]] | None:
            pods = await env.pods("job-name=proc")
            return pods if len(pods) == 2 and not any(gated(p) for p in pods) else None

        await env.until_async(released, what="the process to release both pods")
        metrics = await process.metrics(http)
        assert "tidegate_ungater_pods_released_total 2.0" in metrics
        # Each released pod's time since its admission, and how far behind the bus it is.
        assert "tidegate_ungater_release_latency_seconds_count 2.0" in metrics
        assert "tidegate_state_follower_lag_seconds{follower=" in metrics
        assert "tidegate_ungater_releases_in_flight" in metrics
        process.signal()
        assert await process.wait(within=30) == 0


async def test_a_bad_setting_stops_the_process_with_exit_code_2(tmp_path: Path) -> None:
    settings = {"TIDEGATE_WEBHOOK": "on", "TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path)}
    code, err = await run_to_exit("ungater", settings, within=60)
    assert code == 2
    assert "TIDEGATE_WEBHOOK_CERT_DIR" in err
    assert "tls.crt does not exist" in err
