"""The chart's webhook configuration in front of the real ungater, on the simulator, which calls
it as kube-apiserver does, including for pods created while the webhook is down."""

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tidegate.bus.server import free_port
from tidegate.cli.busview import fill_view
from tidegate.cli.explain import explain, render
from tidegate.kube import PODS, QUEUES, KubeError
from tidegate.model import Admitted, Pending
from tidegate.sim import SimSettings
from tidegate.sim.kinds import MUTATING_WEBHOOK_CONFIGURATIONS

from ..e2e.chart import render_chart
from .conftest import NAMESPACE, Env, environment, gated, k8s, start_pipeline
from .test_webhook import write_pair

BARE = [{"name": "main", "image": "busybox"}]
"""A container as a user writes it, asking for nothing."""

RELEASE_NAMESPACE = "tidegate"


def chart_webhooks(ca: trustme.CA, *, failure_policy: str | None = None) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration (default values), trusting ``ca`` instead of the
    CA the chart generated (``failure_policy`` as ``--set webhook.failurePolicy`` would)."""
    (configuration,) = [
        d
        for d in render_chart(RELEASE_NAMESPACE, "sim")
        if d["kind"] == "MutatingWebhookConfiguration"
    ]
    for webhook in configuration["webhooks"]:
        webhook["clientConfig"]["caBundle"] = base64.b64encode(ca.cert_pem.bytes()).decode()
        if failure_policy is not None:
            webhook["failurePolicy"] = failure_policy
    result: dict[str, Any] = configuration
    return result


@pytest.fixture
async def hooked(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    async with environment(tmp_path, nats_url, cluster_id, SimSettings(nodes="1x2x4x8gpu")) as env:
        yield env


async def serve_webhook(
    env: Env, ca: trustme.CA, certs: Path, port: int, configuration: dict[str, Any]
) -> None:
    """Point the chart's webhook Service at ``port`` and store the configuration."""
    service = configuration["webhooks"][0]["clientConfig"]["service"]
    env.sim.api.webhooks.services[f"{service['namespace']}/{service['name']}"] = (
        f"https://127.0.0.1:{port}"
    )
    write_pair(ca, certs)
    env.sim.api.create(MUTATING_WEBHOOK_CONFIGURATIONS, None, configuration)


async def test_fail_refuses_pods_while_the_ungater_is_down_and_they_are_gated_once_it_is_back(
    hooked: Env, tmp_path: Path
) -> None:
    env = hooked
    ca = trustme.CA()
    certs = tmp_path / "webhook-tls"
    port = free_port()
    webhook = {"webhook": "on", "webhook_port": port, "webhook_cert_dir": certs}
    configuration = chart_webhooks(ca)
    await serve_webhook(env, ca, certs, port, configuration)
    await start_pipeline(env, **webhook)
    await env.stop("ungater")

    # No ungater: a pod naming a queue is refused with the API server's words; others are not
    # sent to the webhook at all.
    with pytest.raises(KubeError) as refused:
        await env.kube.create(
            PODS,
            k8s.pod("direct", gated=False, labels={"tidegate.io/queue": "q"}, containers=BARE),
            namespace=NAMESPACE,
        )
    assert refused.value.status == 500
    assert refused.value.message.startswith(
        'Internal error occurred: failed calling webhook "tidegate-io-queue.queue.pods.tidegate.io"'
    )
    plain = await env.kube.create(
        PODS,
        k8s.pod("plain", gated=False, labels={"app": "web"}, containers=BARE),
        namespace=NAMESPACE,
    )
    assert not gated(dict(plain))

    # The Job controller's creates are refused too, and retried.
    await env.job("train", 2)
    await asyncio.sleep(2.0)
    assert [p["metadata"]["name"] for p in await env.pods()] == ["plain"]

    # The ungater is back: the retried pods are created gated, admitted and run.
    await env.start_ungater(**webhook)

    async def running() -> list[dict[str, Any]] | None:
        pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("train-")]
        ok = len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = await env.until_async(running, within=40, what="the Job's pods running")
    for pod in pods:
        # Released by tidegate: the slot's domain is in its selector.
        assert "kubernetes.io/hostname" in pod["spec"]["nodeSelector"]
    assert env.sim.api.webhooks.configured()


async def test_ignore_lets_pods_through_ungated_and_tidegate_charges_and_reports_them(
    hooked: Env, tmp_path: Path
) -> None:
    env = hooked
    ca = trustme.CA()
    certs = tmp_path / "webhook-tls"
    port = free_port()
    webhook = {"webhook": "on", "webhook_port": port, "webhook_cert_dir": certs}
    await serve_webhook(env, ca, certs, port, chart_webhooks(ca, failure_policy="Ignore"))
    await start_pipeline(env, **webhook)
    await env.kube.patch(QUEUES, "q", {"spec": {"capability": {"nvidia.com/gpu": "4"}}})
    await env.stop("ungater")

    # No ungater under Ignore: the Job's pods are created ungated and kube-scheduler runs them.
    await env.job("ran", 2)

    async def running() -> list[dict[str, Any]] | None:
        pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("ran-")]
        ok = len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)
        return pods if ok else None

    for pod in await env.until_async(running, within=30, what="the ungated pods running"):
        assert not gated(pod)
        assert "kubernetes.io/hostname" not in pod["spec"].get("nodeSelector", {})

    # tidegate finds them: the workload says so, explain names them...
    async def reported() -> dict[str, Any] | None:
        view = await fill_view(env.bus, env.cluster, pods_of=NAMESPACE)
        answer = explain(view, f"{NAMESPACE}/ran")
        return answer if answer is not None and "bypassed" in answer else None

    answer = await env.until_async(reported, within=30, what="explain naming the bypassing pods")
    assert answer["bypassed"]["pods"] == 2
    assert "pods started without passing the gate (webhook down?)" in render(answer)

    # ...and charges them: with the ungater back, a gang of 3 GPUs waits on the 2 in use.
    await env.start_ungater(**webhook)
    await env.job("next", 3)

    def exceeds() -> Pending | None:
        for decision in env.decisions:
            if (
                isinstance(decision, Pending)
                and decision.workload == f"{NAMESPACE}/next"
                and decision.reason == "ExceedsQuota"
            ):
                return decision
        return None

    await env.until(lambda: exceeds() is not None, within=30, what="next waiting on quota")
    pending = exceeds()
    assert pending is not None
    assert "nvidia.com/gpu 2 in use + 3 requested > quota 4" in pending.message, pending.message
    assert all(gated(p) for p in await env.pods() if p["metadata"]["name"].startswith("next-"))
    # The bypassing Job fit its quota and was admitted (the admission's charge replaced theirs);
    # its running pods are left alone: nothing evicts them.
    assert any(isinstance(d, Admitted) and d.workload == f"{NAMESPACE}/ran" for d in env.decisions)
    await asyncio.sleep(2)
    assert await running() is not None


async def test_pods_that_bypassed_the_gate_get_a_warning_event_and_count_in_the_queue_status(
    hooked: Env, tmp_path: Path
) -> None:
    env = hooked
    ca = trustme.CA()
    certs = tmp_path / "webhook-tls"
    port = free_port()
    webhook = {
        "webhook": "on",
        "webhook_port": port,
        "webhook_cert_dir": certs,
        "queue_status_interval_seconds": 0.2,
    }
    await serve_webhook(env, ca, certs, port, chart_webhooks(ca, failure_policy="Ignore"))
    # A quota of 1 GPU from the start (a patch might reach admission after the Job, which it
    # would then admit): the Job of 2 is never admitted, so what its running pods hold shows in
    # the Queue's usage only if the bypassing pods count there.
    await start_pipeline(env, {"capability": {"nvidia.com/gpu": "1"}}, **webhook)
    await env.stop("ungater")
    job = await env.job("ran", 2)

    async def running() -> bool:
        pods = [p for p in await env.pods() if p["metadata"]["name"].startswith("ran-")]
        return len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    await env.until_async(running, within=30, what="the ungated pods running")
    await env.start_ungater(**webhook)

    async def charged() -> dict[str, Any] | None:
        found = await env.kube.get(QUEUES, "q")
        status = dict(found.get("status") or {})
        return status if status.get("usage", {}).get("nvidia.com/gpu") == "2" else None

    status = await env.until_async(charged, within=30, what="the Queue's usage counting them")
    assert status["admitted"] == 0
    assert not any(
        isinstance(d, Admitted) and d.workload == f"{NAMESPACE}/ran" for d in env.decisions
    )

    async def warned() -> dict[str, Any] | None:
        return (await env.events("ran")).get("BypassedGate")

    event = await env.until_async(warned, within=30, what="the BypassedGate Event on the Job")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["uid"] == job["metadata"]["uid"]
    assert event["message"].startswith(
        "2 pods started without passing the gate (webhook down?), charged to queue q"
    ), event["message"]

    # Once, not every round: still one Event, counted once, a few rounds later.
    await asyncio.sleep(1.5)
    again = (await env.events("ran"))["BypassedGate"]
    assert again.get("count", 1) == 1, again
