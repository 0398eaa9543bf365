"""The simulator calls stored mutating webhooks on pod create as kube-apiserver does."""

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from tidegate.bus.server import free_port
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import JOBS, PODS
from tidegate.testing.manifests import Builders

k8s = Builders(server_fields=False)

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
GATE = {"name": "example.com/held"}


@dataclass
class Hook:
    """A small HTTPS webhook server: adds a gate, or answers as told."""

    url: str
    ca: trustme.CA
    reviews: list[dict[str, Any]] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], Awaitable[web.Response]] | None = None

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    ca = trustme.CA()
    port = free_port()
    served = Hook(url=f"https://127.0.0.1:{port}", ca=ca)

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        served.reviews.append(review)
        if served.answer is not None:
            return await served.answer(review)
        patch = [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}]
        response = {
            "uid": review["request"]["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }
        return web.json_response({**review, "response": response})

    app = web.Application()
    app.router.add_post("/mutate", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_context).start()
    try:
        yield served
    finally:
        await runner.cleanup()


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    settings = SimSettings(nodes="1x1x2x8gpu", scheduler=False, kubelet=False)
    async with SimCluster.running(settings) as sim:
        yield sim


def configuration(
    hook: Hook, *, policy: str = "Fail", timeout: int = 5, service: bool = False, **selectors: Any
) -> dict[str, Any]:
    client: dict[str, Any] = {"caBundle": hook.ca_bundle}
    if service:
        client["service"] = {"namespace": "tg", "name": "hook", "path": "/mutate", "port": 443}
    else:
        client["url"] = f"{hook.url}/mutate"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "test"},
        "webhooks": [
            {
                "name": "gate.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": client,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": policy,
                "timeoutSeconds": timeout,
                **selectors,
            }
        ],
    }


async def post(
    session: aiohttp.ClientSession, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with session.post(path, json=body) as response:
        return response.status, await response.json()


def gates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"].get("schedulingGates") or [])


async def test_a_webhook_is_called_over_https_and_its_patch_applied(
    cluster: SimCluster, hook: Hook
) -> None:
    async with aiohttp.ClientSession(cluster.url) as http:
        # No configuration yet: the built-in emulation of tidegate's webhook gates the pod.
        _, emulated = await post(
            http,
            "/api/v1/namespaces/default/pods",
            k8s.pod("e", gated=False, labels={"tidegate.io/queue": "q"}),
        )
        assert gates(emulated) == [{"name": "tidegate.io/admission"}]
        assert hook.reviews == []
        assert (await post(http, CONFIGS, configuration(hook)))[0] == 201
        status, created = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
    assert status == 201, created
    assert gates(created) == [GATE]
    request = hook.reviews[0]["request"]
    assert hook.reviews[0]["apiVersion"] == "admission.k8s.io/v1"
    assert (request["operation"], request["namespace"], request["name"]) == (
        "CREATE",
        "default",
        "a",
    )
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["object"]["metadata"]["namespace"] == "default"
    # The built-in emulation of tidegate's webhook is off while a configuration exists.
    async with aiohttp.ClientSession(cluster.url) as http:
        status, created = await post(
            http,
            "/api/v1/namespaces/default/pods",
            k8s.pod("b", gated=False, labels={"tidegate.io/queue": "q"}),
        )
    assert gates(created) == [GATE]


async def test_selectors_choose_the_pods_sent(cluster: SimCluster, hook: Hook) -> None:
    selectors: dict[str, Any] = {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                }
            ]
        },
        "objectSelector": {"matchExpressions": [{"key": "q", "operator": "Exists"}]},
    }
    async with aiohttp.ClientSession(cluster.url) as http:
        await post(http, CONFIGS, configuration(hook, **selectors))
        _, plain = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("plain", gated=False)
        )
        _, system = await post(
            http,
            "/api/v1/namespaces/kube-system/pods",
            k8s.pod("s", gated=False, labels={"q": "x"}),
        )
        _, chosen = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("c", gated=False, labels={"q": "x"})
        )
    assert (gates(plain), gates(system), gates(chosen)) == ([], [], [GATE])
    assert [r["request"]["name"] for r in hook.reviews] == ["c"]


async def test_fail_refuses_the_create_and_ignore_lets_it_through_unmutated(
    cluster: SimCluster, hook: Hook
) -> None:
    async def broken(review: dict[str, Any]) -> web.Response:
        return web.json_response({"error": "down"}, status=503)

    hook.answer = broken
    async with aiohttp.ClientSession(cluster.url) as http:
        await post(http, CONFIGS, configuration(hook))
        status, error = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
        assert status == 500
        assert error["reason"] == "InternalError"
        assert error["message"].startswith(
            'Internal error occurred: failed calling webhook "gate.example.com": '
        )
        assert cluster.store.get(PODS.key, "default", "a") is None
        body = configuration(hook, policy="Ignore")
        async with http.put(f"{CONFIGS}/test", json=body) as response:
            assert response.status == 200
        status, created = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
    assert status == 201
    assert gates(created) == []


async def test_a_slow_webhook_times_out_and_a_refusal_is_the_webhooks_message(
    cluster: SimCluster, hook: Hook
) -> None:
    async def slow(review: dict[str, Any]) -> web.Response:
        await asyncio.sleep(3)
        return web.json_response({})

    hook.answer = slow
    async with aiohttp.ClientSession(cluster.url) as http:
        await post(http, CONFIGS, configuration(hook, timeout=1))
        loop = asyncio.get_running_loop()
        started = loop.time()
        status, error = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
        assert status == 500
        assert "context deadline exceeded" in error["message"]
        assert loop.time() - started < 2.5

        async def refuse(review: dict[str, Any]) -> web.Response:
            response = {
                "uid": review["request"]["uid"],
                "allowed": False,
                "status": {"code": 403, "message": "no queue"},
            }
            return web.json_response({**review, "response": response})

        hook.answer = refuse
        status, error = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("b", gated=False)
        )
    assert status == 403
    assert error["message"] == 'admission webhook "gate.example.com" denied the request: no queue'


async def test_a_service_is_called_at_the_url_a_test_gave_it(
    cluster: SimCluster, hook: Hook
) -> None:
    async with aiohttp.ClientSession(cluster.url) as http:
        await post(http, CONFIGS, configuration(hook, service=True))
        status, error = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
        assert status == 500
        assert "service tg/hook has no address in the simulator" in error["message"]
        mapping = {"namespace": "tg", "name": "hook", "url": hook.url}
        assert (await post(http, "/sim/v1/webhook-services", mapping))[0] == 201
        status, created = await post(
            http, "/api/v1/namespaces/default/pods", k8s.pod("a", gated=False)
        )
    assert status == 201
    assert gates(created) == [GATE]


async def test_a_job_controllers_pods_go_through_the_webhook_and_are_retried_when_refused(
    cluster: SimCluster, hook: Hook
) -> None:
    down = True

    async def flaky(review: dict[str, Any]) -> web.Response:
        if down:
            return web.json_response({}, status=503)
        hook.answer = None
        return await handler_default(review)

    async def handler_default(review: dict[str, Any]) -> web.Response:
        patch = [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}]
        response = {
            "uid": review["request"]["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }
        return web.json_response({**review, "response": response})

    hook.answer = flaky
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }
    async with aiohttp.ClientSession(cluster.url) as http:
        await post(http, CONFIGS, configuration(hook))
        assert (await post(http, "/apis/batch/v1/namespaces/default/jobs", job))[0] == 201
    await asyncio.sleep(1.5)
    assert list(cluster.store.objects(PODS.key, "default")) == []
    assert len(hook.reviews) >= 2
    down = False

    async def pods() -> list[dict[str, Any]]:
        for _ in range(100):
            found = list(cluster.store.objects(PODS.key, "default"))
            if len(found) == 2:
                return found
            await asyncio.sleep(0.1)
        raise AssertionError(f"the Job's pods were not created: {found}")

    created = await pods()
    assert all(gates(p) == [GATE] for p in created)
    await asyncio.sleep(0.5)
    assert len(list(cluster.store.objects(PODS.key, "default"))) == 2
    assert cluster.store.get(JOBS.key, "default", "j") is not None
