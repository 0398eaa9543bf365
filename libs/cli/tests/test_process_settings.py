"""The process-wide settings every long-running command reads from its environment
(``TIDEGATE_EVENT_LOOP``, ``TIDEGATE_GC_THRESHOLD``): a bad value is one clear line and exit 2,
before anything starts."""

import gc
from collections.abc import Iterator

import pytest

from tidegate.cli.main import main


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
