"""Settings: env and YAML sources, env wins, and every error names the setting."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from tidegate.runtime import ServiceSettings, SettingsError, describe, load_settings


@dataclass(frozen=True, kw_only=True)
class ExampleSettings(ServiceSettings):
    ack_wait_seconds: float = 30.0
    batch_size: int = 64
    dry_run: bool = False
    queues: tuple[str, ...] = ()
    profile: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1:
            raise SettingsError("batch_size", f"{self.batch_size} must be at least 1")


def test_defaults_need_no_configuration() -> None:
    settings = load_settings(ExampleSettings, env={})
    assert settings.cluster == "default"
    assert settings.nats_url == "nats://127.0.0.1:4222"
    assert settings.http_port == 8080
    assert settings.log_level == "INFO"


def test_env_values_are_parsed_by_field_type() -> None:
    settings = load_settings(
        ExampleSettings,
        env={
            "TIDEGATE_CLUSTER": "prod-1",
            "TIDEGATE_ACK_WAIT_SECONDS": "2.5",
            "TIDEGATE_BATCH_SIZE": "8",
            "TIDEGATE_DRY_RUN": "yes",
            "TIDEGATE_QUEUES": "a, b,c",
            "TIDEGATE_PROFILE": "",
            "TIDEGATE_NATS_CREDS": "/etc/nats/user.creds",
            "TIDEGATE_LOG_LEVEL": "debug",
            "TIDEGATE_UNRELATED": "ignored",
        },
    )
    assert settings.cluster == "prod-1"
    assert settings.ack_wait_seconds == 2.5
    assert settings.batch_size == 8
    assert settings.dry_run is True
    assert settings.queues == ("a", "b", "c")
    assert settings.profile is None
    assert settings.nats_creds == Path("/etc/nats/user.creds")
    assert settings.log_level == "DEBUG"


def test_yaml_file_then_env_wins(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cluster: from-file\nbatch_size: 16\nqueues: [x, y]\ndry_run: true\n")
    settings = load_settings(
        ExampleSettings,
        env={"TIDEGATE_CONFIG": str(config), "TIDEGATE_BATCH_SIZE": "4"},
    )
    assert settings.cluster == "from-file"
    assert settings.batch_size == 4
    assert settings.queues == ("x", "y")
    assert settings.dry_run is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TIDEGATE_ACK_WAIT_SECONDS": "x"}, "TIDEGATE_ACK_WAIT_SECONDS: 'x' is not a number"),
        ({"TIDEGATE_BATCH_SIZE": "1.5"}, "TIDEGATE_BATCH_SIZE: '1.5' is not an integer"),
        ({"TIDEGATE_BATCH_SIZE": "0"}, "TIDEGATE_BATCH_SIZE: 0 must be at least 1"),
        ({"TIDEGATE_DRY_RUN": "maybe"}, "TIDEGATE_DRY_RUN: 'maybe' is not a boolean"),
        (
            {"TIDEGATE_CLUSTER": "Prod_1"},
            "TIDEGATE_CLUSTER: cluster id 'Prod_1' must be a DNS label",
        ),
        ({"TIDEGATE_HTTP_PORT": "70000"}, "TIDEGATE_HTTP_PORT: 70000 is not a port"),
        ({"TIDEGATE_LOG_LEVEL": "loud"}, "TIDEGATE_LOG_LEVEL: 'loud' is not one of DEBUG, INFO"),
        ({"TIDEGATE_NATS_URL": "localhost"}, "TIDEGATE_NATS_URL: 'localhost' is not a URL"),
        ({"TIDEGATE_NATS_TLS_CERT": "/c.pem"}, "nats_tls_key (default): a client certificate"),
        ({"TIDEGATE_ACK_WAIT_SECONDS": "nan"}, "TIDEGATE_ACK_WAIT_SECONDS: 'nan' is not a finite"),
    ],
)
def test_a_bad_value_fails_fast_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(ExampleSettings, env=env)
    assert str(caught.value).startswith(message)


def test_errors_in_the_file_name_the_key_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("batch_size: many\n")
    with pytest.raises(SettingsError, match=r"^batch_size in .*config.yaml: 'many' is not an"):
        load_settings(ExampleSettings, env={"TIDEGATE_CONFIG": str(config)})
    config.write_text("bach_size: 3\n")
    with pytest.raises(SettingsError, match=r"^bach_size in .*: unknown setting \(known: "):
        load_settings(ExampleSettings, env={"TIDEGATE_CONFIG": str(config)})
    config.write_text("- a list\n")
    with pytest.raises(SettingsError, match=r"^TIDEGATE_CONFIG: .* must hold a mapping"):
        load_settings(ExampleSettings, env={"TIDEGATE_CONFIG": str(config)})
    with pytest.raises(SettingsError, match=r"^TIDEGATE_CONFIG: cannot read"):
        load_settings(ExampleSettings, env={"TIDEGATE_CONFIG": str(tmp_path / "missing.yaml")})


def test_a_required_field_without_a_value_is_named() -> None:
    @dataclass(frozen=True, kw_only=True)
    class NeedsQueue(ServiceSettings):
        queue: str

    with pytest.raises(SettingsError, match=r"^TIDEGATE_QUEUE: is required"):
        load_settings(NeedsQueue, env={})
    assert load_settings(NeedsQueue, env={"TIDEGATE_QUEUE": "q"}).queue == "q"


def test_bus_settings_carry_the_connection_options() -> None:
    settings = load_settings(
        ExampleSettings,
        env={
            "TIDEGATE_NATS_URL": "nats://a:4222, nats://b:4222",
            "TIDEGATE_NATS_USER": "u",
            "TIDEGATE_NATS_PASSWORD": "secret",
            "TIDEGATE_NATS_STREAM_REPLICAS": "3",
        },
    )
    bus = settings.bus_settings("admission")
    assert bus.servers == ("nats://a:4222", "nats://b:4222")
    assert bus.stream_replicas == 3
    assert (bus.user, bus.password, bus.name) == ("u", "secret", "admission")
    assert "secret" not in repr(settings)
    assert "secret" not in repr(bus)


def test_stream_replicas_outside_jetstreams_range_are_refused() -> None:
    for bad in ("0", "6"):
        with pytest.raises(SettingsError, match=r"^TIDEGATE_NATS_STREAM_REPLICAS: .* not 1-5"):
            load_settings(ExampleSettings, env={"TIDEGATE_NATS_STREAM_REPLICAS": bad})


def test_describe_lists_every_env_var() -> None:
    rows = {name: (kind, default) for name, kind, default in describe(ExampleSettings)}
    assert rows["TIDEGATE_ACK_WAIT_SECONDS"] == ("float", "30.0")
    assert rows["TIDEGATE_CLUSTER"] == ("str", "'default'")
