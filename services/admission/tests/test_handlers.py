"""The handlers feed the policy object from bus messages (no bus needed to check that)."""

import pytest

from tidegate.admission.config import Settings
from tidegate.admission.handlers import Handlers
from tidegate.model import (
    WorkloadKey,
    subjects,
)
from tidegate.policy.admission import Admission
from tidegate.runtime import SettingsError
from tidegate.testing.harness import received
from tidegate.testing.messages import Messages

msg = Messages(namespace="ns", levels=["example.com/rack", "kubernetes.io/hostname"])


async def test_state_and_capacity_messages_reach_the_policy_and_wake_the_loop() -> None:
    handlers = Handlers(Admission())
    admission = handlers.admission
    await handlers.on_state(received("c", msg.topology()))
    await handlers.on_state(received("c", msg.queue_config()))
    await handlers.on_state(received("c", msg.node("n.1", "r1")))
    node_subject = subjects.capacity_node("c", "default", "n.1")
    await handlers.on_capacity(received("c", msg.capacity_node("n.1", "r1")))
    assert handlers.wake.is_set()
    view = admission.capacity.view("default")
    assert view is not None
    assert "n.1" in view

    workload = msg.workload("w")
    await handlers.on_state(received("c", workload))
    assert admission.workload(WorkloadKey("ns/w")) == workload
    await handlers.on_state(received("c", msg.tombstone("workload", "w", "ns")))
    assert admission.workload(WorkloadKey("ns/w")) is None

    # A node leaves the topology's capacity view: the topology comes from the subject.
    await handlers.on_capacity(received("c", msg.tombstone("node", "n.1"), subject=node_subject))
    assert "n.1" not in view


def test_settings_name_the_bad_field() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings(lease_ttl_seconds=0.5)
    assert raised.value.setting == "lease_ttl_seconds"
    with pytest.raises(SettingsError) as raised:
        Settings(lease_ttl_seconds=6, cycle_budget_seconds=3)
    assert raised.value.setting == "cycle_budget_seconds"
    assert Settings(lease_ttl_seconds=6, cycle_budget_seconds=2).cycle_budget == 2
    assert Settings(lease_ttl_seconds=12).cycle_budget == 3
    assert Settings(default_queue="q").policy().default_queue == "q"
