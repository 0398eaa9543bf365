"""The embedded default: nats-server, a simulated cluster and the five services, on one machine.

With ``StackSettings.kubeconfig`` the services run against that existing cluster instead (a
real one, e.g. with fake nodes from ``tidegate nodes``); the stack then starts no simulator.

``tidegate demo`` and the end-to-end tests need the whole system running exactly as it runs in
production (separate processes talking over NATS and the Kubernetes API), without a cluster.
:class:`LocalStack` starts a local nats-server with JetStream, a simulated cluster that speaks
the Kubernetes API (in this process), and every service as its own child process with the
environment the Helm chart would give it; it waits until each service reports ready on
/readyz and stops everything in reverse order. It does not replay workloads or report on them:
that is the demo's job (:mod:`tidegate.cli.demo`).

With ``StackSettings.access`` the simulator enforces RBAC: the stack loads the given
ServiceAccounts, Roles and bindings (the Helm chart's, say) and runs each service with a token
of its own ServiceAccount, as in a cluster; the stack's own kubeconfig stays the admin's.
"""

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Self

import aiohttp

from tidegate.bus.server import NatsCluster, NatsServerProcess, free_port
from tidegate.runtime.collector import GC_THRESHOLD_ENV
from tidegate.runtime.eventloop import EVENT_LOOP_ENV
from tidegate.sim import SimCluster, SimSettings

SERVICES: Final[dict[str, str]] = {
    "watcher": "tidegate.watcher",
    "topology-cache": "tidegate.topology_cache",
    "admission": "tidegate.admission",
    "preemption": "tidegate.preemption",
    "ungater": "tidegate.ungater",
}
"""Service name → the module that runs it (``python -m``), in start order."""

REPLICA_MARK: Final = "#"
"""Separates a service from a replica number in a process name: ``admission#2`` is a second
replica of admission (:meth:`LocalStack.start_service`)."""


def service_of(process_name: str) -> str:
    """The service a process runs: ``admission`` for ``admission`` and ``admission#2``."""
    return process_name.partition(REPLICA_MARK)[0]


PASSED_THROUGH: Final = frozenset({EVENT_LOOP_ENV, GC_THRESHOLD_ENV})
"""This process's variables its services inherit: how every process of the stack runs."""


@dataclass(frozen=True, kw_only=True)
class ServiceAccess:
    """Who each service is on the simulated cluster, and what its roles let it do."""

    documents: tuple[dict[str, object], ...]
    """ServiceAccounts, Roles, ClusterRoles and their bindings, to load into the simulator."""
    accounts: Mapping[str, tuple[str, str]]
    """Service name → (namespace, name) of its ServiceAccount."""


class StackError(RuntimeError):
    """A part of the local stack did not start; the message says which and where its log is."""


@dataclass(frozen=True, kw_only=True)
class StackSettings:
    """What to run: where files go, the cluster's shape, and which services."""

    workdir: Path
    """Logs, the kubeconfig, the JetStream store and the trace file go here."""
    cluster: str = "demo"
    nodes: str | Path = "2x4x8x8gpu"
    time_scale: float = 1.0
    """Wall-clock seconds per simulated second in the simulated kubelet (0.05 = 20x faster)."""
    gpu_product: str = "NVIDIA-H200"
    services: tuple[str, ...] = tuple(SERVICES)
    ready_timeout_seconds: float = 90.0
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """More environment for every service (e.g. TIDEGATE_LOG_LEVEL)."""
    kubeconfig: Path | None = None
    """Run against the existing cluster of this kubeconfig instead of a simulated one (then
    ``nodes``, ``time_scale`` and ``gpu_product`` are not used)."""
    nats_servers: int = 1
    """nats-servers to run: 1, or 3 (up to 5) as one JetStream cluster on loopback, with
    every stream and KV bucket replicated on each of them."""
    access: ServiceAccess | None = None
    """Enforce RBAC on the simulated cluster, each service as its own ServiceAccount; None:
    every service uses the admin kubeconfig and nothing is authorised."""
    service_api_url: str | None = None
    """With ``access``: the API server URL the services' kubeconfigs name (a fault proxy in
    front of the simulator, say); None: the simulator's own."""
    admission_gate: bool | None = None
    """Whether the simulated cluster gates managed pods as tidegate's webhook would
    (``SimSettings.admission_gate``; None: it does). False: pods are gated only by what
    creates them, as on a cluster without the webhook."""

    def __post_init__(self) -> None:
        if not 1 <= self.nats_servers <= 5:
            raise StackError(f"nats_servers must be 1-5, not {self.nats_servers}")
        if self.access is not None and self.kubeconfig is not None:
            raise StackError(
                "access: RBAC is enforced by the simulated cluster only, not with kubeconfig"
            )


@dataclass
class ServiceProcess:
    """One service running as a child process, with its log file and health port."""

    name: str
    module: str
    http_port: int
    log_path: Path
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the process (its stdout and stderr go to ``log_path``)."""
        # The child writes through its own copy of the descriptor; ours is closed at once (kept
        # open, it leaked whenever a restart replaced this object before stop() ran).
        with self.log_path.open("a") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                self.module,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
            )

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self.process is not None and self.process.returncode is None

    async def wait_ready(self, session: aiohttp.ClientSession, timeout_seconds: float) -> None:
        """Poll /readyz until it answers 200; raise StackError if the process dies or times out."""
        deadline = time.monotonic() + timeout_seconds
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        while time.monotonic() < deadline:
            if not self.running:
                raise StackError(
                    f"{self.name} exited with status {self.returncode} before it was ready; "
                    f"see {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise StackError(
            f"{self.name} was not ready within {timeout_seconds:.0f}s; see {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has ended."""
        return None if self.process is None else self.process.returncode

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the service's log, for error messages."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self, *, kill: bool = False, timeout_seconds: float = 15.0) -> int | None:
        """SIGTERM (or SIGKILL with ``kill``) and wait; returns the exit status."""
        if self.process is not None and self.process.returncode is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                async with asyncio.timeout(timeout_seconds):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return self.returncode


class LocalStack:
    """A running local tidegate: use :meth:`running` as an async context manager."""

    def __init__(
        self,
        settings: StackSettings,
        nats: NatsServerProcess | NatsCluster,
        sim: SimCluster | None,
    ) -> None:
        self.settings = settings
        self.nats = nats
        self.sim = sim
        """The simulated cluster, or None when running against ``settings.kubeconfig``."""
        self.service_kubeconfigs: dict[str, Path] = {}
        """The kubeconfig of each service that runs as its own ServiceAccount."""
        if sim is not None:
            self.kubeconfig = sim.write_kubeconfig(settings.workdir / "kubeconfig.yaml")
            if settings.access is not None:
                sim.load([dict(doc) for doc in settings.access.documents])
                for name, (namespace, account) in settings.access.accounts.items():
                    path = settings.workdir / f"kubeconfig-{name}.yaml"
                    self.service_kubeconfigs[name] = sim.service_account_kubeconfig(
                        namespace, account, path, server=settings.service_api_url
                    )
        elif settings.kubeconfig is not None:
            self.kubeconfig = settings.kubeconfig
        else:
            raise StackError("a LocalStack needs a simulated cluster or a kubeconfig")
        self.trace_file = settings.workdir / "traces.jsonl"
        self.processes: dict[str, ServiceProcess] = {}

    @property
    def nats_url(self) -> str:
        """The local nats-server's URL (every member's, comma-separated, for a cluster)."""
        return self.nats.url

    def service_env(self, name: str, http_port: int) -> dict[str, str]:
        """The environment a service gets (the same variables the Helm chart sets).

        Of this process's own ``TIDEGATE_`` variables, only those that say how a process runs
        (:data:`PASSED_THROUGH`) reach the services, so a stack started under
        ``TIDEGATE_EVENT_LOOP=asyncio`` runs on it throughout.
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("TIDEGATE_", "OTEL_")) or key in PASSED_THROUGH
        }
        env.update(
            {
                "TIDEGATE_CLUSTER": self.settings.cluster,
                "TIDEGATE_NATS_URL": self.nats.url,
                "TIDEGATE_NATS_STREAM_REPLICAS": str(self.settings.nats_servers),
                "TIDEGATE_HTTP_PORT": str(http_port),
                "TIDEGATE_KUBECONFIG": str(self.service_kubeconfigs.get(name, self.kubeconfig)),
                "TIDEGATE_TRACE_FILE": str(self.trace_file),
                "OTEL_SERVICE_NAME": f"tidegate-{name}",
                "TIDEGATE_KUEUE_TOPOLOGY_VERSION": "v1alpha1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.settings.extra_env)
        return env

    async def start_service(self, name: str) -> ServiceProcess:
        """Start (or restart) one service and wait until it is ready; ``name`` may name a
        further replica of it (``admission#2``: same settings and account, its own port and
        log)."""
        port = free_port()
        service = ServiceProcess(
            name=name,
            module=SERVICES[service_of(name)],
            http_port=port,
            log_path=self.settings.workdir / "logs" / f"{name}.log",
            env=self.service_env(service_of(name), port),
        )
        self.processes[name] = service
        await service.start()
        async with aiohttp.ClientSession() as session:
            await service.wait_ready(session, self.settings.ready_timeout_seconds)
        return service

    async def stop_service(self, name: str, *, kill: bool = False) -> int | None:
        """Stop one service (SIGTERM, or SIGKILL to simulate a crash)."""
        return await self.processes[name].stop(kill=kill)

    async def restart_service(self, name: str, *, kill: bool = False) -> ServiceProcess:
        """Stop a service (crash it with ``kill``) and start it again."""
        await self.stop_service(name, kill=kill)
        return await self.start_service(name)

    def dead_services(self) -> list[ServiceProcess]:
        """Services whose process has exited although nobody stopped them."""
        return [p for p in self.processes.values() if p.process is not None and not p.running]

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, settings: StackSettings) -> AsyncIterator[Self]:
        """Start everything, yield the stack, stop everything (services first, NATS last)."""
        unknown = sorted(set(settings.services) - set(SERVICES))
        if unknown:
            raise StackError(f"unknown services {unknown}; known: {sorted(SERVICES)}")
        (settings.workdir / "logs").mkdir(parents=True, exist_ok=True)
        store = settings.workdir / "jetstream"
        store.mkdir(exist_ok=True)
        nats: NatsServerProcess | NatsCluster = (
            NatsServerProcess(store_dir=store, monitor_port=0)
            if settings.nats_servers == 1
            else NatsCluster(size=settings.nats_servers, store_dir=store)
        )
        await asyncio.to_thread(nats.start)
        try:
            async with _cluster(settings) as sim:
                stack = cls(settings, nats, sim)
                try:
                    for name in settings.services:
                        await stack.start_service(name)
                    yield stack
                finally:
                    await asyncio.gather(
                        *(p.stop() for p in reversed(stack.processes.values())),
                        return_exceptions=True,
                    )
        finally:
            await asyncio.to_thread(nats.stop)


@contextlib.asynccontextmanager
async def _cluster(settings: StackSettings) -> AsyncIterator[SimCluster | None]:
    """The simulated cluster the settings ask for, or None for an existing one."""
    if settings.kubeconfig is not None:
        yield None
        return
    sim_settings = SimSettings(
        nodes=settings.nodes,
        time_scale=settings.time_scale,
        gpu_product=settings.gpu_product,
        rbac=settings.access is not None,
        admission_gate=settings.admission_gate,
    )
    async with SimCluster.running(sim_settings) as sim:
        yield sim
