"""The preemption service as a real process: settings from the environment, /readyz,
/metrics, one leader among two, SIGTERM, and a bad setting."""

import asyncio
import os
import signal
import socket
import sys
import time

import aiohttp

from .conftest import Harness


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(http: aiohttp.ClientSession, port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"the process on :{port} never became ready")


async def leader_gauge(http: aiohttp.ClientSession, port: int) -> str:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    (line,) = [x for x in text.splitlines() if x.startswith('tidegate_leader{role="preemption"}')]
    return line.split()[-1]


async def test_two_processes_one_leads_and_sigterm_hands_over(harness: Harness) -> None:
    ports = [free_port(), free_port()]
    env = {
        **os.environ,
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": harness.nats_url,
        "TIDEGATE_KUBECONFIG": str(harness.kubeconfig),
        "TIDEGATE_LEASE_TTL_SECONDS": "2",
        "TIDEGATE_LOG_LEVEL": "WARNING",
    }
    processes = []
    try:
        async with aiohttp.ClientSession() as http:
            for port in ports:
                processes.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "tidegate.preemption",
                        env={**env, "TIDEGATE_HTTP_PORT": str(port)},
                        stderr=asyncio.subprocess.PIPE,
                    )
                )
                await wait_ready(http, port)

            async def leaders() -> list[str]:
                return [await leader_gauge(http, port) for port in ports]

            deadline = time.monotonic() + 10
            gauges = await leaders()
            while sorted(gauges) != ["0.0", "1.0"] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                gauges = await leaders()
            assert sorted(gauges) == ["0.0", "1.0"]
            first = gauges.index("1.0")
            processes[first].send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(processes[first].wait(), 20) == 0
            other = 1 - first
            deadline = time.monotonic() + 10
            while await leader_gauge(http, ports[other]) != "1.0":
                assert time.monotonic() < deadline, "the standby never took over"
                await asyncio.sleep(0.1)
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 20)
                except TimeoutError:
                    process.kill()
                    await process.wait()
            assert process.stderr is not None
            await process.stderr.read()


async def test_a_bad_setting_exits_2_naming_it() -> None:
    env = {**os.environ, "TIDEGATE_EVICTION_CONCURRENCY": "0", "TIDEGATE_CONFIG": ""}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegate.preemption", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "TIDEGATE_EVICTION_CONCURRENCY" in stderr.decode()
