"""The chart's RBAC against what the services' code does, on the simulator enforcing it.

Every whole-system scenario on the simulator (:func:`tests.e2e.system.running_system`) runs the
services as the chart's ServiceAccounts and fails on any 403. Paths those scenarios do not
reach are driven here directly, as on the real API server in test_real_rbac.py (the same
bodies, tests/e2e/service_paths.py); and the chart is rendered with a grant taken out to show
the path then fails here, where before only a real control plane noticed (a missing ``patch
podgroups``).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tidegate.bus import BusSettings
from tidegate.bus import connect as connect_bus
from tidegate.kube import NAMESPACES, KubeClient, KubeSettings, connect
from tidegate.preemption.evict import EvictionFailed
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.rbac import service_account_user
from tidegate.testing.rbac import RbacUsage
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import WatcherSettings

from .chart import Documents, granted, render_chart, service_access, without_grant
from .service_paths import abort_a_podgroup_victim
from .system import chart_rbac, running_system
from .tidal import PRIORITY_CLASSES, QUEUES, training

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


@pytest.mark.slow(20)
@pytest.mark.timeout(180)
async def test_a_whole_system_run_fails_when_the_chart_lacks_a_grant_the_ungater_uses(
    tmp_path: Path,
) -> None:
    """Without ``patch pods`` the ungater cannot release an admitted gang: the run on the
    simulator fails at once, naming the refused request, instead of waiting for pods that
    never run."""
    edit = without_grant("ungater", "", "pods", "patch")
    with pytest.raises(AssertionError, match="the API server refused") as failed:
        await run_one_gang(tmp_path, edit)
    refusal = f"{service_account_user(*chart_rbac(edit)[1].accounts['ungater']).name}: patch"
    assert refusal in str(failed.value)
    assert "timed out" not in str(failed.value)


async def run_one_gang(tmp_path: Path, chart_edit: Callable[[Documents], Documents]) -> None:
    """The whole system on the simulator under the edited chart: one training gang submitted
    and waited for until it runs."""
    async with running_system(
        tmp_path, nodes="1x1x2x8gpu", time_scale=0.02, namespace="rbac", chart_edit=chart_edit
    ) as system:
        await system.set_up(priority_classes=PRIORITY_CLASSES, queues=QUEUES)
        await system.submit(training("train", pods=2, duration=None))
        await system.until(lambda: system.running("train", 2), within=60, what="the gang running")


QUEUE_KINDS = {
    ("tidegate.io", "cohorts"),
    ("kueue.x-k8s.io", "clusterqueues"),
    ("kueue.x-k8s.io", "localqueues"),
    ("kueue.x-k8s.io", "cohorts"),
    ("kueue.x-k8s.io", "resourceflavors"),
    ("scheduling.volcano.sh", "queues"),
    ("scheduling.run.ai", "queues"),
}
"""The queue kinds the watcher reads besides tidegate's Queue (docs/queues.md)."""


async def run_watcher(
    system: SimWithChart, tmp_path: Path, nats_url: str, cluster_id: str
) -> Watcher:
    """The watcher as the chart's ServiceAccount until it is ready or 10 s have passed."""
    kube = await connect(KubeSettings(kubeconfig=system.kubeconfig("watcher", tmp_path / "w")))
    bus = await connect_bus(BusSettings(servers=(nats_url,)))
    watcher = Watcher(
        bus=bus, kube=kube, settings=WatcherSettings(cluster=cluster_id, absent_retry_seconds=60)
    )
    task = asyncio.create_task(watcher.run())
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(watcher.ready.wait()), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await bus.drain()
        await kube.close()
    return watcher


async def test_the_watcher_reads_every_queue_kind_under_the_charts_rbac(
    tmp_path: Path, nats_url: str, cluster_id: str, rbac_usage: RbacUsage
) -> None:
    documents = render_chart(RELEASE_NAMESPACE, "c")
    async with sim_with_chart(tmp_path, documents) as system:
        watcher = await run_watcher(system, tmp_path, nats_url, cluster_id)
        assert watcher.ready.is_set()
        assert watcher.unavailable == {}
        assert system.sim.access.log.denied == []
        used = system.sim.access.log.used[system.user("watcher")]
    # Listed before ready (a watch follows each list, maybe after the watcher was stopped).
    assert {(group, resource, "list") for group, resource in QUEUE_KINDS} <= used
    rbac_usage.add({"watcher": granted(documents)["watcher"]}, {"watcher": used})


async def test_without_a_grant_on_a_queue_kind_the_watcher_holds_back(
    tmp_path: Path, nats_url: str, cluster_id: str
) -> None:
    """A queue kind the chart did not grant is refused: the watcher does not publish a
    reconciliation that would lack those queues, and says which kind it cannot list."""
    documents = without_grant("watcher", "scheduling.run.ai", "queues", "list")(
        render_chart(RELEASE_NAMESPACE, "c")
    )
    async with sim_with_chart(tmp_path, documents) as system:
        watcher = await run_watcher(system, tmp_path, nats_url, cluster_id)
    assert not watcher.ready.is_set()
    assert set(watcher.unavailable) == {"KaiQueue"}
    assert "listing scheduling.run.ai/v2 queues failed" in watcher.unavailable["KaiQueue"]
