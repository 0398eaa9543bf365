"""Durations users write (tidegate.model.duration): one parser for max-runtime, defaultMaxRuntime
and aging steps."""

import pytest

from tidegate.model.duration import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2h30m", 9000.0),
        ("90m", 5400.0),
        ("45s", 45.0),
        ("1.5h", 5400.0),
        ("1h0m0s", 3600.0),
        ("1h30s", 3630.0),
        (".5m", 30.0),
        ("3600", 3600.0),
        (" 600 ", 600.0),
        ("90.5", 90.5),
        (3600, 3600.0),
        (0.25, 0.25),
    ],
)
def test_durations_parse(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["", "soon", "0", 0, "-5m", -1, "2d", "1h1h", "m", "5 m", "1e400", "nan", True, None]
)
def test_non_durations_are_refused_with_a_message(value: object) -> None:
    with pytest.raises(DurationError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(9000, "2h30m"), (3600, "1h"), (3605, "1h0m5s"), (45, "45s"), (90, "1m30s"), (0, "0s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    if seconds:
        assert parse_duration(text) == seconds
