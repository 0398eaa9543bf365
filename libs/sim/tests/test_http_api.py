"""The simulated API server over HTTP, tested as one would test a real kube-apiserver."""

import asyncio
import json

import aiohttp

from tidegate.sim import SimCluster

PODS = "/api/v1/namespaces/default/pods"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


def pod(name: str = "", *, gates: tuple[str, ...] = (), **spec: object) -> dict[str, object]:
    metadata: dict[str, object] = {"name": name} if name else {"generateName": "p-"}
    body_spec: dict[str, object] = {"containers": [{"name": "main", "image": "busybox"}], **spec}
    if gates:
        body_spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body_spec}


async def create(http: aiohttp.ClientSession, body: dict[str, object]) -> dict[str, object]:
    async with http.post(PODS, json=body) as response:
        assert response.status == 201, await response.text()
        created: dict[str, object] = await response.json()
        return created


async def patch(
    http: aiohttp.ClientSession, name: str, body: object, headers: dict[str, str]
) -> tuple[int, dict[str, object]]:
    async with http.patch(f"{PODS}/{name}", data=json.dumps(body), headers=headers) as response:
        return response.status, await response.json()


async def test_discovery_documents(http: aiohttp.ClientSession) -> None:
    async with http.get("/api") as response:
        assert (await response.json())["versions"] == ["v1"]
    async with http.get("/api/v1") as response:
        names = {r["name"] for r in (await response.json())["resources"]}
    assert {"pods", "pods/status", "pods/binding", "pods/eviction", "nodes", "namespaces"} <= names
    async with http.get("/apis") as response:
        groups = {g["name"] for g in (await response.json())["groups"]}
    assert {"apps", "batch", "tidegate.io", "apiextensions.k8s.io", "kueue.x-k8s.io"} <= groups
    async with http.get("/apis/tidegate.io/v1alpha1") as response:
        resources = {r["name"]: r for r in (await response.json())["resources"]}
    assert resources["queues"]["namespaced"] is False
    assert resources["podgroups"]["namespaced"] is True
    assert "podgroups/status" in resources
    async with http.get("/version") as response:
        assert (await response.json())["major"] == "1"
    async with http.get("/apis/nothing.example.com/v1") as response:
        assert response.status == 404


async def test_nodes_from_topology(bare: SimCluster, http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/nodes") as response:
        listing = await response.json()
    assert listing["kind"] == "NodeList"
    assert int(listing["metadata"]["resourceVersion"]) == bare.store.resource_version
    nodes = listing["items"]
    assert len(nodes) == 4
    labels = nodes[0]["metadata"]["labels"]
    assert labels["tidegate.io/block"] == "block0"
    assert labels["tidegate.io/rack"] == "block0-rack0"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    async with http.get("/apis/tidegate.io/v1alpha1/topologies/default") as response:
        topology = await response.json()
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "tidegate.io/block",
        "tidegate.io/rack",
        "kubernetes.io/hostname",
    ]


async def test_create_get_generate_name_and_conflicts(http: aiohttp.ClientSession) -> None:
    created = await create(http, pod())
    metadata = created["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["name"].startswith("p-")
    assert len(metadata["name"]) == 7
    assert metadata["uid"]
    assert metadata["creationTimestamp"].endswith("Z")
    assert created["status"] == {
        "phase": "Pending",
        "qosClass": "BestEffort",
    }
    async with http.post(PODS, json=pod(metadata["name"])) as response:
        assert response.status == 409
        status = await response.json()
    assert status["kind"] == "Status"
    assert status["reason"] == "AlreadyExists"
    async with http.get(f"{PODS}/{metadata['name']}") as response:
        assert (await response.json())["metadata"]["uid"] == metadata["uid"]
    async with http.get(f"{PODS}/missing") as response:
        assert response.status == 404
        assert (await response.json())["reason"] == "NotFound"
    stale = json.loads(json.dumps(created))
    stale["metadata"]["labels"] = {"x": "1"}
    async with http.put(f"{PODS}/{metadata['name']}", json=stale) as response:
        assert response.status == 200
    stale["metadata"]["labels"] = {"x": "2"}
    async with http.put(f"{PODS}/{metadata['name']}", json=stale) as response:
        assert response.status == 409
        assert (await response.json())["reason"] == "Conflict"


async def test_invalid_objects_are_422_and_unknown_namespace_404(
    http: aiohttp.ClientSession,
) -> None:
    bad = pod("Bad_Name")
    async with http.post(PODS, json=bad) as response:
        assert response.status == 422
        assert "metadata.name" in (await response.json())["message"]
    no_image = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]}}
    async with http.post(PODS, json=no_image) as response:
        assert response.status == 422
        assert "spec.containers[0].image" in (await response.json())["message"]
    async with http.post("/api/v1/namespaces/nope/pods", json=pod("x")) as response:
        assert response.status == 404
    async with http.post(
        PODS, data=b"{not json", headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400


async def test_gated_pod_rules(http: aiohttp.ClientSession) -> None:
    created = await create(http, pod("gated", gates=("tidegate.io/admission", "other.io/gate")))
    conditions = created["status"]["conditions"]  # type: ignore[index]
    assert conditions[0]["reason"] == "SchedulingGated"
    # Adding a gate is forbidden.
    status, body = await patch(
        http, "gated", {"spec": {"schedulingGates": [{"name": "new.io/gate"}]}}, SMP
    )
    assert status == 422
    assert "only deletion is allowed" in str(body["message"])
    # While gated, nodeSelector may grow and one gate may be removed in the same patch.
    status, body = await patch(
        http,
        "gated",
        {
            "spec": {
                "schedulingGates": [{"name": "tidegate.io/admission", "$patch": "delete"}],
                "nodeSelector": {"tidegate.io/rack": "block0-rack0"},
            }
        },
        SMP,
    )
    assert status == 200, body
    assert body["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]  # type: ignore[index]
    # Still gated: changing an existing key is forbidden, adding one is fine.
    status, body = await patch(
        http, "gated", {"spec": {"nodeSelector": {"tidegate.io/rack": "x"}}}, SMP
    )
    assert status == 422
    assert "only additions" in str(body["message"])
    status, body = await patch(http, "gated", {"spec": {"nodeSelector": {"a": "b"}}}, MERGE)
    assert status == 200
    # Binding is refused while a gate remains.
    async with http.post(f"{PODS}/gated/binding", json={"target": {"name": "n1"}}) as response:
        assert response.status == 409
    status, body = await patch(
        http, "gated", [{"op": "remove", "path": "/spec/schedulingGates"}], JSONPATCH
    )
    assert status == 200
    # No longer gated: nodeSelector is immutable.
    status, body = await patch(http, "gated", {"spec": {"nodeSelector": {"c": "d"}}}, MERGE)
    assert status == 422
    assert "may not change fields" in str(body["message"])
    async with http.post(f"{PODS}/gated/binding", json={"target": {"name": "n1"}}) as response:
        assert response.status == 201
        assert (await response.json()) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
    async with http.post(f"{PODS}/gated/binding", json={"target": {"name": "n2"}}) as response:
        assert response.status == 409


async def test_strategic_merge_lists(http: aiohttp.ClientSession) -> None:
    body = pod("smp")
    body["spec"]["containers"].append({"name": "side", "image": "a"})  # type: ignore[index]
    body["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}]  # type: ignore[index]
    await create(http, body)
    status, patched = await patch(
        http, "smp", {"spec": {"containers": [{"name": "side", "image": "b"}]}}, SMP
    )
    assert status == 200
    containers = patched["spec"]["containers"]  # type: ignore[index]
    assert [(c["name"], c["image"]) for c in containers] == [("main", "busybox"), ("side", "b")]
    # A merge patch replaces the list whole: here it would drop a container, which is invalid.
    status, _ = await patch(
        http, "smp", {"spec": {"containers": [{"name": "side", "image": "c"}]}}, MERGE
    )
    assert status == 422
    # Tolerations have no merge key upstream: a strategic patch replaces them (adding is allowed).
    current = patched["spec"]["tolerations"]  # type: ignore[index]
    status, patched = await patch(
        http, "smp", {"spec": {"tolerations": [*current, {"key": "b", "operator": "Exists"}]}}, SMP
    )
    assert status == 200
    assert {"key": "b", "operator": "Exists"} in patched["spec"]["tolerations"]  # type: ignore[index]


async def test_custom_resources_reject_strategic_merge(http: aiohttp.ClientSession) -> None:
    queue = {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "q1"},
        "spec": {"priority": 1},
        "status": {"ignored": True},
    }
    path = "/apis/tidegate.io/v1alpha1/queues"
    async with http.post(path, json=queue) as response:
        assert response.status == 201
        assert "status" not in await response.json()
    async with http.patch(
        f"{path}/q1", data=json.dumps({"spec": {"priority": 2}}), headers=SMP
    ) as r:
        assert r.status == 415
        assert (await r.json())["reason"] == "UnsupportedMediaType"
    async with http.patch(
        f"{path}/q1/status", data=json.dumps({"status": {"admitted": 3}}), headers=MERGE
    ) as response:
        assert response.status == 200
        body = await response.json()
    assert body["status"] == {"admitted": 3}
    assert body["metadata"]["generation"] == 1
    # Writes to the main resource ignore status; spec changes bump the generation.
    async with http.patch(
        f"{path}/q1",
        data=json.dumps({"spec": {"priority": 5}, "status": {"admitted": 9}}),
        headers=MERGE,
    ) as response:
        body = await response.json()
    assert body["status"] == {"admitted": 3}
    assert body["spec"]["priority"] == 5
    assert body["metadata"]["generation"] == 2


async def test_watch_resume_bookmarks_and_gone(
    bare: SimCluster, http: aiohttp.ClientSession
) -> None:
    async with http.get(PODS) as response:
        rv = (await response.json())["metadata"]["resourceVersion"]
    await create(http, pod("w1"))
    events: list[dict[str, object]] = []

    async def follow() -> None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with http.get(PODS, params={**params, "timeoutSeconds": "1"}) as response:
            events.extend([json.loads(line) async for line in response.content])

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    async with http.delete(f"{PODS}/w1") as response:
        assert response.status == 200
    await task
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["ADDED", "DELETED"]
    assert "BOOKMARK" in kinds
    bookmark = next(e for e in events if e["type"] == "BOOKMARK")
    assert set(bookmark["object"]) == {"kind", "apiVersion", "metadata"}  # type: ignore[arg-type]
    # Force a compaction: resuming from the old version now yields a 410 ERROR event.
    async with http.post("/sim/v1/compact") as response:
        assert response.status == 200
    async with http.get(PODS, params={"watch": "1", "resourceVersion": rv}) as response:
        assert response.status == 200
        first = json.loads(await response.content.readline())
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410
    assert first["object"]["reason"] == "Expired"


async def test_watch_with_selectors_reports_leaving_as_deleted(http: aiohttp.ClientSession) -> None:
    await create(http, {**pod("sel"), "metadata": {"name": "sel", "labels": {"team": "a"}}})
    events: list[dict[str, object]] = []

    async def follow() -> None:
        params = {"watch": "1", "labelSelector": "team in (a)", "timeoutSeconds": "1"}
        async with http.get(PODS, params=params) as response:
            events.extend([json.loads(line) async for line in response.content])

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    await patch(http, "sel", {"metadata": {"labels": {"team": "b"}}}, MERGE)
    await patch(http, "sel", {"metadata": {"labels": {"team": "a"}}}, MERGE)
    await task
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]
    deleted = events[1]["object"]
    assert deleted["metadata"]["labels"] == {"team": "a"}  # type: ignore[index]


async def test_label_and_field_selectors(http: aiohttp.ClientSession) -> None:
    for name, labels in (("s1", {"app": "x", "tier": "1"}), ("s2", {"app": "y"}), ("s3", {})):
        await create(http, {**pod(name), "metadata": {"name": name, "labels": labels}})

    async def names(**params: str) -> list[str]:
        async with http.get(PODS, params=params) as response:
            assert response.status == 200, await response.text()
            return [p["metadata"]["name"] for p in (await response.json())["items"]]

    assert await names(labelSelector="app=x") == ["s1"]
    assert await names(labelSelector="app==x") == ["s1"]
    assert await names(labelSelector="app!=x") == ["s2", "s3"]
    assert await names(labelSelector="app in (x,y)") == ["s1", "s2"]
    assert await names(labelSelector="app notin (x)") == ["s2", "s3"]
    assert await names(labelSelector="tier") == ["s1"]
    assert await names(labelSelector="!tier") == ["s2", "s3"]
    assert await names(labelSelector="app,!tier") == ["s2"]
    assert await names(fieldSelector="metadata.name=s2") == ["s2"]
    assert await names(fieldSelector="status.phase=Pending,metadata.name!=s1") == ["s2", "s3"]
    assert await names(fieldSelector="spec.nodeName=") == ["s1", "s2", "s3"]
    async with http.get(PODS, params={"fieldSelector": "spec.bogus=1"}) as response:
        assert response.status == 400
    async with http.get(PODS, params={"labelSelector": "a in (x"}) as response:
        assert response.status == 400


async def test_pagination(http: aiohttp.ClientSession) -> None:
    for i in range(5):
        await create(http, pod(f"page-{i}"))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        async with http.get(PODS, params=params) as response:
            listing = await response.json()
        pages += 1
        seen += [p["metadata"]["name"] for p in listing["items"]]
        token = listing["metadata"].get("continue", "")
        if not token:
            break
    assert pages == 3
    assert seen == [f"page-{i}" for i in range(5)]


async def test_graceful_delete_and_preconditions(http: aiohttp.ClientSession) -> None:
    created = await create(http, pod("grace", nodeName="block0-rack0-node0"))
    async with http.delete(
        f"{PODS}/grace", json={"preconditions": {"uid": "not-the-uid"}}
    ) as response:
        assert response.status == 409
    async with http.delete(f"{PODS}/grace") as response:
        body = await response.json()
    assert body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30
    async with http.get(f"{PODS}/grace") as response:
        assert response.status == 200
    async with http.delete(f"{PODS}/grace", params={"gracePeriodSeconds": "0"}) as response:
        assert response.status == 200
    async with http.get(f"{PODS}/grace") as response:
        assert response.status == 404
    assert created["metadata"]


async def test_eviction_and_unknown_priority_class(http: aiohttp.ClientSession) -> None:
    await create(http, pod("ev"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "ev"}}
    async with http.post(f"{PODS}/ev/eviction", json=eviction) as response:
        assert response.status == 201
    async with http.get(f"{PODS}/ev") as response:
        assert response.status == 404
    async with http.post(PODS, json=pod("prio", priorityClassName="nope")) as response:
        assert response.status == 403
    async with http.post(PODS, json=pod("prio", priorityClassName="system-node-critical")) as r:
        assert (await r.json())["spec"]["priority"] == 2000001000


async def test_injected_faults(http: aiohttp.ClientSession) -> None:
    fault = {"code": 429, "count": 2, "method": "GET", "pathPrefix": PODS, "retryAfterSeconds": 1}
    async with http.post("/sim/v1/faults", json=fault) as response:
        assert response.status == 201
    for _ in range(2):
        async with http.get(PODS) as response:
            assert response.status == 429
            assert response.headers["Retry-After"] == "1"
    async with http.get(PODS) as response:
        assert response.status == 200


async def test_workload_validation(http: aiohttp.ClientSession) -> None:
    container = {"name": "c", "image": "x"}
    bad_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": -1, "template": {"spec": {"containers": [container]}}},
    }
    async with http.post("/apis/batch/v1/namespaces/default/jobs", json=bad_job) as response:
        assert response.status == 422
        message = (await response.json())["message"]
    assert "spec.template.spec.restartPolicy" in message
    assert "spec.parallelism" in message
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [container]}},
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    async with http.post(path, json=deployment) as response:
        assert response.status == 422
        assert "does not match template" in (await response.json())["message"]
    async with http.post(path, json={"kind": "Job", "metadata": {"name": "x"}}) as response:
        assert response.status == 400


async def test_bookmarks_flow_while_other_objects_change(http: aiohttp.ClientSession) -> None:
    """A watch whose selector matches nothing still advances through bookmarks."""
    bookmarks: list[int] = []

    async def follow() -> None:
        params = {
            "watch": "1",
            "labelSelector": "app=nothing",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "1",
        }
        async with http.get(PODS, params=params) as response:
            async for line in response.content:
                event = json.loads(line)
                assert event["type"] == "BOOKMARK"
                bookmarks.append(int(event["object"]["metadata"]["resourceVersion"]))

    task = asyncio.create_task(follow())
    for i in range(20):
        await create(http, pod(f"busy-{i}"))
        await asyncio.sleep(0.04)
    await task
    assert len(bookmarks) >= 2
    assert bookmarks == sorted(bookmarks)
    assert bookmarks[-1] > bookmarks[0]


async def test_table_answers_for_kubectl(http: aiohttp.ClientSession) -> None:
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    await create(http, pod("tabled", gates=("tidegate.io/admission",)))
    async with http.get(PODS, headers=accept) as response:
        table = await response.json()
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    row = table["rows"][0]
    assert row["cells"][:4] == ["tabled", "0/1", "SchedulingGated", 0]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    async with http.get("/api/v1/nodes/block0-rack0-node0", headers=accept) as response:
        node_row = (await response.json())["rows"][0]["cells"]
    assert node_row[:2] == ["block0-rack0-node0", "Ready"]
    async with http.get(PODS, params={"watch": "1", "timeoutSeconds": "1"}, headers=accept) as r:
        first = json.loads(await r.content.readline())
    assert first["object"]["kind"] == "Table"
    assert first["object"]["rows"][0]["cells"][0] == "tabled"
