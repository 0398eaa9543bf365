"""How a process runs: on uvloop unless asked for the standard loop, and with the garbage
collector's youngest generation collected every 20,000 objects unless set otherwise."""

import asyncio
import gc
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import uvloop

from tidegate.runtime import ServiceSettings, SettingsError, load_settings
from tidegate.runtime.collector import (
    DEFAULT_GC_THRESHOLD,
    GC_THRESHOLD_ENV,
    GcThresholdError,
    apply,
    configured_threshold,
)
from tidegate.runtime.eventloop import (
    EVENT_LOOP_ENV,
    EventLoopError,
    configured_kind,
    run,
    running_loop_kind,
)
from tidegate.runtime.tool import ToolSettingError, run_tool


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


@pytest.mark.parametrize(
    "value", ["uvloop", " asyncio ", "asyncio", "AsyncIO", "UVLOOP", "trio", "", " "]
)
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
    import asyncio
    import gc
    import json
    import os
    import signal
    from pathlib import Path

    from tidegate.runtime import ServiceContext, ServiceSettings, run_service
    from tidegate.runtime.eventloop import running_loop_kind


    async def report(ctx: ServiceContext[ServiceSettings], starting: int) -> None:
        for _ in range(60):  # the threshold is applied once the service is ready
            if gc.get_threshold()[0] != starting:
                break
            await asyncio.sleep(0.05)
        figures = {
            "loop": running_loop_kind(),
            "gc_threshold_while_starting": starting,
            "gc_threshold": gc.get_threshold(),
        }
        Path(os.environ["REPORT_FILE"]).write_text(json.dumps(figures))
        os.kill(os.getpid(), signal.SIGTERM)


    async def setup(ctx: ServiceContext[ServiceSettings]) -> None:
        ctx.spawn("report", report(ctx, gc.get_threshold()[0]))


    run_service("loopcheck", ServiceSettings, setup)
    """
)


async def _run_service(
    settings: dict[str, str], nats_url: str, cluster_id: str, tmp_path: Path
) -> dict[str, object]:
    """Run a minimal service process with ``settings`` in its environment (and neither
    variable under test unless given); what it reports of itself."""
    script = tmp_path / "loopcheck.py"
    script.write_text(SERVICE)
    inherited = {
        key: value
        for key, value in os.environ.items()
        if key not in {EVENT_LOOP_ENV, GC_THRESHOLD_ENV}
    }
    env = inherited | {
        "TIDEGATE_CLUSTER": cluster_id,
        "TIDEGATE_NATS_URL": nats_url,
        "TIDEGATE_HTTP_PORT": "0",
        "REPORT_FILE": str(tmp_path / "report"),
    }
    env.update(settings)
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
    report: dict[str, object] = json.loads((tmp_path / "report").read_text())
    return report


@pytest.mark.parametrize("setting", [None, "uvloop", "asyncio"])
async def test_a_service_process_runs_on_the_loop_its_setting_names(
    setting: str | None, nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    settings = {} if setting is None else {EVENT_LOOP_ENV: setting}
    report = await _run_service(settings, nats_url, cluster_id, tmp_path)
    assert report["loop"] == (setting or "uvloop")


@pytest.mark.parametrize("setting", [None, "700", "50000"])
async def test_a_service_process_collects_garbage_at_the_threshold_its_setting_names_once_ready(
    setting: str | None, nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    settings = {} if setting is None else {GC_THRESHOLD_ENV: setting}
    report = await _run_service(settings, nats_url, cluster_id, tmp_path)
    expected = DEFAULT_GC_THRESHOLD if setting is None else int(setting)
    assert report["gc_threshold"] == [expected, *gc.get_threshold()[1:]]
    assert report["gc_threshold_while_starting"] == 700, "CPython's own until ready"


def test_the_threshold_is_20000_unless_set_and_a_bad_one_is_refused_naming_it() -> None:
    assert configured_threshold({}) == DEFAULT_GC_THRESHOLD == 20_000
    assert configured_threshold({GC_THRESHOLD_ENV: " 700 "}) == 700
    assert load_settings(ServiceSettings, env={}).gc_threshold == DEFAULT_GC_THRESHOLD
    for bad in ("0", "-5", "many", ""):
        with pytest.raises(GcThresholdError, match="TIDEGATE_GC_THRESHOLD"):
            configured_threshold({GC_THRESHOLD_ENV: bad})
        with pytest.raises(SettingsError, match="TIDEGATE_GC_THRESHOLD"):
            load_settings(ServiceSettings, env={GC_THRESHOLD_ENV: bad})


@pytest.mark.parametrize("value", ["20000", " 700 ", "1", "0", "-1", "1e4", "x", ""])
def test_the_tools_and_the_services_read_the_threshold_alike(value: str) -> None:
    try:
        tools: int | None = configured_threshold({GC_THRESHOLD_ENV: value})
    except GcThresholdError:
        tools = None
    try:
        service: int | None = load_settings(
            ServiceSettings, env={GC_THRESHOLD_ENV: value}
        ).gc_threshold
    except SettingsError:
        service = None
    assert tools == service


def test_apply_sets_the_youngest_generation_and_keeps_the_older_ones() -> None:
    before = gc.get_threshold()
    try:
        apply(12_345)
        assert gc.get_threshold() == (12_345, *before[1:])
        with pytest.raises(GcThresholdError):
            apply(0)
        assert gc.get_threshold()[0] == 12_345, "a refused threshold changes nothing"
    finally:
        gc.set_threshold(*before)


async def test_running_loop_kind_names_the_standard_loop_under_pytest() -> None:
    assert running_loop_kind() == "asyncio"


def test_a_tool_runs_with_the_loop_and_threshold_its_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = gc.get_threshold()
    try:
        monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
        monkeypatch.setenv(GC_THRESHOLD_ENV, "12345")
        assert not issubclass(run_tool(_loop_type()), uvloop.Loop)
        assert gc.get_threshold()[0] == 12_345
        for variable, bad in ((GC_THRESHOLD_ENV, "0"), (EVENT_LOOP_ENV, "trio")):
            monkeypatch.setenv(variable, bad)
            main = _loop_type()
            with pytest.raises(ToolSettingError, match=variable):
                run_tool(main)
            assert main.cr_frame is None, "closed, so Python does not warn it was never awaited"
            monkeypatch.delenv(variable)
    finally:
        gc.set_threshold(*before)
