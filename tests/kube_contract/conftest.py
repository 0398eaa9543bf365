"""Where the contract suite runs: the simulator by default, a real API server on request.

With TIDEGATE_TEST_KUBECONFIG unset, every test gets its own simulated cluster (no scheduler,
kubelet or controllers: a bare API server) over real HTTP. With it set to a kubeconfig path, the
same tests run unchanged against that cluster: each test makes its own namespace, its own
labelled Node objects and the CRDs it needs (from deploy/crds/, plus a minimal JobSet CRD when
the cluster has none), and removes what it created. Nothing waits for controllers: pods are
deleted with grace 0 and namespace deletion is not awaited.

Differences between the two targets live here only, as facts about the target (how to expire
watch history, how long bookmarks take), never as branches in the tests.
"""

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from kubernetes_asyncio.config import load_kube_config

from tidegate.kube import (
    CRDS,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    QUEUES,
    AlreadyExists,
    KubeClient,
    KubeSettings,
    NotFound,
    ResourceType,
    connect,
)
from tidegate.kube.transport import JsonObject
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.faultproxy import KubeFaultProxy, Upstream, kube_fault_proxy
from tidegate.testing.manifests import Builders

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "crds"
ENV_KUBECONFIG = "TIDEGATE_TEST_KUBECONFIG"
GATE = "tidegate.io/admission"
CONTRACT_LABEL = "tidegate.io/contract"

k8s = Builders(server_fields=False)
"""What the tests create on the target API server."""

PAUSE: JsonObject = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
"""A container that does nothing, asking for nothing."""

INERT = k8s.template(
    containers=[PAUSE],
    restartPolicy="Never",
    schedulingGates=[{"name": "tidegate.io/contract"}],
)
"""The pod template of a Job that stays inert everywhere: its pods would be gated."""

SERVICEACCOUNTS = ResourceType(
    group="", version="v1", plural="serviceaccounts", kind="ServiceAccount"
)

JOBSET_CRD: JsonObject = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {
        "group": "jobset.x-k8s.io",
        "names": {
            "kind": "JobSet",
            "listKind": "JobSetList",
            "plural": "jobsets",
            "singular": "jobset",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha2",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@dataclass
class Target:
    """The API server under test and the facts about it the tests may depend on."""

    kubeconfig: Path
    """A kubeconfig for the target."""
    expire_watch_history: Callable[[], Awaitable[None]]
    """Make every resourceVersion seen so far too old to watch from (410 Gone on resume)."""
    bookmark_wait_seconds: float
    """How long the server may take to send a BOOKMARK on an idle watch."""
    is_simulator: bool
    """For messages only: tests never branch on it."""


@dataclass
class ContractEnv:
    """One test's slice of the target: a client, a fresh namespace, labelled nodes."""

    target: Target
    client: KubeClient
    namespace: str
    run_id: str
    nodes: list[str] = field(default_factory=list)
    cluster_objects: list[tuple[ResourceType, str]] = field(default_factory=list)
    """Cluster-scoped objects a test created, deleted after it."""

    async def create_cluster_object(self, resource: ResourceType, body: JsonObject) -> JsonObject:
        """Create a cluster-scoped object and remember to delete it after the test."""
        created = await self.client.create(resource, body)
        self.cluster_objects.append((resource, str(body["metadata"]["name"])))  # type: ignore[index]
        return created

    def settings(self, **overrides: object) -> KubeSettings:
        """Client settings for this target with fast retries, plus ``overrides``."""
        kubeconfig = overrides.pop("kubeconfig", self.target.kubeconfig)
        assert isinstance(kubeconfig, Path)
        return contract_settings(kubeconfig, **overrides)

    def pod(
        self,
        name: str,
        *,
        gates: tuple[str, ...] = (GATE,),
        node_selector: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> JsonObject:
        """A minimal valid pod body in this test's namespace."""
        spec: JsonObject = {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
        }
        if gates:
            spec["schedulingGates"] = [{"name": g} for g in gates]
        if node_selector:
            spec["nodeSelector"] = node_selector
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {CONTRACT_LABEL: self.run_id, **(labels or {})},
            },
            "spec": spec,
        }

    async def create_pod(self, name: str, **kwargs: object) -> JsonObject:
        """Create :meth:`pod` and return it as stored."""
        body = self.pod(name, **kwargs)  # type: ignore[arg-type]
        return await self.client.create(PODS, body, namespace=self.namespace)


def contract_settings(kubeconfig: Path, **overrides: object) -> KubeSettings:
    """Settings the suite uses: its kubeconfig, quick backoff so retries stay fast."""
    values: dict[str, object] = {
        "source": "kubeconfig",
        "kubeconfig": kubeconfig,
        "backoff_initial_seconds": 0.01,
        "backoff_max_seconds": 0.2,
        "max_attempts": 4,
        "qps": 0.0,
    }
    values.update(overrides)
    return KubeSettings(**values)  # type: ignore[arg-type]


def _targets() -> list[object]:
    targets: list[object] = ["sim", pytest.param("real", marks=pytest.mark.real_k8s)]
    if os.environ.get(ENV_KUBECONFIG):
        targets.append("external")
    return targets


@pytest.fixture(params=_targets())
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    """The API server: a fresh simulator ("sim"), the session's real control plane ("real"),
    and, when TIDEGATE_TEST_KUBECONFIG names one, that cluster ("external")."""
    if request.param == "external":

        async def nothing_to_expire() -> None:
            # A real server compacts on its own; the tests resume from resourceVersion "1",
            # which any server that has run for a few minutes no longer holds.
            return None

        yield Target(
            kubeconfig=Path(os.environ[ENV_KUBECONFIG]),
            expire_watch_history=nothing_to_expire,
            bookmark_wait_seconds=90.0,
            is_simulator=False,
        )
        return
    if request.param == "real":
        plane: ControlPlane = request.getfixturevalue("real_cluster")

        async def compact_etcd() -> None:
            await asyncio.to_thread(plane.compact)

        yield Target(
            kubeconfig=plane.kubeconfig,
            expire_watch_history=compact_etcd,
            bookmark_wait_seconds=15.0,
            is_simulator=False,
        )
        return
    from tidegate.sim import SimCluster, SimSettings

    settings = SimSettings(
        nodes="1x1x2x8gpu",
        scheduler=False,
        kubelet=False,
        controllers=False,
        install_crds=False,
        bookmark_interval_seconds=0.2,
    )
    async with SimCluster.running(settings) as sim:

        async def compact() -> None:
            sim.store.compact()

        yield Target(
            kubeconfig=sim.write_kubeconfig(tmp_path / "kubeconfig"),
            expire_watch_history=compact,
            bookmark_wait_seconds=5.0,
            is_simulator=True,
        )


@pytest.fixture
async def env(target: Target) -> AsyncIterator[ContractEnv]:
    """A client, a fresh namespace, two labelled Node objects and the CRDs, all cleaned up."""
    run_id = uuid.uuid4().hex[:10]
    namespace = f"tg-contract-{run_id}"
    client = await connect(contract_settings(target.kubeconfig))
    created_crds: list[str] = []
    nodes: list[str] = []
    cluster_objects: list[tuple[ResourceType, str]] = []
    try:
        await client.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        await _ensure_default_service_account(client, namespace)
        for index in range(2):
            name = f"tg-contract-{run_id}-n{index}"
            await client.create(NODES, _node(name, run_id, rack=f"r{index}"))
            nodes.append(name)
        for crd in _crds():
            try:
                await client.create(CRDS, crd)
                created_crds.append(str(crd["metadata"]["name"]))  # type: ignore[index]
            except AlreadyExists:
                pass
        await _wait_served(client, namespace)
        contract = ContractEnv(
            target=target, client=client, namespace=namespace, run_id=run_id, nodes=nodes
        )
        yield contract
        cluster_objects = contract.cluster_objects
    finally:
        await _cleanup(client, namespace, nodes, created_crds, cluster_objects)
        await client.close()


def _node(name: str, run_id: str, *, rack: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {CONTRACT_LABEL: run_id, "tidegate.io/rack": rack},
        },
        "spec": {
            "taints": [
                {"key": CONTRACT_LABEL, "value": run_id, "effect": "NoSchedule"},
            ]
        },
    }


def _crds() -> list[JsonObject]:
    found: list[JsonObject] = [
        document
        for path in sorted(CRD_DIR.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition"
    ]
    if not found:
        raise RuntimeError(f"no CRDs under {CRD_DIR}")
    return [*found, JOBSET_CRD]


async def _ensure_default_service_account(client: KubeClient, namespace: str) -> None:
    # Without controllers nobody creates the "default" ServiceAccount, and a real server's
    # ServiceAccount admission refuses pods until it exists.
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": namespace},
    }
    try:
        await client.create(SERVICEACCOUNTS, body, namespace=namespace)
    except AlreadyExists:
        pass
    except NotFound:
        pass  # a server that does not serve ServiceAccounts does not admit pods by them either


async def _wait_served(client: KubeClient, namespace: str) -> None:
    """Wait until the CRDs' resources answer (a real server needs a moment to establish them)."""
    for _ in range(100):
        try:
            await client.list_objects(PODGROUPS, namespace=namespace, limit=1)
            await client.list_objects(QUEUES, limit=1)
            return
        except NotFound:
            await asyncio.sleep(0.1)
    raise RuntimeError("CRDs were not served within 10 s")


async def _cleanup(
    client: KubeClient,
    namespace: str,
    nodes: list[str],
    created_crds: list[str],
    cluster_objects: list[tuple[ResourceType, str]],
) -> None:
    try:
        for resource, name in cluster_objects:
            with contextlib.suppress(NotFound):
                await client.delete(resource, name)
        pods = await client.list_objects(PODS, namespace=namespace)
        for pod in pods.items:
            name = str(pod["metadata"]["name"])  # type: ignore[index]
            await client.delete_pod(namespace, name, grace_seconds=0, missing_ok=True)
        for name in nodes:
            with contextlib.suppress(NotFound):
                await client.delete(NODES, name)
        # CRDs stay: deleting one is asynchronous on a real server, and the next test's
        # create would race with it (AlreadyExists while it terminates, then not served).
        with contextlib.suppress(NotFound):
            await client.delete(NAMESPACES, namespace)
    except Exception as exc:  # cleanup must not hide the test's own failure
        print(f"contract cleanup of {namespace} incomplete: {exc}")


@contextlib.asynccontextmanager
async def _upstream(kubeconfig: Path) -> AsyncIterator[Upstream]:
    """The target as ``kubeconfig`` reaches it: its TLS, client certificates and token."""
    configuration = Configuration()
    await load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
    )
    rest = RESTClientObject(configuration)

    async def credentials() -> dict[str, str]:
        auth = await configuration.auth_settings()
        if "BearerToken" in auth:
            return {"Authorization": str(auth["BearerToken"]["value"])}
        return {}

    try:
        yield Upstream(
            str(configuration.host), rest.pool_manager, credentials, configuration.tls_server_name
        )
    finally:
        await rest.close()


@pytest.fixture
async def proxy(env: ContractEnv) -> AsyncIterator[KubeFaultProxy]:
    """A fault-injecting HTTP proxy in front of the target."""
    async with _upstream(env.target.kubeconfig) as upstream, kube_fault_proxy(upstream) as running:
        yield running


@pytest.fixture
async def proxied(
    env: ContractEnv, proxy: KubeFaultProxy, tmp_path: Path
) -> AsyncIterator[KubeClient]:
    """A client that talks to the target through :func:`proxy`."""
    kubeconfig = proxy.write_kubeconfig(tmp_path / "proxy-kubeconfig")
    async with await connect(env.settings(kubeconfig=kubeconfig)) as client:
        yield client
