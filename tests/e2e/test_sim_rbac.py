"""The chart's RBAC against what the services' code does, on the simulator enforcing it.

Every whole-system scenario on the simulator (:func:`tests.e2e.system.running_system`) runs the
services as the chart's ServiceAccounts and fails on any 403. Paths those scenarios do not
reach are driven here directly, as on the real API server in test_real_rbac.py (the same
bodies, tests/e2e/service_paths.py); and the chart is rendered with a grant taken out to show
the path then fails here, where before only a real control plane noticed (a missing ``patch
podgroups``).
"""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.kube import NAMESPACES, KubeClient, KubeSettings, connect
from tidegate.preemption.evict import EvictionFailed
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.rbac import service_account_user
from tidegate.testing.rbac import RbacUsage

from .chart import Documents, granted, render_chart, service_access, without_grant
from .service_paths import abort_a_podgroup_victim

RELEASE_NAMESPACE = "tidegate-system"
WORKLOADS = "team-a"


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
