"""``tidegate console`` on a real bus: what the page is sent, who may read it.

A small cluster is put on the streams as the services would have published it (two racks of
two 8-GPU nodes, one NotReady; a Job admitted to rack r1 with one pod running and one bound
but not running; a Job waiting for capacity), then the console serves it. Its answers must be
the same as ``tidegate queues`` and ``tidegate explain`` reading the same bus, its node cells
the topology-cache's arithmetic, and a decision published afterwards must reach an open event
stream. Access: a token is required off loopback, taken from a header or the cookie a
``/?token=`` visit sets, and never written into the page.
"""

import asyncio
import base64
import json
from typing import Any

import aiohttp
import pytest

from tidegate.bus import BusSettings, servers_from_url
from tidegate.cli.busview import fill_view
from tidegate.cli.console_server import Access, ConsoleError, access_for, serving
from tidegate.cli.console_view import ConsoleView
from tidegate.cli.explain import explain
from tidegate.cli.explain import render as render_explain
from tidegate.cli.queues import queue_table
from tidegate.model import (
    CohortConfig,
    QueueConfig,
    ReservationDropped,
    Reserved,
    WaitedGang,
)
from tidegate.telemetry import workload_trace_context
from tidegate.testing.bus import connected
from tidegate.testing.harness import ServiceHarness
from tidegate.testing.messages import Messages

GPU = "nvidia.com/gpu"
RACK = "tidegate.io/rack"
HOST = "kubernetes.io/hostname"
TOKEN = "s3cret-token"
TRACES = "https://traces.example/trace/{trace_id}"


msg = Messages(
    namespace="ns",
    levels=[RACK, HOST],
    queue="research",
    node_labels={"nvidia.com/gpu.product": "NVIDIA-H200"},
    defaults={
        "workload": {"created_at": 10.0},
        "admitted": {
            "podset": "main",
            "charged": {GPU: 16, "cpu": 2000},
            "per_pod": {GPU: 8, "cpu": 1000},
        },
        "pod": {"gpus": 8, "workload": "ns/train", "podset": "main"},
    },
)
"""Jobs of two 8-GPU pods in queue research; nodes of 8 H200s in racks."""


async def cluster_on_the_bus(h: ServiceHarness) -> None:
    """Two racks of two nodes (n4 NotReady); train admitted to n1 and n2, one pod running
    and one bound but not running; wait waiting for capacity."""
    main = msg.podset("main", 2, gpus=8)
    for body in (
        msg.topology(),
        msg.queue_config(quota={GPU: 24}),
        msg.node("n1", "r1"),
        msg.node("n2", "r1"),
        msg.node("n3", "r2"),
        msg.node("n4", "r2", ready=False),
        *(
            msg.workload(name, main, trace_context=workload_trace_context(f"uid-{name}"))
            for name in ("train", "wait")
        ),
        msg.admitted("train", {("r1", "n1"): 1, ("r1", "n2"): 1}, sequence=1),
        msg.pending(
            "wait",
            message="main: needs 2 pods; the cluster fits 1 (limited by nvidia.com/gpu)",
            sequence=2,
        ),
        msg.pod("train-0", "n1", uid="pod-0", phase="Running"),
        msg.pod("train-1", "n2", uid="pod-1", phase="Pending"),
    ):
        await h.send(body)


def test_a_token_or_basic_auth_is_required_off_loopback() -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        assert access_for(host, token=None, basic=None, no_auth=False) == Access()
    with pytest.raises(ConsoleError, match="needs --token or --basic-auth"):
        access_for("0.0.0.0", token=None, basic=None, no_auth=False)
    assert access_for("0.0.0.0", token="t", basic=None, no_auth=False).token == "t"
    assert access_for("0.0.0.0", token=None, basic=None, no_auth=True) == Access()
    with pytest.raises(ConsoleError, match="USER:PASSWORD"):
        access_for("0.0.0.0", token=None, basic="nobody", no_auth=False)


async def read_events(response: aiohttp.ClientResponse, wanted: int) -> list[tuple[str, Any]]:
    """The first ``wanted`` events of a Server-Sent Events stream, as (event, data)."""
    events: list[tuple[str, Any]] = []
    name = ""
    async with asyncio.timeout(20):
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
                if len(events) == wanted:
                    return events
    return events


async def test_the_console_shows_what_queues_and_explain_show(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await cluster_on_the_bus(h)
        reference = await fill_view(bus, cluster_id, pods_of="ns")
        settings = BusSettings(servers=tuple(servers_from_url(nats_url)), name="console-test")
        view = ConsoleView(cluster=cluster_id, trace_url_template=TRACES)
        async with serving(settings, view, access=Access(token=TOKEN)) as (console, url):
            async with asyncio.timeout(20):
                await console.replayed.wait()
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(base_url=url) as http:
                async with http.get("/api/snapshot") as response:
                    assert response.status == 401
                async with http.get("/readyz") as response:
                    assert response.status == 200
                async with http.get("/api/snapshot", headers=bearer) as response:
                    assert response.status == 200
                    snapshot = (await response.json())["snapshot"]
                assert snapshot["queues"] == queue_table(reference)
                racks = snapshot["map"]["root"]["children"]
                assert [r["name"] for r in racks] == ["r1", "r2"]
                cells = {n["name"]: n for r in racks for n in r["nodes"]}
                assert {k: cells["n1"][k] for k in ("running", "released", "reserved", "free")} == {
                    "running": 8,
                    "released": 0,
                    "reserved": 0,
                    "free": 0,
                }
                assert cells["n2"]["released"] == 8
                assert cells["n3"]["free"] == 8
                assert cells["n4"]["ready"] is False
                assert cells["n1"]["card"] == "NVIDIA-H200"
                (waiting,) = snapshot["pending"]
                assert waiting["workload"] == "ns/wait"
                assert waiting["reason"] == "WaitingForCapacity"
                assert waiting["trace_url"] == TRACES.replace("{trace_id}", waiting["trace_id"])

                async with http.get(
                    "/api/explain", params={"workload": "ns/wait"}, headers=bearer
                ) as response:
                    answer = await response.json()
                expected = explain(reference, "ns/wait")
                assert expected is not None
                text = render_explain(expected)
                assert answer == {**expected, "text": text, "trace_url": waiting["trace_url"]}
                async with http.get(
                    "/api/explain", params={"workload": "ns/none"}, headers=bearer
                ) as response:
                    assert response.status == 404
                async with http.get(
                    "/api/explain", params={"workload": "none"}, headers=bearer
                ) as response:
                    assert response.status == 400
                async with http.get(
                    "/api/domain", params={"path": "r1"}, headers=bearer
                ) as response:
                    (gang,) = (await response.json())["gangs"]
                assert gang["workload"] == "ns/train"
                assert gang["nodes"] == {"n1": 1, "n2": 1}

                async with http.get("/events", headers=bearer) as stream:
                    first = await read_events(stream, 2)
                    assert [name for name, _ in first] == ["decisions", "snapshot"]
                    assert [d["workload"] for d in first[0][1]] == ["ns/train", "ns/wait"]
                    n3 = ("r2", "n3")
                    await h.send(msg.admitted("wait", [(n3, 1), (n3, 1)], sequence=3))
                    later = await read_events(stream, 1)
                    while later and later[0][0] != "decision":
                        later = await read_events(stream, 1)
                assert later[0][1]["workload"] == "ns/wait"
                assert later[0][1]["kind"] == "admitted"


async def test_the_token_is_kept_in_a_cookie_never_in_the_page(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id):
        settings = BusSettings(servers=tuple(servers_from_url(nats_url)), name="console-test")
        view = ConsoleView(cluster=cluster_id)
        # unsafe: keep cookies of an IP address, as a browser does
        jar = aiohttp.CookieJar(unsafe=True)
        async with (
            serving(settings, view, access=Access(token=TOKEN)) as (_, url),
            aiohttp.ClientSession(base_url=url, cookie_jar=jar) as http,
        ):
            if True:
                async with http.get("/") as response:
                    assert response.status == 401
                async with http.get("/", params={"token": "wrong"}) as response:
                    assert response.status == 401
                async with http.get("/", params={"token": TOKEN}) as response:
                    assert response.status == 200  # redirected to / with the cookie
                    page = await response.text()
                assert TOKEN not in page
                assert "tidegate console" in page
                async with http.get("/static/console.js") as response:
                    assert response.status == 200
                    assert TOKEN not in await response.text()
        basic = Access(basic="sre:pw")
        async with (
            serving(settings, ConsoleView(cluster=cluster_id), access=basic) as (_, url),
            aiohttp.ClientSession(base_url=url) as http,
        ):
            if True:
                async with http.get("/") as response:
                    assert response.status == 401
                    assert "Basic" in response.headers["WWW-Authenticate"]
                pair = base64.b64encode(b"sre:pw").decode()
                async with http.get("/", headers={"Authorization": f"Basic {pair}"}) as response:
                    assert response.status == 200


def borrowing_pool() -> ConsoleView:
    """Cohort pool: queue a (nominal 8 GPUs) holds 16 beside b (nominal 16, unused)."""
    view = ConsoleView(cluster="c")
    for body in (
        CohortConfig(name="pool"),
        QueueConfig(name="a", parent="pool", nominal={GPU: 8}),
        QueueConfig(name="b", parent="pool", nominal={GPU: 16}),
        msg.workload("train", msg.podset("main", 2, gpus=8)),
    ):
        view.apply_state(body, stream_sequence=1, time=1.0)
    admission = msg.admitted("train", {("r1", "n1"): 1, ("r1", "n2"): 1}, sequence=1, queue="a")
    view.apply_decision(admission, stream_sequence=2, time=2.0)
    return view


def test_the_queue_tree_shows_what_a_queue_borrows_from_its_cohort() -> None:
    """Queue a (nominal 8 GPUs) holds 16 in cohort pool beside b (nominal 16, unused): a
    borrows 8, and could take at most the pool's 24; the numbers are admission's tree rule."""
    assert ConsoleView(cluster="c").queue_tree() == []
    view = borrowing_pool()
    (pool,) = view.queue_tree()
    assert (pool["kind"], pool["name"]) == ("cohort", "pool")
    rows = {child["name"]: child["dims"] for child in pool["children"]}
    gpu_a = next(d for d in rows["a"] if d["dim"] == GPU)
    assert gpu_a == {
        "dim": GPU,
        "nominal": "8",
        "used": "16",
        "borrowed": "8",
        "borrowing": True,
        "lent": "0",
        "lending": False,
        "lendable": "0",
        "ceiling": "24",
    }
    gpu_b = next(d for d in rows["b"] if d["dim"] == GPU)
    assert (gpu_b["used"], gpu_b["borrowed"]) == ("0", "0")


def test_the_queue_tree_shows_what_a_queue_lends_beside_what_others_borrow() -> None:
    """The same cohort: b lends a the 8 GPUs a borrows, out of the 16 it could lend; a lends
    nothing. The numbers are those of ``tidegate admit`` (queuetree.lent and report)."""
    view = borrowing_pool()
    (pool,) = view.queue_tree()
    rows = {child["name"]: child["dims"] for child in pool["children"]}
    gpu_a = next(d for d in rows["a"] if d["dim"] == GPU)
    gpu_b = next(d for d in rows["b"] if d["dim"] == GPU)
    assert (gpu_a["borrowed"], gpu_a["lent"], gpu_a["lending"]) == ("8", "0", False)
    assert (gpu_b["borrowed"], gpu_b["lent"], gpu_b["lending"]) == ("0", "8", True)
    assert gpu_b["lendable"] == "16"


def test_the_map_marks_a_reserved_domain_with_its_gang_and_expected_start() -> None:
    """A reservation in force holds rack r2 for ns/big: the map marks the rack (the gang, its
    expected start, the gangs it waits for) and its nodes, the waiting table and the list of
    reservations carry it, and the stream shows the decision; once it is dropped, nothing."""
    view = ConsoleView(cluster="c")
    for body in (
        msg.topology(),
        msg.node("n1", "r1"),
        msg.node("n2", "r1"),
        msg.node("n3", "r2"),
        msg.node("n4", "r2"),
        QueueConfig(name="research"),
        msg.workload("big", msg.podset("main", 2, gpus=8)),
    ):
        view.apply_state(body, stream_sequence=1, time=1.0)
    start = 10 * 3600.0 + 30 * 60  # 10:30 UTC
    view.apply_decision(msg.pending("big", sequence=1), stream_sequence=2, time=2.0)
    reserved = Reserved(
        workload="ns/big",
        uid="uid-big",
        queue="research",
        sequence=2,
        topology="default",
        level=RACK,
        domain=["r2"],
        nodes=["n3", "n4"],
        expected_start=start,
        waits_for=[WaitedGang(workload="ns/x", expected_end=start, overdue=True)],
        message="rack r2 reserved; expected start 10:30 UTC (in 1h) when ns/x ends",
    )
    shown = view.apply_decision(reserved, stream_sequence=3, time=3.0)
    assert shown is not None
    assert (shown["kind"], shown["workload"], shown["text"]) == (
        "reserved",
        "ns/big",
        reserved.message,
    )

    snapshot = view.snapshot()
    (listed,) = snapshot["reservations"]
    assert listed["workload"] == "ns/big"
    assert (listed["where"], listed["nodes"]) == ("rack r2", ["n3", "n4"])
    assert listed["expected_start"] == "1970-01-01T10:30:00+00:00"
    assert (listed["waits_for"], listed["overdue"]) == (["ns/x"], ["ns/x"])
    r1, r2 = snapshot["map"]["root"]["children"]
    assert "reservation" not in r1
    assert r2["reservation"]["workload"] == "ns/big"
    assert r2["reservation"]["expected_start"] == listed["expected_start"]
    assert r2["reservation"]["waits_for"] == ["ns/x"]
    assert r2["reservation"]["message"].startswith("rack r2 reserved for you; expected start 10:30")
    cells = {n["name"]: n["reserved_for"] for r in (r1, r2) for n in r["nodes"]}
    assert cells == {"n1": None, "n2": None, "n3": "ns/big", "n4": "ns/big"}
    (waiting,) = snapshot["pending"]
    assert waiting["reservation"] == r2["reservation"]["message"]

    dropped = ReservationDropped(
        workload="ns/big",
        uid="uid-big",
        queue="research",
        reason="QueueDisallows",
        sequence=3,
        reserved_sequence=2,
        message="its queue no longer allows the reservation",
    )
    shown = view.apply_decision(dropped, stream_sequence=4, time=4.0)
    assert shown is not None
    assert (shown["kind"], shown["reason"]) == ("reservation-dropped", "QueueDisallows")
    snapshot = view.snapshot()
    assert snapshot["reservations"] == []
    assert all("reservation" not in r for r in snapshot["map"]["root"]["children"])
    assert snapshot["pending"][0]["reservation"] is None
