"""The chart's RBAC against what the services' code does on a real API server.

The whole-system tests (test_real_system.py) fail on any 403 and on any request no grant of
the chart covers, read from the API server's audit log. Paths those scenarios do not reach are
driven here directly: the service's own code, as the chart's ServiceAccount (a TokenRequest
token), against the real API server.
"""

from pathlib import Path

import pytest

from tidegate.kube import PODGROUPS, PODS, KubeSettings, connect
from tidegate.preemption.evict import EvictionSettings, Evictor
from tidegate.preemption.record import PodRef, VictimRecord
from tidegate.testing.controlplane import ControlPlane
from tidegate.testing.rbac import RbacUsage

from .real import RealSystem, render_chart

pytestmark = [pytest.mark.real_k8s]


async def test_preemption_may_abort_a_podgroup_victim(
    real_cluster: ControlPlane, tmp_path: Path, rbac_usage: RbacUsage
) -> None:
    admin_settings = KubeSettings(source="kubeconfig", kubeconfig=real_cluster.kubeconfig)
    async with await connect(admin_settings) as admin:
        system = RealSystem.fresh(real_cluster, admin, tmp_path, prefix="tg-rbac")
        await system.install()
        ns = system.namespace
        await admin.create(
            PODGROUPS,
            {
                "apiVersion": "tidegate.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "gang"},
                "spec": {"minMember": 1},
            },
            namespace=ns,
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
            namespace=ns,
        )
        kubeconfig = await real_cluster.service_account_kubeconfig(
            admin,
            system.release_namespace,
            system.accounts["preemption"],
            tmp_path / "preemption.kubeconfig",
        )
        victim = VictimRecord(
            key=f"{ns}/gang",
            uid="u",
            mode="abort",
            owner_kind="PodGroup",
            owner_api_version="tidegate.io/v1alpha1",
            pods=[PodRef(namespace=ns, name="gang-0", uid=str(pod["metadata"]["uid"]))],  # type: ignore[index]
        )
        settings = KubeSettings(source="kubeconfig", kubeconfig=kubeconfig, max_attempts=1)
        async with await connect(settings) as as_preemption:
            evictor = Evictor(as_preemption, EvictionSettings(retry_seconds=0))
            await evictor.abort(victim, preemptor=f"{ns}/serve")
            await evictor.preempt(victim, victim.pods, preemptor=f"{ns}/serve")
        group = await admin.get(PODGROUPS, "gang", namespace=ns)
        assert group["metadata"]["annotations"]["tidegate.io/preempted-by"] == f"{ns}/serve"  # type: ignore[index]
        system.assert_rbac(rbac_usage)
        await system.close()


def test_the_chart_renders_a_role_for_every_service_that_calls_kubernetes() -> None:
    roles = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]
        for doc in render_chart("tidegate", "c")
        if doc["kind"] == "ClusterRole"
    }
    assert roles == {"watcher", "ungater", "preemption"}
