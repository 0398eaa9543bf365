"""``tidegate explain`` and ``tidegate queues`` on a real bus: what the services would have
published (workloads, queues, pods, decisions) is put on the streams, and the commands read it
back like any subscriber."""

import asyncio
import json

import msgspec
import pytest

from tidegate.bus import Bus
from tidegate.cli.busview import fill_view
from tidegate.cli.explain import explain, render
from tidegate.cli.main import main
from tidegate.cli.queues import queue_table
from tidegate.cli.queues import render as render_queues
from tidegate.model import (
    Admitted,
    DomainCount,
    Message,
    Pending,
    PodSetSpec,
    PodState,
    Preempted,
    QueueConfig,
    Released,
    TopologyAssignment,
    TopologyRequest,
    WorkloadState,
    subjects,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.model.subjects import DecisionKind
from tidegate.telemetry import workload_trace_context
from tidegate.testing.bus import connected, envelope

GPU = "nvidia.com/gpu"


def workload(name: str, *, queue: str, priority: int, created: float) -> WorkloadState:
    return WorkloadState(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        owner_kind="Job",
        queue=queue,
        priority=priority,
        service_type="inference" if name == "serve" else "training",
        podsets=[
            PodSetSpec(
                name="main",
                count=2,
                requests={"cpu": 8000, GPU: 8},
                topology=TopologyRequest(required="tidegate.io/rack"),
            )
        ],
        created_at=created,
        trace_context=workload_trace_context(f"uid-{name}"),
    )


def admitted(name: str, queue: str, sequence: int) -> Admitted:
    levels = ["tidegate.io/rack", "kubernetes.io/hostname"]
    return Admitted(
        workload=f"ns/{name}",
        uid=f"uid-{name}",
        queue=queue,
        sequence=sequence,
        epoch=1,
        assignments={
            "main": TopologyAssignment(
                levels=levels,
                domains=[
                    DomainCount(values=["r1", "n1"], count=1),
                    DomainCount(values=["r1", "n2"], count=1),
                ],
            )
        },
        charged={"cpu": 16000, GPU: 16},
        charged_cards={"H200": 16},
    )


def pending(name: str, queue: str, sequence: int, reason: str = "WaitingForCapacity") -> Pending:
    return Pending(
        workload=f"ns/{name}",
        uid=f"uid-{name}",
        queue=queue,
        reason=reason,  # type: ignore[arg-type]
        message="main: needs 2 pods in one rack; the best rack fits 1 (limited by nvidia.com/gpu)",
        sequence=sequence,
    )


async def put(bus: Bus, cluster: str, subject: str, body: Message) -> None:
    await bus.publish(subject, envelope(cluster, body))


async def decide(bus: Bus, cluster: str, kind: DecisionKind, name: str, body: Message) -> None:
    await put(bus, cluster, subjects.decision(cluster, kind, "ns", name), body)


async def scenario(bus: Bus, cluster: str) -> None:
    """serve (online) evicted train-a (offline) and runs; train-b, train-c wait in offline."""
    await put(
        bus,
        cluster,
        subjects.queue(cluster, "online"),
        QueueConfig(name="online", priority=100, reclaimable=False, quota={GPU: 64}),
    )
    await put(
        bus,
        cluster,
        subjects.queue(cluster, "offline"),
        QueueConfig(name="offline", priority=10, quota={GPU: 64}, card_quota={"H200": 32}),
    )
    for name, queue, priority, created in (
        ("serve", "online", 100, 30.0),
        ("train-a", "offline", 10, 10.0),
        ("train-b", "offline", 10, 20.0),
        ("train-c", "offline", 5, 5.0),
        ("broken", "offline", 50, 1.0),
    ):
        body = workload(name, queue=queue, priority=priority, created=created)
        await put(bus, cluster, subjects.workload(cluster, "ns", name), body)
    await decide(bus, cluster, "admitted", "train-a", admitted("train-a", "offline", 1))
    await decide(bus, cluster, "pending", "broken", pending("broken", "offline", 1, "Invalid"))
    await decide(bus, cluster, "pending", "train-b", pending("train-b", "offline", 2))
    await decide(bus, cluster, "pending", "serve", pending("serve", "online", 3))
    preempted = Preempted(
        preemptor="ns/serve", preemptor_uid="uid-serve", victims=["ns/train-a"], message="m"
    )
    await decide(bus, cluster, "preempted", "serve", preempted)
    released = Released(
        workload="ns/train-a", uid="uid-train-a", queue="offline", reason="Evicted", sequence=4
    )
    await decide(bus, cluster, "released", "train-a", released)
    await decide(bus, cluster, "pending", "train-a", pending("train-a", "offline", 5))
    await decide(bus, cluster, "admitted", "serve", admitted("serve", "online", 6))
    for index, (node, gates) in enumerate(((None, [ADMISSION_GATE]), ("n1", []))):
        pod = PodState(
            namespace="ns",
            name=f"serve-{index}",
            uid=f"p{index}",
            node_name=node,
            scheduling_gates=gates,
            workload="ns/serve",
            phase="Running" if node else "Pending",
        )
        await put(bus, cluster, subjects.pod(cluster, "ns", pod.name), pod)


async def test_explain_names_state_reason_position_placement_preemption_pods_and_trace(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(bus, cluster_id)
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
        await put(
            bus, cluster_id, subjects.queue(cluster_id, "offline"), QueueConfig(name="offline")
        )
        body = workload("stuck", queue="offline", priority=10, created=1.0)
        await put(bus, cluster_id, subjects.workload(cluster_id, "ns", "stuck"), body)
        first = admitted("stuck", "offline", 1)
        await decide(bus, cluster_id, "admitted", "stuck", first)
        moved = msgspec.structs.replace(
            first,
            sequence=2,
            replaces=1,
            origin=1,
            replace_cause="Unschedulable",
            unschedulable_moves=2,
        )
        await decide(bus, cluster_id, "admitted", "stuck", moved)
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
        team = QueueConfig(name="team-b", parent="research", nominal={GPU: 8})
        await put(bus, cluster_id, subjects.queue(cluster_id, "team-b"), team)
        body = workload("big", queue="team-b", priority=0, created=1.0)
        await put(bus, cluster_id, subjects.workload(cluster_id, "ns", "big"), body)
        borrowing = msgspec.structs.replace(
            admitted("big", "team-b", 1), borrowed={GPU: 8}, cohort="research"
        )
        await decide(bus, cluster_id, "admitted", "big", borrowing)
        view = await fill_view(bus, cluster_id, pods_of="ns")

    answer = explain(view, "ns/big")
    assert answer is not None
    assert answer["borrowing"] == "borrowing 8 GPUs from cohort research"
    assert "quota      borrowing 8 GPUs from cohort research" in render(answer)


async def test_queues_sum_usage_of_admitted_and_count_pending_by_reason(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(bus, cluster_id)
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
        await scenario(bus, cluster_id)
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
        body = workload("grows", queue="offline", priority=10, created=1.0)
        await put(bus, cluster_id, subjects.workload(cluster_id, "ns", "grows"), body)
        await decide(bus, cluster_id, "admitted", "grows", admitted("grows", "offline", 1))
        growth = pending("grows", "offline", 2, "ExceedsQuota")
        await decide(bus, cluster_id, "pending", "grows", growth)
        lost = msgspec.structs.replace(
            workload("stray", queue="offline", priority=1, created=2.0), queue=None
        )
        await put(bus, cluster_id, subjects.workload(cluster_id, "ns", "stray"), lost)
        await decide(bus, cluster_id, "pending", "stray", pending("stray", "default", 3))
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
