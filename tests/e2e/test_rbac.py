"""The chart's RBAC against what the services' code does, on the real API server and on the
simulator (which enforces the same RBAC).

The whole-system tests (test_real_system.py on the real control plane, every
:func:`tests.e2e.system.running_system` scenario on the simulator) fail on any 403. Paths those
scenarios do not reach are driven here directly: the service's own code, as the chart's
ServiceAccount, against the API server. On the simulator the chart can also be rendered with a
grant taken out, to show that the path then fails here (as it did only on a real control plane
before).
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.kube import NAMESPACES, PODGROUPS, PODS, KubeClient, KubeSettings, connect
from tidegate.preemption.evict import EvictionFailed, EvictionSettings, Evictor
from tidegate.preemption.record import PodRef, VictimRecord
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.rbac import service_account_user
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.rbac import RbacUsage

from .chart import Documents, granted, render_chart, service_access, without_grant
from .real import RealSystem

RELEASE_NAMESPACE = "tidegate-system"
WORKLOADS = "team-a"


async def abort_a_podgroup_victim(admin: KubeClient, namespace: str, preemption: Path) -> None:
    """Preemption's abort of a PodGroup gang, as the preemption ServiceAccount (kubeconfig
    ``preemption``): the PodGroup is annotated with the preemptor and its pod evicted. The
    PodGroup and its pod are created first as ``admin``."""
    await admin.create(
        PODGROUPS,
        {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"minMember": 1},
        },
        namespace=namespace,
    )
    pod = await admin.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gang-0", "labels": {"scheduling.k8s.io/group-name": "gang"}},
            "spec": {
                "containers": [{"name": "main", "image": "busybox:1.36"}],
                "schedulingGates": [{"name": "tidegate.io/contract"}],
            },
        },
        namespace=namespace,
    )
    victim = VictimRecord(
        key=f"{namespace}/gang",
        uid="u",
        mode="abort",
        owner_kind="PodGroup",
        owner_api_version="tidegate.io/v1alpha1",
        pods=[PodRef(namespace=namespace, name="gang-0", uid=str(pod["metadata"]["uid"]))],  # type: ignore[index]
    )
    settings = KubeSettings(source="kubeconfig", kubeconfig=preemption, max_attempts=1)
    async with await connect(settings) as as_preemption:
        evictor = Evictor(as_preemption, EvictionSettings(retry_seconds=0))
        await evictor.abort(victim, preemptor=f"{namespace}/serve")
        await evictor.preempt(victim, victim.pods, preemptor=f"{namespace}/serve")
    group = await admin.get(PODGROUPS, "gang", namespace=namespace)
    assert group["metadata"]["annotations"]["tidegate.io/preempted-by"] == f"{namespace}/serve"  # type: ignore[index]


@pytest.mark.real_k8s
async def test_preemption_may_abort_a_podgroup_victim_on_real_kubernetes(
    real_cluster: ControlPlane, tmp_path: Path, rbac_usage: RbacUsage
) -> None:
    admin_settings = KubeSettings(source="kubeconfig", kubeconfig=real_cluster.kubeconfig)
    async with await connect(admin_settings) as admin:
        system = RealSystem.fresh(real_cluster, admin, tmp_path, prefix="tg-rbac")
        await system.install()
        kubeconfig = await real_cluster.service_account_kubeconfig(
            admin,
            system.release_namespace,
            system.accounts["preemption"],
            tmp_path / "preemption.kubeconfig",
        )
        await abort_a_podgroup_victim(admin, system.namespace, kubeconfig)
        system.assert_rbac(rbac_usage)
        await system.close()


class SimWithChart:
    """A bare simulated cluster enforcing the chart's RBAC (as rendered, or edited)."""

    def __init__(self, sim: SimCluster, documents: Documents, admin: KubeClient) -> None:
        self.sim = sim
        self.documents = documents
        self.admin = admin
        self.access = service_access(RELEASE_NAMESPACE, documents)

    def kubeconfig(self, service: str, path: Path) -> Path:
        """A kubeconfig with a token of ``service``'s ServiceAccount."""
        namespace, name = self.access.accounts[service]
        return self.sim.service_account_kubeconfig(namespace, name, path)

    def user(self, service: str) -> str:
        """The user name ``service`` authenticates as."""
        return service_account_user(*self.access.accounts[service]).name


@contextlib.asynccontextmanager
async def sim_with_chart(tmp_path: Path, documents: Documents) -> AsyncIterator[SimWithChart]:
    """A bare simulator enforcing RBAC with the chart's RBAC objects loaded, an admin client
    and the workloads' namespace."""
    settings = SimSettings(nodes=None, scheduler=False, kubelet=False, controllers=False, rbac=True)
    async with SimCluster.running(settings) as sim:
        sim.load(list(service_access(RELEASE_NAMESPACE, documents).documents))
        admin_settings = KubeSettings(kubeconfig=sim.write_kubeconfig(tmp_path / "admin"))
        async with await connect(admin_settings) as admin:
            await admin.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKLOADS}},
            )
            yield SimWithChart(sim, documents, admin)


async def test_preemption_may_abort_a_podgroup_victim_on_the_simulator(
    tmp_path: Path, rbac_usage: RbacUsage
) -> None:
    documents = render_chart(RELEASE_NAMESPACE, "c")
    async with sim_with_chart(tmp_path, documents) as system:
        kubeconfig = system.kubeconfig("preemption", tmp_path / "kc")
        await abort_a_podgroup_victim(system.admin, WORKLOADS, kubeconfig)
        assert system.sim.access.log.denied == []
        used = system.sim.access.log.used[system.user("preemption")]
    assert {("tidegate.io", "podgroups", "patch"), ("", "pods/eviction", "create")} <= used
    rbac_usage.add({"preemption": granted(documents)["preemption"]}, {"preemption": used})


@pytest.mark.parametrize(
    ("group", "resource", "verb", "path"),
    [
        ("tidegate.io", "podgroups", "patch", "/apis/tidegate.io/v1alpha1/namespaces/{ns}/podgroups/gang"),
        ("", "pods/eviction", "create", "/api/v1/namespaces/{ns}/pods/gang-0/eviction"),
    ],
)  # fmt: skip
async def test_without_a_grant_it_uses_preemption_is_refused_on_the_simulator(
    tmp_path: Path, group: str, resource: str, verb: str, path: str
) -> None:
    documents = without_grant("preemption", group, resource, verb)(
        render_chart(RELEASE_NAMESPACE, "c")
    )
    async with sim_with_chart(tmp_path, documents) as system:
        kubeconfig = system.kubeconfig("preemption", tmp_path / "kc")
        with pytest.raises(EvictionFailed) as failed:
            await abort_a_podgroup_victim(system.admin, WORKLOADS, kubeconfig)
        denied = system.sim.access.log.denied
    assert denied == [f"{system.user('preemption')}: {verb} {path.format(ns=WORKLOADS)}"]
    assert f'cannot {verb} resource "{resource}" in API group "{group}"' in str(failed.value)


def test_the_chart_renders_a_role_for_every_service_that_calls_kubernetes() -> None:
    roles = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]
        for doc in render_chart("tidegate", "c")
        if doc["kind"] == "ClusterRole"
    }
    assert roles == {"watcher", "ungater", "preemption"}
