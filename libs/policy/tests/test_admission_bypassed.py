"""Pods that bypassed the gate are charged to their queue (issue 29, seam 9)."""

import msgspec

from tidegate.model import Admitted, Pending, QueueConfig, WorkloadKey
from tidegate.policy.quota import Charge, QuotaLedger

from .test_admission import GPU, cluster, msg, only, two_racks


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
