"""The session's real control plane: RBAC, TokenRequest, the audit log."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tidegate.kube import NAMESPACES, PODS, Forbidden, KubeSettings, ResourceType, connect
from tidegate.testing.controlplane import ControlPlane

SERVICEACCOUNTS = ResourceType(
    group="", version="v1", plural="serviceaccounts", kind="ServiceAccount"
)
ROLES = ResourceType(group="rbac.authorization.k8s.io", version="v1", plural="roles", kind="Role")
ROLEBINDINGS = ResourceType(
    group="rbac.authorization.k8s.io", version="v1", plural="rolebindings", kind="RoleBinding"
)


@pytest.mark.real_k8s
async def test_service_account_tokens_are_authorized_by_rbac_and_audited(
    real_cluster: ControlPlane, tmp_path: Path
) -> None:
    namespace = f"tg-cp-{uuid.uuid4().hex[:8]}"
    admin_settings = KubeSettings(source="kubeconfig", kubeconfig=real_cluster.kubeconfig)
    async with await connect(admin_settings) as admin:
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await admin.create(
            SERVICEACCOUNTS,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
            namespace=namespace,
        )
        kubeconfig = await real_cluster.service_account_kubeconfig(
            admin, namespace, "reader", tmp_path / "reader.kubeconfig"
        )
        settings = KubeSettings(source="kubeconfig", kubeconfig=kubeconfig, max_attempts=1)
        async with await connect(settings) as reader:
            with pytest.raises(Forbidden):
                await reader.list_objects(PODS, namespace=namespace)
            await admin.create(
                ROLES,
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": "read-pods"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
                },
                namespace=namespace,
            )
            await admin.create(
                ROLEBINDINGS,
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "reader"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "read-pods",
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": "reader", "namespace": namespace}
                    ],
                },
                namespace=namespace,
            )
            assert (await reader.list_objects(PODS, namespace=namespace)).items == []
        await admin.delete(NAMESPACES, namespace)
    user = f"system:serviceaccount:{namespace}:reader"
    decisions = [
        (event["verb"], event["objectRef"]["resource"], event["responseStatus"]["code"])  # type: ignore[index]
        for event in real_cluster.audit_events()
        if event["user"]["username"] == user  # type: ignore[index]
    ]
    assert decisions == [("list", "pods", 403), ("list", "pods", 200)]


CHILD = """
import sys, time
from pathlib import Path
from tidegate.testing.controlplane import ControlPlane
plane = ControlPlane.start(Path(sys.argv[1]), Path(sys.argv[2]))
print(" ".join(str(pid) for pid in plane.pids().values()), flush=True)
time.sleep(600)
"""


@pytest.mark.real_k8s
@pytest.mark.slow
def test_no_component_outlives_a_killed_test_process(
    real_cluster: ControlPlane, tmp_path: Path
) -> None:
    # The session's binaries; a second control plane in a child process, killed with SIGKILL.
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(real_cluster.binaries), str(tmp_path / "plane")],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            pids = [int(p) for p in child.stdout.readline().split()]
            assert len(pids) == 4
        finally:
            child.kill()
            child.wait()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie is gone too: it no longer runs
        stat = Path(f"/proc/{pid}/stat")
        return not stat.exists() or stat.read_text().split()[2] == "Z"

    deadline = time.monotonic() + 20.0
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"components still running: {pids}"
        time.sleep(0.1)
