"""The ``preempted`` decision goes out before the first eviction, so a victim cannot restart in
its old slots while its gang is being evicted.

A ReplicaSet controller (real or simulated) creates a replacement for an evicted pod as soon
as the pod is terminating (so would a Job's, were its victims not re-queued by suspension). The replacement arrives gated; if
the victim's admission were still in force for the ungater, it would be released into the
victim's old slot and the preemption defeated. Here the real ungater runs, evictions are slowed
to one a second so the first replacements exist long before the last eviction, and the test
checks both the order on the bus and what the ungater did with the replacements.
"""

import asyncio
from typing import Any

from tidegate.kube import DEPLOYMENTS
from tidegate.model import NodeState, PodState, Preempted, TopologyAssignment
from tidegate.testing.messages import Messages

from .conftest import GATE, NAMESPACE, Harness, training_deployment
from .test_preemption_service import evicted_record, gated, inference_arrives, live

msg = Messages(namespace=NAMESPACE)
SETTLE_SECONDS = 1.0
"""How long the ungater (rounds every 0.05 s) is given to act on the last replacement."""


def nodes_on_the_bus(h: Harness) -> list[NodeState]:
    """The nodes the watcher published, by name."""
    return sorted((m for m in h.state.values() if isinstance(m, NodeState)), key=lambda n: n.name)


def one_pod_per_node(h: Harness) -> TopologyAssignment:
    """An assignment of one pod to every node of the simulated cluster, at hostname level."""
    levels = h.sim.levels
    hosts = [(tuple(n.labels[level] for level in levels), 1) for n in nodes_on_the_bus(h)]
    return msg.assignment(hosts, levels)


def train_pods(h: Harness) -> list[PodState]:
    """The training gang's pods as the watcher last published them."""
    return [
        m
        for m in h.state.values()
        if isinstance(m, PodState) and m.workload == f"{NAMESPACE}/train"
    ]


async def test_replacements_of_a_victim_being_evicted_are_not_released(
    harness: Harness,
) -> None:
    h = harness
    await h.start_ungater()
    # A Deployment: its pods are evicted one by one and its ReplicaSet replaces them at once (a
    # Job victim is suspended instead, and gets no replacement until it is admitted again).
    await h.create(DEPLOYMENTS, training_deployment("train", pods=4))
    await h.until(lambda: h.workload("train") is not None, what="the gang on the bus")
    await h.until(
        lambda: len(nodes_on_the_bus(h)) == len(h.sim.layout.nodes), what="every node on the bus"
    )
    workload = h.workload("train")
    assert workload is not None
    (podset,) = workload.podsets
    # The real ungater releases the gang's pods into the slots of this admission.
    await h.admit("train", assignments={podset.name: one_pod_per_node(h)})

    def all_running() -> bool:
        pods = train_pods(h)
        return len(pods) == 4 and all(p.phase == "Running" and p.node_name for p in pods)

    await h.until(all_running, what="the gang's pods released by the ungater and running")
    original = {p.uid for p in train_pods(h)}

    await h.start_preemption(evictions_per_second=1.0, eviction_burst=1, eviction_concurrency=1)
    await inference_arrives(h)

    async def evicted_and_replaced() -> list[dict[str, Any]]:
        pods = live(await h.pods("train-"))
        uids = {p["metadata"]["uid"] for p in pods}
        return pods if len(pods) == 4 and not uids & original else []

    replaced = await h.until_async(
        evicted_and_replaced, within=30, what="every original pod evicted and replaced"
    )
    replacements = {p["metadata"]["uid"] for p in replaced}
    await h.until_async(lambda: evicted_record(h), what="the preemption record marked evicted")
    await h.until(lambda: replacements <= set(h.seen_at), what="the replacements on the bus")
    await asyncio.sleep(SETTLE_SECONDS)

    # The decision was on the bus before the evictions: when it arrived, at most the first of
    # the four pods (evicted right after the publish) could have been seen leaving.
    ((index, decision),) = [
        (i, body) for i, (body, _) in enumerate(h.decisions) if isinstance(body, Preempted)
    ]
    assert decision.victims == [f"{NAMESPACE}/train"]
    arrived = h.decided_at[index]
    assert original <= set(h.leaving_at)
    before = [uid for uid in original if h.leaving_at[uid] < arrived]
    assert len(before) <= 1, f"{len(before)} of 4 pods were evicted before the decision"

    # Replacements existed while the gang was still being evicted ...
    last_eviction = max(h.leaving_at[uid] for uid in original)
    assert min(h.seen_at[uid] for uid in replacements) < last_eviction

    # ... and the ungater kept every one of them gated: the victim's admission had ended.
    assert not h.released_uids & replacements
    still = live(await h.pods("train-"))
    assert {p["metadata"]["uid"] for p in still} == replacements
    assert all(gated(p) for p in still)
    assert all(GATE in p.scheduling_gates for p in train_pods(h) if p.uid in replacements)
