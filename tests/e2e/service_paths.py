"""Service code paths the whole-system scenarios do not reach, driven directly as the service's
ServiceAccount: the same body on the real control plane (test_real_rbac.py) and on the
simulator enforcing the chart's RBAC (test_sim_rbac.py).
"""

from pathlib import Path

from tidegate.kube import PODGROUPS, PODS, KubeClient, KubeSettings, connect
from tidegate.model.ledger import PodRef, VictimRecord
from tidegate.preemption.evict import EvictionSettings, Evictor


async def abort_a_podgroup_victim(admin: KubeClient, namespace: str, preemption: Path) -> None:
    """Preemption's abort of a PodGroup gang, as the preemption ServiceAccount (kubeconfig
    ``preemption``): the PodGroup is annotated with the preemptor and its pod evicted. The
    PodGroup and its pod are created first as ``admin``."""
    group = await admin.create(
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
        uid=str(group["metadata"]["uid"]),  # type: ignore[index]
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
