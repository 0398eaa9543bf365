"""A service process whose stop hangs ends anyway, with its tasks logged (run_service)."""

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

SERVICE = textwrap.dedent(
    """
    import asyncio

    from tidegate.runtime import ServiceContext, ServiceSettings, run_service


    async def deaf() -> None:
        while True:  # loses every cancellation, as Python 3.11's wait_for can
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass


    async def fails() -> None:
        await asyncio.sleep(0.5)
        raise RuntimeError("a task failed")


    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        ctx.spawn("deaf", deaf())
        ctx.spawn("fails", fails())


    run_service("hanging", ServiceSettings, setup)
    """
)


async def test_a_stop_that_hangs_ends_the_process_with_its_tasks_logged(
    nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    """One task fails (the service must stop, exit 1) while another ignores its cancellation:
    the process still exits 1 once the margin has passed, and its log names the deaf task.
    Without the bound it would run for ever (the wait below would time out)."""
    script = tmp_path / "hanging.py"
    script.write_text(SERVICE)
    env = {
        **os.environ,
        "TIDEGATE_CLUSTER": cluster_id,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_HTTP_PORT": "0",
        "TIDEGATE_SHUTDOWN_GRACE_SECONDS": "0",
        "TIDEGATE_SHUTDOWN_MARGIN_SECONDS": "2",
    }
    with (tmp_path / "hanging.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(script), env=env, stdout=log, stderr=log
        )
        started = time.monotonic()
        try:
            async with asyncio.timeout(60):
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    text = (tmp_path / "hanging.log").read_text(errors="replace")
    assert code == 1, text
    assert "stopping did not finish within 2s" in text, text
    assert "hanging:deaf" in text, "the task dump names the task that would not stop"
    assert time.monotonic() - started < 60
