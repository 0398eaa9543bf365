"""``tidegate explain`` and ``tidegate queues`` on a real bus: what the services would have
published (workloads, queues, pods, decisions) is put on the streams, and the commands read it
back like any subscriber."""

import asyncio
import json

import msgspec
import pytest

from tidegate.cli.busview import fill_view
from tidegate.cli.explain import eviction_text, explain, render
from tidegate.cli.main import main
from tidegate.cli.queues import queue_table
from tidegate.cli.queues import render as render_queues
from tidegate.model import (
    QueueConfig,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.telemetry import workload_trace_context
from tidegate.testing.bus import connected
from tidegate.testing.harness import ServiceHarness
from tidegate.testing.messages import Messages

GPU = "nvidia.com/gpu"


RACK = "tidegate.io/rack"
msg = Messages(
    namespace="ns",
    levels=[RACK, "kubernetes.io/hostname"],
    defaults={
        "workload": {"service_type": "training"},
        "admitted": {
            "podset": "main",
            "charged": {"cpu": 16000, GPU: 16},
            "charged_cards": {"H200": 16},
        },
        "pending": {
            "message": "main: needs 2 pods in one rack; the best rack fits 1 (limited by nvidia.com/gpu)"
        },
    },
)
"""Workloads of two 8-GPU pods in one rack, admitted on n1 and n2 of rack r1."""
MAIN = msg.podset("main", 2, cpu=8000, gpus=8, required=RACK)
ON_TWO_NODES = {("r1", "n1"): 1, ("r1", "n2"): 1}


async def scenario(h: ServiceHarness) -> None:
    """serve (online) evicted train-a (offline) and runs; train-b, train-c wait in offline."""
    await h.send(QueueConfig(name="online", priority=100, reclaimable=False, quota={GPU: 64}))
    await h.send(QueueConfig(name="offline", priority=10, quota={GPU: 64}, card_quota={"H200": 32}))
    for name, queue, priority, created in (
        ("serve", "online", 100, 30.0),
        ("train-a", "offline", 10, 10.0),
        ("train-b", "offline", 10, 20.0),
        ("train-c", "offline", 5, 5.0),
        ("broken", "offline", 50, 1.0),
    ):
        body = msg.workload(
            name,
            MAIN,
            queue=queue,
            priority=priority,
            created_at=created,
            service_type="inference" if name == "serve" else "training",
            trace_context=workload_trace_context(f"uid-{name}"),
        )
        await h.send(body)
    await h.send(msg.admitted("train-a", ON_TWO_NODES, sequence=1, queue="offline"))
    await h.send(msg.pending("broken", sequence=1, queue="offline", reason="Invalid"))
    await h.send(msg.pending("train-b", sequence=2, queue="offline"))
    await h.send(msg.pending("serve", sequence=3, queue="online"))
    await h.send(msg.preempted("serve", ["train-a"], message="m"))
    await h.send(msg.released("train-a", queue="offline", reason="Evicted", sequence=4))
    await h.send(msg.pending("train-a", sequence=5, queue="offline"))
    await h.send(msg.admitted("serve", ON_TWO_NODES, sequence=6, queue="online"))
    for index, (node, gates) in enumerate(((None, [ADMISSION_GATE]), ("n1", []))):
        phase = "Running" if node else "Pending"
        await h.send(
            msg.pod(
                f"serve-{index}",
                node,
                uid=f"p{index}",
                requests={},
                scheduling_gates=gates,
                workload="ns/serve",
                phase=phase,
            )
        )


async def test_explain_names_state_reason_position_placement_preemption_pods_and_trace(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(ServiceHarness(bus, cluster_id, nats_url))
        view = await fill_view(bus, cluster_id, pods_of="ns")

    serve = explain(view, "ns/serve")
    assert serve is not None
    assert serve["state"] == "Admitted"
    assert serve["placement"] == ["main: 2 pods in tidegate.io/rack r1 x2"]
    assert serve["preempted"]["victims"] == ["ns/train-a"]
    assert serve["pods"]["gated"] == 1
    assert serve["pods"]["bound"] == 1
    assert serve["trace_id"] == workload_trace_context("uid-serve")["traceparent"].split("-")[1]
    assert "trace      " + serve["trace_id"] in render(serve)

    victim = explain(view, "ns/train-a")
    assert victim is not None
    assert victim["state"] == "Pending"
    assert victim["reason"] == "WaitingForCapacity"
    assert victim["preempted_by"][0]["preemptor"] == "ns/serve"
    # Admission order in offline: priority first (train-a and train-b: 10, train-c: 5), then age.
    assert victim["position"] == {"place": 1, "waiting": 3}
    waiting = explain(view, "ns/train-c")
    assert waiting is not None
    assert waiting["state"] == "Submitted"
    assert waiting["position"] == {"place": 3, "waiting": 3}
    assert waiting["ahead"] == ["ns/train-a", "ns/train-b"]
    broken = explain(view, "ns/broken")
    assert broken is not None
    assert broken["reason"] == "Invalid"
    assert "position" not in broken, "a workload waiting for a fix is nobody's turn"
    assert explain(view, "ns/nothing") is None


async def test_explain_says_when_and_why_slots_were_moved(nats_url: str, cluster_id: str) -> None:
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await h.send(QueueConfig(name="offline"))
        body = msg.workload("stuck", MAIN, queue="offline", priority=10, created_at=1.0)
        await h.send(body)
        first = msg.admitted("stuck", ON_TWO_NODES, sequence=1, queue="offline")
        await h.send(first)
        moved = msgspec.structs.replace(
            first,
            sequence=2,
            replaces=1,
            origin=1,
            replace_cause="Unschedulable",
            unschedulable_moves=2,
        )
        await h.send(moved)
        view = await fill_view(bus, cluster_id, pods_of="ns")

    answer = explain(view, "ns/stuck")
    assert answer is not None
    assert answer["moved"] == {"replaces": 1, "cause": "Unschedulable"}
    assert answer["unschedulable_moves"] == 2
    text = render(answer)
    assert "moved      replacing decision #1 (Unschedulable)" in text
    assert "slots moved 2 times because the scheduler found no room" in text


async def test_explain_says_what_an_admission_borrows_from_its_cohort(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await h.send(QueueConfig(name="team-b", parent="research", nominal={GPU: 8}))
        await h.send(msg.workload("big", MAIN, queue="team-b", created_at=1.0))
        admitted = msg.admitted("big", ON_TWO_NODES, sequence=1, queue="team-b")
        await h.send(msgspec.structs.replace(admitted, borrowed={GPU: 8}, cohort="research"))
        view = await fill_view(bus, cluster_id, pods_of="ns")

    answer = explain(view, "ns/big")
    assert answer is not None
    assert answer["borrowing"] == "borrowing 8 GPUs from cohort research"
    assert "quota      borrowing 8 GPUs from cohort research" in render(answer)


async def test_queues_sum_usage_of_admitted_and_count_pending_by_reason(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(ServiceHarness(bus, cluster_id, nats_url))
        view = await fill_view(bus, cluster_id)
    rows = {row["queue"]: row for row in queue_table(view)}
    assert rows["online"]["admitted"] == 1
    assert rows["online"]["usage"] == {"cpu": 16000, GPU: 16}
    assert rows["online"]["pending"] == {}
    assert rows["offline"]["admitted"] == 0
    assert rows["offline"]["usage"] == {}
    assert rows["offline"]["pending"] == {"WaitingForCapacity": 2, "Submitted": 1, "Invalid": 1}
    text = render_queues(list(rows.values()))
    assert "usage      cpu 16, nvidia.com/gpu 16/64" in text
    assert "pending    4 (Invalid 1, Submitted 1, WaitingForCapacity 2)" in text


@pytest.mark.usefixtures("nats_server")
async def test_the_commands_print_json_and_say_when_a_workload_is_unknown(
    nats_url: str, cluster_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(ServiceHarness(bus, cluster_id, nats_url))
    bus_options = ["--cluster", cluster_id, "--nats-url", nats_url]
    # main() runs its own event loop: run it off this test's loop.
    assert await asyncio.to_thread(main, ["explain", "ns/serve", "--json", *bus_options]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "Admitted"
    assert await asyncio.to_thread(main, ["queues", *bus_options]) == 0
    assert "online  priority 100, not reclaimable" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["explain", "ns/ghost", *bus_options]) == 1
    assert "no workload ns/ghost" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["explain", "no-slash", *bus_options]) == 2


async def test_an_admitted_workload_whose_growth_waits_is_admitted_and_the_default_queue_counts(
    nats_url: str, cluster_id: str
) -> None:
    """busview read "the newest decision is an Admitted": a pending growth hid the admission
    from ``explain`` and its usage from ``queues``; a workload naming no queue waits in the
    one admission chose (its default queue), not in "no queue"."""
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        body = msg.workload("grows", MAIN, queue="offline", priority=10, created_at=1.0)
        await h.send(body)
        await h.send(msg.admitted("grows", ON_TWO_NODES, sequence=1, queue="offline"))
        growth = msg.pending("grows", sequence=2, queue="offline", reason="ExceedsQuota")
        await h.send(growth)
        lost = msgspec.structs.replace(
            msg.workload("stray", MAIN, queue="offline", priority=1, created_at=2.0), queue=None
        )
        await h.send(lost)
        await h.send(msg.pending("stray", sequence=3, queue="default"))
        view = await fill_view(bus, cluster_id, pods_of="ns")

    answer = explain(view, "ns/grows")
    assert answer is not None
    assert answer["state"] == "Admitted"
    assert answer["last_decision"]["sequence"] == 1
    rows = {row["queue"]: row for row in queue_table(view)}
    assert rows["offline"]["admitted"] == 1
    assert rows["offline"]["usage"] == {"cpu": 16000, GPU: 16}
    assert rows["offline"]["pending"] == {}
    assert rows["default"]["pending"] == {"WaitingForCapacity": 1}
    assert "" not in rows
    stray = explain(view, "ns/stray")
    assert stray is not None
    assert stray["queue"] == "default"
    assert stray["position"] == {"place": 1, "waiting": 1}


async def test_explain_says_when_quota_was_reclaimed_by_whom_and_who_waits_to_borrow(
    nats_url: str, cluster_id: str
) -> None:
    """team-a's serve reclaimed the quota team-b's borrow had borrowed from cohort research;
    team-b's next gang waits for borrowable capacity, team-a's next asked for reclaim."""
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await h.send(QueueConfig(name="team-a", parent="research", nominal={GPU: 16}))
        await h.send(QueueConfig(name="team-b", parent="research", nominal={GPU: 16}))
        for name, queue in (("borrow", "team-b"), ("serve", "team-a"), ("more", "team-b")):
            await h.send(msg.workload(name, MAIN, queue=queue, created_at=1.0))
        await h.send(msg.workload("next", MAIN, queue="team-a", created_at=2.0))
        await h.send(msg.admitted("borrow", ON_TWO_NODES, sequence=1, queue="team-b"))
        await h.send(
            msg.preempted(
                "serve",
                ["borrow"],
                message="borrowed quota of cohort research reclaimed for queue team-a",
                reclaimed={"ns/borrow": "InCohortReclamation"},
                cohort="research",
            )
        )
        await h.send(
            msg.pending(
                "more",
                sequence=2,
                queue="team-b",
                reason="ExceedsQuota",
                message="queue team-b: nvidia.com/gpu 16 in use + 16 requested > 16 available "
                "now (nominal 16; the rest is what cohort research can lend while others use it)",
            )
        )
        await h.send(msg.preempt_requested("next", sequence=3, queue="team-a", reclaim=True))
        view = await fill_view(bus, cluster_id, pods_of="ns")

    victim = explain(view, "ns/borrow")
    assert victim is not None
    assert victim["state"] == "Preempted"
    why = "evicted by ns/serve: quota lent by cohort research reclaimed (InCohortReclamation)"
    assert victim["message"] == why
    assert victim["preempted_by"][0]["reclaimed"] == "InCohortReclamation"
    assert victim["preempted_by"][0]["cohort"] == "research"
    assert why in render(victim)
    serve = explain(view, "ns/serve")
    assert serve is not None
    assert serve["preempted"]["reclaimed"] == {"ns/borrow": "InCohortReclamation"}
    assert "reclaimed  quota lent by cohort research: ns/borrow (InCohortReclamation)" in render(
        serve
    )
    more = explain(view, "ns/more")
    assert more is not None
    assert more["borrowing"] == "waits for borrowable capacity in cohort research"
    assert "quota      waits for borrowable capacity in cohort research" in render(more)
    following = explain(view, "ns/next")
    assert following is not None
    assert following["reason"] == "WaitingForPreemption"
    assert following["borrowing"].startswith("waits for cohort research to give back quota")


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("InCohortReclamation", "quota lent by cohort research reclaimed"),
        (
            "InCohortReclaimWhileBorrowing",
            "quota of cohort research taken by a higher-priority borrower",
        ),
        ("InCohortFairSharing", "its queue held more than its fair share of cohort research"),
        ("InClusterQueue", "its own queue's quota taken within the queue"),
    ],
)
def test_an_eviction_for_quota_says_what_each_kueue_reason_took(reason: str, words: str) -> None:
    preempted = msg.preempted("p", ["v"], reclaimed={"ns/v": reason}, cohort="research")
    assert eviction_text(preempted, "ns/v") == f"evicted by ns/p: {words} ({reason})"
    assert eviction_text(preempted, "ns/other") == "evicted by ns/p"
