"""The session's real control plane: binaries unpacked once, RBAC, TokenRequest, the audit log."""

import hashlib
import lzma
import uuid
from pathlib import Path

import pytest

from tidegate.kube import NAMESPACES, PODS, Forbidden, KubeSettings, ResourceType, connect
from tidegate.testing.controlplane import (
    BINARIES,
    ControlPlane,
    ControlPlaneError,
    unpack_binaries,
)

SERVICEACCOUNTS = ResourceType(
    group="", version="v1", plural="serviceaccounts", kind="ServiceAccount"
)
ROLES = ResourceType(group="rbac.authorization.k8s.io", version="v1", plural="roles", kind="Role")
ROLEBINDINGS = ResourceType(
    group="rbac.authorization.k8s.io", version="v1", plural="rolebindings", kind="RoleBinding"
)


def packed_binaries(directory: Path, *, wrong_sum: str | None = None) -> Path:
    directory.mkdir()
    sums = []
    for name in BINARIES:
        content = f"#!/bin/sh\necho {name}\n".encode()
        (directory / f"{name}.xz").write_bytes(lzma.compress(content))
        digest = hashlib.sha256(content).hexdigest()
        sums.append(f"{'0' * 64 if name == wrong_sum else digest}  {name}")
    (directory / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return directory


def test_unpack_checks_sums_and_reuses_the_cache(tmp_path: Path) -> None:
    source = packed_binaries(tmp_path / "src")
    unpacked = unpack_binaries(source, tmp_path / "cache")
    assert sorted(p.name for p in unpacked.iterdir()) == sorted([*BINARIES, "SHA256SUMS"])
    assert (unpacked / "etcd").read_text() == "#!/bin/sh\necho etcd\n"
    mtime = (unpacked / "etcd").stat().st_mtime_ns
    assert unpack_binaries(source, tmp_path / "cache") == unpacked
    assert (unpacked / "etcd").stat().st_mtime_ns == mtime  # reused, not unpacked again

    bad = packed_binaries(tmp_path / "bad", wrong_sum="kube-scheduler")
    with pytest.raises(ControlPlaneError, match="does not match its checksum"):
        unpack_binaries(bad, tmp_path / "cache2")
    assert not list((tmp_path / "cache2").glob("*/kube-scheduler"))


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
