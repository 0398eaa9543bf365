"""The admission service over a real nats-server: decisions, bad input, FIFO, failover."""

import asyncio
import collections
import signal
import time

from tidegate.model import (
    Admitted,
    LostAdmission,
    Pending,
    PodSetSpec,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    WorkloadState,
    subjects,
)

from .conftest import GPU, Harness

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def workers(count: int, gpus: int, name: str = "workers") -> PodSetSpec:
    """A podset of ``count`` pods with ``gpus`` GPUs and one cpu each."""
    return PodSetSpec(name=name, count=count, requests={"cpu": 1000, GPU: gpus})


def workload(
    name: str,
    *podsets: PodSetSpec,
    queue: str | None = "q",
    created_at: float = 0.0,
    **extra: object,
) -> WorkloadState:
    """A training workload of ``podsets`` (one pod with one GPU by default)."""
    return WorkloadState(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        owner_kind="Job",
        queue=queue,
        service_type="training",
        created_at=created_at or time.time(),
        podsets=list(podsets) or [workers(1, 1)],
        **extra,  # type: ignore[arg-type]
    )


async def small_cluster(harness: Harness, *queues: QueueConfig) -> None:
    """A topology of two racks of two 8-GPU nodes, and ``queues`` (or one queue "q")."""
    await harness.topology()
    for name, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2")):
        await harness.node(name, rack)
    for queue in queues or (QueueConfig(name="q"),):
        await harness.queue(queue)


async def test_admits_releases_and_continues_the_workload_trace(harness: Harness) -> None:
    await small_cluster(harness)
    await harness.start_admission()
    traceparent = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
    await harness.workload(
        workload("train", workers(2, 8), trace_context={"traceparent": traceparent})
    )
    await harness.until(lambda: harness.of(Admitted, "ns/train"), what="admission")
    (admitted,) = harness.of(Admitted, "ns/train")
    assert isinstance(admitted, Admitted)
    assert admitted.charged == {"cpu": 2000, GPU: 16}
    assert sum(d.count for d in admitted.assignments["workers"].domains) == 2
    assert admitted.epoch > 0
    headers = harness.headers[harness.decisions.index(admitted)]
    assert headers["traceparent"].split("-")[1] == TRACE_ID

    await harness.delete_workload("ns", "train")
    await harness.until(lambda: harness.of(Released, "ns/train"), what="release")
    (released,) = harness.of(Released, "ns/train")
    assert isinstance(released, Released)
    assert released.reason == "Deleted"
    assert released.sequence > admitted.sequence


async def test_malformed_queues_and_unknown_queues_give_pending_never_a_crash(
    harness: Harness,
) -> None:
    await small_cluster(
        harness,
        QueueConfig(name="q"),
        QueueConfig(name="broken", invalid_reason="spec.capability.cpu: 'lots' is not a quantity"),
        QueueConfig(name="negative", quota={GPU: -4}),
    )
    # Bytes that are no envelope at all, on a queue's subject: skipped, nothing else changes.
    await harness.bus.jetstream.publish(subjects.queue(harness.cluster, "garbage"), b"{not json")
    await harness.start_admission()
    await harness.workload(workload("lost", queue="nowhere"))
    await harness.workload(workload("in-broken", queue="broken"))
    await harness.workload(workload("in-negative", queue="negative"))
    await harness.workload(workload("in-garbage", queue="garbage"))
    await harness.workload(workload("no-queue", queue=None))
    await harness.workload(workload("fine"))
    await harness.until(lambda: harness.of(Admitted, "ns/fine"), what="the good workload")
    await harness.until(lambda: len(harness.of(Pending)) >= 5, what="five pending decisions")
    reasons = {
        p.workload: (p.reason, p.message) for p in harness.of(Pending) if isinstance(p, Pending)
    }
    assert reasons == {
        "ns/lost": ("QueueNotFound", "queue nowhere does not exist"),
        "ns/in-broken": (
            "Invalid",
            "queue broken is invalid: spec.capability.cpu: 'lots' is not a quantity",
        ),
        "ns/in-negative": (
            "Invalid",
            "queue negative is invalid: quota.nvidia.com/gpu: -4 is negative",
        ),
        "ns/in-garbage": ("QueueNotFound", "queue garbage does not exist"),
        "ns/no-queue": ("QueueNotFound", "the workload names no queue"),
    }
    # Fixing the queue lets its workload in: the service kept running all along.
    await harness.queue(QueueConfig(name="broken"))
    await harness.until(lambda: harness.of(Admitted, "ns/in-broken"), what="the fixed queue")


async def test_strict_fifo_head_blocks_best_effort_lets_smaller_ones_pass(
    harness: Harness,
) -> None:
    await harness.topology()
    await harness.node("n1", "r1", free_gpus=4)
    await harness.node("n2", "r1", free_gpus=4)
    await harness.queue(QueueConfig(name="strict", strategy="StrictFIFO", priority=2))
    await harness.queue(QueueConfig(name="best", strategy="BestEffortFIFO", priority=1))
    await harness.start_admission()
    for queue in ("strict", "best"):
        await harness.workload(workload(f"{queue}-big", workers(1, 8), queue=queue, created_at=1))
        await harness.workload(workload(f"{queue}-small", workers(1, 4), queue=queue, created_at=2))
    await harness.until(lambda: harness.of(Admitted, "ns/best-small"), what="best-effort pass")
    await harness.until(
        lambda: harness.of(Pending, "ns/strict-small"), what="the blocked strict workload"
    )
    (blocked,) = harness.of(Pending, "ns/strict-small")
    assert isinstance(blocked, Pending)
    assert blocked.message == "queue strict is StrictFIFO and waits for ns/strict-big"
    assert harness.of(Admitted, "ns/strict-small") == []
    big = {p.workload: p.reason for p in harness.of(Pending) if isinstance(p, Pending)}
    assert big["ns/strict-big"] == big["ns/best-big"] == "WaitingForCapacity"


async def test_leader_failover_mid_stream_admits_nothing_twice(harness: Harness) -> None:
    await harness.topology()
    for i in range(8):
        await harness.node(f"n{i}", f"r{i // 4}")
    await harness.queue(QueueConfig(name="q"))
    first = await harness.spawn_admission("first")
    await harness.workload(workload("w00"))
    await harness.until(lambda: harness.of(Admitted, "ns/w00"), within=30, what="a leader")
    await harness.spawn_admission("second")
    await asyncio.sleep(1.0)  # the second instance is up and standing by
    names = [f"w{i:02d}" for i in range(1, 61)]
    for i, name in enumerate(names):
        await harness.workload(workload(name, created_at=time.time()))
        if i == 20:
            first.signal(signal.SIGKILL)
            await first.wait()
        await asyncio.sleep(0.02)
    await harness.until(
        lambda: all(harness.of(Admitted, f"ns/{n}") for n in names), within=30, what="all admitted"
    )
    await asyncio.sleep(0.5)  # anything published twice would have arrived by now

    admitted = [d for d in harness.decisions if isinstance(d, Admitted)]
    per_workload = collections.Counter(d.workload for d in admitted)
    assert per_workload == {f"ns/{n}": 1 for n in ["w00", *names]}
    epochs = sorted({d.epoch for d in admitted})
    assert len(epochs) == 2, f"expected the first and the second leader, saw epochs {epochs}"
    per_node: collections.Counter[str] = collections.Counter()
    for decision in admitted:
        for domain in decision.assignments["workers"].domains:
            per_node[domain.values[-1]] += domain.count
    assert max(per_node.values()) <= 8  # one GPU per pod, eight per node: never over-booked
    sequences = [d.sequence for d in admitted]
    assert len(set(sequences)) == len(sequences)


async def test_preemption_round_trip_releases_victims_and_holds_room_for_the_preemptor(
    harness: Harness,
) -> None:
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    await harness.start_admission()
    victim = await inference_needs_the_victims_room(harness)
    assert [p.reason for p in harness.of(Pending, "ns/serve") if isinstance(p, Pending)] == [
        "WaitingForPreemption"
    ]

    # The preemption service evicts the victim and nominates its room for the preemptor.
    preempted = victim_aborted_for_serve()
    await harness.publish(subjects.decision(harness.cluster, "preempted", "ns", "serve"), preempted)
    await harness.until(lambda: harness.of(Released, "ns/victim"), what="the victim released")
    (released,) = harness.of(Released, "ns/victim")
    assert isinstance(released, Released)
    assert released.reason == "Evicted"
    # A higher-priority newcomer must not take the nominated room once the victim is gone.
    await harness.workload(workload("sneaky", workers(1, 8), priority=1000))
    await harness.node("n1", "r1", free_gpus=8, applied=released.sequence)
    await harness.until(lambda: harness.of(Admitted, "ns/serve"), what="the preemptor admitted")
    (admitted,) = harness.of(Admitted, "ns/serve")
    assert isinstance(admitted, Admitted)
    assert admitted.nominated_by == "ns/serve"
    assert harness.of(Admitted, "ns/sneaky") == []
    assert harness.of(Admitted, "ns/victim") == [victim]  # aborted: not admitted again


async def test_a_release_by_another_service_gives_the_quota_back(harness: Harness) -> None:
    await small_cluster(harness, QueueConfig(name="q", quota={"cpu": 100_000, GPU: 8}))
    await harness.start_admission()
    await harness.workload(workload("first", workers(1, 8), created_at=1))
    await harness.workload(workload("second", workers(1, 8), created_at=2))
    await harness.until(lambda: harness.of(Pending, "ns/second"), what="the quota to run out")
    (pending,) = harness.of(Pending, "ns/second")
    assert isinstance(pending, Pending)
    assert pending.reason == "ExceedsQuota"
    done = Released(workload="ns/first", uid="uid-first", queue="q", reason="Completed")
    await harness.publish(subjects.decision(harness.cluster, "released", "ns", "first"), done)
    await harness.until(lambda: harness.of(Admitted, "ns/second"), what="the quota given back")
    # A release for another object under the same name (another uid) changes nothing.
    stale = Released(workload="ns/second", uid="uid-old", queue="q", reason="Completed")
    await harness.publish(subjects.decision(harness.cluster, "released", "ns", "second"), stale)
    await harness.workload(workload("third", workers(1, 8), created_at=3))
    await harness.until(lambda: harness.of(Pending, "ns/third"), what="third waits on quota")
    await asyncio.sleep(0.3)
    assert harness.of(Admitted, "ns/third") == []


async def inference_needs_the_victims_room(harness: Harness, *, within: float = 15.0) -> Admitted:
    """With admission running on node n1: a training gang ``ns/victim`` fills n1 (as the
    topology-cache would report), then the inference workload ``ns/serve`` arrives and admission
    asks for preemption. Returns the victim's admission."""
    await harness.workload(workload("victim", workers(1, 8)))
    await harness.until(
        lambda: harness.of(Admitted, "ns/victim"), within=within, what="the victim admitted"
    )
    (victim,) = harness.of(Admitted, "ns/victim")
    assert isinstance(victim, Admitted)
    # The topology-cache applied the admission: n1 is full.
    await harness.node("n1", "r1", free_gpus=0, applied=victim.sequence)
    serve = WorkloadState(
        namespace="ns",
        name="serve",
        uid="uid-serve",
        owner_kind="Deployment",
        queue="q",
        service_type="inference",
        created_at=time.time(),
        podsets=[workers(1, 8)],
    )
    await harness.workload(serve)
    await harness.until(lambda: harness.of(PreemptRequested, "ns/serve"), what="a request")
    return victim


def victim_aborted_for_serve() -> Preempted:
    """The decision the preemption service publishes for ``ns/serve``: ``ns/victim`` aborted,
    its room on n1 nominated."""
    return Preempted(
        preemptor="ns/serve",
        preemptor_uid="uid-serve",
        victims=["ns/victim"],
        mode={"ns/victim": "abort"},
        nominated={"n1": {GPU: 8, "cpu": 1000, "pods": 1}},
    )


async def test_a_preempted_stored_twice_leaves_the_victims_readmission_alone(
    harness: Harness,
) -> None:
    """Against the running service: the same ``preempted`` stored a second
    time (re-published by a preemption failover after JetStream's duplicate window, so under
    another stream sequence) after the restart-mode victim was admitted again must not
    release that new admission."""
    await harness.topology()
    await harness.node("n1", "r1")
    await harness.queue(QueueConfig(name="q"))
    await harness.start_admission()
    victim = await inference_needs_the_victims_room(harness)
    preempted = Preempted(
        preemptor="ns/serve",
        preemptor_uid="uid-serve",
        victims=["ns/victim"],
        mode={"ns/victim": "restart"},
        lost={"ns/victim": LostAdmission(uid=victim.uid, sequence=victim.sequence)},
    )
    subject = subjects.decision(harness.cluster, "preempted", "ns", "serve")
    await harness.publish(subject, preempted, event_id="preemption-1")
    await harness.until(lambda: harness.of(Released, "ns/victim"), what="the victim released")
    (released,) = harness.of(Released, "ns/victim")
    assert isinstance(released, Released)
    # The preemptor goes away; the room is free again and the victim is admitted again.
    await harness.delete_workload("ns", "serve")
    await harness.node("n1", "r1", free_gpus=8, applied=released.sequence)
    await harness.until(
        lambda: len(harness.of(Admitted, "ns/victim")) == 2, what="the victim admitted again"
    )
    await harness.publish(subject, preempted, event_id="preemption-1-again")
    await asyncio.sleep(1.5)
    assert len(harness.of(Released, "ns/victim")) == 1, "the re-admission was released"
