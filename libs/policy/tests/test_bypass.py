"""When a workload's pods that bypassed the gate get an Event, and its words."""

import msgspec

from tidegate.model import WorkloadState
from tidegate.policy.bypass import BypassNotices, bypass_message
from tidegate.testing.messages import Messages

GPU = "nvidia.com/gpu"
msg = Messages(namespace="ns", queue="q")


def bypassing(name: str, pods: int, *, uid: str | None = None) -> WorkloadState:
    return msg.workload(
        name, uid=uid, bypassed_pods=pods, bypassed_requests={"cpu": 2000 * pods, GPU: pods}
    )


def test_a_notice_is_due_once_and_again_only_when_more_pods_get_past() -> None:
    notices = BypassNotices()
    assert not notices.due(bypassing("a", 0))
    assert notices.due(bypassing("a", 2))
    assert not notices.due(bypassing("a", 2))  # any other change of the workload
    assert not notices.due(bypassing("a", 1))  # one finished
    assert notices.due(bypassing("a", 2))  # another got past
    finished = msgspec.structs.replace(bypassing("a", 2), finished="Completed")
    assert not notices.due(finished)
    assert len(notices) == 0
    # Re-created under its name: another uid, news again.
    assert notices.due(bypassing("a", 2))
    assert notices.due(bypassing("a", 2, uid="uid-a2"))
    # A failed Event is due again.
    notices.failed(bypassing("a", 2, uid="uid-a2"))
    assert notices.due(bypassing("a", 2, uid="uid-a2"))


def test_the_notices_memory_is_bounded() -> None:
    notices = BypassNotices(remembered=3)
    for index in range(100):
        assert notices.due(bypassing(f"w{index}", 1))
    assert len(notices) == 3
    assert not notices.due(bypassing("w99", 1))
    assert notices.due(bypassing("w0", 1))  # forgotten: reported once more


def test_the_message_names_the_pods_the_queue_and_their_requests() -> None:
    assert bypass_message(bypassing("a", 2), "q") == (
        "2 pods started without passing the gate (webhook down?), charged to queue q: "
        "cpu=4,nvidia.com/gpu=2; they are not evicted"
    )
    assert bypass_message(bypassing("a", 1), "q").startswith("1 pod started")
