"""The chart's RBAC against what the services' code does on a real API server.

The whole-system tests (test_real_system.py) fail on any 403 and on any request no grant of
the chart covers, read from the API server's audit log. Paths those scenarios do not reach are
driven here directly: the service's own code, as the chart's ServiceAccount (a TokenRequest
token), against the real API server. test_sim_rbac.py drives the same paths on the simulator.
"""

from pathlib import Path

import pytest

from tidegate.kube import KubeSettings, connect
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.rbac import RbacUsage

from .chart import render_chart
from .real import RealSystem
from .service_paths import abort_a_podgroup_victim

pytestmark = [pytest.mark.real_k8s]


async def test_preemption_may_abort_a_podgroup_victim(
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


def test_the_chart_renders_a_role_for_every_service_that_calls_kubernetes() -> None:
    roles = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]
        for doc in render_chart("tidegate", "c")
        if doc["kind"] == "ClusterRole"
    }
    assert roles == {"watcher", "ungater", "preemption"}
