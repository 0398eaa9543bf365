"""End to end: malformed input of every kind, while well-formed work goes on around it.

The whole system runs as in production (:mod:`tests.e2e.system`). Before anything is
submitted, garbage is put on the bus as a broken client would: bytes that are not JSON and JSON
that is not an envelope, on state subjects (node, pod, workload, Queue, Topology), a capacity
subject and a decision subject. Then, side by side with two well-formed training Jobs, come
workloads with a malformed annotation of each family — Volcano's card request that is not JSON,
a negative slice size, a level that is not in the named Topology (tidegate's and KAI's keys),
one that is not in the queue's Topology (Kueue's key, found by admission rather than the
watcher), a slice size that is not an integer — and one whose Queue's spec is malformed.

Each malformed workload must end pending with reason ``Invalid`` and a message naming the
field, with a Warning Event on its Job saying why (read through the API server as kubectl
would); no service may restart (same pids, all alive); the well-formed Jobs are admitted and
complete; and at the end the capacity view and the pod mirror on the bus equal the simulator's
own state (so no garbage node or pod found its way into either).
"""

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry
from tidegate.model import Admitted, Pending, Released, subjects

from .system import CLUSTER, System, running_system

NAMESPACE = "bad"
RACK = "tidegate.io/rack"
QUEUES = [
    QueueEntry(name="good", spec={"priority": 10}),
    QueueEntry(name="broken", spec={"priority": 5, "capability": {"cpu": "four"}}),
]


def job(
    name: str,
    *,
    queue: str = "good",
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> WorkloadEntry:
    """A 2-pod training Job of 8-GPU pods; ``annotations`` on the Job (workload-wide
    settings), ``template_annotations`` on its pod template (per-podset settings)."""
    return WorkloadEntry(
        name=name,
        queue=queue,
        pods=2,
        requests={"cpu": "4", "nvidia.com/gpu": 8},
        duration=100,
        annotations=annotations or {},
        template_annotations=template_annotations or {},
    )


WELL_FORMED = [
    job("ok-rack", annotations={"tidegate.io/topology-required": RACK}),
    job("ok-kueue", template_annotations={"kueue.x-k8s.io/podset-preferred-topology": RACK}),
]
MALFORMED: dict[str, tuple[WorkloadEntry, str]] = {
    # workload name → (what is submitted, what the reason and the Event must name)
    "bad-card-json": (
        job("bad-card-json", annotations={"volcano.sh/card.request": "{NVIDIA-H200: 2"}),
        "volcano.sh/card.request",
    ),
    "bad-slice-size": (
        job(
            "bad-slice-size",
            template_annotations={
                "tidegate.io/slice-size": "-4",
                "tidegate.io/slice-topology": RACK,
            },
        ),
        "tidegate.io/slice-size",
    ),
    "bad-level": (
        job(
            "bad-level",
            annotations={
                "tidegate.io/topology": "default",
                "tidegate.io/topology-required": "x.io/row",
            },
        ),
        "x.io/row",
    ),
    "bad-kai-level": (
        job(
            "bad-kai-level",
            annotations={
                "kai.scheduler/topology": "default",
                "kai.scheduler/topology-required-placement": "aisle",
            },
        ),
        "aisle",
    ),
    "bad-kueue-level": (
        job(
            "bad-kueue-level",
            template_annotations={"kueue.x-k8s.io/podset-required-topology": "x.io/row"},
        ),
        "x.io/row",
    ),
    "bad-slice-int": (
        job(
            "bad-slice-int",
            template_annotations={
                "kueue.x-k8s.io/podset-slice-size": "two",
                "kueue.x-k8s.io/podset-slice-required-topology": RACK,
            },
        ),
        "kueue.x-k8s.io/podset-slice-size",
    ),
    "in-broken-queue": (job("in-broken-queue", queue="broken"), "spec.capability.cpu"),
}

NOT_JSON = b"\xff\x00{not json at all"
NOT_AN_ENVELOPE = json.dumps({"kind": "workload", "name": 7, "cluster": ["?"]}).encode()


async def publish_garbage(system: System, round_: str) -> None:
    """Garbage on state, capacity and decision subjects (none of them a real object's)."""
    targets = [
        subjects.node(CLUSTER, f"garbage-{round_}"),
        subjects.pod(CLUSTER, NAMESPACE, f"garbage-{round_}"),
        subjects.workload(CLUSTER, NAMESPACE, f"garbage-{round_}"),
        subjects.queue(CLUSTER, f"garbage-{round_}"),
        subjects.topology(CLUSTER, f"garbage-{round_}"),
        subjects.capacity_node(CLUSTER, "default", f"garbage-{round_}"),
        subjects.decision(CLUSTER, "admitted", NAMESPACE, f"garbage-{round_}"),
        subjects.decision(CLUSTER, "preempt-requested", NAMESPACE, f"garbage-{round_}"),
    ]
    for subject in targets:
        await system.publish_raw(subject, NOT_JSON)
        await system.publish_raw(subject + "-json", NOT_AN_ENVELOPE)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_malformed_input_is_isolated_and_explained(tmp_path: Path) -> None:
    async with running_system(
        tmp_path, nodes="1x2x2x8gpu", time_scale=0.02, namespace=NAMESPACE
    ) as system:
        pids = system.pids()
        assert len(pids) == 5
        await system.set_up(priority_classes={}, queues=QUEUES)
        await publish_garbage(system, "before")
        await system.submit(*(entry for entry, _ in MALFORMED.values()))
        await system.submit(*WELL_FORMED)
        await publish_garbage(system, "during")

        for name, (_, names) in MALFORMED.items():
            pending = await system.until(
                functools.partial(invalid, system, name), within=30, what=f"{name} Invalid"
            )
            assert names in pending.message, (name, pending.message)
            event = await system.until_async(
                functools.partial(invalid_event, system, name),
                within=20,
                what=f"the Invalid Event on Job {name}",
            )
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "Job"
            assert names in event["message"], (name, event["message"])
        broken = invalid(system, "in-broken-queue")
        assert broken is not None
        assert "queue broken" in broken.message

        async def well_formed_completed() -> bool:
            return {entry.name for entry in WELL_FORMED} <= await system.completed_jobs()

        await system.until_async(well_formed_completed, within=60, what="the good Jobs done")
        # Admission gives the quota back once the watcher saw the Job finish: a moment later.
        await system.until(
            lambda: all(system.of(Released, entry.name) for entry in WELL_FORMED),
            within=20,
            what="the good Jobs' quota released",
        )
        for entry in WELL_FORMED:
            assert len(system.of(Admitted, entry.name)) == 1, entry.name
            released = system.of(Released, entry.name)
            assert [r.reason for r in released] == ["Completed"], released
        await system.until_bus_agrees(within=20)

        for name in MALFORMED:
            assert system.of(Admitted, name) == [], name
            assert invalid(system, name) is not None, name
        assert system.pids() == pids, "a service restarted"
        assert system.dead() == []
        assert system.violations == [], system.report()
        assert system.admission_problems() == [], system.report()


def invalid(system: System, name: str) -> Pending | None:
    """The workload's newest pending decision, if its reason is Invalid."""
    pending = system.of(Pending, name)
    return pending[-1] if pending and pending[-1].reason == "Invalid" else None


async def invalid_event(system: System, name: str) -> dict[str, Any] | None:
    """The Invalid Event on the Job ``name``, read through the API server."""
    for event in await system.events(name):
        if event.get("reason") == "Invalid":
            return event
    return None
