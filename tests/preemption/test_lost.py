"""The preemption service names, in ``Preempted.lost``, the admission each victim loses: the
one in force on the decision stream (uid, sequence and chain start), also after a resize."""

from typing import Any

from tidegate.kube import DEPLOYMENTS, JOBS
from tidegate.kube.ungate import has_gate
from tidegate.model import Admitted, LostAdmission, PodState, Preempted, subjects
from tidegate.model import resources as res

from .conftest import GATE, NAMESPACE, Harness, inference_deployment, training_job


async def running_job(h: Harness, name: str, nodes: list[str]) -> str:
    """A Job of one pod per node of ``nodes``, admitted and running there; its uid."""
    job = await h.create(JOBS, training_job(name, pods=len(nodes)))
    await h.until(lambda: h.workload(name) is not None, what=f"{name} on the bus")

    async def all_gated() -> bool:
        return len([p for p in await h.pods(f"{name}-") if has_gate(p, GATE)]) == len(nodes)

    await h.until_async(all_gated, what=f"{name}'s gated pods")
    await h.admit(name)
    await h.ungate(f"{name}-", nodes)

    def running() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/{name}"
        ]
        return len(pods) == len(nodes) and all(p.phase == "Running" for p in pods)

    await h.until(running, what=f"{name}'s pods running")
    return str(job["metadata"]["uid"])


async def resize(h: Harness, name: str) -> None:
    """Publish a resize of ``team/<name>``'s admission (as admission answers a shrink)."""
    workload = h.workload(name)
    assert workload is not None
    (first,) = [a for a in h.of(Admitted) if a.workload == f"{NAMESPACE}/{name}"]
    h.sequence += 1
    body = Admitted(
        workload=f"{NAMESPACE}/{name}",
        uid=workload.uid,
        queue=workload.queue or "",
        sequence=h.sequence,
        epoch=1,
        assignments={},
        charged=res.total(res.scale(p.requests, p.count) for p in workload.podsets),
        replaces=first.sequence,
        resized=True,
        origin=first.chain_start(),
    )
    await h.publish(subjects.decision(h.cluster, "admitted", NAMESPACE, name), body)


def in_force(decisions: list[Any], key: str) -> Admitted:
    """The last ``admitted`` decision of ``key`` on the raw stream (nothing ends it here)."""
    admitted = [d for d in decisions if isinstance(d, Admitted) and d.workload == key]
    assert admitted, f"no admitted decision for {key}"
    return admitted[-1]


async def test_preempted_names_the_admission_in_force_of_every_victim(harness: Harness) -> None:
    """Two victims, one resized: ``lost`` names each one's last admission, from the stream."""
    h = harness
    nodes = [n.name for n in h.sim.layout.nodes]
    uids = {
        f"{NAMESPACE}/alpha": await running_job(h, "alpha", nodes[:2]),
        f"{NAMESPACE}/beta": await running_job(h, "beta", nodes[2:]),
    }
    await resize(h, "beta")
    await h.start_preemption()
    # Four 8-GPU replicas need all four nodes: both Jobs are victims.
    await h.create(DEPLOYMENTS, inference_deployment("serve", replicas=4))
    await h.until(lambda: h.workload("serve") is not None, what="serve on the bus")
    await h.request_preemption("serve")

    await h.until(lambda: h.of(Preempted), what="a preempted decision")
    decisions = [d for d, _ in h.decisions]
    at = next(i for i, d in enumerate(decisions) if isinstance(d, Preempted))
    decision = decisions[at]
    assert isinstance(decision, Preempted)
    assert sorted(decision.victims) == sorted(uids)
    expected = {}
    for victim in decision.victims:
        admitted = in_force(decisions[:at], victim)
        assert admitted.uid == uids[victim]  # the object on the API server
        start = admitted.origin if admitted.origin is not None else admitted.sequence
        expected[victim] = LostAdmission(uid=admitted.uid, sequence=admitted.sequence, origin=start)
    beta = expected[f"{NAMESPACE}/beta"]
    assert beta.origin is not None
    assert beta.sequence > beta.origin  # the resize counts
    assert decision.lost == expected
