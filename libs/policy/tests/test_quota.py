"""Quota and card-quota arithmetic, messages with numbers, and the usage ledger."""

from hypothesis import given
from hypothesis import strategies as st

from tidegate.model import PodSetSpec, WorkloadKey, parse_quantity
from tidegate.policy.quota import (
    Charge,
    QueueUsage,
    QuotaExceeded,
    QuotaLedger,
    QuotaRequest,
    check_quota,
    gang_resources,
)
from tidegate.testing.messages import Messages

msg = Messages()


GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.18gb"


def test_the_issue_example_message() -> None:
    verdict = check_quota(
        msg.queue_config("online", quota={GPU: 16}),
        QueueUsage(resources={GPU: 12}),
        QuotaRequest(resources={GPU: 8}),
    )
    assert verdict == QuotaExceeded(
        reason="ExceedsQuota", queue="online", name=GPU, in_use=12, requested=8, quota=16
    )
    assert verdict.message == "queue online: nvidia.com/gpu 12 in use + 8 requested > quota 16"


def test_quantities_are_printed_in_kubernetes_notation() -> None:
    gi = parse_quantity("memory", "1Gi")
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 4000, "memory": 64 * gi}),
        QueueUsage(resources={"cpu": 1500, "memory": 48 * gi}),
        QuotaRequest(resources={"cpu": 500, "memory": 32 * gi}),
    )
    assert verdict is not None
    assert verdict.message == "queue online: memory 48Gi in use + 32Gi requested > quota 64Gi"
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 2000}),
        QueueUsage(resources={"cpu": 1500}),
        QuotaRequest({"cpu": 1000}),
    )
    assert verdict is not None
    assert verdict.message == "queue online: cpu 1500m in use + 1 requested > quota 2"


def test_exactly_at_quota_fits() -> None:
    assert (
        check_quota(
            msg.queue_config("online", quota={GPU: 16}),
            QueueUsage(resources={GPU: 8}),
            QuotaRequest({GPU: 8}),
        )
        is None
    )


def test_none_is_unlimited_and_a_resource_not_named_is_not_limited() -> None:
    huge = QuotaRequest(resources={"cpu": 10**9, "example.com/fpga": 3})
    assert check_quota(msg.queue_config("online", quota=None), QueueUsage(), huge) is None
    assert check_quota(msg.queue_config("online", quota={"cpu": 10**9}), QueueUsage(), huge) is None
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 10**9, "example.com/fpga": 2}), QueueUsage(), huge
    )
    assert verdict is not None
    assert (verdict.name, verdict.quota) == ("example.com/fpga", 2)


def test_resources_the_gang_does_not_request_are_not_checked() -> None:
    over = QueueUsage(resources={"memory": 10**12})
    assert (
        check_quota(
            msg.queue_config("online", quota={"cpu": 1000}),
            over,
            QuotaRequest({"cpu": 1000, "x": 0}),
        )
        is None
    )


def test_card_quota_none_is_unlimited_and_a_missing_model_is_zero() -> None:
    request = QuotaRequest(
        cards={"NVIDIA-H200": 2}, resources={GPU: 2}, card_resources=frozenset({GPU})
    )
    assert (
        check_quota(
            msg.queue_config("online", quota={"cpu": 1}, card_quota=None), QueueUsage(), request
        )
        is None
    )
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 1}, card_quota={"NVIDIA-A100": 8}),
        QueueUsage(),
        request,
    )
    assert verdict is not None
    assert verdict.reason == "CardQuotaExceeded"
    assert (
        verdict.message == "queue online: NVIDIA-H200 cards 0 in use + 2 requested > card quota 0"
    )


def test_mig_cards_are_counted_per_mig_model() -> None:
    model = "NVIDIA-H200/mig-1g.18gb-mixed"
    request = QuotaRequest(cards={model: 3}, resources={MIG: 3}, card_resources=frozenset({MIG}))
    q = msg.queue_config("online", quota=None, card_quota={model: 4, "NVIDIA-H200": 100})
    assert check_quota(q, QueueUsage(cards={model: 1}), request) is None
    verdict = check_quota(q, QueueUsage(cards={model: 2, "NVIDIA-H200": 0}), request)
    assert verdict is not None
    assert verdict.message == (
        "queue online: NVIDIA-H200/mig-1g.18gb-mixed cards 2 in use + 3 requested > card quota 4"
    )


def test_gpus_are_bounded_by_quota_only_where_quota_names_them() -> None:
    request = QuotaRequest(
        resources={"cpu": 1000, GPU: 8},
        cards={"NVIDIA-H200": 8},
        card_resources=frozenset({GPU}),
    )
    assert (
        check_quota(
            msg.queue_config("online", quota={"cpu": 1000}, card_quota={"NVIDIA-H200": 8}),
            QueueUsage(),
            request,
        )
        is None
    )
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 1000, GPU: 4}, card_quota={"NVIDIA-H200": 8}),
        QueueUsage(),
        request,
    )
    assert verdict is not None
    assert verdict.reason == "ExceedsQuota"
    assert verdict.name == GPU
    without_card = QuotaRequest(resources={"cpu": 1000, GPU: 8})
    assert (
        check_quota(msg.queue_config("online", quota={"cpu": 1000}), QueueUsage(), without_card)
        is None
    )
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 1000, GPU: 0}), QueueUsage(), without_card
    )
    assert verdict is not None
    assert (verdict.name, verdict.quota) == (GPU, 0)


def test_resources_are_checked_before_cards_in_name_order() -> None:
    request = QuotaRequest(resources={"memory": 2, "cpu": 2}, cards={"B": 1, "A": 1})
    verdict = check_quota(
        msg.queue_config("online", quota={"cpu": 1, "memory": 1}, card_quota={}),
        QueueUsage(),
        request,
    )
    assert verdict is not None
    assert verdict.name == "cpu"
    verdict = check_quota(
        msg.queue_config("online", quota={}, card_quota={}), QueueUsage(), request
    )
    assert verdict is not None
    assert verdict.name == "A"
    verdict = check_quota(
        msg.queue_config("online", quota=None, card_quota={}), QueueUsage(), request
    )
    assert verdict is not None
    assert verdict.name == "A"


def test_gang_resources_sum_every_pod() -> None:
    podsets = [
        PodSetSpec(name="a", count=2, requests={"cpu": 500, GPU: 4}),
        PodSetSpec(name="b", count=3, requests={"cpu": 1000, "memory": 0}),
    ]
    assert gang_resources(podsets) == {"cpu": 4000, GPU: 8}


def test_ledger_charges_replace_and_release_whole_gangs() -> None:
    ledger = QuotaLedger()
    a, b = WorkloadKey("ns/a"), WorkloadKey("ns/b")
    ledger.charge(a, Charge(queue="online", resources={GPU: 8}, cards={"H": 8}))
    ledger.charge(b, Charge(queue="online", resources={GPU: 4}, cards={"H": 4}))
    assert ledger.usage("online") == QueueUsage(resources={GPU: 12}, cards={"H": 12})
    ledger.charge(a, Charge(queue="online", resources={GPU: 8}, cards={"H": 8}))
    assert ledger.usage("online") == QueueUsage(resources={GPU: 12}, cards={"H": 12})
    verdict = ledger.check(msg.queue_config("online", quota={GPU: 16}), QuotaRequest({GPU: 8}))
    assert verdict is not None
    assert verdict.message == "queue online: nvidia.com/gpu 12 in use + 8 requested > quota 16"
    assert ledger.release(a) == Charge(queue="online", resources={GPU: 8}, cards={"H": 8})
    assert ledger.release(a) is None
    assert ledger.usage("online") == QueueUsage(resources={GPU: 4}, cards={"H": 4})
    assert ledger.holders() == [b]
    assert ledger.holders("other") == []
    ledger.release(b)
    assert ledger.usage("online") == QueueUsage()


charges = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["q1", "q2"]),
        st.dictionaries(st.sampled_from(["cpu", GPU]), st.integers(0, 100), max_size=2),
        st.booleans(),
    ),
    max_size=30,
)


@given(charges)
def test_ledger_usage_is_always_the_sum_of_current_charges(
    steps: list[tuple[str, str, dict[str, int], bool]],
) -> None:
    ledger = QuotaLedger()
    current: dict[str, Charge] = {}
    for key, q, amounts, release in steps:
        if release:
            ledger.release(WorkloadKey(key))
            current.pop(key, None)
        else:
            ledger.charge(WorkloadKey(key), Charge(queue=q, resources=amounts))
            current[key] = Charge(queue=q, resources=amounts)
        for name in ("q1", "q2"):
            expected: dict[str, int] = {}
            for charge in current.values():
                if charge.queue == name:
                    for r, v in charge.resources.items():
                        expected[r] = expected.get(r, 0) + v
            assert ledger.usage(name).resources == {r: v for r, v in expected.items() if v}
