"""The topology-cache's settings: defaults, env and file values, and errors naming the setting."""

import pytest

from tidegate.runtime import SettingsError, load_settings
from tidegate.topology_cache.config import Settings


def test_defaults_and_env() -> None:
    assert load_settings(Settings, env={}).coalesce_seconds == 0.005
    settings = load_settings(
        Settings,
        env={"TIDEGATE_MAX_IN_FLIGHT": "64", "TIDEGATE_PUBLISH_RETRY_SECONDS": "0.5"},
    )
    assert (settings.max_in_flight, settings.publish_retry_seconds) == (64, 0.5)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TIDEGATE_COALESCE_SECONDS", "-1", "TIDEGATE_COALESCE_SECONDS: must not be negative"),
        (
            "TIDEGATE_PUBLISH_RETRY_SECONDS",
            "0",
            "TIDEGATE_PUBLISH_RETRY_SECONDS: 0.0 must be positive",
        ),
        ("TIDEGATE_MAX_IN_FLIGHT", "0", "TIDEGATE_MAX_IN_FLIGHT: 0 must be at least 1"),
        ("TIDEGATE_MAX_IN_FLIGHT", "many", "TIDEGATE_MAX_IN_FLIGHT: 'many' is not an integer"),
    ],
)
def test_bad_values_name_the_setting(variable: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(Settings, env={variable: value})
    assert str(caught.value) == message
