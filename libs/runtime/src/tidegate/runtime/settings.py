"""Service settings: one frozen dataclass per service, from env vars and an optional YAML file.

Why: a service must refuse to start with a bad setting and say exactly which one
(``TIDEGATE_ACK_WAIT_SECONDS: 'x' is not a number``), rather than fail later in a handler.

Sources, later wins: the field's default, the YAML file named by ``TIDEGATE_CONFIG`` (keys
are field names, e.g. ``ack_wait_seconds: 30``; what the Helm chart mounts), then env vars
``TIDEGATE_<FIELD>`` (upper case). Field types understood: ``str``, ``int``, ``float``,
``bool``, ``Path``, ``tuple[str, ...]`` (comma-separated in env), ``Literal[...]`` and any of
these ``| None`` (an empty env value means None). Values are checked once, in the dataclass's
``__post_init__``, which raises :class:`SettingsError` naming the field; :func:`load_settings`
rewrites the name to where the value came from.

This module does not watch for changes: settings are read once at start.
"""

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeVar, get_args, get_origin

import yaml

from tidegate.bus import BusSettings, servers_from_url
from tidegate.model import subjects
from tidegate.runtime.collector import DEFAULT_GC_THRESHOLD
from tidegate.runtime.eventloop import EventLoopKind

ENV_PREFIX: Final = "TIDEGATE_"
CONFIG_ENV: Final = "TIDEGATE_CONFIG"
"""Names the optional YAML settings file."""

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class SettingsError(ValueError):
    """A setting has a bad value; ``setting`` names it (env var, file key or field)."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


def env_name(field_name: str) -> str:
    """The environment variable of a settings field: ``ack_wait_seconds`` → ``TIDEGATE_ACK_WAIT_SECONDS``."""
    return ENV_PREFIX + field_name.upper()


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """Settings every service has. Subclass it (frozen, kw_only) to add a service's own.

    Override ``__post_init__`` to check your fields, call ``super().__post_init__()``, and
    raise :class:`SettingsError` with the field name.
    """

    cluster: str = "default"
    """Cluster id: the ``<cluster>`` in every subject and stream name (a DNS label)."""
    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server URL, or several separated by commas (every member of a NATS cluster)."""
    nats_stream_replicas: int = 1
    """Replicas of tidegate's JetStream streams and KV buckets: 3 on a three-server NATS
    cluster, so that losing one server loses nothing. The same in every service."""
    nats_creds: Path | None = None
    """NATS credentials file (JWT + nkey)."""
    nats_user: str | None = None
    nats_password: str | None = field(default=None, repr=False)
    nats_tls_ca: Path | None = None
    """CA bundle to verify the NATS server's certificate."""
    nats_tls_cert: Path | None = None
    """Client certificate for mutual TLS (needs ``nats_tls_key``)."""
    nats_tls_key: Path | None = None
    http_port: int = 8080
    """Port of /healthz, /readyz and /metrics; 0 picks a free one."""
    log_level: LogLevel = "INFO"
    shutdown_grace_seconds: float = 20.0
    """After SIGTERM, how long consumers may take to finish their batch."""
    shutdown_margin_seconds: float = 30.0
    """How much longer than the grace a process's stop may take (draining NATS, releasing
    leases) before it ends anyway with exit 1, after logging its tasks."""
    event_loop: EventLoopKind = "uvloop"
    """The asyncio event loop: ``uvloop`` (libuv, less CPU per message and request) or
    ``asyncio`` (the standard library's)."""
    gc_threshold: int = DEFAULT_GC_THRESHOLD
    """Container objects made between two collections of the garbage collector's youngest
    generation (CPython's default: 700)."""
    cprofile_dir: Path | None = None
    """For profiling: run the process under cProfile (CPU time) and write ``<service>-<pid>.prof`` here
    when it exits (slows it down; never in production)."""

    def __post_init__(self) -> None:
        try:
            subjects.validate_cluster(self.cluster)
        except ValueError as exc:
            raise SettingsError("cluster", str(exc)) from exc
        try:
            servers = servers_from_url(self.nats_url)
        except ValueError as exc:
            raise SettingsError("nats_url", str(exc)) from exc
        for server in servers:
            if "://" not in server:
                raise SettingsError(
                    "nats_url", f"{server!r} is not a URL (expected nats://host:port)"
                )
        if not 1 <= self.nats_stream_replicas <= 5:
            raise SettingsError(
                "nats_stream_replicas",
                f"{self.nats_stream_replicas} is not 1-5 (JetStream's range)",
            )
        if not 0 <= self.http_port <= 65535:
            raise SettingsError("http_port", f"{self.http_port} is not a port (0-65535)")
        if (self.nats_tls_cert is None) != (self.nats_tls_key is None):
            missing = "nats_tls_key" if self.nats_tls_key is None else "nats_tls_cert"
            raise SettingsError(missing, "a client certificate and its key go together")
        if self.shutdown_grace_seconds < 0:
            raise SettingsError("shutdown_grace_seconds", "must not be negative")
        if self.shutdown_margin_seconds <= 0:
            raise SettingsError("shutdown_margin_seconds", "must be positive")
        if self.gc_threshold < 1:
            raise SettingsError("gc_threshold", "must be at least 1")

    def bus_settings(self, name: str) -> BusSettings:
        """How this service connects to NATS; ``name`` labels the connection."""
        return BusSettings(
            servers=tuple(servers_from_url(self.nats_url)),
            name=name,
            user=self.nats_user,
            password=self.nats_password,
            creds_file=self.nats_creds,
            tls_ca_file=self.nats_tls_ca,
            tls_cert_file=self.nats_tls_cert,
            tls_key_file=self.nats_tls_key,
            stream_replicas=self.nats_stream_replicas,
        )


S = TypeVar("S", bound=ServiceSettings)

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def _parse(raw: object, kind: object, setting: str) -> object:
    """Convert ``raw`` (an env string or a YAML value) to ``kind``; SettingsError otherwise."""
    origin = get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in get_args(kind) if option is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            return None
        if len(options) != 1:
            raise TypeError(f"settings field {setting}: unions other than X | None unsupported")
        return _parse(raw, options[0], setting)
    if origin is Literal:
        allowed = get_args(kind)
        text = str(raw).strip()
        for option in allowed:
            if text == str(option) or (isinstance(option, str) and text.upper() == option):
                return option
        raise SettingsError(
            setting, f"{raw!r} is not one of {', '.join(str(option) for option in allowed)}"
        )
    if origin is tuple:
        items = raw if isinstance(raw, list) else str(raw).split(",")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(raw, (list, dict)):
        raise SettingsError(setting, f"{raw!r} is not a single value")
    text = str(raw).strip()
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SettingsError(setting, f"{raw!r} is not a boolean (use true or false)")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise SettingsError(setting, f"{raw!r} is not an integer") from None
    if kind is float:
        try:
            number = float(text)
        except ValueError:
            raise SettingsError(setting, f"{raw!r} is not a number") from None
        if not math.isfinite(number):
            raise SettingsError(setting, f"{raw!r} is not a finite number")
        return number
    if kind is Path:
        if not text:
            raise SettingsError(setting, "must not be empty")
        return Path(text)
    if kind is str:
        return str(raw) if isinstance(raw, str) else text
    raise TypeError(f"settings field {setting}: type {kind!r} is not supported")


def _read_config_file(path: Path) -> Mapping[str, object]:
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(CONFIG_ENV, f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise SettingsError(CONFIG_ENV, f"{path} is not valid YAML: {exc}") from exc
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise SettingsError(CONFIG_ENV, f"{path} must hold a mapping of setting: value")
    return {str(key): value for key, value in content.items()}


def load_settings(settings_type: type[S], *, env: Mapping[str, str] | None = None) -> S:
    """Build and validate ``settings_type`` from the YAML file and env vars (env wins).

    Raises :class:`SettingsError` whose ``setting`` is the env var (``TIDEGATE_HTTP_PORT``)
    or the file key (``http_port in /etc/tidegate/config.yaml``) the bad value came from.
    """
    environ = os.environ if env is None else env
    fields = {f.name: f for f in dataclasses.fields(settings_type) if f.init}
    hints = typing.get_type_hints(settings_type)
    values: dict[str, object] = {}
    origins: dict[str, str] = {}

    config = environ.get(CONFIG_ENV, "").strip()
    if config:
        path = Path(config)
        for key, raw in _read_config_file(path).items():
            where = f"{key} in {path}"
            if key not in fields:
                known = ", ".join(sorted(fields))
                raise SettingsError(where, f"unknown setting (known: {known})")
            values[key] = _parse(raw, hints[key], where)
            origins[key] = where

    for name in fields:
        variable = env_name(name)
        if variable in environ:
            values[name] = _parse(environ[variable], hints[name], variable)
            origins[name] = variable

    for name, item in fields.items():
        required = (
            item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
        )
        if required and name not in values:
            raise SettingsError(env_name(name), "is required")
    try:
        return settings_type(**values)  # type: ignore[arg-type]
    except SettingsError as exc:
        where = origins.get(exc.setting, f"{exc.setting} (default)")
        raise SettingsError(where, exc.problem) from None


def describe(settings_type: type[ServiceSettings]) -> list[tuple[str, str, str]]:
    """(env var, type, default) of every field, for documentation and ``--help``."""
    hints = typing.get_type_hints(settings_type)
    rows = []
    for item in dataclasses.fields(settings_type):
        default = "" if item.default is dataclasses.MISSING else repr(item.default)
        kind = getattr(hints[item.name], "__name__", str(hints[item.name]))
        rows.append((env_name(item.name), kind.replace("typing.", ""), default))
    return rows
