"""Never double-book, end to end through the real cycle and placement engine.

A small cluster, workloads arriving, admission cycles, deletions, and a topology-cache that
applies admitted/released decisions in sequence order and reports each changed node; reports
are delivered in any interleaving (in order per node, sometimes only the latest). After every
cycle, what the admitted-and-not-released workloads take on each node fits that node.
"""

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.model import (
    Admitted,
    CapacityNode,
    NodeName,
    PodSetSpec,
    QueueConfig,
    Released,
    Resources,
    TopologyConfig,
    TopologyRequest,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model import resources as res
from tidegate.policy.admission import Admission

LEVELS = ["example.com/rack", "kubernetes.io/hostname"]
NODES = {"n1": "r1", "n2": "r1", "n3": "r2"}
ALLOCATABLE: Resources = {"cpu": 4000, "nvidia.com/gpu": 4, "pods": 110}


@dataclass
class Cache:
    """The topology-cache's part: applies decisions in order, reports changed nodes."""

    used: dict[str, Resources] = field(default_factory=dict)
    holding: dict[str, dict[NodeName, Resources]] = field(default_factory=dict)
    applied: int = 0
    in_flight: dict[str, list[CapacityNode]] = field(default_factory=dict)

    def apply(self, body: Admitted | Released, usage: dict[NodeName, Resources]) -> None:
        if isinstance(body, Admitted):
            self.holding[body.workload] = usage
            for node, taken in usage.items():
                self.used[node] = res.add(self.used.get(node, {}), taken)
        else:
            for node, taken in self.holding.pop(body.workload, {}).items():
                self.used[node] = res.subtract(self.used.get(node, {}), taken)
        self.applied = body.sequence
        for name in sorted(usage) if usage else sorted(NODES):
            self.publish(name)

    def publish(self, node: str) -> None:
        free = res.subtract(ALLOCATABLE, self.used.get(node, {}))
        report = CapacityNode(
            topology="default",
            node=node,
            domain=[NODES[node], node],
            allocatable=dict(ALLOCATABLE),
            free={r: free.get(r, 0) for r in ALLOCATABLE},
            applied_sequence=self.applied,
        )
        self.in_flight.setdefault(node, []).append(report)


action = st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 3), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("apply")),
    st.tuples(st.just("deliver"), st.sampled_from(sorted(NODES)), st.booleans()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(action, max_size=50))
def test_cycles_deletions_and_reports_in_any_order_never_double_book(
    actions: list[tuple[object, ...]],
) -> None:
    admission = Admission()
    admission.set_queue(QueueConfig(name="q"))
    admission.capacity.set_topology(TopologyConfig(name="default", levels=LEVELS))
    cache = Cache()
    for name in NODES:
        cache.publish(name)
        admission.capacity.update(cache.in_flight.pop(name)[0])

    log: list[tuple[Admitted | Released, dict[NodeName, Resources]]] = []
    usage_of: dict[str, dict[NodeName, Resources]] = {}
    live: set[str] = set()
    submitted = 0
    now = 0.0
    for step in actions:
        now += 1.0
        match step:
            case ("submit", int(pods), int(gpus), bool(rack)):
                submitted += 1
                podset = PodSetSpec(
                    name="w",
                    count=pods,
                    requests={"cpu": 500, "nvidia.com/gpu": gpus},
                    topology=TopologyRequest(required=LEVELS[0] if rack else None),
                )
                admission.set_workload(
                    WorkloadState(
                        namespace="ns",
                        name=f"w{submitted}",
                        uid=f"u{submitted}",
                        owner_kind="Job",
                        queue="q",
                        created_at=now,
                        podsets=[podset],
                    )
                )
            case ("cycle",):
                for decision in admission.cycle(now=now):
                    if isinstance(decision.body, Admitted):
                        live.add(decision.key)
                        usage_of[decision.key] = decision.node_usage
                        log.append((decision.body, decision.node_usage))
                check_no_double_booking(live, usage_of)
            case ("delete", int(pick)):
                if live:
                    key = sorted(live)[pick % len(live)]
                    live.discard(key)
                    for decision in admission.remove_workload(WorkloadKey(key)):
                        assert isinstance(decision.body, Released)
                        log.append((decision.body, {}))
            case ("apply",):
                if log:
                    body, usage = log.pop(0)
                    cache.apply(body, usage)
            case ("deliver", str(name), bool(latest_only)):
                queue = cache.in_flight.get(name, [])
                if queue:
                    report = queue[-1] if latest_only else queue[0]
                    del queue[: len(queue) if latest_only else 1]
                    admission.capacity.update(report)


def check_no_double_booking(live: set[str], usage_of: dict[str, dict[NodeName, Resources]]) -> None:
    for name in NODES:
        held = res.total(usage_of[key].get(NodeName(name), {}) for key in live)
        over = res.exceeding(held, ALLOCATABLE)
        assert not over, f"{name} double-booked: {held} > {ALLOCATABLE}"
