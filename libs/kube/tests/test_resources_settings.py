"""Resource paths and settings validation."""

from pathlib import Path

import pytest

from tidegate.kube import (
    JOBS,
    NODES,
    PODS,
    QUEUES,
    KubeConfigError,
    KubeSettings,
    resource_for_kind,
)


def test_core_and_group_paths() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path(namespace="ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path(namespace="ns", name="p", subresource="eviction") == (
        "/api/v1/namespaces/ns/pods/p/eviction"
    )
    assert NODES.path(name="n1") == "/api/v1/nodes/n1"
    assert JOBS.path(namespace="a", name="j") == "/apis/batch/v1/namespaces/a/jobs/j"
    assert (
        QUEUES.path(name="q", subresource="status") == "/apis/tidegate.io/v1alpha1/queues/q/status"
    )
    assert QUEUES.api_version == "tidegate.io/v1alpha1"
    assert PODS.api_version == "v1"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: PODS.path(name="p"), "namespaced"),
        (lambda: NODES.path(namespace="x"), "cluster-scoped"),
        (lambda: PODS.path(namespace="ns", name="a/b"), "not a valid"),
        (lambda: PODS.path(namespace="ns", subresource="status"), "subresource"),
    ],
)
def test_bad_addresses(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_kind_lookup() -> None:
    assert resource_for_kind("Job") is JOBS
    with pytest.raises(ValueError, match="'Widget'"):
        resource_for_kind("Widget")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"qps": -1.0}, "qps"),
        ({"burst": 0}, "burst"),
        ({"request_timeout_seconds": 0.0}, "request_timeout_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"source": "cloud"}, "source"),
    ],
)
def test_settings_name_the_bad_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(KubeConfigError, match=f"^{field}:"):
        KubeSettings(**kwargs)  # type: ignore[arg-type]


def test_settings_from_env() -> None:
    settings = KubeSettings.from_env(
        {"TIDEGATE_KUBE_QPS": "5", "TIDEGATE_KUBE_KUBECONFIG": "/k", "TIDEGATE_KUBE_BURST": "7"}
    )
    assert settings.qps == 5.0
    assert settings.burst == 7
    assert settings.kubeconfig == Path("/k")
    with pytest.raises(KubeConfigError, match="TIDEGATE_KUBE_BURST"):
        KubeSettings.from_env({"TIDEGATE_KUBE_BURST": "many"})
