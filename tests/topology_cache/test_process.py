"""The topology-cache as a real process: env settings, /readyz, its output, SIGTERM, bad settings."""

import pstats
from pathlib import Path

import aiohttp

from tidegate.testing import run_to_exit, service_process

from .conftest import Harness, msg


async def test_the_process_publishes_becomes_ready_and_stops_on_sigterm(
    harness: Harness, nats_url: str, tmp_path: Path
) -> None:
    await harness.send(msg.topology())
    await harness.send(msg.node("n1", "b1", "r1", labels={}, allocatable={"cpu": 4000}))
    settings = {
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_LOG_LEVEL": "WARNING",
    }
    async with service_process("topology_cache", settings, logs=tmp_path) as process:
        async with aiohttp.ClientSession() as http:
            await process.ready(http, interval=0.05)
        await harness.until_consistent()
        assert harness.node_record("n1").free["cpu"] == 4000
        process.signal()
        assert await process.wait() == 0


async def test_a_bad_setting_exits_2_naming_it() -> None:
    code, stderr = await run_to_exit("topology_cache", {"TIDEGATE_COALESCE_SECONDS": "soon"})
    assert code == 2
    assert "TIDEGATE_COALESCE_SECONDS: 'soon' is not a number" in stderr


async def test_cprofile_dir_writes_the_profile_of_the_process_when_it_stops(
    harness: Harness, nats_url: str, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    settings = {
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_LOG_LEVEL": "WARNING",
        "TIDEGATE_CPROFILE_DIR": str(profiles),
    }
    async with service_process("topology_cache", settings, logs=tmp_path) as process:
        async with aiohttp.ClientSession() as http:
            await process.ready(http, interval=0.05)
        process.signal()
        assert await process.wait(within=60) == 0
    written = list(profiles.glob("topology-cache-*.prof"))
    assert len(written) == 1
    stats = pstats.Stats(str(written[0]))
    assert any(function == "run" for _, _, function in stats.stats)  # type: ignore[attr-defined]
