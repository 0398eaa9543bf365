"""The handlers feed the policy object from bus messages (no bus needed to check that)."""

import pytest

from tidegate.admission.config import Settings
from tidegate.admission.handlers import Handlers
from tidegate.bus import Received
from tidegate.model import (
    CapacityNode,
    Envelope,
    Message,
    NodeState,
    QueueConfig,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
    WorkloadState,
    subjects,
)
from tidegate.policy.admission import Admission
from tidegate.runtime import SettingsError

LEVELS = ["example.com/rack", "kubernetes.io/hostname"]


def received(subject: str, body: Message) -> Received:
    envelope = Envelope(event_id="e", cluster="c", source="watcher", time=0.0, body=body)
    return Received(subject=subject, envelope=envelope, stream_sequence=1)


def capacity(node: str) -> CapacityNode:
    return CapacityNode(
        topology="default",
        node=node,
        domain=["r1", node],
        allocatable={"cpu": 1000},
        free={"cpu": 1000},
    )


async def test_state_and_capacity_messages_reach_the_policy_and_wake_the_loop() -> None:
    handlers = Handlers(Admission())
    admission = handlers.admission
    topology = TopologyConfig(name="default", levels=LEVELS)
    await handlers.on_state(received(subjects.topology("c", "default"), topology))
    await handlers.on_state(received(subjects.queue("c", "q"), QueueConfig(name="q")))
    await handlers.on_state(received(subjects.node("c", "n.1"), NodeState(name="n.1")))
    node_subject = subjects.capacity_node("c", "default", "n.1")
    await handlers.on_capacity(received(node_subject, capacity("n.1")))
    assert handlers.wake.is_set()
    view = admission.capacity.view("default")
    assert view is not None
    assert "n.1" in view

    workload = WorkloadState(namespace="ns", name="w", uid="u", owner_kind="Job", queue="q")
    await handlers.on_state(received(subjects.workload("c", "ns", "w"), workload))
    assert admission.workload(WorkloadKey("ns/w")) == workload
    tombstone = Tombstone(object_kind="workload", name="w", namespace="ns")
    await handlers.on_state(received(subjects.workload("c", "ns", "w"), tombstone))
    assert admission.workload(WorkloadKey("ns/w")) is None

    # A node leaves the topology's capacity view: the topology comes from the subject.
    gone = Tombstone(object_kind="node", name="n.1")
    await handlers.on_capacity(received(node_subject, gone))
    assert "n.1" not in view


def test_settings_name_the_bad_field() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings(lease_ttl_seconds=0.5)
    assert raised.value.setting == "lease_ttl_seconds"
    assert Settings(default_queue="q").policy().default_queue == "q"
