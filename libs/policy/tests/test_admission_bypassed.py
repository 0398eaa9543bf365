"""Pods that bypassed the gate are charged to their queue."""

import msgspec

from tidegate.model import Admitted, CapacityNode, NodeState, Pending, QueueConfig, WorkloadKey
from tidegate.policy.quota import Charge, QuotaLedger

from .test_admission import GPU, PRODUCT, cluster, msg, only, two_racks


def test_pods_that_bypassed_the_gate_count_against_the_quota_until_the_workload_is_admitted() -> (
    None
):
    queue = QueueConfig(name="q", quota={GPU: 16})
    admission = cluster(*two_racks(), queues=[queue])
    # 3 pods of 4 GPUs started ungated while the webhook was down: 12 GPUs in use, uncharged
    # before; now charged, so a gang of 8 GPUs waits.
    bypassing = msg.workload(
        "ran",
        msg.podset(count=3, gpus=4),
        created_at=1,
        bypassed_pods=3,
        bypassed_requests={GPU: 12},
    )
    admission.set_workload(bypassing)
    admission.set_workload(msg.workload("next", msg.podset(count=2, gpus=4), created_at=2))
    (pending, *_) = [p for p in only(admission.cycle(now=1.0), Pending) if p.workload == "ns/next"]
    assert isinstance(pending, Pending)
    assert pending.reason == "ExceedsQuota"
    assert pending.message == "queue q: nvidia.com/gpu 12 in use + 8 requested > quota 16"
    # Its pods finish: the charge goes with them, and the waiting gang is admitted.
    admission.set_workload(msgspec.structs.replace(bypassing, finished="Completed"))
    assert [a.workload for a in only(admission.cycle(now=2.0), Admitted)] == ["ns/next"]
    assert admission.quota.usage("q").resources == {"cpu": 2000, GPU: 8}


def test_an_admission_replaces_the_charge_of_its_own_bypassing_pods() -> None:
    ledger = QuotaLedger()
    key = WorkloadKey("ns/a")
    ledger.charge_outside(key, Charge(queue="q", resources={GPU: 4}))
    assert ledger.usage("q").resources == {GPU: 4}
    ledger.charge(key, Charge(queue="q", resources={GPU: 8}))  # the whole gang, admitted
    assert ledger.usage("q").resources == {GPU: 8}
    ledger.charge_outside(key, Charge(queue="q", resources={GPU: 6}))
    assert ledger.usage("q").resources == {GPU: 8}
    ledger.release(key)  # the admission ended; its pods still run outside
    assert ledger.usage("q").resources == {GPU: 6}
    ledger.charge_outside(key, None)
    assert ledger.usage("q").resources == {}


def test_pods_that_bypassed_the_gate_count_against_the_card_quota_of_their_nodes_model() -> None:
    """Two bypassing pods hold one card each of model X (the watcher read it from their nodes'
    GPU label): with a card quota of 2 for X, another workload needing X waits. (Its own gang,
    of pods larger than any node, is never admitted: its admission would replace the charge.)"""
    queue = QueueConfig(name="q", quota={"cpu": 10**6, GPU: 100}, card_quota={"X": 2})
    admission = cluster(queues=[queue])
    for name in ("x1", "x2", "x3"):
        admission.capacity.set_node(NodeState(name=name, labels={PRODUCT: "X"}))
        admission.capacity.update(
            CapacityNode(
                topology="default",
                node=name,
                domain=["b1", "r1", name],
                allocatable={"cpu": 64_000, GPU: 8},
                free={"cpu": 64_000, GPU: 8},
            )
        )
    bypassing = msg.workload(
        "ran",
        msg.podset(count=2, gpus=16),
        queue="q",
        created_at=1,
        bypassed_pods=2,
        bypassed_requests={GPU: 2},
        bypassed_cards={"X": 2},
    )
    admission.set_workload(bypassing)
    admission.set_workload(
        msg.workload("next", msg.podset(count=1, gpus=1), queue="q", card_request={"X": 1})
    )
    (pending, *_) = [p for p in only(admission.cycle(now=1.0), Pending) if p.workload == "ns/next"]
    assert isinstance(pending, Pending)
    assert pending.reason == "CardQuotaExceeded"
    assert pending.message == "queue q: X cards 2 in use + 1 requested > card quota 2"
    assert admission.quota.usage("q").cards == {"X": 2}
    # Its pods finish: their cards go with them, and the waiting workload is admitted.
    admission.set_workload(msgspec.structs.replace(bypassing, finished="Completed"))
    assert [a.workload for a in only(admission.cycle(now=2.0), Admitted)] == ["ns/next"]
    assert admission.quota.usage("q").cards == {"X": 1}
