"""The preemption service as a real process: settings from the environment, /readyz,
/metrics, one leader among two, SIGTERM, and a bad setting."""

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp

from tidegate.testing import ServiceProcess, run_to_exit, service_process

from .conftest import Harness


async def leader_gauge(http: aiohttp.ClientSession, process: ServiceProcess) -> str:
    text = await process.metrics(http)
    (line,) = [x for x in text.splitlines() if x.startswith('tidegate_leader{role="preemption"}')]
    return line.split()[-1]


async def test_two_processes_one_leads_and_sigterm_hands_over(
    harness: Harness, tmp_path: Path
) -> None:
    settings = {
        "TIDEGATE_CLUSTER": harness.cluster,
        "TIDEGATE_NATS_URL": harness.nats_url,
        "TIDEGATE_KUBECONFIG": str(harness.kubeconfig),
        "TIDEGATE_LEASE_TTL_SECONDS": "2",
        "TIDEGATE_LOG_LEVEL": "WARNING",
    }
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(aiohttp.ClientSession())
        processes: list[ServiceProcess] = []
        for instance in ("a", "b"):
            logs = tmp_path / instance
            logs.mkdir()
            process = await stack.enter_async_context(
                service_process("preemption", settings, logs=logs)
            )
            await process.ready(http)
            processes.append(process)

        async def leaders() -> list[str]:
            return [await leader_gauge(http, process) for process in processes]

        deadline = time.monotonic() + 10
        gauges = await leaders()
        while sorted(gauges) != ["0.0", "1.0"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            gauges = await leaders()
        assert sorted(gauges) == ["0.0", "1.0"]
        first = gauges.index("1.0")
        processes[first].signal()
        assert await processes[first].wait() == 0
        other = processes[1 - first]
        deadline = time.monotonic() + 10
        while await leader_gauge(http, other) != "1.0":
            assert time.monotonic() < deadline, "the standby never took over"
            await asyncio.sleep(0.1)


async def test_a_bad_setting_exits_2_naming_it() -> None:
    code, stderr = await run_to_exit(
        "preemption", {"TIDEGATE_EVICTION_CONCURRENCY": "0", "TIDEGATE_CONFIG": ""}
    )
    assert code == 2
    assert "TIDEGATE_EVICTION_CONCURRENCY" in stderr
