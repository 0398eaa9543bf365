"""The process-wide settings every long-running command reads from its environment
(``TIDEGATE_EVENT_LOOP``, ``TIDEGATE_GC_THRESHOLD``): a bad value is one clear line and exit 2,
before anything starts."""

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegate.bus.server import NatsServerProcess
from tidegate.cli.main import main
from tidegate.cli.stack import LocalStack, StackSettings


@pytest.fixture(autouse=True)
def _keep_the_collectors_threshold() -> Iterator[None]:
    """A command that gets as far as applying the threshold changes it for this process."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TIDEGATE_GC_THRESHOLD", "0", "TIDEGATE_GC_THRESHOLD=0: must be a whole number ≥ 1"),
        ("TIDEGATE_GC_THRESHOLD", "lots", "TIDEGATE_GC_THRESHOLD='lots': must be a whole number"),
        ("TIDEGATE_EVENT_LOOP", "trio", "TIDEGATE_EVENT_LOOP='trio': expected one of"),
    ],
)
@pytest.mark.parametrize("command", [["sim", "--nodes", "8"], ["nodes", "--nodes", "1"]])
def test_a_bad_process_setting_is_refused_naming_it(
    command: list[str],
    variable: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(command) == 2
    assert message in capsys.readouterr().err


def test_the_local_stacks_services_run_as_its_own_process_was_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tidegate demo`` and the benchmarks start the services from a LocalStack: the
    variables that say how a process runs reach them; the stack's other settings are its own."""
    monkeypatch.setenv("TIDEGATE_EVENT_LOOP", "asyncio")
    monkeypatch.setenv("TIDEGATE_GC_THRESHOLD", "700")
    monkeypatch.setenv("TIDEGATE_CLUSTER", "someone-elses")
    stack = LocalStack(
        StackSettings(workdir=tmp_path, cluster="demo", kubeconfig=tmp_path / "kubeconfig"),
        NatsServerProcess(port=4222),
        sim=None,
    )
    env = stack.service_env("admission", 8080)
    assert env["TIDEGATE_EVENT_LOOP"] == "asyncio"
    assert env["TIDEGATE_GC_THRESHOLD"] == "700"
    assert env["TIDEGATE_CLUSTER"] == "demo"
