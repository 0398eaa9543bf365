"""The topology-cache as a real process: env settings, /readyz, its output, SIGTERM, bad settings."""

import asyncio
import os
import signal
import socket
import sys
import time

import aiohttp

from tidegate.model import NodeState, TopologyConfig

from .conftest import LEVELS, Harness


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_process_publishes_becomes_ready_and_stops_on_sigterm(
    harness: Harness, nats_url: str
) -> None:
    await harness.put(TopologyConfig(name="default", levels=LEVELS))
    await harness.put(
        NodeState(
            name="n1",
            labels={LEVELS[0]: "b1", LEVELS[1]: "r1", LEVELS[2]: "n1"},
            allocatable={"cpu": 4000},
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_HTTP_PORT": str(port),
        "TIDEGATE_LOG_LEVEL": "WARNING",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.topology_cache", env=env, stderr=asyncio.subprocess.PIPE
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
                await asyncio.sleep(0.05)
            assert status == 200, "the topology-cache process never became ready"
        await harness.until_consistent()
        assert harness.node_record("n1").free["cpu"] == 4000
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        assert process.stderr is not None
        await process.stderr.read()


async def test_a_bad_setting_exits_2_naming_it() -> None:
    env = {**os.environ, "TIDEGATE_COALESCE_SECONDS": "soon"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.topology_cache", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "TIDEGATE_COALESCE_SECONDS: 'soon' is not a number" in stderr.decode()
