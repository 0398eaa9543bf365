"""Queue status as shown: counts, usage in Kubernetes notation, the ``Active`` condition, and
the merge patch that removes what is gone."""

from tidegate.model import QueueConfig
from tidegate.model.replica import QueueTally
from tidegate.policy.queue_status import active_condition, queue_status, status_patch


def test_status_lists_quota_resources_in_kubernetes_notation() -> None:
    config = QueueConfig(
        name="offline", quota={"cpu": 64000, "memory": 2**40}, card_quota={"NVIDIA-H200": 8}
    )
    tally = QueueTally(
        admitted=3, pending={"ExceedsQuota": 2}, usage={"cpu": 4500, "example.com/fpga": 2}
    )
    status = queue_status(config, tally, now="2025-01-01T00:00:00Z")
    assert status["admitted"] == 3
    assert status["pending"] == 2
    assert status["usage"] == {"cpu": "4500m", "example.com/fpga": "2", "memory": "0"}
    assert status["cardUsage"] == {"NVIDIA-H200": 0}
    assert status["conditions"] == [
        {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "can admit workloads",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }
    ]


def test_active_is_false_for_an_invalid_queue_and_keeps_its_time_while_unchanged() -> None:
    bad = QueueConfig(
        name="q", invalid_reason="Queue q: spec.capability.cpu: 'x' is not a quantity"
    )
    negative = QueueConfig(name="q", quota={"cpu": -1})
    first = active_condition(bad, now="t1")
    assert (first["status"], first["reason"]) == ("False", "Invalid")
    assert first["message"] == "Queue q: spec.capability.cpu: 'x' is not a quantity"
    assert active_condition(negative, now="t2", previous=[first]) == {
        "type": "Active",
        "status": "False",
        "reason": "Invalid",
        "message": "quota.cpu: -1 is negative",
        "lastTransitionTime": "t1",
    }
    fixed = active_condition(QueueConfig(name="q"), now="t3", previous=[first])
    assert (fixed["status"], fixed["lastTransitionTime"]) == ("True", "t3")


def test_patch_removes_map_keys_that_are_gone() -> None:
    shown = {"admitted": 1, "usage": {"cpu": "1", "memory": "1Gi"}, "cardUsage": {"A": 1}}
    desired = {"admitted": 0, "usage": {"cpu": "0"}, "cardUsage": {"A": 0}}
    assert status_patch(desired, shown) == {
        "admitted": 0,
        "usage": {"cpu": "0", "memory": None},
        "cardUsage": {"A": 0},
    }
    assert status_patch(desired, {}) == desired
