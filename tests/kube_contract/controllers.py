"""A cluster WITH controllers for the controller contract (tests/kube_contract/test_controllers.py).

The rest of tests/kube_contract runs on a bare API server. These tests are about what the
controllers tidegate lives beside do (Job, ReplicaSet/Deployment, disruption, namespace, node
lifecycle, the scheduler, graceful deletion), so each gets a whole control plane:

- ``sim``: a fresh simulator with all of its control plane (scheduler, kubelets, controllers),
  its webhook emulation off, in real time (``time_scale`` 1: grace periods and
  ``tolerationSeconds`` mean wall seconds, as on a real cluster);
- ``real`` (marked ``real_k8s``): the session's kube-apiserver, kube-controller-manager and
  kube-scheduler; ``external``: the cluster TIDEGATE_TEST_KUBECONFIG names. Neither has a
  kubelet for the test's nodes, so :func:`tidegate.cli.nodeagent.fake_nodes` registers two and
  plays their kubelets (Ready, Leases, pods run, graceful deletions confirmed).

Either way a test gets two 8-GPU nodes labelled with its run id (its pods select them), its own
namespace, and :meth:`ControllerCluster.kubelet_down` / :meth:`ControllerCluster.kubelet_up`.
Differences between the backends live here only, never in the test bodies.
"""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidegate.kube import (
    NAMESPACES,
    NODES,
    PODS,
    AlreadyExists,
    KubeClient,
    NotFound,
    ResourceType,
    connect,
)
from tidegate.testing import until_async

from .conftest import CONTRACT_LABEL, SERVICEACCOUNTS, contract_settings

JsonObject = dict[str, Any]
NODE_COUNT = 2
LAYOUT = "1x1x2x8gpu"


@dataclass
class ControllerCluster:
    """One test's cluster with controllers: a client, a namespace, two nodes."""

    kube: KubeClient
    namespace: str
    run_id: str
    nodes: list[str]
    kubeconfig: Path
    _down: Callable[[str], None]
    _up: Callable[[str], None]

    @property
    def selector(self) -> dict[str, str]:
        """The nodeSelector that keeps a pod on this test's nodes."""
        return {CONTRACT_LABEL: self.run_id}

    async def kubelet_down(self, node: str) -> None:
        """The node's kubelet stops (no heartbeat, no pod touched) after posting Ready=False,
        as a kubelet that finds itself unhealthy does."""
        self._down(node)
        await self._post_ready(node, ready=False)

    async def kubelet_up(self, node: str) -> None:
        """The node's kubelet is back and posts Ready=True."""
        self._up(node)
        await self._post_ready(node, ready=True)

    async def _post_ready(self, node: str, *, ready: bool) -> None:
        condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "set by the controller contract",
        }
        await self.kube.patch(
            NODES,
            node,
            {"status": {"conditions": [condition]}},
            patch_type="strategic",
            subresource="status",
        )

    async def pods(self, selector: str) -> list[JsonObject]:
        """This namespace's pods matching a label selector, Terminating ones included."""
        listed = await self.kube.list_objects(
            PODS, namespace=self.namespace, label_selector=selector
        )
        return [dict(p) for p in listed.items]

    def template(
        self,
        app: str,
        *,
        gpus: int = 0,
        grace: int = 0,
        seconds: float | None = None,
        tolerations: list[JsonObject] | None = None,
        node: str | None = None,
        restart: str = "Never",
    ) -> JsonObject:
        """A pod template on this test's nodes: label ``app``, ``gpus`` GPUs, a grace period,
        a run time (``tidegate.io/sim-duration-seconds``; forever when None)."""
        annotations = (
            {} if seconds is None else {"tidegate.io/sim-duration-seconds": f"{seconds:g}"}
        )
        requests: JsonObject = {"cpu": "100m"}
        limits: JsonObject = {}
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
            limits["nvidia.com/gpu"] = str(gpus)
        selector = dict(self.selector)
        if node is not None:
            selector["kubernetes.io/hostname"] = node
        spec: JsonObject = {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "nodeSelector": selector,
            # The test's nodes carry the contract taint (so other tests' pods stay off them).
            "tolerations": [
                {"key": CONTRACT_LABEL, "operator": "Exists", "effect": "NoSchedule"},
                *(tolerations or []),
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, **({"limits": limits} if limits else {})},
                }
            ],
        }
        return {"metadata": {"labels": {"app": app}, "annotations": annotations}, "spec": spec}

    def pod(self, name: str, **kwargs: Any) -> JsonObject:
        """A bare pod from :meth:`template`."""
        template = self.template(name, **kwargs)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **template["metadata"]},
            "spec": template["spec"],
        }

    async def wait(
        self, check: Callable[[], Awaitable[Any]], what: str, within: float = 60.0
    ) -> Any:
        """Wait for ``check`` to return something truthy (and return it)."""
        return await until_async(check, within=within, what=what, interval=0.1)

    async def wait_gone(
        self, resource: ResourceType, name: str, what: str, *, namespace: str | None = None
    ) -> None:
        """Wait until the object ``name`` no longer exists."""

        async def gone() -> bool:
            try:
                await self.kube.get(resource, name, namespace=namespace)
            except NotFound:
                return True
            return False

        await self.wait(gone, what)


@contextlib.asynccontextmanager
async def sim_cluster(tmp_path: Path, *, kubelets: bool) -> AsyncIterator[Path]:
    """A simulator with its whole control plane (without nodes and kubelets unless
    ``kubelets``); yields its kubeconfig."""
    from tidegate.sim import SimCluster, SimSettings

    settings = SimSettings(
        nodes=LAYOUT if kubelets else None,
        kubelet=kubelets,
        admission_gate=False,
        time_scale=1.0,
    )
    async with SimCluster.running(settings) as sim:
        yield sim.write_kubeconfig(tmp_path / "kubeconfig")


@contextlib.asynccontextmanager
async def controller_cluster(
    backend: str, kubeconfig: Path | None, tmp_path: Path
) -> AsyncIterator[ControllerCluster]:
    """The cluster for one test on ``backend``: "sim", "sim-agent" (the simulator's
    controllers with the node agent as kubelets: the real backend's path, run where no real
    cluster is), "real" or "external" (``kubeconfig`` is theirs)."""
    run_id = uuid.uuid4().hex[:8]
    async with contextlib.AsyncExitStack() as stack:
        agent: Any = None
        if backend in ("sim", "sim-agent"):
            kubeconfig = await stack.enter_async_context(
                sim_cluster(tmp_path, kubelets=backend == "sim")
            )
        assert kubeconfig is not None
        kube = await stack.enter_async_context(await connect(contract_settings(kubeconfig)))
        if backend == "sim":
            listed = await kube.list_objects(NODES)
            nodes = sorted(str(n["metadata"]["name"]) for n in listed.items)[:NODE_COUNT]
            for name in nodes:
                await kube.patch(NODES, name, _contract_node(run_id), patch_type="strategic")
        else:
            from tidegate.cli.nodeagent import AgentSettings, fake_nodes

            settings = AgentSettings(
                nodes=LAYOUT,
                prefix=f"c{run_id}-",
                labels={CONTRACT_LABEL: run_id},
                delete_nodes_on_exit=True,
                # Node status is posted again within a second of anyone else's change.
                status_interval_seconds=5.0,
                renew_interval_seconds=2.0,
            )
            agent = await stack.enter_async_context(fake_nodes(kubeconfig, settings))
            nodes = list(agent.node_names)
            # Tainted once Ready: before, the not-ready taint is there, which a patch of
            # spec.taints would replace.
            await agent.wait_ready(timeout_seconds=90)
            for name in nodes:
                await kube.patch(
                    NODES, name, {"spec": _contract_node(run_id)["spec"]}, patch_type="strategic"
                )
        namespace = f"tg-ctl-{run_id}"
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await _default_service_account(kube, namespace)
        cluster = ControllerCluster(
            kube=kube,
            namespace=namespace,
            run_id=run_id,
            nodes=nodes,
            kubeconfig=kubeconfig,
            _down=(lambda _n: None) if agent is None else agent.kubelet_down,
            _up=(lambda _n: None) if agent is None else agent.kubelet_up,
        )
        try:
            yield cluster
        finally:
            await _clean(kube, namespace)


def _contract_node(run_id: str) -> JsonObject:
    """The label and taint of a test's nodes (other tests' pods stay off them)."""
    return {
        "metadata": {"labels": {CONTRACT_LABEL: run_id}},
        "spec": {"taints": [{"key": CONTRACT_LABEL, "value": run_id, "effect": "NoSchedule"}]},
    }


async def _default_service_account(kube: KubeClient, namespace: str) -> None:
    """A real server's ServiceAccount admission refuses pods until "default" exists (its
    controller makes it within a moment; the simulator has none)."""
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": namespace},
    }
    with contextlib.suppress(AlreadyExists, NotFound):
        await kube.create(SERVICEACCOUNTS, body, namespace=namespace)


async def _clean(kube: KubeClient, namespace: str) -> None:
    """Delete the namespace's pods with grace 0 (its kubelets stop with the test), then it."""
    try:
        with contextlib.suppress(NotFound):
            for pod in (await kube.list_objects(PODS, namespace=namespace)).items:
                await kube.delete_pod(
                    namespace, str(pod["metadata"]["name"]), grace_seconds=0, missing_ok=True
                )
            await kube.delete(NAMESPACES, namespace)
    except Exception as exc:  # cleanup must not hide the test's own failure
        print(f"controller contract: cleanup of {namespace} incomplete: {exc}")
    await asyncio.sleep(0)
