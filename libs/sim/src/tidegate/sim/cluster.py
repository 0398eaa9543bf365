"""Run a simulated cluster: the API server on loopback plus the simulated control plane.

:meth:`SimCluster.running` is the entry point for tests, the demo and ``tidegate sim``::

    async with SimCluster.running(SimSettings(nodes="2x4x8x8gpu")) as sim:
        sim.url; sim.write_kubeconfig(path); sim.store

With ``SimSettings(rbac=True)`` the API server enforces RBAC: :meth:`SimCluster.write_kubeconfig`
is the admin's kubeconfig, :meth:`SimCluster.service_account_kubeconfig` one per
ServiceAccount, :meth:`SimCluster.load` installs RBAC objects (e.g. a Helm chart's), and
:attr:`SimCluster.access` says what each user asked and what was refused.

It creates the store, the bootstrap objects (namespaces, system PriorityClasses, CRDs, nodes,
the Topology object), serves HTTP with aiohttp, and starts the parts of the control plane the
settings enable, each as a supervised task that ends when the cluster stops.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Self

import yaml
from aiohttp import web

from tidegate.sim.apiserver import ApiServer
from tidegate.sim.bundled import bundled_crds
from tidegate.sim.disruption import DisruptionController
from tidegate.sim.errors import ApiError, JsonObject
from tidegate.sim.http import HttpApi, WatchSettings
from tidegate.sim.kinds import CRDS, NAMESPACES, NODES, SERVICEACCOUNTS, STATUS, Registry
from tidegate.sim.kubelet import Kubelet
from tidegate.sim.lifecycle import GarbageCollector, NamespaceController, NodeLifecycle
from tidegate.sim.names import rfc3339
from tidegate.sim.pods import set_condition
from tidegate.sim.rbac import ADMIN_TOKEN, Access, bootstrap_objects, service_account_user
from tidegate.sim.scheduler import Scheduler
from tidegate.sim.settings import SettingsError, SimSettings
from tidegate.sim.store import Store
from tidegate.sim.topology import ClusterLayout, layout_for, node_object, topology_object
from tidegate.sim.workloads import (
    DeploymentController,
    JobController,
    JobSetController,
    ReplicaSetController,
)

CONTEXT_NAME = "tidegate-sim"


class SimCluster:
    """A running (or ready to run) simulated Kubernetes cluster."""

    def __init__(self, settings: SimSettings) -> None:
        settings.validate()
        self.settings = settings
        self.store = Store(history_window=settings.history_window)
        self.registry = Registry.with_builtins()
        self.api = ApiServer(
            self.store,
            self.registry,
            gate_managed_pods=settings.gates_managed_pods,
            webhook_services=settings.webhook_services,
        )
        self.access = Access(enforce=settings.rbac)
        """Tokens, and every request and refusal when RBAC is enforced."""
        self.http = HttpApi(
            self.api,
            WatchSettings(
                bookmark_interval_seconds=settings.bookmark_interval_seconds,
                max_watch_seconds=settings.max_watch_seconds,
            ),
            self.access,
        )
        self.layout: ClusterLayout = ClusterLayout(nodes=[], levels=[])
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.scheduler: Scheduler | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, settings: SimSettings | None = None) -> AsyncIterator[Self]:
        """Start a cluster, yield it, and stop it on exit."""
        cluster = cls(settings or SimSettings())
        await cluster.start()
        try:
            yield cluster
        finally:
            await cluster.stop()

    @property
    def url(self) -> str:
        """Base URL of the API server, e.g. ``http://127.0.0.1:43121``."""
        if self._runner is None:
            raise RuntimeError("the simulated cluster is not running")
        return f"http://{self.settings.host}:{self._port}"

    @property
    def levels(self) -> list[str]:
        """Node label keys of the topology levels, widest first."""
        return list(self.layout.levels)

    async def start(self) -> None:
        """Populate the cluster, serve HTTP, start the enabled control-plane parts."""
        self._populate()
        runner = web.AppRunner(
            self.http.application(), handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        await site.start()
        self._port = int(runner.addresses[0][1])
        self._runner = runner
        for coroutine in self._control_plane():
            self._tasks.append(asyncio.create_task(coroutine))

    def _control_plane(self) -> list[Coroutine[object, object, None]]:
        settings = self.settings
        parts: list[Coroutine[object, object, None]] = []
        if settings.scheduler:
            self.scheduler = Scheduler(
                self.api, interval_seconds=settings.scheduler_interval_seconds
            )
            parts.append(self.scheduler.run())
        if settings.kubelet:
            parts.append(Kubelet(self.api, time_scale=settings.time_scale).run())
        if settings.controllers:
            parts.extend(
                controller.run()
                for controller in (
                    JobController(self.api),
                    ReplicaSetController(self.api),
                    DeploymentController(self.api),
                    JobSetController(self.api),
                    GarbageCollector(self.api),
                    NamespaceController(self.api),
                    DisruptionController(self.api),
                    NodeLifecycle(self.api, time_scale=settings.time_scale),
                )
            )
        return parts

    async def stop(self) -> None:
        """Stop the control plane, end watches, stop serving."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self.http.stop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _populate(self) -> None:
        settings = self.settings
        self.api.bootstrap()
        self.load(bootstrap_objects())
        crd_objects: list[JsonObject] = []
        if settings.install_crds:
            crd_objects.extend(bundled_crds())
        for path in settings.crd_files:
            crd_objects.extend(_load_crds(path))
        for crd in crd_objects:
            name = str(crd["metadata"]["name"])  # type: ignore[index]
            if self.store.get(CRDS.key, "", name) is not None:
                self.api.update(CRDS, None, name, crd)
            else:
                self.api.create(CRDS, None, crd)
        if settings.nodes is not None:
            self.layout = layout_for(
                settings.nodes, gpu_product=settings.gpu_product, allocatable=settings.allocatable
            )
            created = rfc3339()
            for spec in self.layout.nodes:
                self.api.create(NODES, None, node_object(spec, created=created))
        if settings.topology_name and self.layout.levels:
            for group in ("tidegate.io", "kueue.x-k8s.io"):
                rtype = self.api.resolve_kind(f"{group}/v1alpha1", "Topology")
                if rtype is not None:
                    body = topology_object(settings.topology_name, self.layout.levels, group=group)
                    body["apiVersion"] = rtype.api_version
                    try:
                        self.api.create(rtype, None, body)
                    except ApiError as exc:
                        if exc.code != 409:
                            raise

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Set a node's Ready condition (what a kubelet's heartbeat, or its absence, does).

        The same as patching ``nodes/<name>/status`` over HTTP; the node-lifecycle controller
        then taints the node and evicts pods that do not tolerate it.
        """
        node = self.api.get(NODES, None, name)
        current = node.get("status")
        status: JsonObject = dict(current) if isinstance(current, dict) else {}
        condition: JsonObject = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "set by the simulator",
            "lastHeartbeatTime": rfc3339(),
            "lastTransitionTime": rfc3339(),
        }
        set_condition(status, condition)
        self.api.update(NODES, None, name, {**node, "status": status}, subresource=STATUS)

    def load(self, documents: list[JsonObject]) -> None:
        """Create objects of served kinds as they are (a chart's ServiceAccounts, Roles,
        ClusterRoles and bindings, say), replacing same-named ones; namespaced ones go to
        their ``metadata.namespace`` (created if missing, as ``helm install
        --create-namespace`` does)."""
        for document in documents:
            api_version, kind = str(document.get("apiVersion")), str(document.get("kind"))
            rtype = self.api.resolve_kind(api_version, kind)
            if rtype is None:
                raise SettingsError(f"load: {api_version} {kind} is not served")
            metadata = document.get("metadata")
            assert isinstance(metadata, dict)
            namespace = str(metadata.get("namespace") or "default") if rtype.namespaced else ""
            if namespace and self.store.get(NAMESPACES.key, "", namespace) is None:
                self.api.create(NAMESPACES, None, {"metadata": {"name": namespace}})
            name = str(metadata["name"])
            if self.store.get(rtype.key, namespace, name) is not None:
                self.api.update(rtype, namespace or None, name, document)
            else:
                self.api.create(rtype, namespace or None, document)

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | str, *, server: str | None = None
    ) -> Path:
        """Write a kubeconfig whose token authenticates as the ServiceAccount
        ``namespace/name`` (which must exist), as a TokenRequest's token would; ``server``
        replaces the API server's URL (e.g. a proxy's in front of it)."""
        self.api.get(SERVICEACCOUNTS, namespace, name)
        token = self.access.mint(service_account_user(namespace, name))
        return self._kubeconfig(path, token, namespace=namespace, server=server)

    def write_kubeconfig(self, path: Path | str) -> Path:
        """Write a kubeconfig for this cluster (kubernetes-asyncio and kubectl accept it); its
        token is the admin's (``system:masters``)."""
        return self._kubeconfig(path, ADMIN_TOKEN, namespace="default")

    def _kubeconfig(
        self, path: Path | str, token: str, *, namespace: str, server: str | None = None
    ) -> Path:
        """Write a kubeconfig for ``server`` (default: this API server) with ``token``."""
        target = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": server or self.url}}],
            "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
            "contexts": [
                {
                    "name": CONTEXT_NAME,
                    "context": {
                        "cluster": CONTEXT_NAME,
                        "user": CONTEXT_NAME,
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": CONTEXT_NAME,
            "preferences": {},
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target


def _load_crds(path: Path) -> list[JsonObject]:
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"crd_files: cannot load {path}: {exc}") from exc
    crds = [
        d for d in documents if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
    ]
    if not crds:
        raise SettingsError(f"crd_files: {path} holds no CustomResourceDefinition")
    return crds
