"""The event loop a process runs on: uvloop by default, the standard one when asked."""

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest
import uvloop

from tidegate.runtime import ServiceSettings, SettingsError, load_settings
from tidegate.runtime.eventloop import (
    EVENT_LOOP_ENV,
    EventLoopError,
    configured_kind,
    run,
    running_loop_kind,
)


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_uvloop_is_the_default_and_asyncio_is_one_setting_away() -> None:
    assert issubclass(run(_loop_type(), "uvloop"), uvloop.Loop)
    assert not issubclass(run(_loop_type(), "asyncio"), uvloop.Loop)
    assert configured_kind({}) == "uvloop"
    assert configured_kind({EVENT_LOOP_ENV: " asyncio "}) == "asyncio"
    assert load_settings(ServiceSettings, env={}).event_loop == "uvloop"
    settings = load_settings(ServiceSettings, env={EVENT_LOOP_ENV: "asyncio"})
    assert settings.event_loop == "asyncio"


def test_an_unknown_loop_is_refused_naming_the_setting() -> None:
    with pytest.raises(
        EventLoopError, match="TIDEGATE_EVENT_LOOP='trio': expected one of uvloop, asyncio"
    ):
        configured_kind({EVENT_LOOP_ENV: "trio"})
    with pytest.raises(SettingsError, match="TIDEGATE_EVENT_LOOP"):
        load_settings(ServiceSettings, env={EVENT_LOOP_ENV: "trio"})


@pytest.mark.parametrize("value", ["uvloop", " asyncio ", "asyncio", "AsyncIO", "UVLOOP", "trio"])
def test_the_tools_and_the_services_read_the_variable_alike(value: str) -> None:
    """The command-line tools and the benchmarks read TIDEGATE_EVENT_LOOP with
    ``configured_kind``, a service with its settings: a value one accepts, the other does."""
    try:
        tools: str | None = configured_kind({EVENT_LOOP_ENV: value})
    except EventLoopError:
        tools = None
    try:
        service: str | None = load_settings(ServiceSettings, env={EVENT_LOOP_ENV: value}).event_loop
    except SettingsError:
        service = None
    assert tools == service


def test_a_missing_uvloop_is_a_clear_error_and_the_coroutine_is_not_left_unawaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    main = _loop_type()
    with pytest.raises(EventLoopError, match="set TIDEGATE_EVENT_LOOP=asyncio"):
        run(main, "uvloop")
    assert main.cr_frame is None, "closed, so Python does not warn it was never awaited"
    assert not issubclass(run(_loop_type(), "asyncio"), uvloop.Loop)


SERVICE = textwrap.dedent(
    """
    import os
    import signal
    from pathlib import Path

    from tidegate.runtime import ServiceContext, ServiceSettings, run_service
    from tidegate.runtime.eventloop import running_loop_kind


    async def report() -> None:
        Path(os.environ["LOOP_FILE"]).write_text(running_loop_kind())
        os.kill(os.getpid(), signal.SIGTERM)


    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        ctx.spawn("report", report())


    run_service("loopcheck", ServiceSettings, setup)
    """
)


@pytest.mark.parametrize("setting", [None, "uvloop", "asyncio"])
async def test_a_service_process_runs_on_the_loop_its_setting_names(
    setting: str | None, nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    script = tmp_path / "loopcheck.py"
    script.write_text(SERVICE)
    env = {key: value for key, value in os.environ.items() if key != EVENT_LOOP_ENV} | {
        "TIDEGATE_CLUSTER": cluster_id,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_HTTP_PORT": "0",
        "LOOP_FILE": str(tmp_path / "loop"),
    }
    if setting is not None:
        env[EVENT_LOOP_ENV] = setting
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert (tmp_path / "loop").read_text() == (setting or "uvloop")


async def test_running_loop_kind_names_the_standard_loop_under_pytest() -> None:
    assert running_loop_kind() == "asyncio"
