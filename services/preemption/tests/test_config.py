"""Settings validation, owner resource types for abort mode, capacity subjects."""

import pytest

from tidegate.kube import JOBS
from tidegate.preemption.config import Settings
from tidegate.preemption.evict import owner_resource
from tidegate.preemption.handlers import capacity_topology
from tidegate.runtime import SettingsError, load_settings


def test_defaults_are_valid_and_feed_the_parts() -> None:
    settings = Settings()
    assert settings.eviction().rate_per_second == 20.0
    assert settings.eviction().grace_seconds is None
    assert settings.victims().step_budget == settings.search_step_budget
    assert settings.kube_settings().user_agent == "tidegate-preemption"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("TIDEGATE_EVICTION_CONCURRENCY", "0", "out of range"),
        ("TIDEGATE_EVICTIONS_PER_SECOND", "-1", "out of range"),
        ("TIDEGATE_EVICTION_GRACE_SECONDS", "-5", "must not be negative"),
        ("TIDEGATE_LEASE_TTL_SECONDS", "0.5", "at least 1"),
        ("TIDEGATE_NOMINATION_TIMEOUT_SECONDS", "0", "out of range"),
        ("TIDEGATE_KUBE_BURST", "0", "must be an integer >= 1"),
        ("TIDEGATE_DEFAULT_TOPOLOGY", " ", "must not be blank"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(Settings, env={variable: value})
    assert caught.value.setting == variable
    assert problem in caught.value.problem


def test_an_empty_grace_means_each_pods_own() -> None:
    settings = load_settings(Settings, env={"TIDEGATE_EVICTION_GRACE_SECONDS": ""})
    assert settings.eviction_grace_seconds is None


def test_owner_resources_of_victims() -> None:
    assert owner_resource("Job", "batch/v1") == JOBS
    jobset = owner_resource("JobSet", "jobset.x-k8s.io/v1beta1")
    assert jobset is not None
    assert (jobset.group, jobset.version, jobset.plural) == (
        "jobset.x-k8s.io",
        "v1beta1",
        "jobsets",
    )
    podgroup = owner_resource("PodGroup", "scheduling.x-k8s.io/v1alpha1")
    assert podgroup is not None
    assert podgroup.path(namespace="a", name="b") == (
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/a/podgroups/b"
    )
    pod = owner_resource("Pod", "v1")
    assert pod is not None
    assert pod.plural == "pods"
    assert owner_resource("Mystery", "") is None


def test_capacity_subjects_name_their_topology() -> None:
    assert capacity_topology("tg.c.capacity.default.node.n1") == "default"
    assert capacity_topology("tg.c.capacity.gpu%2Ea.node.n1") == "gpu.a"
    assert capacity_topology("tg.c.capacity.default.domain.0.b0") is None
