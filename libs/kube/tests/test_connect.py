"""connect(): unusable configuration is reported as KubeConfigError naming where it looked."""

import os
from pathlib import Path

import pytest

from tidegate.kube import KubeConfigError, KubeSettings, connect
from tidegate.kube.client import uses_environment


async def test_missing_kubeconfig(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(KubeConfigError, match=r"nope\.yaml"):
        await connect(KubeSettings(source="kubeconfig", kubeconfig=missing))


async def test_kubeconfig_without_the_context(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\ncurrent-context: ''\n"
    )
    with pytest.raises(KubeConfigError, match="kubeconfig"):
        await connect(KubeSettings(source="kubeconfig", kubeconfig=path, context="elsewhere"))


async def test_in_cluster_outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="in-cluster"):
        await connect(KubeSettings(source="in-cluster"))


async def test_a_good_kubeconfig_gives_a_client(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: secret}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    client = await connect(KubeSettings(source="kubeconfig", kubeconfig=path, user_agent="t/1"))
    try:
        assert client.host == "http://127.0.0.1:9"
    finally:
        await client.close()


def test_the_environment_is_used_only_when_it_holds_a_proxy_or_a_netrc(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert not uses_environment(home)
    assert uses_environment({**home, "HTTPS_PROXY": "http://proxy:3128"})
    assert uses_environment({**home, "no_proxy": "10.0.0.0/8"})
    (tmp_path / ".netrc").write_text("machine api login u password p\n")
    assert uses_environment(home)
    assert uses_environment({"HOME": "/nonexistent", "NETRC": str(tmp_path / ".netrc")})


@pytest.mark.parametrize("proxy", [None, "http://127.0.0.1:3128"])
async def test_the_session_trusts_the_environment_only_when_it_has_something(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: str | None
) -> None:
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    if proxy is not None:
        monkeypatch.setenv("HTTPS_PROXY", proxy)
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: secret}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    client = await connect(KubeSettings(source="kubeconfig", kubeconfig=path))
    try:
        assert client.transport.trusts_environment is (proxy is not None)
    finally:
        await client.close()
