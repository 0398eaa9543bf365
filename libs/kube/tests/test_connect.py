"""connect(): unusable configuration is reported as KubeConfigError naming where it looked."""

from pathlib import Path

import pytest

from tidegate.kube import KubeConfigError, KubeSettings, connect


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


async def test_the_environment_applies_to_requests_only_when_asked(tmp_path: Path) -> None:
    """aiohttp reads proxies and ~/.netrc from the environment (``trust_env``) only when the
    settings say so: off by default, the session does not look ~/.netrc up per request."""
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: secret}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    for asked in (False, True):
        settings = KubeSettings(source="kubeconfig", kubeconfig=path, trust_env=asked)
        client = await connect(settings)
        try:
            session = client._transport._api.rest_client.pool_manager
            assert session.trust_env is asked
        finally:
            await client.close()
    assert KubeSettings().trust_env is False
