"""The ungater's settings: a bad value is named."""

from pathlib import Path

import pytest

from tidegate.runtime import SettingsError, load_settings
from tidegate.ungater.config import UngaterSettings


def test_settings_name_the_bad_value(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="TIDEGATE_MAX_CONCURRENT_PATCHES"):
        load_settings(UngaterSettings, env={"TIDEGATE_MAX_CONCURRENT_PATCHES": "0"})
    with pytest.raises(SettingsError, match="TIDEGATE_WEBHOOK_FAILURE_POLICY"):
        load_settings(UngaterSettings, env={"TIDEGATE_WEBHOOK_FAILURE_POLICY": "Sometimes"})
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(
            UngaterSettings,
            env={"TIDEGATE_WEBHOOK": "on", "TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path)},
        )
    with pytest.raises(SettingsError, match="TIDEGATE_KUBE_QPS"):
        load_settings(UngaterSettings, env={"TIDEGATE_KUBE_QPS": "-1"})
    # Without a certificate (the chart with the webhook disabled) it starts without the webhook.
    quiet = load_settings(UngaterSettings, env={"TIDEGATE_WEBHOOK_CERT_DIR": str(tmp_path)})
    assert not quiet.serves_webhook
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("x")
    assert quiet.serves_webhook
    settings = load_settings(
        UngaterSettings,
        env={"TIDEGATE_KUBECONFIG": "/k", "TIDEGATE_KUBE_CONTEXT": "c", "TIDEGATE_WEBHOOK": "off"},
    )
    assert (settings.kube_settings().kubeconfig, settings.kube_settings().context) == (
        Path("/k"),
        "c",
    )
    assert not settings.serves_webhook
