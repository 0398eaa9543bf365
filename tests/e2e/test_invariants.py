"""The end-to-end invariants catch what they are meant to catch.

The crash, malformed-input and chaos tests pass when nothing is broken, which proves little
unless each check fails on the situation it guards against. Here each situation is built by
hand as the Node and Pod objects an API server would list (the checks take nothing else) or as
a decision log, and the check must name it; where it matters, the harmless neighbour of the
situation is shown not to fire.
"""

import ast
import time
from pathlib import Path
from typing import Any

import msgspec

from tidegate.model import (
    Admitted,
    CapacityNode,
    DomainCount,
    LostAdmission,
    Message,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    Released,
    TopologyAssignment,
)

from . import invariants
from .invariants import (
    GATE,
    Invariants,
    capacity_differences,
    decision_problems,
    double_admissions,
    eviction_problems,
    gated_forever,
    mirror_differences,
    release_problems,
    reservations,
    unreleased_victims,
    workload_key,
)

NAMESPACE = "t"
HOST = "kubernetes.io/hostname"
RACK = "tidegate.io/rack"
LEVELS = [RACK, HOST]
NODE = "rack0-node0"
OTHER = "rack0-node1"


def node(name: str, *, gpus: int = 8, rack: str = "rack0") -> dict[str, Any]:
    """A Ready node with ``gpus`` GPUs, labelled with its rack and hostname."""
    return {
        "metadata": {"name": name, "labels": {RACK: rack, HOST: name}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


NODES = [node(NODE), node(OTHER)]


def pod(
    name: str,
    *,
    app: str,
    node: str | None = None,
    gated: bool = False,
    gpus: int = 8,
    namespace: str = NAMESPACE,
    selector: dict[str, str] | None = None,
    deleting: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    """A pod of trace workload ``app`` asking for ``gpus`` GPUs, bound to ``node`` if given."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "m", "image": "m", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if selector:
        spec["nodeSelector"] = selector
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": {"app": app},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase if node is not None else "Pending"},
    }


def admitted(
    workload: str,
    sequence: int,
    *,
    count: int = 1,
    replaces: int | None = None,
    domains: list[DomainCount] | None = None,
) -> Admitted:
    assignment = TopologyAssignment(
        levels=LEVELS,
        domains=domains or [DomainCount(values=["rack0", NODE], count=count)],
    )
    return Admitted(
        workload=workload,
        uid=f"uid-{workload}",
        queue="q",
        sequence=sequence,
        epoch=1,
        assignments={"main": assignment},
        replaces=replaces,
    )


def released(workload: str, sequence: int, reason: str = "Evicted") -> Released:
    return Released(
        workload=workload,
        uid=f"uid-{workload}",
        queue="q",
        reason=reason,  # type: ignore[arg-type]
        sequence=sequence,
    )


def preempted(*victims: str) -> Preempted:
    return Preempted(preemptor="t/s", preemptor_uid="s", victims=list(victims))


def checks(grace: float = 0, lag: float = 0) -> Invariants:
    return Invariants(managed_namespaces=[NAMESPACE], grace_seconds=grace, observer_lag_seconds=lag)


def sample_twice(found: Invariants, pods: list[dict[str, Any]], nodes: Any = None) -> None:
    """Two samples a moment apart (a grace period of 0 has then run out)."""
    now = time.monotonic()
    found.sample(nodes or NODES, pods, now)
    found.sample(nodes or NODES, pods, now + 0.05)


def test_a_gang_left_partly_released_is_named() -> None:
    found = checks()
    pods = [pod("g-0", app="g", node=NODE), pod("g-1", app="g", gated=True)]
    found.restarting.add("ungater")
    sample_twice(found, pods)
    assert found.violations == [], "no grace runs out while a service is down"
    found.restarting.clear()
    time.sleep(0.01)
    sample_twice(found, pods)
    assert len(found.violations) == 1
    assert "gang t/g partly released: 1 of 2 live pods released" in found.violations[0]
    assert "t/g-1" in found.violations[0]


def test_growth_waiting_beyond_every_slot_is_not_a_partly_released_gang() -> None:
    found = checks()
    found.decided(admitted("t/g", 1, count=1))
    pods = [pod("g-0", app="g", node=NODE), pod("g-1", app="g", gated=True)]
    sample_twice(found, pods)
    assert found.violations == []
    # Admitted to two slots (it grew), one still gated: partly released again.
    found.decided(admitted("t/g", 2, count=2, replaces=1))
    time.sleep(0.01)
    sample_twice(found, pods)
    assert len(found.violations) == 1
    assert "gang t/g partly released" in found.violations[0]


def test_overcommit_unscheduled_and_overrelease_are_named() -> None:
    found = checks()
    found.decided(admitted(f"{NAMESPACE}/a", 1, count=2))
    pods = [
        pod("a-0", app="a", node=NODE),
        pod("a-1", app="a", node=NODE),
        pod("a-2", app="a"),
    ]
    sample_twice(found, pods)
    text = "\n".join(found.violations)
    assert f"node {NODE} overcommitted: {{'nvidia.com/gpu': (16, 8)}}" in text
    assert "pod t/a-2 released but not scheduled" in text
    assert "3 pods of t/a released but its admission assigned 2" in text


def test_an_overrelease_shorter_than_the_observer_lag_is_not_named_a_longer_one_is() -> None:
    """A growth: the ungater releases the extra pods as soon as it sees the larger admission,
    which the observer may see a moment later (seen in test_elastic_kinds on a loaded run)."""
    found = checks(lag=1.0)
    found.decided(admitted(f"{NAMESPACE}/a", 1, count=2))
    pods = [pod(f"a-{i}", app="a", node=NODE, gpus=1) for i in range(3)]
    now = time.monotonic()
    found.sample(NODES, pods, now)
    found.sample(NODES, pods, now + 0.5)
    assert not any("released but its admission assigned" in v for v in found.violations)
    found.sample(NODES, pods, now + 1.5)
    assert any("3 pods of t/a released but its admission assigned 2" in v for v in found.violations)


def test_released_pods_that_cannot_fit_beside_other_pods_are_named() -> None:
    """The scheduler would never bind these (it refuses to overcommit): the pods would wait,
    and only a check computed from the objects sees that tidegate released them anyway."""
    found = checks(grace=60)
    system = pod("daemon", app="daemon", node=NODE, gpus=4, namespace="kube-system")
    pinned = pod("a-0", app="a", selector={HOST: NODE})
    sample_twice(found, [system, pinned])
    assert len(found.violations) == 1, found.violations
    assert (
        f"released tidegate pods do not fit on {NODE} ['{NODE}']: (requested, allocatable "
        "minus other pods) {'nvidia.com/gpu': (8, 4)}"
    ) in found.violations[0]

    # Three 8-GPU pods pinned to a two-node rack: no node is named alone, the rack is.
    found = checks(grace=60)
    rack = [pod(f"b-{i}", app="b", selector={RACK: "rack0"}) for i in range(3)]
    sample_twice(found, rack)
    assert len(found.violations) == 1, found.violations
    assert "do not fit on 2 nodes" in found.violations[0]
    assert "{'nvidia.com/gpu': (24, 16)}" in found.violations[0]


def test_released_fit_leaves_out_gated_pods_and_a_preempted_gang_on_its_way_out() -> None:
    found = checks(grace=60)
    victim = pod("v-0", app="v", node=NODE)
    found.sample(NODES, [victim], time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    pods = [
        victim,  # not evicted yet: preemption announces first
        pod("s-0", app="s", selector={HOST: NODE}),  # the preemptor, released into its room
        pod("w-0", app="w", gated=True, selector={HOST: NODE}),  # still gated: holds nothing
    ]
    sample_twice(found, pods)
    assert found.violations == []


def test_more_pods_released_into_a_domain_than_assigned_there_is_named() -> None:
    found = checks(grace=60)
    found.decided(
        admitted(
            f"{NAMESPACE}/a",
            1,
            domains=[
                DomainCount(values=["rack0", NODE], count=1),
                DomainCount(values=["rack0", OTHER], count=1),
            ],
        )
    )
    pods = [
        pod("a-0", app="a", node=NODE, gpus=1),
        pod("a-1", app="a", selector={RACK: "rack0", HOST: NODE}, gpus=1),
    ]
    sample_twice(found, pods)
    assert len(found.violations) == 1, found.violations
    assert (
        f"2 pods of t/a released into domain rack0/{NODE} but admission 1 assigned 1 there"
        in found.violations[0]
    )


def test_a_preempted_gangs_new_pods_released_before_readmission_are_named() -> None:
    found = checks(grace=10)
    found.decided(admitted(f"{NAMESPACE}/v", 1))
    old = pod("v-old", app="v", node=NODE)
    found.sample(NODES, [old], time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    evicted = pod("v-old", app="v", node=NODE, deleting=True)
    sample_twice(found, [evicted, pod("v-new", app="v", node=NODE, gpus=0)])
    assert len(found.violations) == 1, found.violations
    assert "pod t/v-new of preempted t/v released without a new admission" in found.violations[0]


def test_pods_that_finished_under_a_preempted_admission_hold_no_slot_of_the_next() -> None:
    # A Job that completed just as it was preempted keeps its Succeeded pods where the ended
    # admission put them; they count against the next admission's domains no more, but a pod
    # of that generation still running there does.
    found = checks()
    found.decided(admitted(f"{NAMESPACE}/v", 1))
    pods = [pod("v-0", app="v", node=NODE, gpus=1), pod("v-1", app="v", node=NODE, gpus=1)]
    found.sample(NODES, pods, time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    found.decided(released(f"{NAMESPACE}/v", 2))
    elsewhere = [DomainCount(values=["rack0", OTHER], count=2)]
    found.decided(admitted(f"{NAMESPACE}/v", 3, count=2, domains=elsewhere))
    finished = [
        pod(p["metadata"]["name"], app="v", node=NODE, gpus=1, phase="Succeeded") for p in pods
    ]
    sample_twice(found, finished)
    assert found.violations == []
    sample_twice(found, [finished[0], pods[1]])
    assert len(found.violations) == 1, found.violations
    assert (
        f"1 pods of t/v released into domain rack0/{NODE} but admission 3 assigned 0"
        in (found.violations[0])
    )


def test_a_readmission_stored_before_the_release_it_follows_is_a_new_admission() -> None:
    """Admission's sequence orders its decisions; a publish retried later may store its
    release after the re-admission that follows it. The re-admitted gang's pods are then not
    released early."""
    found = checks()
    found.decided(admitted(f"{NAMESPACE}/v", 1))
    found.sample(NODES, [pod("v-0", app="v", node=NODE)], time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    found.sample(NODES, [], time.monotonic())  # evicted and gone
    found.decided(admitted(f"{NAMESPACE}/v", 3))
    found.decided(released(f"{NAMESPACE}/v", 2))
    sample_twice(found, [pod("v-1", app="v", node=NODE)])
    assert found.violations == []
    log: list[Message] = [admitted("t/v", 1), preempted("t/v"), admitted("t/v", 3)]
    assert eviction_problems([*log, released("t/v", 2)]) == []


def test_a_preempted_gang_not_evicted_whole_is_named() -> None:
    found = checks()
    both = [DomainCount(values=["rack0", n], count=1) for n in (NODE, OTHER)]
    found.decided(admitted(f"{NAMESPACE}/v", 1, domains=both))
    pods = [pod("v-0", app="v", node=NODE), pod("v-1", app="v", node=OTHER)]
    found.sample(NODES, pods, time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    pods[0] = pod("v-0", app="v", node=NODE, deleting=True)
    sample_twice(found, pods)
    assert len(found.violations) == 1, found.violations
    assert "preempted t/v not evicted whole: ['t/v-1'] still running" in found.violations[0]
    # Once the last pod is evicted too, the gang is no longer watched.
    pods[1] = pod("v-1", app="v", node=OTHER, deleting=True)
    sample_twice(found, pods)
    assert len(found.violations) == 1, found.violations


def test_double_admissions_and_unreleased_victims_are_named() -> None:
    log: list[Message] = [
        admitted("t/a", 1),
        released("t/a", 2),
        admitted("t/a", 3),  # after a release: fine
        admitted("t/a", 3),  # the same decision again: fine
        admitted("t/a", 4, replaces=3),  # moves slots of the admission in force: fine
        admitted("t/a", 5),  # no release in between
        preempted("t/a", "t/b"),
        released("t/a", 6),
    ]
    assert double_admissions(log) == [
        "t/a (uid uid-t/a) admitted again (sequence 5) while admission 4 was in force: "
        "no release in between"
    ]
    assert unreleased_victims(log) == ["t/b was preempted for t/s but never released as Evicted"]
    # Delivered again after the victim's release: the same preemption, owed nothing more.
    again: list[Message] = [preempted("t/a"), released("t/a", 2), preempted("t/a")]
    assert unreleased_victims(again) == []
    # Chosen while it ran, stored after it completed (chaos seed 13): owed nothing; admitted
    # again and preempted then, it is owed its release.
    late: list[Message] = [admitted("t/a", 1), released("t/a", 2, "Completed"), preempted("t/a")]
    assert unreleased_victims(late) == []
    later = Preempted(preemptor="t/s2", preemptor_uid="s2", victims=["t/a"])
    assert unreleased_victims([*late, admitted("t/a", 3), later]) == [
        "t/a was preempted for t/s2 but never released as Evicted"
    ]


def test_a_release_that_ends_no_admission_is_named() -> None:
    fine: list[Message] = [
        admitted("t/a", 1),
        released("t/a", 3, "Completed"),
        released("t/a", 3, "Completed"),  # the same release delivered again: fine
        admitted("t/b", 4),
        released("t/b", 2, "Deleted"),  # a release older than the admission: not in force
    ]
    assert release_problems(fine[:3]) == []
    assert release_problems(fine) == [
        "t/b (uid uid-t/b) released (Deleted, sequence 2) but no admission of it was in "
        "force: released twice, or never admitted"
    ]
    twice: list[Message] = [admitted("t/a", 1), released("t/a", 2), released("t/a", 3)]
    assert release_problems(twice) == [
        "t/a (uid uid-t/a) released (Evicted, sequence 3) but no admission of it was in force: "
        "released twice, or never admitted"
    ]
    # Published out of order (a retried publish): judged in the order admission decided.
    late: list[Message] = [released("t/a", 2), admitted("t/a", 1)]
    assert release_problems(late) == []


def test_a_repeated_preemption_applied_twice_is_named() -> None:
    """A repeated ``preempted`` that releases the victim's later admission is named."""
    once: list[Message] = [
        admitted("t/v", 1),
        preempted("t/v"),
        released("t/v", 2),
        preempted("t/v"),  # delivered again: the same decision
        admitted("t/v", 3),
    ]
    assert eviction_problems(once) == []
    applied_twice = [*once, released("t/v", 4)]
    assert eviction_problems(applied_twice) == [
        "t/v released as Evicted (sequence 4) its admission 3 with no preemption of it left "
        "to apply: one preempted decision applied twice, or to a later admission"
    ]
    assert len(decision_problems(applied_twice)) == 1
    # Lost nodes evict too (evict_pods), without any preemption: not this check's business.
    lost = Released(
        workload="t/w", uid="uid-t/w", queue="q", reason="Evicted", sequence=6, evict_pods=True
    )
    assert eviction_problems([admitted("t/w", 5), lost]) == []


def test_capacity_and_mirror_differences_are_named() -> None:
    bound = pod("p", app="p", node=NODE)
    wrong_node = PodState(
        namespace=NAMESPACE, name="p", uid=bound["metadata"]["uid"], node_name="elsewhere"
    )
    assert mirror_differences([bound], [wrong_node]) == [
        f"pod t/p: bus says ('uid-t-p', 'elsewhere', 'Pending', False, False), the API server "
        f"says ('uid-t-p', {NODE!r}, 'Running', False, False)"
    ]
    stale = CapacityNode(
        topology="default",
        node=NODE,
        domain=["rack0", NODE],
        allocatable={"nvidia.com/gpu": 8},
        free={"nvidia.com/gpu": 8},
    )
    problems = capacity_differences(NODES, [bound], LEVELS, [stale])
    assert any(
        p.startswith(f"NodeKey(topology='default', node='{NODE}'): bus says") for p in problems
    )
    assert any(f"missing NodeKey(topology='default', node='{OTHER}')" in p for p in problems)


def test_a_preemption_delivered_again_is_one_preemption_to_the_sampler() -> None:
    """A repeated ``preempted`` (redelivered after its victim was admitted again) must not make
    the sampler expect the victim's new pods to be evicted: it is the same decision."""
    found = checks()
    found.decided(admitted(f"{NAMESPACE}/v", 1))
    found.sample(NODES, [pod("v-0", app="v", node=NODE)], time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))
    found.sample(NODES, [], time.monotonic())  # evicted and gone
    found.decided(released(f"{NAMESPACE}/v", 2))
    found.decided(admitted(f"{NAMESPACE}/v", 3))
    again = [pod("v-1", app="v", node=NODE)]
    found.sample(NODES, again, time.monotonic())
    found.decided(preempted(f"{NAMESPACE}/v"))  # the same decision, delivered again
    sample_twice(found, again)
    assert found.violations == []


def test_a_reservation_the_capacity_view_misses_or_keeps_too_long_is_named() -> None:
    """The view holds room for admitted pods not bound yet; an admission delivered again after
    its release must not bring its reservation back (the recomputation applies it once)."""
    admission = msgspec.structs.replace(
        admitted("t/a", 1, count=2), requests={"main": {"nvidia.com/gpu": 8}}
    )
    bound = [pod("a-0", app="a", node=NODE)]  # one of two bound: one pod's room reserved
    assert reservations([admission], NODES, bound) == {NODE: {"pods": 1, "nvidia.com/gpu": 8}}

    def view(free_gpus: int, pods: int) -> list[CapacityNode]:
        out = []
        for name in (NODE, OTHER):
            gpus, slots = (free_gpus, pods) if name == NODE else (8, 110)
            out.append(
                CapacityNode(
                    topology="default",
                    node=name,
                    domain=["rack0", name],
                    allocatable={"cpu": 64000, "nvidia.com/gpu": 8, "pods": 110},
                    free={"cpu": 64000, "nvidia.com/gpu": gpus, "pods": slots},
                )
            )
        return out

    def node_differences(view: list[CapacityNode], log: list[Message]) -> list[str]:
        found = capacity_differences(NODES, bound, LEVELS, view, log)
        return [p for p in found if not p.startswith("missing DomainKey")]  # nodes only here

    held = view(free_gpus=-8, pods=108)  # the bound pod, and the reservation of the other
    assert node_differences(held, [admission]) == []
    forgot = view(free_gpus=0, pods=109)
    (problem,) = node_differences(forgot, [admission])
    assert problem.startswith(f"NodeKey(topology='default', node='{NODE}'): bus says")
    log: list[Message] = [admission, released("t/a", 2, "Deleted"), admission]
    assert reservations(log, NODES, bound) == {}
    (kept,) = node_differences(held, log)
    assert kept.startswith(f"NodeKey(topology='default', node='{NODE}'): bus says")


def test_a_preemption_that_names_an_older_admission_ends_no_later_one() -> None:
    """A preemption names the admission its victim loses; another copy of it (published again
    with other content, e.g. by a deposed leader) must not end the victim's re-admission."""
    lost = {"t/v": LostAdmission(uid="uid-t/v", sequence=1)}
    first = Preempted(preemptor="t/s", preemptor_uid="s", victims=["t/v"], lost=lost)
    again = Preempted(
        preemptor="t/s", preemptor_uid="s", victims=["t/v"], lost=lost, message="again"
    )
    log: list[Message] = [admitted("t/v", 1), first, released("t/v", 2), admitted("t/v", 3)]
    assert eviction_problems([*log, again]) == []
    assert eviction_problems([*log, again, released("t/v", 4)]) == [
        "t/v released as Evicted (sequence 4) its admission 3 with no preemption of it left "
        "to apply: one preempted decision applied twice, or to a later admission"
    ]
    later = Preempted(
        preemptor="t/s",
        preemptor_uid="s",
        victims=["t/v"],
        lost={"t/v": LostAdmission(uid="uid-t/v", sequence=3)},
    )
    assert eviction_problems([*log, later, released("t/v", 4)]) == []
    # Stored before the re-admission began, a preemption cannot account for its end.
    early = [admitted("t/v", 1), first, released("t/v", 2), later, admitted("t/v", 3)]
    assert len(eviction_problems([*early, released("t/v", 4)])) == 1
    # The capacity view's recomputation ends an admission when admission releases it.
    assert reservations([*log, again], NODES, []) == {NODE: {"pods": 1}}
    assert reservations([*log, later], NODES, []) == {NODE: {"pods": 1}}
    assert reservations([*log, later, released("t/v", 4)], NODES, []) == {}


def test_the_sampler_ends_only_the_generation_a_preemption_names() -> None:
    """A copy of a preemption naming the victim's earlier admission (published again with
    other content) must not make the sampler expect the re-admitted gang's pods to go; one
    naming the admission in force must."""
    lost = {"t/v": LostAdmission(uid="uid-t/v", sequence=1)}
    stale = Preempted(
        preemptor="t/s", preemptor_uid="s", victims=["t/v"], lost=lost, message="again"
    )
    found = checks()
    found.decided(admitted(f"{NAMESPACE}/v", 1))
    found.decided(released(f"{NAMESPACE}/v", 2))
    found.decided(admitted(f"{NAMESPACE}/v", 3))
    running = [pod("v-0", app="v", node=NODE)]
    found.sample(NODES, running, time.monotonic())
    found.decided(stale)
    sample_twice(found, running)
    assert found.violations == []
    current = msgspec.structs.replace(
        stale, lost={"t/v": LostAdmission(uid="uid-t/v", sequence=3)}, message="now"
    )
    found.decided(current)
    sample_twice(found, running)
    assert found.violations == [found.violations[0]]
    assert "preempted t/v not evicted whole: ['t/v-0'] still running" in found.violations[0]


def test_the_invariants_do_not_apply_the_rule_under_test() -> None:
    """Ground truth only: no call of a decision's own in-force rule (``ends``, ``aborts``) and
    no import of the replica or of a policy module."""
    source = Path(invariants.__file__).read_text()
    tree = ast.parse(source)
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("ends", "aborts")
    ]
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    assert calls == []
    assert [
        m for m in imported if m.startswith(("tidegate.model.replica", "tidegate.policy"))
    ] == []


def owned(obj: dict[str, Any], kind: str, name: str, *, controller: bool = True) -> dict[str, Any]:
    """``obj`` with an ownerReference to the ``kind`` named ``name``."""
    ref = {"kind": kind, "name": name, "uid": f"uid-{kind}-{name}", "controller": controller}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def test_a_pods_workload_is_its_group_else_its_top_owner_else_itself() -> None:
    job = owned({"metadata": {"name": "js-workers-0"}}, "JobSet", "js")
    replicaset = owned({"metadata": {"name": "web-1"}}, "Deployment", "web")
    cron_job = owned({"metadata": {"name": "nightly-1"}}, "CronJob", "nightly")
    owners = {"uid-Job-js-workers-0": job, "uid-ReplicaSet-web-1": replicaset}
    owners["uid-Job-nightly-1"] = cron_job
    grouped = owned(pod("g-0", app="x"), "Job", "js-workers-0")
    grouped["metadata"]["labels"]["scheduling.k8s.io/group-name"] = "gang"
    assert workload_key(grouped, owners) == "t/gang"  # membership wins over owners
    assert workload_key(owned(pod("j", app="x"), "Job", "js-workers-0"), owners) == "t/js"
    assert workload_key(owned(pod("w", app="x"), "ReplicaSet", "web-1"), owners) == "t/web"
    assert workload_key(owned(pod("n", app="x"), "Job", "nightly-1"), owners) == "t/nightly-1"
    assert workload_key(owned(pod("s", app="x"), "StatefulSet", "db"), owners) == "t/db"
    assert workload_key(pod("bare", app="x"), owners) == "t/bare"


def test_a_pod_still_gated_while_its_workload_is_admitted_is_named() -> None:
    owners = {"uid-ReplicaSet-web-1": owned({"metadata": {"name": "web-1"}}, "Deployment", "web")}
    pods = [
        owned(pod("web-a", app="web", node=NODE), "ReplicaSet", "web-1"),
        owned(pod("web-b", app="web", gated=True), "ReplicaSet", "web-1"),
        owned(pod("web-c", app="web", gated=True, deleting=True), "ReplicaSet", "web-1"),
        pod("other", app="other", gated=True),  # never admitted: waiting is fine
        pod("gone", app="gone", gated=True),  # admitted, then released: waiting again
    ]
    log: list[Message] = [
        admitted("t/web", 1),
        admitted("t/gone", 2),
        released("t/gone", 3),
    ]
    assert gated_forever(log, pods, owners) == [
        "t/web-b is still gated though t/web is admitted (sequence 1)"
    ]
    # Once admission releases web (preempted), its gated pod waits for a new admission.
    assert gated_forever([*log, preempted("t/web"), released("t/web", 4)], pods, owners) == []


# ------------------------------------------------------------------------- the queue tree

GPU = "nvidia.com/gpu"


def queue_obj(name: str, cohort: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Queue object as the API lists it."""
    return {"metadata": {"name": name}, "spec": {**({"cohort": cohort} if cohort else {}), **spec}}


def cohort_obj(name: str, **spec: Any) -> dict[str, Any]:
    """A Cohort object as the API lists it."""
    return {"metadata": {"name": name}, "spec": spec}


def charged(workload: str, queue: str, sequence: int, gpus: int) -> Admitted:
    """An admission of ``workload`` in ``queue`` charged ``gpus`` GPUs."""
    return Admitted(
        workload=workload,
        uid=f"uid-{workload}",
        queue=queue,
        sequence=sequence,
        epoch=1,
        assignments={},
        charged={GPU: gpus},
    )


def freed(workload: str, queue: str, sequence: int) -> Released:
    return Released(
        workload=workload, uid=f"uid-{workload}", queue=queue, reason="Completed", sequence=sequence
    )


def test_a_queue_above_its_ceiling_or_what_its_path_allows_is_named() -> None:
    """Two teams of 16 GPUs nominal in cohort research; team-b may borrow 4, team-a keeps 8
    it never lends and has a ceiling of 20. Each bound fires on an admission that crosses it
    and not on its harmless neighbour (the same amounts with a release in between)."""
    queues = [
        queue_obj(
            "team-a",
            "research",
            nominalQuota={GPU: "16"},
            lendingLimit={GPU: "8"},
            capability={GPU: "20"},
        ),
        queue_obj("team-b", "research", nominalQuota={GPU: "16"}, borrowingLimit={GPU: "4"}),
        queue_obj("alone", capability={GPU: "8"}),
    ]
    cohorts = [cohort_obj("research")]

    def problems(*log: Message) -> list[str]:
        return invariants.quota_problems(queues, cohorts, log)

    # Within every bound: team-b borrows 4 of team-a's lendable 8.
    assert problems(charged("t/b1", "team-b", 1, 16), charged("t/b2", "team-b", 2, 4)) == []
    # team-b's borrowing limit: 16 + 4 at most.
    (found,) = problems(charged("t/b1", "team-b", 1, 16), charged("t/b2", "team-b", 2, 8))
    assert found == (
        "queue team-b after admission 2 of t/b2: nvidia.com/gpu 24 in use > 20, what its path "
        "allows"
    )
    # team-a's ceiling (its nominal and team-b's idle 16 would allow 32).
    (found,) = problems(charged("t/a1", "team-a", 1, 24))
    assert found == (
        "queue team-a above its ceiling after admission 1 of t/a1: nvidia.com/gpu 24 > "
        "capability 20"
    )
    # A queue outside any tree: its capability only.
    assert problems(charged("t/x", "alone", 1, 8)) == []
    assert problems(charged("t/x", "alone", 1, 9)) != []
    # The pool: team-a uses its 16 while team-b borrows 4 of what team-a may lend.
    log = [charged("t/b1", "team-b", 1, 20), charged("t/a1", "team-a", 2, 16)]
    assert problems(*log) == [
        "cohort research after admission 2 of t/a1: nvidia.com/gpu 28 in use > 24, its subtree "
        "quota"
    ]
    # The same with team-b's borrowing gang released first: nothing to name.
    assert problems(log[0], freed("t/b1", "team-b", 2), charged("t/a1", "team-a", 3, 16)) == []
    # Order is admission's sequence, not the stream's: a release stored late still came first.
    assert problems(log[0], charged("t/a1", "team-a", 3, 16), freed("t/b1", "team-b", 2)) == []


def test_a_malformed_queue_is_checked_as_one_that_may_hold_nothing() -> None:
    """A Queue whose amounts do not parse is Invalid: the check does not fail on it, and an
    admission into it is named."""
    queues = [queue_obj("broken", capability={"cpu": "four"}, cardQuota={"H200": "x"})]
    assert invariants.quota_problems(queues, [], []) == []
    assert invariants.quota_problems(queues, [], [charged("t/x", "broken", 1, 0)]) == []
    bad = Admitted(
        workload="t/y",
        uid="uid-t/y",
        queue="broken",
        sequence=2,
        epoch=1,
        assignments={},
        charged={"cpu": 1000},
    )
    assert invariants.quota_problems(queues, [], [bad]) != []


def test_a_cohort_ceiling_and_a_nested_cohorts_borrowing_limit_are_named() -> None:
    queues = [
        queue_obj("a", "left", nominalQuota={GPU: "8"}),
        queue_obj("b", "right", nominalQuota={GPU: "8"}),
    ]
    cohorts = [
        cohort_obj("root", capability={GPU: "12"}),
        cohort_obj("left", parent="root", borrowingLimit={GPU: "2"}),
        cohort_obj("right", parent="root"),
    ]
    found = invariants.quota_problems(queues, cohorts, [charged("t/a", "a", 1, 11)])
    assert found == [
        "queue a after admission 1 of t/a: nvidia.com/gpu 11 in use > 10, what its path allows",
        "cohort left after admission 1 of t/a: nvidia.com/gpu 11 in use > 10, its subtree quota "
        "plus its borrowing limit",
    ]
    log = [charged("t/a", "a", 1, 8), charged("t/b", "b", 2, 6)]
    assert invariants.quota_problems(queues, cohorts, log) == [
        "cohort root above its ceiling after admission 2 of t/b: nvidia.com/gpu 14 > capability 12"
    ]


TEAMS = [
    queue_obj(
        "team-a", "research", nominalQuota={GPU: "16"}, preemption={"reclaimWithinCohort": "Any"}
    ),
    queue_obj("team-b", "research", nominalQuota={GPU: "16"}),
]


def quota_wait(workload: str, queue: str, sequence: int) -> Pending:
    return Pending(
        workload=workload,
        uid=f"uid-{workload}",
        queue=queue,
        reason="ExceedsQuota",
        message="over",
        sequence=sequence,
    )


def reclaim(workload: str, queue: str, sequence: int) -> PreemptRequested:
    return PreemptRequested(
        workload=workload, uid=f"uid-{workload}", queue=queue, sequence=sequence, reclaim=True
    )


def answer(preemptor: str, request: int, *victims: str) -> Preempted:
    return Preempted(
        preemptor=preemptor,
        preemptor_uid=f"uid-{preemptor}",
        victims=list(victims),
        request_sequence=request,
        reclaimed=dict.fromkeys(victims, "InCohortReclamation"),
        cohort="research",
    )


def test_a_lender_left_without_what_it_lent_is_named() -> None:
    """team-b borrows all of team-a's idle 16 GPUs; team-a's job of 8 fits its nominal: it
    must ask to reclaim, and the request must be answered within its round."""
    requests = {"t/a": {GPU: 8, "cpu": 1000}}
    borrowing = [charged("t/b1", "team-b", 1, 16), charged("t/b2", "team-b", 2, 16)]

    def problems(*log: Message, settled: bool = True, training: tuple[str, ...] = ()) -> list[str]:
        return invariants.lender_problems(
            TEAMS, [], [*borrowing, *log], requests, training or ("t/b1", "t/b2"), settled=settled
        )

    # Asked, answered with the borrowing gang, admitted: nothing to name.
    assert (
        problems(
            reclaim("t/a", "team-a", 3),
            answer("t/a", 3, "t/b2"),
            Released(workload="t/b2", uid="uid-t/b2", queue="team-b", reason="Evicted", sequence=4),
            charged("t/a", "team-a", 5, 8),
        )
        == []
    )
    # A quota wait instead of a reclaim request.
    assert problems(quota_wait("t/a", "team-a", 3), settled=False) == [
        "t/a waits with ExceedsQuota (sequence 3) though it fits queue team-a's nominal and "
        "borrowers hold what it lent: no reclaim asked"
    ]
    # Asked twice: the first round went unanswered.
    assert problems(
        reclaim("t/a", "team-a", 3), reclaim("t/a", "team-a", 4), answer("t/a", 4, "t/b2")
    ) == ["t/a: reclaim request 3 not answered before admission asked again (4)"]
    # Never answered by the end of a settled run; admitted meanwhile is an answer.
    assert problems(reclaim("t/a", "team-a", 3)) == ["t/a: reclaim request 3 never answered"]
    assert problems(reclaim("t/a", "team-a", 3), settled=False) == []
    assert (
        problems(
            reclaim("t/a", "team-a", 3), freed("t/b2", "team-b", 4), charged("t/a", "team-a", 5, 8)
        )
        == []
    )
    # Moot: another job of team-a took the room before the answer (nothing left to reclaim
    # for t/a), or the borrower finished.
    assert problems(reclaim("t/a", "team-a", 3), charged("t/a2", "team-a", 4, 12)) == []
    assert problems(reclaim("t/a", "team-a", 3), freed("t/b2", "team-b", 4)) == []
    # Its own queue full: the wait is right until its own job ends, then it is owed a reclaim.
    own = [charged("t/a0", "team-a", 3, 16), quota_wait("t/a", "team-a", 4)]
    assert problems(*own, settled=False) == []
    assert problems(*own, freed("t/a0", "team-a", 5)) == [
        "t/a still waits on queue team-a's quota (since sequence 4) though it fits its nominal "
        "and borrowers hold what it lent: no reclaim asked"
    ]
    # Not owed: the borrower is inference (never a victim), or the lender does not reclaim.
    assert problems(quota_wait("t/a", "team-a", 3), training=("t/b1",)) == []
    never = [TEAMS[0] | {"spec": {"cohort": "research", "nominalQuota": {GPU: "16"}}}, TEAMS[1]]
    assert (
        invariants.lender_problems(
            never,
            [],
            [*borrowing, quota_wait("t/a", "team-a", 3)],
            requests,
            ["t/b1", "t/b2"],
            settled=True,
        )
        == []
    )
