"""tidegate's invariants, as functions of Kubernetes API objects and of the decisions on the bus.

Why: an end-to-end test that only looks at the end state misses a gang left half released for
a while, a node overcommitted for a moment, a workload admitted twice and released in between.
And a check that reads the simulator's own store proves nothing about a real control plane.
So every check here takes what any API server returns — Node and Pod objects as JSON, listed
over HTTP (``kubectl get -o json`` gives the same) — plus the decisions seen on the decisions
stream, and nothing else. :mod:`tests.e2e.system` lists nodes and pods through
:mod:`tidegate.kube` several times a second and feeds every decision as it arrives; a harness
on a real cluster does the same with its own client.

Ground truth only: what the API server lists, and the raw decision log (the decisions stream
read message by message in stream order, a decision stored twice with the same content
counted once). No check applies the rules under test — neither
:meth:`~tidegate.model.Preempted.ends` nor the replica of the decisions in force
(:mod:`tidegate.model.replica`) nor any policy. Which admission is in force comes from
admission's own admitted and released decisions in the order of its sequence
(:func:`generations`); a ``preempted`` ends the victim's generation it names (its ``lost``
entry, looked up among the generation's admissions) and is accounted for by admission's
release of it.

The API, kept small so that any harness can call it:

- ``Invariants(managed_namespaces=..., grace_seconds=...)``; ``decided(decision)`` for every
  decision in stream order; ``sample(nodes, pods, now)`` with the lists of Node and Pod
  objects (dicts as the API returns them) and ``time.monotonic()``; broken invariants collect
  in ``violations`` (each names the invariant, the workload or node, and for how long);
- decision-log checks, pure functions of the decisions in stream order:
  :func:`double_admissions`, :func:`release_problems`, :func:`eviction_problems`,
  :func:`unreleased_victims` (and :func:`decision_problems`, all four);
- end checks, pure functions of API objects and of the last message of every capacity or
  state subject: :func:`capacity_differences`, :func:`mirror_differences`; and
  :func:`gated_forever` of the decisions and the Pod objects.

Sampled (:meth:`Invariants.sample`), where a *tidegate pod* is a pod in a managed namespace and
it is *released* once it no longer carries the ``tidegate.io/admission`` gate:

- **released pods fit**: for every node, the requests of the released, live, not terminating
  tidegate pods bound to it or pinned to it alone by their node selector (released but not yet
  scheduled) fit its allocatable minus what the other live pods bound to it use; and for every
  group of nodes a released pod's selector pins it to, the same summed over the group (the
  pods of a preempted gang are on their way out and left out: *evicted whole* bounds that). This is
  computed from the objects, so it fires even when the scheduler refuses to over-bind (the
  pod then waits) — the over-release is tidegate's, not the scheduler's;
- **no overcommit**: the bound, unfinished pods of a node request at most its allocatable;
- **released ≤ assigned, per domain**: the released pods of a workload in each domain of its
  newest admission's assignment (the node's values at the assignment's levels) are no more
  than the admission assigned there, and no more than assigned in total;
- **whole gangs**: no gang stays partly released (some live pods released, others gated while
  its newest admission has slots left for them: pods beyond every slot are an elastic
  workload's growth waiting to be admitted, docs/workloads.md), and no released pod stays
  unscheduled, for longer than a grace period counted from the moment every service is up
  again;
- **no early release**: a preempted gang's re-created pods are not released before a new
  admission of it;
- **evicted whole**: every pod a preempted gang had released when the ``preempted`` decision
  came is deleted within the grace period.

From the decision log (a decision seen twice with the same content — a repeated publish or
delivery — is one decision; these are what "each decision applied once by each consumer" leaves
visible on the bus):

- **no double admission** (:func:`double_admissions`): an admission of an object while another
  of it is in force, with no release in between (``replaces`` aside);
- **a release ends the admission in force** (:func:`release_problems`): every release of a uid
  follows an admission of that uid still in force, with a lower sequence — a second release of
  the same admission (a decision applied twice) is named;
- **one eviction per preemption** (:func:`eviction_problems`): a workload is released as
  ``Evicted`` no more often than distinct ``preempted`` decisions named it, each stored after
  the generation it ends began and before its release, naming (if it names one) an admission
  of that generation — a repeated ``preempted`` that releases the victim's later admission is
  named;
- **victims released** (:func:`unreleased_victims`, at the end): every victim is released as
  ``Evicted``.

At the end, from the decisions and the Pod objects: **nothing gated forever**
(:func:`gated_forever`): no live pod of a workload whose admission is in force still carries
the gate.

Once the system is quiet: the capacity view on the bus equals a recomputation from the Node
and Pod objects less the reservations the admissions in force call for (:func:`reservations`:
so the topology-cache applied every decision and event once — a reservation never ended or
revived by a stale decision, or a pod counted twice, shows as a difference), and the watcher's
pods equal the API server's.

Nothing here does I/O.
"""

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from tidegate.kube.ungate import has_gate
from tidegate.model import (
    Admitted,
    Message,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    QuantityError,
    Released,
    parse_resources,
)
from tidegate.model import resources as res
from tidegate.model.pods import TERMINAL_PHASES
from tidegate.placement import DEFAULT_MAX_PODS
from tidegate.testing import capacity_differences as compare_capacity
from tidegate.testing import capacity_of, pod_requests, published_capacity

GATE: Final = "tidegate.io/admission"
POD_GROUP_KEYS: Final = ("scheduling.k8s.io/group-name", "scheduling.x-k8s.io/pod-group")
"""Label or annotation naming a pod's PodGroup (docs/workloads.md)."""
PARENT_KINDS: Final = {"Job": "JobSet", "ReplicaSet": "Deployment"}
"""Owner kind → the kind of its owner that is the workload instead (docs/workloads.md)."""
OBSERVER_LAG_SECONDS: Final = 3.0
"""How much later than the services the observer may learn of a decision."""

JsonObject = dict[str, Any]
Domain = tuple[str, ...]


class Invariants:
    """Sampled checks of a running cluster from its API objects (module docstring)."""

    def __init__(
        self,
        *,
        managed_namespaces: Collection[str],
        grace_seconds: float,
        observer_lag_seconds: float = OBSERVER_LAG_SECONDS,
        note: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.managed_namespaces = set(managed_namespaces)
        """Namespaces whose pods tidegate manages (labelled ``tidegate.io/managed=true``)."""
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
        self.admissions: dict[str, Admitted] = {}
        """Workload key → its newest admission seen."""
        self._started = time.monotonic()
        self._last_pods: list[JsonObject] = []
        self._preempted_since_sample: set[str] = set()
        self._partial_since: dict[str, float] = {}
        self._unbound_since: dict[str, float] = {}
        self._early_since: dict[str, float] = {}
        self._overfull_since: dict[str, float] = {}
        self._evicted_generation: dict[str, set[str]] = {}
        """Victim workload key → uids of its pods released when its preemption was seen; its
        later pods need a new admission before they may be released."""
        self._superseded: dict[str, set[str]] = {}
        """Workload key → uids of pods released under an admission a preemption ended: they
        hold no slot of a later admission (one that finished stays as it is, Succeeded)."""
        self._to_evict: dict[str, tuple[float, set[str]]] = {}
        """Victim workload key → when its preemption was seen and the uids of its pods then
        released, until every one of them is being deleted."""
        self._generation: dict[str, tuple[str, set[int]]] = {}
        """Workload key → uid and admission sequences of its open generation (admitted, not
        released since)."""
        self._ended: dict[tuple[str, str], int] = {}
        """(workload key, uid) → sequence of the release that ended its last generation."""
        self._reported: set[str] = set()
        self._decided: set[bytes] = set()

    def managed(self, pod: Mapping[str, Any]) -> bool:
        """Whether tidegate manages the pod (it is in a managed namespace)."""
        return pod.get("metadata", {}).get("namespace") in self.managed_namespaces

    def decided(self, body: Message) -> None:
        """Take one decision into account (call in stream order, as they arrive); one seen
        before with the same content (a repeated publish or delivery) changes nothing.

        Which admission a ``preempted`` ends is read from the log itself, not from the rule
        under test (:meth:`~tidegate.model.Preempted.ends`): the victim's :class:`Generation`
        open when it came — the one holding the admission its ``lost`` names, if it names
        one; a copy naming an admission of an earlier generation ends nothing."""
        key = type(body).__name__.encode() + msgspec.json.encode(body)
        if key in self._decided:
            return
        self._decided.add(key)
        if isinstance(body, Admitted):
            self._open_generation(body)
            newest = self.admissions.get(body.workload)
            if newest is not None and newest.uid == body.uid and newest.sequence > body.sequence:
                return  # an older admission delivered late changes nothing
            self.admissions[body.workload] = body
            self.assigned[body.workload] = sum(
                d.count for a in body.assignments.values() for d in a.domains
            )
        elif isinstance(body, Released):
            uid, sequences = self._generation.get(body.workload, ("", set()))
            if uid != body.uid:
                return
            self._ended[(body.workload, body.uid)] = body.sequence
            later = {s for s in sequences if s > body.sequence}
            del self._generation[body.workload]
            if later:  # a re-admission stored before this release: the next generation
                self._begin(body.workload, uid, later)
        elif isinstance(body, Preempted):
            for victim in body.victims:
                lost = body.lost.get(victim)
                held = self._generation.get(victim)
                if (
                    held is not None
                    and lost is not None
                    and (lost.uid != held[0] or lost.sequence not in held[1])
                ):
                    continue  # a late copy about an earlier admission: the open one stays
                # The pods released before the decision (the last sample); those being
                # deleted at the next sample are of the same generation too.
                released = {
                    p["metadata"]["uid"]
                    for p in self._last_pods
                    if workload_of(p) == victim and not gated(p)
                }
                self._evicted_generation[victim] = released
                self._to_evict.setdefault(victim, (time.monotonic(), set()))[1].update(released)
                self._preempted_since_sample.add(victim)

    def _open_generation(self, body: Admitted) -> None:
        """Add an admission to its workload's open generation, or open a new one (another
        object under the name, or the first admission since a release); a new generation
        after a preemption is the re-admission the preempted gang's pods wait for."""
        if body.sequence < self._ended.get((body.workload, body.uid), 0):
            return  # published before the release that ended it, stored after it
        uid, sequences = self._generation.get(body.workload, ("", set()))
        if uid == body.uid:
            sequences.add(body.sequence)
            return
        self._begin(body.workload, body.uid, {body.sequence})

    def _begin(self, workload: str, uid: str, sequences: set[int]) -> None:
        self._generation[workload] = (uid, sequences)
        ended = self._evicted_generation.pop(workload, None)
        if ended:
            self._superseded.setdefault(workload, set()).update(ended)

    # ------------------------------------------------------------------ invariants, sampled

    def sample(
        self,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        now: float | None = None,
    ) -> None:
        """Check the cluster as ``nodes`` and ``pods`` (API objects listed a moment ago) show
        it; record what is broken in :attr:`violations`."""
        now = time.monotonic() if now is None else now
        pod_list = [dict(p) for p in pods]
        node_list = [dict(n) for n in nodes]
        self.samples += 1
        for victim in self._preempted_since_sample:
            evicted = {
                p["metadata"]["uid"]
                for p in pod_list
                if workload_of(p) == victim and not gated(p) and terminating(p)
            }
            self._evicted_generation.get(victim, set()).update(evicted)
            if victim in self._to_evict:
                self._to_evict[victim][1].update(evicted)
        self._preempted_since_sample.clear()
        self._last_pods = pod_list
        live = [p for p in pod_list if not terminating(p) and pod_phase(p) not in TERMINAL_PHASES]
        self._check_overcommit(node_list, pod_list)
        self._check_released_fit(node_list, pod_list)
        self._check_gangs(live, now)
        self._check_unbound(live, now)
        self._check_early_release(pod_list, now)
        self._check_evicted_whole(pod_list, now)
        self._check_overrelease(node_list, pod_list, now)

    def _check_overcommit(self, nodes: list[JsonObject], pods: list[JsonObject]) -> None:
        """No node holds more than its allocatable (bound pods that have not finished)."""
        used: dict[str, dict[str, int]] = {}
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node and pod_phase(pod) not in TERMINAL_PHASES:
                used[node] = res.add(res.add(used.get(node, {}), pod_requests(pod)), {"pods": 1})
        for node in nodes:
            name = node["metadata"]["name"]
            over = exceeding(used.get(name, {}), allocatable_of(node))
            if over:
                self._report(
                    f"overcommit:{name}:{sorted(over)}", f"node {name} overcommitted: {over}"
                )

    def _check_released_fit(self, nodes: list[JsonObject], pods: list[JsonObject]) -> None:
        """The tidegate pods released onto a node (bound there, or pinned there by their node
        selector and waiting for the scheduler) fit its allocatable minus what the other pods
        bound to it use; the same for every group of nodes a released pod is pinned to."""
        by_name = {n["metadata"]["name"]: n for n in nodes}
        room: dict[str, dict[str, int]] = {
            name: allocatable_of(node) for name, node in by_name.items()
        }
        demand: dict[frozenset[str], dict[str, int]] = {}
        pinned: list[tuple[frozenset[str], dict[str, int]]] = []
        leaving = {uid for _, uids in self._to_evict.values() for uid in uids}
        for pod in pods:
            if terminating(pod) or pod_phase(pod) in TERMINAL_PHASES:
                continue
            if pod["metadata"]["uid"] in leaving:
                continue  # a preempted gang's pod on its way out (checked: evicted whole)
            bound = pod.get("spec", {}).get("nodeName")
            need = res.add(pod_requests(pod), {"pods": 1})
            if not self.managed(pod):
                if bound in room:
                    room[bound] = res.subtract(room[bound], need)
                continue
            if gated(pod):
                continue
            where = frozenset([bound]) if bound else nodes_matching(pod, nodes)
            if not where:
                continue  # pinned nowhere: the unscheduled check names it
            pinned.append((where, need))
        for group in {where for where, _ in pinned} | {frozenset([n]) for n in by_name}:
            demand[group] = {}
            for where, need in pinned:
                if where <= group:
                    demand[group] = res.add(demand[group], need)
        for group, needed in demand.items():
            if not needed:
                continue
            available: dict[str, int] = {}
            for name in group:
                available = res.add(available, room[name])
            over = exceeding(needed, available)
            if over:
                what = next(iter(group)) if len(group) == 1 else f"{len(group)} nodes"
                self._report(
                    f"released-fit:{sorted(group)}:{sorted(over)}",
                    f"released tidegate pods do not fit on {what} {sorted(group)[:4]}: "
                    f"(requested, allocatable minus other pods) {over}",
                )

    def _check_gangs(self, live: list[JsonObject], now: float) -> None:
        """All of a gang's live pods are released, or none (allowing the moments a release
        or an eviction takes)."""
        by_workload: dict[str, list[JsonObject]] = {}
        for pod in live:
            key = workload_of(pod)
            if key is not None and self.managed(pod):
                by_workload.setdefault(key, []).append(pod)
        partial = set()
        for key, members in by_workload.items():
            held = [p for p in members if gated(p)]
            if not held or len(held) == len(members):
                continue
            assigned = self.assigned.get(key)
            if assigned is not None and len(members) - len(held) >= assigned:
                continue  # every slot filled: pods beyond them are growth waiting its turn
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
            if not self.managed(pod) or gated(pod) or pod.get("spec", {}).get("nodeName"):
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

    def _check_overrelease(
        self, nodes: list[JsonObject], pods: list[JsonObject], now: float
    ) -> None:
        """Never more pods released than assigned, in total and per domain of the newest
        admission: released pods that hold (or held) a slot of it — not being deleted, not
        failed, not finished under an admission a preemption ended (a Job that completed just
        as it was preempted keeps its Succeeded pods where the old admission put them).
        The observer may see a new admission (a move, a growth) a moment after the ungater
        acted on it, so only an excess that lasts longer than that is named."""
        labels = {n["metadata"]["name"]: labels_of(n) for n in nodes}
        released: dict[str, int] = {}
        in_domain: dict[tuple[str, Domain], int] = {}
        for pod in pods:
            key = workload_of(pod)
            if key is None or gated(pod) or terminating(pod) or pod_phase(pod) == "Failed":
                continue
            if pod_phase(pod) == "Succeeded" and pod["metadata"]["uid"] in self._superseded.get(
                key, ()
            ):
                continue  # it finished under the admission the preemption ended
            released[key] = released.get(key, 0) + 1
            admission = self.admissions.get(key)
            if admission is None:
                continue
            for assignment in admission.assignments.values():
                domain = domain_of(pod, assignment.levels, labels)
                if domain is not None:
                    in_domain[(key, domain)] = in_domain.get((key, domain), 0) + 1
                    break
        excess = set()
        for key, count in released.items():
            assigned = self.assigned.get(key)
            if assigned is None or count <= assigned:
                continue
            # A growth: the ungater may act on the larger admission before the observer sees it.
            tag = f"{key}:total"
            excess.add(tag)
            since = self._overfull_since.setdefault(tag, now)
            if now - since > self.observer_lag_seconds:
                self._report(
                    f"overrelease:{key}:{count}",
                    f"{count} pods of {key} released but its admission assigned {assigned}",
                )
        for (key, domain), count in in_domain.items():
            admission = self.admissions[key]
            allowed = sum(
                d.count
                for a in admission.assignments.values()
                for d in a.domains
                if tuple(d.values) == domain
            )
            if count <= allowed:
                continue
            tag = f"{key}:{'/'.join(domain)}"
            excess.add(tag)
            since = self._overfull_since.setdefault(tag, now)
            if now - since > self.observer_lag_seconds:
                self._report(
                    f"overrelease-domain:{tag}:{count}",
                    f"{count} pods of {key} released into domain {'/'.join(domain)} but "
                    f"admission {admission.sequence} assigned {allowed} there",
                )
        for tag in set(self._overfull_since) - excess:
            del self._overfull_since[tag]

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


# ---------------------------------------------------------------------- the decision log


def distinct(decisions: Iterable[Message]) -> list[Message]:
    """The decisions in stream order, each once: a decision seen again with the same content
    (a retried publish, a redelivery) is the same decision."""
    seen: set[bytes] = set()
    out: list[Message] = []
    for decision in decisions:
        key = type(decision).__name__.encode() + msgspec.json.encode(decision)
        if key not in seen:
            seen.add(key)
            out.append(decision)
    return out


def _by_sequence(decisions: Iterable[Message]) -> list[Admitted | Released]:
    """Distinct admissions and releases in the order admission decided them (its sequence is
    monotonic; a publish retried later may reach the stream out of order)."""
    found = [d for d in distinct(decisions) if isinstance(d, Admitted | Released)]
    return sorted(found, key=lambda d: d.sequence)


def double_admissions(decisions: Iterable[Message]) -> list[str]:
    """Workloads admitted again while an admission of the same object was in force (no
    release in between), and replacements of an admission that was not in force."""
    problems: list[str] = []
    in_force: dict[str, int] = {}
    for decision in _by_sequence(decisions):
        match decision:
            case Admitted():
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
    return problems


def release_problems(decisions: Iterable[Message]) -> list[str]:
    """Releases that end no admission: no admission of that uid was in force before the
    release's sequence (never admitted, or already released — a decision applied twice)."""
    problems: list[str] = []
    in_force: dict[str, int] = {}
    for decision in _by_sequence(decisions):
        match decision:
            case Admitted():
                in_force[decision.uid] = decision.sequence
            case Released():
                ended = in_force.pop(decision.uid, None)
                if ended is None:
                    problems.append(
                        f"{decision.workload} (uid {decision.uid}) released "
                        f"({decision.reason}, sequence {decision.sequence}) but no admission "
                        f"of it was in force: released twice, or never admitted"
                    )
    return problems


def eviction_problems(decisions: Iterable[Message]) -> list[str]:
    """Releases as ``Evicted`` that no distinct ``preempted`` decision accounts for, judged
    from the log alone (:func:`generations`, not the rule under test): each preemption of a
    victim accounts for the end of at most one of its generations, one that began before the
    preemption was stored and was released after it — and, when its ``lost`` names an
    admission, the generation holding that admission. A repeated ``preempted`` applied again
    releases the victim's later admission (its quota returned while its pods run): that
    release is named. Releases that evict for lost nodes (``evict_pods``) are not preemptions
    and are left out."""
    log = distinct(decisions)
    preemptions = [(at, d) for at, d in enumerate(log) if isinstance(d, Preempted)]
    used: set[tuple[int, str]] = set()
    problems: list[str] = []
    for generation in generations(log):
        end, ended_at = generation.end, generation.end_seen
        if end is None or ended_at is None or end.reason != "Evicted" or end.evict_pods:
            continue
        key = generation.workload
        match = next(
            (
                at
                for at, p in preemptions
                if key in p.victims
                and (at, key) not in used
                and generation.first_seen < at < ended_at
                and generation.named_by(p)
            ),
            None,
        )
        if match is None:
            problems.append(
                f"{key} released as Evicted (sequence {end.sequence}) its admission "
                f"{generation.newest.sequence} with no preemption of it left to apply: one "
                f"preempted decision applied twice, or to a later admission"
            )
        else:
            used.add((match, key))
    return problems


def unreleased_victims(decisions: Iterable[Message]) -> list[str]:
    """Victims of a preemption that admission never released as ``Evicted`` (their quota
    would leak); only meaningful once the run has settled. A preemption delivered again is the
    same preemption, and one whose victim's admission ended otherwise first (it completed,
    even when the preemption is stored after that release) is owed nothing."""
    waiting: dict[str, str] = {}
    ended: set[str] = set()
    """Workloads whose last admission was released: a preemption stored after that (chosen
    while it ran, published late) is owed nothing."""
    for decision in distinct(decisions):
        match decision:
            case Admitted():
                ended.discard(decision.workload)
            case Preempted():
                for victim in decision.victims:
                    if victim not in ended:
                        waiting[victim] = decision.preemptor
            case Released():
                waiting.pop(decision.workload, None)
                ended.add(decision.workload)
            case _:
                pass
    return [
        f"{victim} was preempted for {preemptor} but never released as Evicted"
        for victim, preemptor in waiting.items()
    ]


def decision_problems(decisions: Sequence[Message], *, settled: bool = False) -> list[str]:
    """Every decision-log check; with ``settled``, also the victims never released."""
    found = double_admissions(decisions) + release_problems(decisions)
    found += eviction_problems(decisions)
    return found + (unreleased_victims(decisions) if settled else [])


# ---------------------------------------------------------------------- checks at the end


@dataclass
class Generation:
    """One admission of one workload object as admission's own log tells it: its admitted
    decisions of one uid in sequence order (the first, then resizes and replacements), until
    a released decision of that uid ends it or an admission of another object under the name
    supersedes it. Stream positions are indexes into the distinct log, in stream order."""

    workload: str
    uid: str
    sequences: set[int]
    newest: Admitted
    first_seen: int
    """Stream position of the earliest stored of its admissions."""
    end: Released | None = None
    end_seen: int | None = None
    """Stream position of :attr:`end`."""

    def named_by(self, preempted: Preempted) -> bool:
        """Whether a preemption may end this generation by what it names: its ``lost`` entry
        for the workload names one of this generation's admissions, or it names none."""
        lost = preempted.lost.get(self.workload)
        return lost is None or (lost.uid == self.uid and lost.sequence in self.sequences)


def generations(decisions: Iterable[Message]) -> list[Generation]:
    """Every workload's generations (:class:`Generation`), in the order admission decided
    them (its sequence; a publish retried later may reach the stream out of order). Built
    from admitted and released decisions only: a ``preempted`` ends nothing until admission
    releases its victim."""
    log = distinct(decisions)
    position = {id(d): at for at, d in enumerate(log)}
    open_now: dict[str, Generation] = {}
    found: list[Generation] = []
    for decision in _by_sequence(log):
        at = position[id(decision)]
        held = open_now.get(decision.workload)
        if isinstance(decision, Admitted):
            if held is not None and held.uid == decision.uid:
                held.sequences.add(decision.sequence)
                held.newest = decision
                held.first_seen = min(held.first_seen, at)
                continue
            generation = Generation(
                decision.workload, decision.uid, {decision.sequence}, decision, at
            )
            open_now[decision.workload] = generation
            found.append(generation)
        elif held is not None and held.uid == decision.uid:
            held.end, held.end_seen = decision, at
            del open_now[decision.workload]
    return found


def admissions_in_force(decisions: Iterable[Message]) -> dict[str, Admitted]:
    """Workload key → the newest admission of its open generation (:func:`generations`):
    admitted, and not released since by admission. A ``preempted`` alone ends nothing here:
    once the run is quiet admission has released every victim it ends
    (:func:`unreleased_victims`, :func:`eviction_problems`)."""
    in_force: dict[str, Admitted] = {}
    for generation in generations(decisions):
        if generation.end is None:
            in_force[generation.workload] = generation.newest
        else:
            in_force.pop(generation.workload, None)
    return in_force


def gated_forever(
    decisions: Iterable[Message],
    pods: Iterable[Mapping[str, Any]],
    owners: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Nothing gated forever (at the end, once the run is quiet): the live pods in ``pods``
    that still carry the gate although their workload (:func:`workload_key`; ``owners``: the
    Jobs and ReplicaSets by uid) has an admission in force."""
    in_force = admissions_in_force(decisions)
    found = []
    for pod in pods:
        if not gated(pod) or terminating(pod) or pod_phase(pod) in TERMINAL_PHASES:
            continue
        key = workload_key(pod, owners)
        admission = in_force.get(key)
        if admission is not None:
            found.append(
                f"{object_name(pod)} is still gated though {key} is admitted "
                f"(sequence {admission.sequence})"
            )
    return found


def workload_key(pod: Mapping[str, Any], owners: Mapping[str, Mapping[str, Any]]) -> str:
    """A pod's workload key (``namespace/name``) as docs/workloads.md defines it: its PodGroup,
    else its owner's top owner (a Job's JobSet, a ReplicaSet's Deployment), else its owner,
    else the pod itself. ``owners``: the Jobs and ReplicaSets by uid."""
    metadata = pod.get("metadata", {})
    namespace = metadata.get("namespace")
    for key in POD_GROUP_KEYS:
        group = labels_of(pod).get(key) or (metadata.get("annotations") or {}).get(key)
        if group:
            return f"{namespace}/{group}"
    owner_ref = _owner_ref(pod)
    if owner_ref is None:
        return f"{namespace}/{metadata['name']}"
    owner = owners.get(str(owner_ref.get("uid")))
    parent_ref = _owner_ref(owner) if owner is not None else None
    if parent_ref is not None and parent_ref.get("kind") == PARENT_KINDS.get(owner_ref["kind"]):
        return f"{namespace}/{parent_ref['name']}"
    return f"{namespace}/{owner_ref['name']}"


def _owner_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ownerReference, else the first one."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def reservations(
    decisions: Iterable[Message],
    nodes: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> dict[str, dict[str, int]] | None:
    """Node → what the capacity view must hold there for admitted pods not bound yet, from the
    admissions in force (in stream order: a newer admission of a workload replaces its older
    one; a release of it, or a ``preempted`` naming it, ends it) and the pods bound (for every
    podset domain, ``max(0, assigned − bound) × per-pod requests``, docs/topology-cache.md).

    Only domains that are one node have an exact answer (wider ones are spread by the cache's
    estimate): None when an admission in force has a wider domain with pods still unbound.
    Pods name no podset, so a workload's bound pods are matched to its podsets in order."""
    in_force = admissions_in_force(decisions)
    bound: dict[tuple[str, str], int] = {}
    for pod in pods:
        key, node = workload_of(pod), pod.get("spec", {}).get("nodeName")
        if key is not None and node and pod_phase(pod) not in TERMINAL_PHASES:
            bound[(key, node)] = bound.get((key, node), 0) + 1
    out: dict[str, dict[str, int]] = {}
    for key, admission in in_force.items():
        for podset, assignment in admission.assignments.items():
            per_pod = {"pods": 1, **admission.requests.get(podset, {})}
            for domain in assignment.domains:
                matching = [
                    n["metadata"]["name"]
                    for n in nodes
                    if [labels_of(n).get(level) for level in assignment.levels] == domain.values
                ]
                if len(matching) != 1:
                    return None
                (node,) = matching
                taken = min(domain.count, bound.get((key, node), 0))
                bound[(key, node)] = bound.get((key, node), 0) - taken
                if domain.count > taken:
                    out[node] = res.add(out.get(node, {}), res.scale(per_pod, domain.count - taken))
    return out


def capacity_differences(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    levels: Sequence[str],
    capacity: Iterable[Message],
    decisions: Iterable[Message] = (),
) -> list[str]:
    """Where the capacity view (the last message of every capacity subject) differs from a
    recomputation from the Node and Pod objects (:func:`tidegate.testing.capacity_of`, shared
    with tests/topology_cache/test_end_to_end.py) less the :func:`reservations` the decisions
    in force call for; ``levels`` are the Topology's level labels, widest first. When the
    reservations have no exact answer, the view is compared without them (right once every
    admitted pod is bound)."""
    reserved = reservations(decisions, nodes, pods)
    want = capacity_of(nodes, pods, levels, reserved=reserved)
    return compare_capacity(want, published_capacity(capacity))


def mirror_differences(pods: Iterable[Mapping[str, Any]], state: Iterable[Message]) -> list[str]:
    """Where the watcher's pods (the last message of every state subject) differ from the
    Pod objects the API server lists."""
    want = {
        object_name(p): (
            p["metadata"]["uid"],
            p.get("spec", {}).get("nodeName"),
            pod_phase(p),
            gated(p),
            terminating(p),
        )
        for p in pods
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
        f"pod {k}: bus says {got[k]}, the API server says {want[k]}"
        for k in want.keys() & got.keys()
        if got[k] != want[k]
    ]
    return sorted(problems)


# ---------------------------------------------------------------------- reading API objects


def allocatable_of(node: Mapping[str, Any]) -> dict[str, int]:
    """A node's allocatable in tidegate units (``pods`` 110 when the node does not say)."""
    allocatable = parse_resources(node.get("status", {}).get("allocatable"))
    allocatable.setdefault("pods", DEFAULT_MAX_PODS)
    return allocatable


def exceeding(need: Mapping[str, int], have: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Resource → (needed, available) for every resource of ``need`` above ``have``."""
    return {r: (amount, have.get(r, 0)) for r, amount in need.items() if amount > have.get(r, 0)}


def nodes_matching(pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the nodes whose labels satisfy the pod's ``nodeSelector`` (empty when it has
    none: an unpinned pod is pinned nowhere)."""
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    if not selector:
        return frozenset()
    return frozenset(
        n["metadata"]["name"]
        for n in nodes
        if all(labels_of(n).get(k) == v for k, v in selector.items())
    )


def domain_of(
    pod: Mapping[str, Any], levels: Sequence[str], node_labels: Mapping[str, Mapping[str, str]]
) -> Domain | None:
    """The pod's values at ``levels``: from its node when bound, else from its node selector
    (the ungater pins a released pod to its domain); None when neither says."""
    spec = pod.get("spec", {})
    labels: Mapping[str, str] = (
        node_labels.get(spec["nodeName"], {})
        if spec.get("nodeName")
        else spec.get("nodeSelector") or {}
    )
    values = tuple(labels.get(level) for level in levels)
    return None if any(v is None for v in values) else tuple(str(v) for v in values)


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
    return has_gate(pod, GATE)


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


# ---------------------------------------------------------------------- the queue tree

QUOTA_REASONS: Final = ("ExceedsQuota", "CardQuotaExceeded")
"""Pending reasons of a workload short of its queue's quota (docs/queues.md)."""
Amounts = dict[str, int]


@dataclass
class QuotaNode:
    """A Queue or Cohort object's quota fields, parsed (``cards`` keys are card models)."""

    kind: str
    """``queue`` or ``cohort``."""
    name: str
    parent: str | None
    nominal: Amounts
    borrowing: Amounts
    lending: Amounts
    capability: Amounts | None
    """Ceiling per resource; a resource not named is not limited (None: no ceiling)."""
    card_quota: Amounts | None
    """Ceiling per card model; a model not named has 0 (None: no card ceiling)."""
    reclaim_any: bool = False
    """A Queue whose ``spec.preemption.reclaimWithinCohort`` is ``Any``."""
    reclaimable: bool = True


def quota_nodes(
    queues: Iterable[Mapping[str, Any]], cohorts: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], QuotaNode]:
    """(kind, name) → :class:`QuotaNode` of every Queue and Cohort object (as the API lists
    them; a cohort a Queue names that no object defines is an empty root, docs/queues.md).
    Card amounts are keyed ``"<model> cards"`` beside the resources."""

    def resources(values: Mapping[str, Any] | None) -> Amounts:
        # A malformed amount makes the queue Invalid: it may hold nothing of that resource.
        try:
            return dict(parse_resources(dict(values or {})))
        except QuantityError:
            return dict.fromkeys(values or {}, 0)

    def amounts(spec: Mapping[str, Any], field: str, card_field: str) -> Amounts:
        out = resources(spec.get(field))
        out.update({f"{m} cards": _cards(n) for m, n in (spec.get(card_field) or {}).items()})
        return out

    found: dict[tuple[str, str], QuotaNode] = {}
    for kind, objects, parent_field in (("queue", queues, "cohort"), ("cohort", cohorts, "parent")):
        for obj in objects:
            spec = obj.get("spec") or {}
            capability = spec.get("capability")
            cards = spec.get("cardQuota")
            preemption = spec.get("preemption") or {}
            found[(kind, obj["metadata"]["name"])] = QuotaNode(
                kind=kind,
                name=obj["metadata"]["name"],
                parent=spec.get(parent_field) or None,
                nominal=amounts(spec, "nominalQuota", "cardNominalQuota"),
                borrowing=amounts(spec, "borrowingLimit", "cardBorrowingLimit"),
                lending=amounts(spec, "lendingLimit", "cardLendingLimit"),
                capability=resources(capability) if capability is not None else None,
                card_quota={m: _cards(n) for m, n in cards.items()} if cards is not None else None,
                reclaim_any=preemption.get("reclaimWithinCohort") == "Any",
                reclaimable=spec.get("reclaimable", True) is not False,
            )
    for node in list(found.values()):
        if node.parent is not None and ("cohort", node.parent) not in found:
            found[("cohort", node.parent)] = QuotaNode(
                "cohort", node.parent, None, {}, {}, {}, None, None
            )
    return found


def _cards(value: object) -> int:
    """A card amount of a Queue object; a malformed one allows none."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


class QuotaArithmetic:
    """Kueue's hierarchical-cohort arithmetic written out once more, small, from the objects
    (docs/queues.md, "Borrowing and lending"): a node's subtree quota is its nominal plus
    what its children lend up (their subtree quota, at most their lending limit); its
    guaranteed part is what it never lends (subtree − lending limit); what counts against a
    cohort is what its children use above their guaranteed parts; the most a node's subtree
    can ever use (its *potential*) is its guaranteed part plus its parent's potential, capped
    by its subtree quota plus its borrowing limit. Only the dimensions some node of a tree
    names in a nominal or a limit are shared; the others are bounded by the ceilings only."""

    def __init__(self, nodes: Mapping[tuple[str, str], QuotaNode]) -> None:
        self.nodes = dict(nodes)
        self.children: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for key, node in self.nodes.items():
            if node.parent is not None:
                self.children.setdefault(("cohort", node.parent), []).append(key)

    def path(self, key: tuple[str, str]) -> list[tuple[str, str]]:
        """The node, its parent, … up to its root (a cycle stops where it closes)."""
        out = [key]
        while (parent := self.nodes[out[-1]].parent) is not None:
            if ("cohort", parent) in out:
                break
            out.append(("cohort", parent))
        return out

    def shared(self, key: tuple[str, str]) -> set[str]:
        """The dimensions the tree of ``key`` shares."""
        root = self.path(key)[-1]
        dims: set[str] = set()
        todo = [root]
        while todo:
            node = self.nodes[todo.pop()]
            dims |= set(node.nominal) | set(node.borrowing) | set(node.lending)
            todo.extend(self.children.get((node.kind, node.name), []))
        return dims

    def subtree(self, key: tuple[str, str], dim: str) -> int:
        node = self.nodes[key]
        return node.nominal.get(dim, 0) + sum(
            self.lent_up(child, dim) for child in self.children.get(key, [])
        )

    def lent_up(self, key: tuple[str, str], dim: str) -> int:
        limit = self.nodes[key].lending.get(dim)
        quota = self.subtree(key, dim)
        return quota if limit is None else min(quota, limit)

    def guaranteed(self, key: tuple[str, str], dim: str) -> int:
        return self.subtree(key, dim) - self.lent_up(key, dim)

    def potential(self, key: tuple[str, str], dim: str) -> int:
        node = self.nodes[key]
        own = self.subtree(key, dim)
        if node.parent is None:
            return own
        cap = self.guaranteed(key, dim) + self.potential(("cohort", node.parent), dim)
        limit = node.borrowing.get(dim)
        return cap if limit is None else min(cap, own + limit)

    def counted(self, key: tuple[str, str], dim: str, usage: Mapping[str, Amounts]) -> int:
        """What counts against ``key``'s subtree quota: a queue's usage, a cohort's
        children's usage above their guaranteed parts."""
        if key[0] == "queue":
            return usage.get(key[1], {}).get(dim, 0)
        return sum(
            max(0, self.counted(child, dim, usage) - self.guaranteed(child, dim))
            for child in self.children.get(key, [])
        )

    def total(self, key: tuple[str, str], usage: Mapping[str, Amounts]) -> Amounts:
        """What the admitted workloads of ``key``'s subtree hold."""
        if key[0] == "queue":
            return dict(usage.get(key[1], {}))
        out: Amounts = {}
        for child in self.children.get(key, []):
            out = res.add(out, self.total(child, usage))
        return out


def _charge(admitted: Admitted) -> Amounts:
    return {
        **admitted.charged,
        **{f"{m} cards": n for m, n in admitted.charged_cards.items()},
    }


def _over_ceiling(node: QuotaNode, held: Mapping[str, int]) -> list[str]:
    over = []
    for dim, amount in sorted(held.items()):
        if amount <= 0:
            continue
        if dim.endswith(" cards"):
            if node.card_quota is not None:
                ceiling = node.card_quota.get(dim.removesuffix(" cards"), 0)
                if amount > ceiling:
                    over.append(f"{dim} {amount} > card quota {ceiling}")
        elif node.capability is not None and amount > node.capability.get(dim, amount):
            over.append(f"{dim} {amount} > capability {node.capability[dim]}")
    return over


def quota_problems(
    queues: Iterable[Mapping[str, Any]],
    cohorts: Iterable[Mapping[str, Any]],
    decisions: Iterable[Message],
) -> list[str]:
    """No queue ever above its ceiling nor above what its path up the tree allows, at any
    point of the decision log: after each admission (in admission's sequence order, a
    release ending its object's charge), for the admitted queue and every cohort above it,
    what the admissions in force were charged (``charged``, ``charged_cards``) is within
    each ``capability`` / ``cardQuota`` on the path (a cohort's bounds its subtree), within
    the queue's potential (:class:`QuotaArithmetic`: nominal, borrowing limits of every
    ancestor, lending limits of the others), and what counts against each cohort is within
    its subtree quota (plus its borrowing limit below a root). ``queues`` and ``cohorts``
    are the Queue and Cohort objects as listed (a run that changes them checks each span
    with the objects of that span)."""
    tree = QuotaArithmetic(quota_nodes(queues, cohorts))
    held: dict[str, tuple[str, Amounts]] = {}
    """uid → (queue, charge) of the admission in force."""
    problems: list[str] = []
    for decision in _by_sequence(decisions):
        if isinstance(decision, Released):
            held.pop(decision.uid, None)
            continue
        held[decision.uid] = (decision.queue, _charge(decision))
        key = ("queue", decision.queue)
        if key not in tree.nodes:
            continue
        usage: dict[str, Amounts] = {}
        for queue, charge in held.values():
            usage[queue] = res.add(usage.get(queue, {}), charge)
        where = f"after admission {decision.sequence} of {decision.workload}"
        shared = tree.shared(key)
        for step in tree.path(key):
            node = tree.nodes[step]
            over = _over_ceiling(node, tree.total(step, usage))
            problems.extend(f"{node.kind} {node.name} above its ceiling {where}: {o}" for o in over)
            for dim in sorted(shared):
                counted = tree.counted(step, dim, usage)
                if step == key:
                    bound, what = tree.potential(step, dim), "what its path allows"
                elif node.parent is None:
                    bound, what = tree.subtree(step, dim), "its subtree quota"
                elif dim in node.borrowing:
                    bound = tree.subtree(step, dim) + node.borrowing[dim]
                    what = "its subtree quota plus its borrowing limit"
                else:
                    continue
                if counted > bound:
                    problems.append(
                        f"{node.kind} {node.name} {where}: {dim} {counted} in use > {bound}, {what}"
                    )
    return problems


def lender_problems(
    queues: Iterable[Mapping[str, Any]],
    cohorts: Iterable[Mapping[str, Any]],
    decisions: Iterable[Message],
    requests: Mapping[str, Mapping[str, int]],
    training: Collection[str],
    *,
    settled: bool = False,
) -> list[str]:
    """A lender below its nominal whose lent quota borrowers hold gets it back within one
    nomination round, from the decision log and the objects:

    a workload W of ``requests`` (its gang's requests, as submitted) waits in queue Q on a
    quota reason while the log shows Q *owed*: Q's Queue reclaims with ``Any``; W fits Q's
    own nominal beside what Q holds, in every shared resource it requests, and the ceilings
    on its path; and another queue of Q's tree, reclaimable, uses more than its nominal in
    one of them while it holds only ``training`` workloads. Then admission must not publish
    a quota wait for W (it asks to reclaim instead: ``preempt-requested`` with ``reclaim``),
    and it must not leave W waiting so until the end of a ``settled`` log; and each such
    reclaim request is answered in its round: a ``preempted`` for W naming that request
    (``request_sequence``, or none), or W admitted, before admission asks again (and, when
    ``settled``, at all) — unless it became moot first (W no longer fits the nominal beside
    what Q holds, or no borrower is left). Admission's own decisions are replayed in its
    sequence order."""
    nodes = quota_nodes(queues, cohorts)
    tree = QuotaArithmetic(nodes)
    log = distinct(decisions)
    answered = {(d.preemptor, d.request_sequence) for d in log if isinstance(d, Preempted)}
    ordered = sorted(
        (d for d in log if isinstance(d, Admitted | Released | Pending | PreemptRequested)),
        key=lambda d: d.sequence,
    )
    held: dict[str, tuple[str, str, Amounts]] = {}
    """uid → (workload, queue, charge) of the admission in force."""
    waiting: dict[str, tuple[str, int]] = {}
    """Workload → (its queue, the sequence of its quota wait) while it waits on quota."""
    asked: dict[str, PreemptRequested] = {}
    """Workload → its reclaim request not answered yet."""
    problems: list[str] = []

    def owed(workload: str, queue: str) -> bool:
        key = ("queue", queue)
        node = nodes.get(key)
        request = requests.get(workload)
        if node is None or request is None or node.parent is None or not node.reclaim_any:
            return False
        usage: dict[str, Amounts] = {}
        holders: dict[str, set[str]] = {}
        for who, where, charge in held.values():
            usage[where] = res.add(usage.get(where, {}), charge)
            holders.setdefault(where, set()).add(who)
        shared = tree.shared(key) & {d for d, n in request.items() if n > 0}
        mine = res.add(usage.get(queue, {}), dict(request))
        if not shared or any(mine.get(d, 0) > node.nominal.get(d, 0) for d in shared):
            return False
        for step in tree.path(key):
            if _over_ceiling(tree.nodes[step], res.add(tree.total(step, usage), dict(request))):
                return False
        root = tree.path(key)[-1]
        return any(
            other.kind == "queue"
            and other.name != queue
            and tree.path(okey)[-1] == root
            and other.reclaimable
            and holders.get(other.name, set()) <= set(training)
            and any(usage.get(other.name, {}).get(d, 0) > other.nominal.get(d, 0) for d in shared)
            for okey, other in nodes.items()
        )

    for decision in ordered:
        match decision:
            case Admitted():
                held[decision.uid] = (decision.workload, decision.queue, _charge(decision))
                waiting.pop(decision.workload, None)
                asked.pop(decision.workload, None)
            case Released():
                held.pop(decision.uid, None)
            case Pending(reason=reason, queue=str(queue)) if reason in QUOTA_REASONS:
                if owed(decision.workload, queue):
                    problems.append(
                        f"{decision.workload} waits with {reason} (sequence "
                        f"{decision.sequence}) though it fits queue {queue}'s nominal and "
                        "borrowers hold what it lent: no reclaim asked"
                    )
                waiting[decision.workload] = (queue, decision.sequence)
            case Pending():
                waiting.pop(decision.workload, None)
            case PreemptRequested(reclaim=True):
                waiting.pop(decision.workload, None)
                before = asked.get(decision.workload)
                if before is not None:
                    problems.append(
                        f"{decision.workload}: reclaim request {before.sequence} not answered "
                        f"before admission asked again ({decision.sequence})"
                    )
                if owed(decision.workload, decision.queue):
                    asked[decision.workload] = decision
            case _:
                pass
        for workload, request in list(asked.items()):
            if {(workload, request.sequence), (workload, None)} & answered or not owed(
                workload, request.queue
            ):
                del asked[workload]  # answered, or moot: the queue's own work took the room
    if settled:
        problems.extend(
            f"{workload}: reclaim request {request.sequence} never answered"
            for workload, request in asked.items()
        )
        problems.extend(
            f"{workload} still waits on queue {queue}'s quota (since sequence {since}) though "
            "it fits its nominal and borrowers hold what it lent: no reclaim asked"
            for workload, (queue, since) in waiting.items()
            if owed(workload, queue)
        )
    return problems
