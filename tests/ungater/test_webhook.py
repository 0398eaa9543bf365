"""The mutating webhook over TLS (trustme certificates): injection, failure policy, rotation."""

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from tidegate.bus.server import free_port
from tidegate.kube import PODS
from tidegate.sim import SimSettings
from tidegate.sim.patching import json_patch
from tidegate.testing.manifests import Builders

from .conftest import NAMESPACE, Env, environment, gated


def write_pair(ca: trustme.CA, directory: Path) -> None:
    """A serving certificate for the loopback address, as the chart's Secret mounts it."""
    directory.mkdir(exist_ok=True)
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.cert_chain_pems[0].write_to_path(str(directory / "tls.crt"))
    issued.private_key_pem.write_to_path(str(directory / "tls.key"))


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A client context that trusts ``ca`` only."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


k8s = Builders(server_fields=False)
"""Pods as a user creates them (no gate: only the webhook adds it)."""
REQUESTS_A_CPU = [k8s.container("1", None)]


@pytest.fixture
async def bare_env(tmp_path: Path, nats_url: str, cluster_id: str) -> Any:
    """A simulated cluster that does NOT gate pods itself: only the webhook does."""
    settings = SimSettings(nodes="1x2x4x8gpu", admission_gate=False)
    async with environment(tmp_path, nats_url, cluster_id, settings) as env:
        yield env


async def start_webhook(env: Env, ca: trustme.CA, certs: Path, **settings: Any) -> str:
    """Start the ungater with its webhook serving a certificate of ``ca`` from ``certs`` (as
    the chart's Secret mounts it) and ``settings``; the webhook's URL."""
    write_pair(ca, certs)
    port = free_port()
    await env.start_ungater(webhook="on", webhook_port=port, webhook_cert_dir=certs, **settings)
    return f"https://127.0.0.1:{port}/mutate-pods"


async def call(url: str, body: bytes, context: ssl.SSLContext) -> tuple[int, dict[str, Any]]:
    """POST a review like the API server does."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, data=body, ssl=context, headers={"Content-Type": "application/json"}
        ) as response,
    ):
        return response.status, await response.json()


async def test_the_webhook_gates_pods_that_then_run_where_admitted(
    bare_env: Env, tmp_path: Path
) -> None:
    env = bare_env
    ca = trustme.CA()
    certs = tmp_path / "webhook-tls"
    url = await start_webhook(env, ca, certs, webhook_gate_all=False)

    # Not trusted without the CA: the API server verifies with the chart's caBundle.
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await call(
            url,
            json.dumps(
                k8s.admission_review(
                    k8s.pod("x", gated=False, labels={}, containers=REQUESTS_A_CPU),
                    namespace=NAMESPACE,
                )
            ).encode(),
            ssl.create_default_context(),
        )

    pod = k8s.pod("solo", gated=False, labels={"tidegate.io/queue": "q"}, containers=REQUESTS_A_CPU)
    status, answer = await call(
        url, json.dumps(k8s.admission_review(pod, namespace=NAMESPACE)).encode(), trusting(ca)
    )
    assert status == 200
    assert answer["response"]["uid"] == "review-1"
    assert answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    # The API server applies the patch and stores the pod: here, the same by hand.
    created = await env.create(PODS, json_patch(pod, patch))
    assert gated(created)
    status, answer = await call(
        url,
        json.dumps(
            k8s.admission_review(
                k8s.pod("plain", gated=False, labels={"app": "web"}, containers=REQUESTS_A_CPU),
                namespace=NAMESPACE,
            )
        ).encode(),
        trusting(ca),
    )
    assert answer["response"] == {"uid": "review-1", "allowed": True}

    # The gated pod is tidegate's: admitted, it is released onto its host and runs there.
    host = env.host(1, 3)
    await env.admit("team/solo", created["metadata"]["uid"], {"main": [(host, 1)]})

    async def running() -> dict[str, Any] | None:
        stored = await env.kube.get(PODS, "solo", namespace=NAMESPACE)
        return stored if stored.get("status", {}).get("phase") == "Running" else None

    stored = await env.until_async(running, what="the pod running")
    assert stored["spec"]["nodeName"] == host[-1]
    assert not gated(stored)


async def test_failure_policy_and_odd_input(bare_env: Env, tmp_path: Path) -> None:
    env = bare_env
    ca = trustme.CA()
    certs = tmp_path / "webhook-tls"
    url = await start_webhook(env, ca, certs, webhook_failure_policy="Fail")
    trusted = trusting(ca)
    bad = {"metadata": {"labels": ["not", "a", "map"]}, "spec": {}}
    status, answer = await call(
        url, json.dumps(k8s.admission_review(bad, namespace=NAMESPACE)).encode(), trusted
    )
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert "metadata.labels" in answer["response"]["status"]["message"]
    for body in (b"{not json", b"[]", json.dumps({"apiVersion": "admission.k8s.io/v1"}).encode()):
        status, answer = await call(url, body, trusted)
        assert status == 400
        assert "unreadable AdmissionReview" in answer["error"]
    # Still serving after all that.
    status, answer = await call(
        url,
        json.dumps(
            k8s.admission_review(
                k8s.pod("ok", gated=False, labels={}, containers=REQUESTS_A_CPU),
                namespace=NAMESPACE,
            )
        ).encode(),
        trusted,
    )
    assert (status, answer["response"]["allowed"]) == (200, True)


async def test_a_rotated_certificate_is_used_without_a_restart(
    bare_env: Env, tmp_path: Path
) -> None:
    env = bare_env
    first, second = trustme.CA(), trustme.CA()
    certs = tmp_path / "webhook-tls"
    url = await start_webhook(env, first, certs, webhook_cert_reload_seconds=0.1)
    body = json.dumps(
        k8s.admission_review(
            k8s.pod("p", gated=False, labels={}, containers=REQUESTS_A_CPU), namespace=NAMESPACE
        )
    ).encode()
    assert (await call(url, body, trusting(first)))[0] == 200
    write_pair(second, certs)

    async def rotated() -> bool:
        try:
            return (await call(url, body, trusting(second)))[0] == 200
        except aiohttp.ClientConnectorCertificateError:
            return False

    await env.until_async(rotated, what="the new certificate")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await call(url, body, trusting(first))
