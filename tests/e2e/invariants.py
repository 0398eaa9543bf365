"""tidegate's invariants, checked on the simulated cluster and on what the bus says.

Why: an end-to-end test that only looks at the end state misses a gang left half released for
a while, a node overcommitted for a moment, a workload admitted twice and released in between.
:class:`Invariants` is fed every decision as it arrives and samples the simulator's objects
several times a second (:mod:`tests.e2e.system` does both), and records what it finds broken,
with when and what; the checks of the end state are functions of the simulator and of what was
observed on the bus. Each check says which invariant broke so a failing test names it:

- sampled (:meth:`Invariants.sample`): no node holds more than its allocatable; no gang stays
  partly released (some of its live pods released, others still gated) and no released pod
  stays unscheduled, for longer than a grace period counted from the moment every service is
  up again; a preempted gang's re-created pods are not released before a new admission; a
  preempted gang is evicted whole (every pod it had released when the ``preempted`` decision
  came is deleted within the grace period: preemption announces before it evicts, so a pod
  released into the victim's old slot meanwhile would stay); never more pods released than
  admission assigned;
- from the decision log: no workload admitted twice without a release in between
  (:func:`double_admissions`), every victim of a preemption released as ``Evicted``
  (:func:`unreleased_victims`);
- at the end (:func:`capacity_differences`, :func:`mirror_differences`): the capacity view on
  the bus equals a recomputation from the simulator's own objects, and the watcher's pods on
  the bus equal the simulator's pods.

It reads the simulator's store directly (read only, in this process) and does no I/O.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, cast

from tidegate.model import (
    Admitted,
    Message,
    PodState,
    Preempted,
    Released,
    parse_resources,
)
from tidegate.model import resources as res
from tidegate.placement import DEFAULT_MAX_PODS
from tidegate.placement.accounting import TERMINAL_PHASES
from tidegate.sim import SimCluster
from tidegate.sim.kinds import NODES, PODS
from tidegate.sim.kinds import ResourceType as SimResource
from tidegate.testing import capacity_differences as compare_capacity
from tidegate.testing import pod_requests, published_capacity, recompute_capacity

GATE: Final = "tidegate.io/admission"
OBSERVER_LAG_SECONDS: Final = 3.0
"""How much later than the services the observer may learn of a decision."""

JsonObject = dict[str, Any]


class Invariants:
    """Sampled checks of a running simulated cluster (module docstring)."""

    def __init__(
        self,
        sim: SimCluster,
        *,
        grace_seconds: float,
        observer_lag_seconds: float = OBSERVER_LAG_SECONDS,
        note: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.sim = sim
        self.observer_lag_seconds = observer_lag_seconds
        self.grace_seconds = grace_seconds
        """How long a gang may stay partly released (or a released pod unscheduled) after
        every service is up again."""
        self.note = note
        """Where each violation is also told (a timeline)."""
        self.violations: list[str] = []
        """Invariants found broken while sampling, with when and what."""
        self.samples = 0
        self.restarting: set[str] = set()
        """Services down on purpose: grace periods are suspended meanwhile."""
        self.settled_at = time.monotonic()
        """When the last restarted service was ready again (grace periods count from here)."""
        self.assigned: dict[str, int] = {}
        """Workload key → pods its newest admission assigned."""
        self._started = time.monotonic()
        self._partial_since: dict[str, float] = {}
        self._unbound_since: dict[str, float] = {}
        self._early_since: dict[str, float] = {}
        self._evicted_generation: dict[str, set[str]] = {}
        """Victim workload key → uids of its pods released when its preemption was seen; its
        later pods need a new admission before they may be released."""
        self._to_evict: dict[str, tuple[float, set[str]]] = {}
        """Victim workload key → when its preemption was seen and the uids of its pods then
        released, until every one of them is being deleted."""
        self._reported: set[str] = set()

    def decided(self, body: Message) -> None:
        """Take one decision into account (call in stream order, as they arrive)."""
        if isinstance(body, Admitted):
            self.assigned[body.workload] = sum(
                d.count for a in body.assignments.values() for d in a.domains
            )
            self._evicted_generation.pop(body.workload, None)
        elif isinstance(body, Preempted):
            for victim in body.victims:
                released = {
                    p["metadata"]["uid"]
                    for p in sim_objects(self.sim, PODS)
                    if workload_of(p) == victim and not gated(p)
                }
                self._evicted_generation[victim] = released
                self._to_evict.setdefault(victim, (time.monotonic(), set()))[1].update(released)

    # ------------------------------------------------------------------ invariants, sampled

    def sample(self) -> None:
        """Check the cluster as it is now; record what is broken in :attr:`violations`."""
        now = time.monotonic()
        self.samples += 1
        pods = sim_objects(self.sim, PODS)
        live = [p for p in pods if not terminating(p) and pod_phase(p) not in TERMINAL_PHASES]
        self._check_overcommit(pods)
        self._check_gangs(live, now)
        self._check_unbound(live, now)
        self._check_early_release(pods, now)
        self._check_evicted_whole(pods, now)
        self._check_overrelease(pods)

    def _check_overcommit(self, pods: list[JsonObject]) -> None:
        """No node holds more than its allocatable (bound pods that have not finished)."""
        used: dict[str, dict[str, int]] = {}
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node and pod_phase(pod) not in TERMINAL_PHASES:
                used[node] = res.add(res.add(used.get(node, {}), pod_requests(pod)), {"pods": 1})
        for node in sim_objects(self.sim, NODES):
            name = node["metadata"]["name"]
            allocatable = parse_resources(node.get("status", {}).get("allocatable"))
            allocatable.setdefault("pods", DEFAULT_MAX_PODS)
            over = {
                r: (amount, allocatable.get(r, 0))
                for r, amount in used.get(name, {}).items()
                if amount > allocatable.get(r, 0)
            }
            if over:
                self._report(
                    f"overcommit:{name}:{sorted(over)}", f"node {name} overcommitted: {over}"
                )

    def _check_gangs(self, live: list[JsonObject], now: float) -> None:
        """All of a gang's live pods are released, or none (allowing the moments a release
        or an eviction takes)."""
        by_workload: dict[str, list[JsonObject]] = {}
        for pod in live:
            key = workload_of(pod)
            if key is not None:
                by_workload.setdefault(key, []).append(pod)
        partial = set()
        for key, members in by_workload.items():
            held = [p for p in members if gated(p)]
            if not held or len(held) == len(members):
                continue
            partial.add(key)
            since = self._partial_since.setdefault(key, now)
            self._overdue(
                f"partial:{key}:{since}",
                since,
                now,
                f"gang {key} partly released: {len(members) - len(held)} of {len(members)} "
                f"live pods released, {sorted(object_name(p) for p in held)} still gated",
            )
        for key in set(self._partial_since) - partial:
            del self._partial_since[key]

    def _check_unbound(self, live: list[JsonObject], now: float) -> None:
        """A released pod is scheduled: admission found room for it, so the scheduler must."""
        unbound = set()
        for pod in live:
            if gated(pod) or pod.get("spec", {}).get("nodeName"):
                continue
            name = object_name(pod)
            unbound.add(name)
            since = self._unbound_since.setdefault(name, now)
            self._overdue(
                f"unbound:{name}:{since}",
                since,
                now,
                f"pod {name} released but not scheduled: {unschedulable_message(pod)}",
            )
        for name in set(self._unbound_since) - unbound:
            del self._unbound_since[name]

    def _check_early_release(self, pods: list[JsonObject], now: float) -> None:
        """A preempted gang's re-created pods wait for a new admission: none is released while
        the observer has seen no admission of it since the preemption (the observer may learn
        of an admission a moment after the ungater acted on it)."""
        early = set()
        for pod in pods:
            victim = workload_of(pod)
            old = self._evicted_generation.get(victim or "")
            if old is None or gated(pod) or pod["metadata"]["uid"] in old:
                continue
            name = object_name(pod)
            early.add(name)
            since = self._early_since.setdefault(name, now)
            if now - since > self.observer_lag_seconds:
                self._report(
                    f"early:{name}",
                    f"pod {name} of preempted {victim} released without a new admission",
                )
        for name in set(self._early_since) - early:
            del self._early_since[name]

    def _check_evicted_whole(self, pods: list[JsonObject], now: float) -> None:
        """A preempted gang is evicted whole: every pod it had released when the decision was
        seen is being deleted (or gone) once the grace period has passed."""
        for victim, (since, uids) in list(self._to_evict.items()):
            staying = sorted(
                object_name(p)
                for p in pods
                if p["metadata"]["uid"] in uids
                and not terminating(p)
                and pod_phase(p) not in TERMINAL_PHASES
            )
            if not staying:
                del self._to_evict[victim]
                continue
            self._overdue(
                f"not-evicted:{victim}:{since}",
                since,
                now,
                f"preempted {victim} not evicted whole: {staying} still running",
            )

    def _check_overrelease(self, pods: list[JsonObject]) -> None:
        """Never more pods released than assigned: released pods that hold (or held) a slot —
        not being deleted, not failed — against the newest admission's pod count."""
        released: dict[str, int] = {}
        for pod in pods:
            key = workload_of(pod)
            if key is None or gated(pod) or terminating(pod) or pod_phase(pod) == "Failed":
                continue
            released[key] = released.get(key, 0) + 1
        for key, count in released.items():
            assigned = self.assigned.get(key)
            if assigned is not None and count > assigned:
                self._report(
                    f"overrelease:{key}:{count}",
                    f"{count} pods of {key} released but its admission assigned {assigned}",
                )

    def _overdue(self, tag: str, since: float, now: float, message: str) -> None:
        if self.restarting:
            return
        if now - max(since, self.settled_at) > self.grace_seconds:
            self._report(tag, f"{message} (for {now - since:.1f}s)")

    def _report(self, tag: str, message: str) -> None:
        if tag not in self._reported:
            self._reported.add(tag)
            self.violations.append(f"[{time.monotonic() - self._started:6.1f}s] {message}")
            self.note(f"VIOLATION {message}")


def double_admissions(decisions: Iterable[Message]) -> list[str]:
    """Workloads admitted again while an admission of the same object was in force (no
    release in between), and replacements of an admission that was not in force."""
    problems: list[str] = []
    in_force: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for decision in decisions:
        match decision:
            case Admitted():
                if (decision.uid, decision.sequence) in seen:
                    continue  # the same decision again (a retried publish): harmless
                seen.add((decision.uid, decision.sequence))
                held = in_force.get(decision.uid)
                if decision.replaces is not None:
                    if held != decision.replaces:
                        problems.append(
                            f"{decision.workload}: admission {decision.sequence} replaces "
                            f"{decision.replaces}, but {held} was in force"
                        )
                elif held is not None:
                    problems.append(
                        f"{decision.workload} (uid {decision.uid}) admitted again "
                        f"(sequence {decision.sequence}) while admission {held} was in "
                        f"force: no release in between"
                    )
                in_force[decision.uid] = decision.sequence
            case Released():
                in_force.pop(decision.uid, None)
            case _:
                pass
    return problems


def unreleased_victims(decisions: Iterable[Message]) -> list[str]:
    """Victims of a preemption that admission never released as ``Evicted`` (their quota
    would leak); only meaningful once the run has settled."""
    waiting: dict[str, str] = {}
    for decision in decisions:
        match decision:
            case Preempted():
                for victim in decision.victims:
                    waiting[victim] = decision.preemptor
            case Released(reason="Evicted"):
                waiting.pop(decision.workload, None)
            case _:
                pass
    return [
        f"{victim} was preempted for {preemptor} but never released as Evicted"
        for victim, preemptor in waiting.items()
    ]


def capacity_differences(sim: SimCluster, capacity: Iterable[Message]) -> list[str]:
    """Where the capacity view (the last message of every capacity subject) differs from a
    recomputation from the simulator's objects (:func:`tidegate.testing.recompute_capacity`,
    shared with tests/topology_cache/test_end_to_end.py)."""
    want = recompute_capacity(sim.store, sim.levels)
    return compare_capacity(want, published_capacity(capacity))


def mirror_differences(sim: SimCluster, state: Iterable[Message]) -> list[str]:
    """Where the watcher's pods (the last message of every state subject) differ from the
    simulator's pods."""
    want = {
        object_name(p): (
            p["metadata"]["uid"],
            p.get("spec", {}).get("nodeName"),
            pod_phase(p),
            gated(p),
            terminating(p),
        )
        for p in sim_objects(sim, PODS)
    }
    got = {
        f"{p.namespace}/{p.name}": (
            p.uid,
            p.node_name,
            p.phase,
            GATE in p.scheduling_gates,
            p.terminating,
        )
        for p in state
        if isinstance(p, PodState)
    }
    problems = [f"pod {k} missing on the bus" for k in want.keys() - got.keys()]
    problems += [f"pod {k} on the bus but gone" for k in got.keys() - want.keys()]
    problems += [
        f"pod {k}: bus says {got[k]}, simulator says {want[k]}"
        for k in want.keys() & got.keys()
        if got[k] != want[k]
    ]
    return sorted(problems)


def sim_objects(
    sim: SimCluster, resource: SimResource, namespace: str | None = None
) -> list[JsonObject]:
    """Objects of one kind straight from the simulator's store (read only; writes go over HTTP)."""
    return cast(list[JsonObject], list(sim.store.objects(resource.key, namespace)))


def workload_of(pod: Mapping[str, Any]) -> str | None:
    """The trace workload a pod belongs to (``namespace/<app label>``), if any."""
    app = labels_of(pod).get("app")
    return None if app is None else f"{pod['metadata']['namespace']}/{app}"


def object_name(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object."""
    return f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """An object's labels."""
    return dict(obj.get("metadata", {}).get("labels") or {})


def pod_phase(pod: Mapping[str, Any]) -> str:
    """A pod's phase (Pending until the kubelet says otherwise)."""
    return str(pod.get("status", {}).get("phase") or "Pending")


def terminating(pod: Mapping[str, Any]) -> bool:
    """Whether a pod is being deleted."""
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether a pod still carries tidegate's scheduling gate."""
    gates = pod.get("spec", {}).get("schedulingGates") or []
    return any(g.get("name") == GATE for g in gates)


def unschedulable_message(pod: Mapping[str, Any]) -> str:
    """Why the scheduler left a pod unbound, as it said in the PodScheduled condition."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason"))
    return "not scheduled yet"


def job_complete(job: Mapping[str, Any]) -> bool:
    """Whether a Job has its Complete condition."""
    return any(
        c.get("type") == "Complete" and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )
