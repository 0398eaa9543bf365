"""bench/e2e.py's accounting: the invariants it reports (duplicated admissions, lost vs in flight,
time queued) fire on hand-made violations and stay quiet otherwise. The benchmark itself is
never run in the test command (it takes minutes)."""

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from tidegate.bus import Received
from tidegate.bus.server import NatsServerProcess
from tidegate.model import Admitted, Envelope, Pending, Released, subjects
from tidegate.model.names import ADMISSION_GATE
from tidegate.testing import connected
from tidegate.testing.bench import load_script
from tidegate.testing.messages import Messages

msg = Messages(
    namespace="bench",
    queue="bench",
    defaults={
        "admitted": {"uid": "u1"},
        "released": {"uid": "u1"},
        "pending": {"uid": "u1", "message": "full"},
    },
)
"""The decisions about bench/job-1 the benchmark's observer is fed."""


e2e = load_script("e2e.py", "e2e_bench")

_stream = iter(range(1, 1_000_000))


def received(body: Admitted | Pending | Released, *, at: float) -> Received:
    envelope = Envelope(
        event_id=f"e{id(body)}", cluster="c", source="admission", time=at, body=body
    )
    return Received(subject="tg.c.decision.x", envelope=envelope, stream_sequence=next(_stream))


def feed(observer: object, *bodies: Admitted | Pending | Released) -> None:
    for index, body in enumerate(bodies):
        asyncio.run(observer.on_decision(received(body, at=1000.0 + index)))  # type: ignore[attr-defined]


def test_a_second_admission_while_one_is_in_force_is_a_duplicate() -> None:
    observer = e2e.Observer()
    feed(observer, msg.admitted("job-1", sequence=1), msg.admitted("job-1", sequence=2))
    assert observer.duplicated("job-1") == 1


def test_a_repeated_decision_sequence_is_a_duplicate() -> None:
    observer = e2e.Observer()
    feed(
        observer,
        msg.admitted("job-1", sequence=1),
        msg.released("job-1", sequence=2),
        msg.admitted("job-1", sequence=1),
    )
    assert observer.duplicated("job-1") == 1


def test_a_replacement_a_readmission_after_a_release_or_a_new_uid_is_not() -> None:
    observer = e2e.Observer()
    feed(
        observer,
        msg.admitted("job-1", sequence=1),
        msg.admitted("job-1", sequence=2, replaces=1),  # slots moved or resized
        msg.released("job-1", sequence=3),
        msg.admitted("job-1", sequence=4),  # admitted again after its release
        msg.admitted("job-1", sequence=5, uid="u2"),  # a new object under the same name
    )
    assert observer.duplicated("job-1") == 0
    assert observer.admission_in_force("job-1")


def job(observer: object, pods: int) -> object:
    spec = e2e.JobSpec(name="job-1", at=0.0, pods=pods, gpus=1, topology="none", duration=1.0)
    times = e2e.JobTimes(spec, created=time.monotonic(), created_wall=time.time())
    observer.jobs["job-1"] = times  # type: ignore[attr-defined]
    return times


def pod_event(name: str, *, gated: bool) -> SimpleNamespace:
    gates = [{"name": ADMISSION_GATE}] if gated else []
    return SimpleNamespace(
        type="MODIFIED",
        obj={
            "metadata": {"namespace": e2e.NAMESPACE, "name": name, "labels": {"app": "job-1"}},
            "spec": {"schedulingGates": gates},
            "status": {"phase": "Pending"},
        },
    )


def test_an_admission_left_gated_by_an_idle_pipeline_is_lost() -> None:
    observer = e2e.Observer()
    job(observer, 2)
    feed(observer, msg.admitted("job-1", sequence=1))
    observer.on_pod(pod_event("job-1-a", gated=False))
    observer.on_pod(pod_event("job-1-b", gated=True))
    assert e2e.unreleased_admitted(observer, ["job-1"]) == ["job-1"]
    observer.last_change = time.monotonic() - 60
    outcome = asyncio.run(e2e.settle(observer, ["job-1"], limit_seconds=30, quiet_seconds=15))
    assert outcome == "idle"


def test_an_admission_released_while_settling_was_in_flight() -> None:
    observer = e2e.Observer()
    job(observer, 1)
    feed(observer, msg.admitted("job-1", sequence=1))
    observer.on_pod(pod_event("job-1-a", gated=True))

    async def release_later() -> str:
        async def release() -> None:
            await asyncio.sleep(0.3)
            observer.on_pod(pod_event("job-1-a", gated=False))

        task = asyncio.create_task(release())
        outcome = await e2e.settle(observer, ["job-1"], limit_seconds=30, quiet_seconds=15)
        await task
        return str(outcome)

    assert asyncio.run(release_later()) == "caught up"
    # Still working when the settle time is up: in flight, not lost.
    second = e2e.Observer()
    job(second, 1)
    feed(second, msg.admitted("job-1", sequence=1))
    assert asyncio.run(e2e.settle(second, ["job-1"], limit_seconds=0, quiet_seconds=15)) == "busy"


def test_the_time_queued_runs_from_the_first_pending_to_the_admission() -> None:
    observer = e2e.Observer()
    times = job(observer, 1)
    asyncio.run(observer.on_decision(received(msg.pending("job-1", sequence=1), at=100.0)))
    asyncio.run(observer.on_decision(received(msg.admitted("job-1", sequence=2), at=104.0)))
    times.ungated["job-1-a"] = times.created + 5.0  # type: ignore[attr-defined]
    split = e2e.latency_split(observer, times)
    assert split is not None
    queued, pipeline = split
    assert queued == 4.0
    assert abs(pipeline - 1.0) < 1e-9


def test_the_offered_load_is_little_s_law() -> None:
    specs = [
        e2e.JobSpec(name=f"j{i}", at=i, pods=2, gpus=4, topology="none", duration=10.0)
        for i in range(10)
    ]
    load = e2e.offered_load(specs, seconds=10.0, nodes=32)
    # 1 Job/s x 8 GPUs x 10 s = 80 busy GPUs of 256.
    assert load["gpu_demand"] == round(80 / 256, 3)
    assert load["pods_per_s"] == 2.0


def test_the_stages_of_a_job_add_up_to_created_to_ungated() -> None:
    observer = e2e.Observer()
    times = job(observer, 2)
    times.pods_seen = times.created + 0.010  # type: ignore[attr-defined]
    times.published = times.created_wall + 0.030  # type: ignore[attr-defined]
    at = times.created_wall + 0.100  # type: ignore[attr-defined]
    asyncio.run(observer.on_decision(received(msg.admitted("job-1", sequence=1), at=at)))
    times.ungated["job-1-a"] = times.created + 0.150  # type: ignore[attr-defined]
    assert e2e.job_stages(observer, times) is None  # one pod of two: not wholly ungated
    times.ungated["job-1-b"] = times.created + 0.400  # type: ignore[attr-defined]
    row = e2e.job_stages(observer, times)
    assert row is not None
    assert [row[name] for name in e2e.STAGES] == [10.0, 20.0, 70.0, 50.0, 250.0]
    assert sum(row[name] for name in e2e.STAGES) == row["created_to_ungated_ms"] == 400.0
    figures = e2e.stage_percentiles([row])
    assert figures["first_to_last_ungated_ms"]["p50_ms"] == 250.0


def test_cpu_per_job_counts_only_the_load() -> None:
    samples = [
        (2.0, {"watcher": 3.0, "ungater": 1.0}),
        (7.0, {"watcher": 4.0, "ungater": 3.0}),
        (12.0, {"watcher": 5.0, "ungater": 5.0}),
    ]
    cost = e2e.cpu_per_job(samples, 200)
    assert cost["seconds"] == 10.0
    assert cost["ms_per_job"] == {"watcher": 10.0, "ungater": 20.0}
    assert cost["cores"] == {"watcher": 0.2, "ungater": 0.4}
    assert cost["all_ms_per_job"] == 30.0
    assert cost["all_cores"] == 0.6
    assert e2e.cpu_per_job(samples[:1], 200) == {}


def test_bus_messages_per_job_are_the_counters_growth_over_the_jobs() -> None:
    before = {"watcher": (100, 100, 10_240, 10_240), "ungater": (5, 50, 0, 0)}
    after = {
        "watcher": (300, 300, 30_720, 30_720),
        "ungater": (25, 450, 2_048, 40_960),
        "restarted": (10, 20, 1_024, 1_024),  # a connection opened in between counts from zero
    }
    rows = e2e.bus_per_job(before, after, 20)
    assert rows["watcher"] == {"sent": 10.0, "received": 10.0, "sent_kib": 1.0, "received_kib": 1.0}
    assert rows["ungater"] == {"sent": 1.0, "received": 20.0, "sent_kib": 0.1, "received_kib": 2.0}
    assert rows["restarted"]["sent"] == 0.5
    assert rows["all"]["sent"] == 11.5
    assert rows["all"]["received"] == 31.0
    assert e2e.bus_per_job(before, after, 0) == {}


async def test_bus_counts_read_each_named_connection_from_the_server(cluster_id: str) -> None:
    """What the nats-server says a named connection sent (each publish) and received (each
    publish's acknowledgement), told apart by their sizes."""
    with NatsServerProcess(monitor_port=0) as server:
        stack = SimpleNamespace(nats=server)
        async with connected(server.url, cluster_id, name="bench-counter") as bus:
            first = e2e.bus_counts(stack)["bench-counter"]
            for index in range(7):
                envelope = Envelope(
                    event_id=f"e{index}",
                    cluster=cluster_id,
                    source="test",
                    time=0.0,
                    body=msg.released("job-1", sequence=index, uid=f"u{index}"),
                )
                await bus.publish(
                    subjects.decision(cluster_id, "released", "ns", f"w{index}"), envelope
                )
            then = e2e.bus_counts(stack)["bench-counter"]
        sent, received = then[0] - first[0], then[1] - first[1]
        assert sent == 7, then
        assert received == 7, then
        # The envelopes went out; only the short acknowledgements came back.
        sent_bytes, received_bytes = then[2] - first[2], then[3] - first[3]
        assert sent_bytes > 2 * received_bytes > 0, then


def test_every_job_declares_a_runtime_not_below_its_run_unless_told_not_to() -> None:
    def stream(declare: float) -> list[object]:
        return e2e.job_stream(  # type: ignore[no-any-return]
            seed=7, rate=5.0, seconds=20.0, nodes=64, utilization=0.5, prefix="j-", declare=declare
        )

    declared = stream(1.5)
    plain = stream(0.0)
    assert [s.duration for s in declared] == [s.duration for s in plain]
    assert all(s.max_runtime is None for s in plain)
    for spec in declared:
        assert spec.max_runtime >= spec.duration * 1.5
        assert spec.max_runtime % e2e.DECLARED_ROUND_UP_TO == 0
        meta = e2e.workload_object(spec.entry(), e2e.NAMESPACE)["metadata"]
        assert meta["annotations"]["tidegate.io/max-runtime"] == f"{spec.max_runtime:g}"


def test_reservations_off_turns_them_off_in_admission() -> None:
    def env(mode: str) -> dict[str, str]:
        args = SimpleNamespace(env=[], reservations=mode, nodes=32, nats_servers=1)
        return dict(e2e.stack_settings(args, Path("/tmp")).extra_env)

    assert env("off")["TIDEGATE_RESERVATIONS_MAX_PER_CLUSTER"] == "0"
    assert "TIDEGATE_RESERVATIONS_MAX_PER_CLUSTER" not in env("on")


def bound_pod(name: str, node: str, gpus: int, phase: str = "Running") -> SimpleNamespace:
    return SimpleNamespace(
        type="MODIFIED",
        obj={
            "metadata": {"namespace": e2e.NAMESPACE, "name": name, "labels": {"app": "job-1"}},
            "spec": {
                "nodeName": node,
                "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
            },
            "status": {"phase": phase},
        },
    )


def test_the_schedule_figures_follow_the_pods_held_and_the_first_admissions() -> None:
    observer = e2e.Observer()
    times = job(observer, 2)
    gpus = {"n1": 8, "n2": 8}
    waiting = observer.snapshot(gpus)
    assert waiting.waiting == ("job-1",)
    assert waiting.free == {"n1": 8, "n2": 8}
    asyncio.run(observer.on_decision(received(msg.admitted("job-1", sequence=1), at=1010.0)))
    observer.on_pod(bound_pod("job-1-a", "n1", 1))
    observer.on_pod(bound_pod("job-1-b", "n1", 1))
    running = observer.snapshot(gpus)
    assert running.waiting == ()
    assert running.free == {"n1": 6, "n2": 8}
    observer.on_pod(bound_pod("job-1-a", "n1", 1, phase="Succeeded"))
    assert observer.snapshot(gpus).free == {"n1": 7, "n2": 8}
    nodes = ({"n1": {"tidegate.io/rack": "r1"}, "n2": {"tidegate.io/rack": "r1"}}, gpus)
    times.created_wall = 1000.0  # type: ignore[attr-defined]
    timeline = e2e.schedule_timeline(
        observer,
        [times.spec],
        nodes,
        [waiting, running],
        end=running.at + 1,  # type: ignore[attr-defined]
    )
    (gang,) = timeline.gangs
    assert (gang.submitted_at, gang.started_at, gang.gpus) == (1000.0, 1010.0, 2)
    figures = e2e.schedule_figures(timeline)
    assert figures["small"]["max"] == 10.0
