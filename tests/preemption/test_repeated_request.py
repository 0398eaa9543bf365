"""A preemptor asking again while its preemption is in force gets no further victims.

With a short preemption timeout (1 s, as the crash-restart scenario runs admission), admission
asks again before the room the first preemption freed shows in the capacity view. The victims'
pods are gone from the state stream, the topology-cache has not published the freed room yet:
a second search would see the room still taken and evict a second gang for the same room.
"""

from typing import Any

from tidegate.kube import JOBS
from tidegate.model import PodState, Preempted

from .conftest import NAMESPACE, Harness, training_job
from .test_preemption_service import evicted_record, gated, inference_arrives, live


async def two_running_jobs(h: Harness) -> None:
    """Jobs ``a`` and ``b``, two 8-GPU pods each, running on two nodes each (all four full)."""
    nodes = [n.name for n in h.sim.layout.nodes]
    for name, hosts in (("a", nodes[:2]), ("b", nodes[2:])):
        await h.create(JOBS, training_job(name, pods=2))
        await h.until(lambda name=name: h.workload(name) is not None, what=f"Job {name}")

        async def both_gated(name: str = name) -> bool:
            return len([p for p in await h.pods(f"{name}-") if gated(p)]) == 2

        await h.until_async(both_gated, what=f"Job {name}'s gated pods")
        await h.admit(name)
        await h.ungate(f"{name}-", hosts)

    def all_running() -> bool:
        pods = [
            m
            for m in h.state.values()
            if isinstance(m, PodState) and m.workload in (f"{NAMESPACE}/a", f"{NAMESPACE}/b")
        ]
        return len(pods) == 4 and all(p.phase == "Running" and p.node_name for p in pods)

    await h.until(all_running, what="both Jobs running")


async def test_a_second_request_while_the_preemption_is_in_force_evicts_no_one_more(
    harness: Harness,
) -> None:
    h = harness
    await two_running_jobs(h)
    running = {j: {p["metadata"]["uid"] for p in await h.pods(f"{j}-")} for j in ("a", "b")}
    service = await h.start_preemption()
    # The topology-cache lags from here on: the capacity view keeps every node full.
    h.plays_topology_cache = False

    await inference_arrives(h)
    await h.until(lambda: h.of(Preempted), what="the first preempted decision")
    (first,) = h.of(Preempted)
    (victim,) = first.victims
    name = victim.partition("/")[2]
    other = "b" if name == "a" else "a"
    await h.until_async(lambda: evicted_record(h), what="the first preemption evicted")

    async def victim_gone() -> bool:
        uids = {p["metadata"]["uid"] for p in live(await h.pods(f"{name}-"))}
        gone_from_bus = not any(
            isinstance(m, PodState) and m.uid in running[name] for m in h.state.values()
        )
        return not uids & running[name] and gone_from_bus

    await h.until_async(victim_gone, what="the victim's pods gone from the API and the bus")

    def handled() -> float:
        total = 0.0
        for metric in service.metrics.registry.collect():
            if metric.name == "tidegate_preemption_requests":
                total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
        return total

    assert handled() == 1
    # Admission asks again (its preemption timeout passed before the room showed).
    await h.request_preemption("serve")
    await h.until(lambda: handled() == 2, what="the second request answered")

    assert [d.victims for d in h.of(Preempted)] == [first.victims]
    value = service.metrics.registry.get_sample_value(
        "tidegate_preemption_requests_total", {"outcome": "nominated"}
    )
    assert value == 1
    still: list[dict[str, Any]] = live(await h.pods(f"{other}-"))
    assert {p["metadata"]["uid"] for p in still} == running[other]
