"""The watcher's settings: read from the environment, bad values named."""

import pytest

from tidegate.runtime import SettingsError, load_settings
from tidegate.watcher.config import WatcherSettings


def test_settings_from_the_environment() -> None:
    settings = load_settings(
        WatcherSettings,
        env={
            "TIDEGATE_CLUSTER": "prod",
            "TIDEGATE_OWNER_KIND_SERVICE_TYPES": "Deployment=inference, MPIJob=training",
            "TIDEGATE_BATCH_MAX_EVENTS": "10",
            "TIDEGATE_KUBECONFIG": "/etc/kube/config",
            "TIDEGATE_KUBE_QPS": "5",
        },
    )
    assert settings.cluster == "prod"
    assert settings.service_type_map == {"Deployment": "inference", "MPIJob": "training"}
    assert settings.batch_max_events == 10
    kube = settings.kube_settings()
    assert (str(kube.kubeconfig), kube.qps) == ("/etc/kube/config", 5.0)
    assert WatcherSettings().service_type_map["JobSet"] == "training"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TIDEGATE_CLUSTER": "Prod_1"},
            "TIDEGATE_CLUSTER: cluster id 'Prod_1' must be a DNS label",
        ),
        (
            {"TIDEGATE_OWNER_KIND_SERVICE_TYPES": "Job=batch"},
            "TIDEGATE_OWNER_KIND_SERVICE_TYPES: ['Job']: 'batch' is not a service type",
        ),
        (
            {"TIDEGATE_OWNER_KIND_SERVICE_TYPES": "Job"},
            "TIDEGATE_OWNER_KIND_SERVICE_TYPES: 'Job' is not Kind=service-type",
        ),
        (
            {"TIDEGATE_BATCH_MAX_EVENTS": "many"},
            "TIDEGATE_BATCH_MAX_EVENTS: 'many' is not an integer",
        ),
        ({"TIDEGATE_ABSENT_RETRY_SECONDS": "0"}, "TIDEGATE_ABSENT_RETRY_SECONDS: must be positive"),
        ({"TIDEGATE_KUBE_BURST": "0"}, "TIDEGATE_KUBE_BURST: must be an integer >= 1"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(WatcherSettings, env=env)
    assert message in str(error.value)
