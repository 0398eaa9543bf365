"""Release planning: what the ungater does about one workload, as intents.

:func:`plan` looks at a workload in the :class:`~tidegate.policy.clusterview.ClusterView`
(its admission in force, its pods, the nodes) and at what the releasing process remembers of
it (:class:`Memory`: releases in flight, evictions sent, requests asked, …) and returns a
:class:`Plan`: the intents to carry out and the memory to keep. It decides; it does no I/O.
The ungater's :mod:`~tidegate.ungater.releaser` carries the intents out against Kubernetes and
the bus, and on a failed write forgets what the plan remembered (``Memory.without_*``), so
the next plan makes the write again.

The intents, in the order a plan gives them:

- :class:`ReleasePod` — remove the gate and set the nodeSelector of a free slot
  (:func:`tidegate.policy.slots.plan_podset`: released pods count from their selectors,
  releases in flight from the expectations, pods on NotReady or deleted nodes hold none; a
  slot is never filled twice);
- :class:`RequestReplacement` — ask admission for new slots: whole domains lost their nodes
  (``NodeFailed``), released pods found no room for ``unschedulable_seconds``
  (``Unschedulable``), or an elastic workload shrank (``give_back``); once per admission and
  set of slots, again after ``replace_retry_seconds``;
- :class:`RequeueOwner` / :class:`EvictPod` — take away the pods a replacement moved
  elsewhere or an eviction decision (``Released.evict_pods``) removes: a Job's or JobSet's by
  suspending the owner once per decision, others' one by one, once each;
- :class:`ResumeOwner` — unsuspend a Job or JobSet admitted while suspended for tidegate,
  only the object of the admitted uid, once per admission, and only once none of its old pods
  is active;
- :class:`WritePodGroupStatus` — a PodGroup's status, when it changed;
- :class:`Notice` — something worth a warning in the log.
"""

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import msgspec

from tidegate.model import (
    Admitted,
    DomainCount,
    Pending,
    PodState,
    Released,
    ReplaceCause,
    ReplaceRequested,
    TopologyAssignment,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.names import REQUEUE_KINDS
from tidegate.policy import elastic, podgroup, slots
from tidegate.policy.cards import GPU_PRODUCT_LABEL, CardError, parse_card_name
from tidegate.policy.clusterview import ClusterView
from tidegate.policy.common import active, gated

SOURCE: Final = "ungater"
"""The source of the requests a plan names (their event ids start with it)."""

RESUMABLE_KINDS: Final = frozenset({"Job", "JobSet"})
"""Owner kinds the ungater unsuspends on admission."""


# ---------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class Timing:
    """The times planning compares with (the ungater's settings)."""

    expectation_timeout_seconds: float
    """How long a release in flight holds its slot without the bus showing it."""
    replace_retry_seconds: float
    """How long before the same request to admission is sent again."""
    unschedulable_seconds: float
    """How long a released pod may stay unschedulable before its slot is moved (0: never)."""


@dataclass(frozen=True, slots=True)
class Expectation:
    """A release sent and not yet seen on the bus."""

    podset: str
    domain: slots.Domain
    at: float
    """Monotonic time the release was planned."""


@dataclass(frozen=True, slots=True)
class Asked:
    """The last request of one kind sent to admission about a workload."""

    sequence: int
    """The admission it was about."""
    signature: str
    """A hash of what it asked."""
    at: float
    attempt: int


@dataclass(frozen=True, slots=True)
class Memory:
    """What the releasing process remembers about one workload between plans."""

    expectations: Mapping[str, Expectation] = field(default_factory=dict)
    """Pod uid → release in flight."""
    released_under: Mapping[str, int] = field(default_factory=dict)
    """Pod uid → sequence of the admission this process released it under."""
    evicting: frozenset[str] = frozenset()
    """Uids of pods whose eviction was sent."""
    asked: Asked | None = None
    """The last replacement request (node failure or unschedulable pods)."""
    giving: Asked | None = None
    """The last give-back request (slots of a workload that shrank)."""
    unschedulable_due: float | None = None
    """Wall-clock time the next released pod the scheduler cannot place will have waited
    ``unschedulable_seconds`` (the workload is looked at again then)."""
    resumed: tuple[str, int] | None = None
    """(uid, admission sequence) this process unsuspended the workload for."""
    requeuing: tuple[str, int] | None = None
    """(uid, eviction decision sequence) this process suspended the workload for."""
    status: Mapping[str, object] | None = None
    """The PodGroup status last written (or being written)."""

    def is_empty(self) -> bool:
        """Whether there is nothing to remember (the workload's entry can go)."""
        return self == EMPTY

    def due(self, *, now: float, wall_now: float, timing: Timing) -> bool:
        """Whether a timeout passed that the workload must be planned again for: a release
        in flight unseen too long, a request unanswered too long, an unschedulable pod due."""
        retry = now - timing.replace_retry_seconds
        return (
            any(e.at < now - timing.expectation_timeout_seconds for e in self.expectations.values())
            or (self.asked is not None and self.asked.at < retry)
            or (self.unschedulable_due is not None and self.unschedulable_due <= wall_now)
            or (self.giving is not None and self.giving.at < retry)
        )

    def with_expectation(self, uid: str, expectation: Expectation) -> "Memory":
        """Also a release in flight of pod ``uid`` (a predecessor's, found at takeover)."""
        return replace(self, expectations={**self.expectations, uid: expectation})

    def without_expectation(self, uid: str) -> "Memory":
        """The release of pod ``uid`` is not in flight (refused, gone, or not sent)."""
        if uid not in self.expectations:
            return self
        return replace(self, expectations={k: v for k, v in self.expectations.items() if k != uid})

    def without_eviction(self, uid: str) -> "Memory":
        """The eviction of pod ``uid`` was not sent or failed (planned again)."""
        return replace(self, evicting=self.evicting - {uid})

    def without_request(self, *, give_back: bool) -> "Memory":
        """The last request (give-back, or replacement) was not sent (planned again)."""
        return replace(self, giving=None) if give_back else replace(self, asked=None)


EMPTY: Final = Memory()


# ---------------------------------------------------------------------------- intents


@dataclass(frozen=True, slots=True)
class ReleasePod:
    """Remove tidegate's gate from ``pod`` and set ``selector``: the slot in ``domain``."""

    pod: PodState
    podset: str
    domain: slots.Domain
    selector: Mapping[str, str]
    """Every level label down to the domain, and the admitted card model's product."""


@dataclass(frozen=True, slots=True)
class RequestReplacement:
    """Publish ``request`` to admission with ``event_id`` (new slots, or slots given back)."""

    request: ReplaceRequested
    event_id: str


@dataclass(frozen=True, slots=True)
class EvictPod:
    """Evict ``pod`` (``why`` is for the log)."""

    pod: PodState
    why: str


@dataclass(frozen=True, slots=True)
class RequeueOwner:
    """Take ``pods`` away by suspending their Job or JobSet (``workload``, by its uid), once
    no disruption budget refuses evicting them."""

    workload: WorkloadState
    pods: tuple[PodState, ...]
    why: str


@dataclass(frozen=True, slots=True)
class ResumeOwner:
    """Unsuspend the Job or JobSet ``workload`` (only the object of ``workload.uid``, the
    admitted one) and hand any later suspension to people."""

    workload: WorkloadState


@dataclass(frozen=True, slots=True)
class WritePodGroupStatus:
    """Write ``status`` to the PodGroup ``workload`` (``first``: the first write of this
    process, which keeps the condition times the object shows)."""

    workload: WorkloadState
    status: dict[str, object]
    first: bool


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the log should warn about."""

    message: str


Intent = (
    ReleasePod
    | RequestReplacement
    | EvictPod
    | RequeueOwner
    | ResumeOwner
    | WritePodGroupStatus
    | Notice
)
"""What a plan asks to be done."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do about one workload, and what to remember."""

    intents: tuple[Intent, ...]
    memory: Memory
    waiting: int
    """Gated pods of the admission without a free slot."""


# ---------------------------------------------------------------------------- planning


def plan(
    view: ClusterView,
    key: WorkloadKey,
    memory: Memory,
    *,
    releasing: bool,
    now: float,
    wall_now: float,
    timing: Timing,
    stamp: str,
) -> Plan:
    """Plan workload ``key`` (module docstring). ``releasing``: the view holds every decision
    that could move its pods, so pods may be released and owners resumed; ``now`` is
    monotonic time, ``wall_now`` the time the scheduler's marks are compared with, ``stamp``
    the RFC 3339 time of new status conditions."""
    return _Planner(view, key, memory, now=now, wall_now=wall_now, timing=timing).run(
        releasing=releasing, stamp=stamp
    )


def fresh_gang(view: ClusterView, key: WorkloadKey, memory: Memory) -> bool:
    """A first admission (not a replacement) none of whose pods is released or expected yet,
    with a gated pod in the view for each of its slots: nothing to wait for."""
    admitted = view.verdict(key).admitted
    if admitted is None or admitted.replaces is not None or memory.expectations:
        return False
    wanted = sum(
        sum(slots.assigned(assignment).values()) for assignment in admitted.assignments.values()
    )
    if view.member_count(key) < wanted:
        return False
    return all(gated(pod) for pod in view.members(key))


def taken_over(
    admitted: Admitted, pod: PodState, selector: Mapping[str, str], *, now: float
) -> Expectation | None:
    """At takeover: the release in flight that a gated pod of the view is, when the API
    server shows it released (``selector``) into a slot of ``admitted`` (a predecessor's
    release the bus does not show yet); None when its selector names no slot."""
    podset = pod.podset or ""
    assignment = admitted.assignments.get(podset)
    if assignment is None:
        return None
    domain = slots.domain_of(assignment.levels, dict(selector), list(slots.assigned(assignment)))
    if domain is None:
        return None
    return Expectation(podset=podset, domain=domain, at=now)


def card_selector(admitted: Admitted) -> tuple[dict[str, str], str | None]:
    """The selector label of the admitted card model, and the problem when it has none."""
    if not admitted.card_model:
        return {}, None
    try:
        return {GPU_PRODUCT_LABEL: parse_card_name(admitted.card_model).product}, None
    except CardError as exc:
        return {}, f"{admitted.workload}: card model not used in the selector: {exc}"


def _by_podset(pods: Sequence[PodState]) -> dict[str, list[PodState]]:
    """``pods`` grouped by podset name (an unnamed podset is "")."""
    out: dict[str, list[PodState]] = {}
    for pod in pods:
        out.setdefault(pod.podset or "", []).append(pod)
    return out


def _plural(count: int, word: str) -> str:
    return f"{word}{'s' if count != 1 else ''}"


class _Planner:
    """One plan in the making: a working copy of the memory, and the intents so far."""

    def __init__(
        self,
        view: ClusterView,
        key: WorkloadKey,
        memory: Memory,
        *,
        now: float,
        wall_now: float,
        timing: Timing,
    ) -> None:
        self.view = view
        self.key = key
        self.now = now
        self.wall_now = wall_now
        self.timing = timing
        self.workload = view.replica.workload(key)
        self.intents: list[Intent] = []
        self.expectations = dict(memory.expectations)
        self.released_under = dict(memory.released_under)
        self.evicting = set(memory.evicting)
        self.asked = memory.asked
        self.giving = memory.giving
        self.unschedulable_due = memory.unschedulable_due
        self.resumed = memory.resumed
        self.requeuing = memory.requeuing
        self.status = memory.status

    def run(self, *, releasing: bool, stamp: str) -> Plan:
        verdict = self.view.verdict(self.key)
        members = self.view.members(self.key)
        self._settle_expectations(members)
        self._forget_gone(members)
        waiting = 0
        admitted = verdict.admitted
        if admitted is not None:
            if releasing:
                waiting = self._releases(admitted, members)
            self._replacement(admitted, members)
            if admitted.replaces is not None:
                self._stranded(admitted, members)
            if releasing:
                self._resume(admitted, members)
        else:
            self.asked = self.giving = self.unschedulable_due = None
        released = verdict.released.body if verdict.released is not None else None
        if released is not None and released.evict_pods:
            # Even when admitted again meanwhile: the pods released before the eviction go.
            self._evictions(members, released.sequence, admitted)
        if self.workload is not None and self.workload.owner_kind == "PodGroup":
            pending = verdict.pending.body if verdict.pending is not None else None
            self._status(self.workload, members, admitted, released, pending, stamp)
        memory = Memory(
            expectations=self.expectations,
            released_under=self.released_under,
            evicting=frozenset(self.evicting),
            asked=self.asked,
            giving=self.giving,
            unschedulable_due=self.unschedulable_due,
            resumed=self.resumed,
            requeuing=self.requeuing,
            status=self.status,
        )
        return Plan(intents=tuple(self.intents), memory=memory, waiting=waiting)

    # ------------------------------------------------------------------ memory

    def _settle_expectations(self, members: list[PodState]) -> None:
        by_uid = {pod.uid: pod for pod in members}
        deadline = self.now - self.timing.expectation_timeout_seconds
        for uid, expectation in list(self.expectations.items()):
            pod = by_uid.get(uid)
            if pod is None or not gated(pod):
                del self.expectations[uid]  # gone, or seen released: its selector counts now
            elif expectation.at < deadline:
                self.intents.append(
                    Notice(
                        f"release of pod {pod.namespace}/{pod.name} not seen within "
                        f"{self.timing.expectation_timeout_seconds:.0f}s; judging it by the bus"
                    )
                )
                del self.expectations[uid]

    def _forget_gone(self, members: list[PodState]) -> None:
        """Drop what is remembered about pods (and the workload) that are gone."""
        present = {pod.uid for pod in members}
        self.released_under = {u: s for u, s in self.released_under.items() if u in present}
        self.evicting &= present
        if self.workload is None:
            self.status = None
            self.resumed = None
            self.requeuing = None

    def _ask(self, asked: Asked | None, sequence: int, payload: object) -> Asked | None:
        """The record of a request about admission ``sequence`` carrying ``payload``, or None
        when the same one was sent less than ``replace_retry_seconds`` ago (the next attempt
        of the same request gets a new number, so its event id differs)."""
        encoded = msgspec.json.encode(payload, order="deterministic")
        signature = hashlib.sha256(encoded).hexdigest()[:16]
        same = asked is not None and asked.sequence == sequence
        if (
            same
            and asked is not None
            and asked.signature == signature
            and self.now - asked.at < self.timing.replace_retry_seconds
        ):
            return None
        attempt = asked.attempt + 1 if same and asked is not None else 1
        return Asked(sequence, signature, self.now, attempt)

    # ------------------------------------------------------------------ releases

    def _releases(self, admitted: Admitted, members: list[PodState]) -> int:
        grouped = _by_podset(members)
        extra, problem = card_selector(admitted)
        if problem is not None:
            self.intents.append(Notice(problem))
        waiting = 0
        workload = self.workload
        surplus = (
            elastic.surplus(workload, admitted)
            if workload is not None
            and workload.uid == admitted.uid
            and elastic.gives_back(workload)
            else {}
        )
        giving: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            pods = grouped.get(podset, [])
            lost = {tuple(d.values) for d in self._failed(assignment)}
            expected = {uid: e.domain for uid, e in self.expectations.items() if e.podset == podset}
            podset_plan = slots.plan_podset(
                assignment,
                slots.members(pods, self.view.node_ready),
                expected=expected,
                lost=lost,
            )
            waiting += podset_plan.waiting
            if podset_plan.waiting == 0 and surplus.get(podset, 0) > 0:
                spare = slots.spare_slots(
                    assignment, podset_plan.occupied, surplus=surplus[podset], lost=lost
                )
                if spare:
                    giving[podset] = spare
            by_uid = {pod.uid: pod for pod in pods}
            for release in podset_plan.releases:
                pod = by_uid[release.uid]
                selector = {**slots.selector_for(assignment.levels, release.domain), **extra}
                self.expectations[pod.uid] = Expectation(
                    podset=podset, domain=release.domain, at=self.now
                )
                self.released_under[pod.uid] = admitted.sequence
                self.intents.append(
                    ReleasePod(pod=pod, podset=podset, domain=release.domain, selector=selector)
                )
        self._give_back(admitted, giving)
        return waiting

    def _give_back(self, admitted: Admitted, giving: dict[str, list[DomainCount]]) -> None:
        """Ask admission to take back slots no pod holds of a workload that shrank."""
        if not giving:
            self.giving = None
            return
        record = self._ask(self.giving, admitted.sequence, giving)
        if record is None:
            return
        self.giving = record
        freed = sum(d.count for domains in giving.values() for d in domains)
        request = ReplaceRequested(
            workload=admitted.workload,
            uid=admitted.uid,
            admitted_sequence=admitted.sequence,
            lost=giving,
            give_back=True,
            message=f"the workload shrank: {freed} {_plural(freed, 'slot')} no pod holds",
        )
        event_id = (
            f"{SOURCE}-giveback-{admitted.uid}-{admitted.sequence}-"
            f"{record.signature}-{record.attempt}"
        )
        self.intents.append(RequestReplacement(request=request, event_id=event_id))

    # ------------------------------------------------------------------ replacements

    def _failed(self, assignment: TopologyAssignment) -> list[DomainCount]:
        levels = assignment.levels

        def alive(domain: slots.Domain) -> bool:
            return any(node.ready for node in self.view.nodes_matching(levels, domain))

        return slots.failed_domains(assignment, alive)

    def _domain_nodes(
        self, admitted: Admitted, lost: Mapping[str, list[DomainCount]], *, departed: bool = False
    ) -> set[str]:
        """The nodes of the domains ``lost`` names (with ``departed``, deleted ones too)."""
        return {
            node.name
            for podset, domains in lost.items()
            for domain in domains
            for node in self.view.nodes_matching(
                admitted.assignments[podset].levels, domain.values, departed=departed
            )
        }

    def _replacement(self, admitted: Admitted, members: list[PodState]) -> None:
        lost: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            failed = self._failed(assignment)
            if failed:
                lost[podset] = failed
        if not lost:
            self._unschedulable(admitted, members)
            return
        nodes = sorted(
            self._domain_nodes(admitted, lost, departed=True)
            | {
                pod.node_name
                for pod in members
                if pod.node_name is not None and not self.view.node_ready(pod.node_name)
            }
        )
        slots_lost = sum(d.count for domains in lost.values() for d in domains)
        message = (
            f"{slots_lost} {_plural(slots_lost, 'slot')} of "
            f"{', '.join(sorted(lost))} lost with {_plural(len(nodes), 'node')} "
            f"{', '.join(nodes) or '(gone)'}"
        )
        self._request(admitted, lost, nodes, message, "NodeFailed")

    def _unschedulable(self, admitted: Admitted, members: list[PodState]) -> None:
        """Ask admission to place again the slots whose released pods the scheduler has found
        no room for during ``unschedulable_seconds``, doubled for every such move the workload
        had already, and note when the next such pod is due."""
        self.unschedulable_due = None
        wait = slots.unschedulable_wait(
            self.timing.unschedulable_seconds, admitted.unschedulable_moves
        )
        marked = [since for pod in members if (since := slots.stuck_since(pod)) is not None]
        if wait <= 0 or not marked:
            self.asked = None
            return
        now = self.wall_now
        later = [since + wait for since in marked if since + wait > now]
        if later:
            self.unschedulable_due = min(later)
        grouped = _by_podset(members)
        stuck: dict[str, list[DomainCount]] = {}
        for podset, assignment in sorted(admitted.assignments.items()):
            found = slots.stuck_slots(
                assignment, grouped.get(podset, []), self.view.node_ready, before=now - wait
            )
            if found:
                stuck[podset] = found
        if not stuck:
            self.asked = None
            return
        nodes = sorted(self._domain_nodes(admitted, stuck))
        count = sum(d.count for domains in stuck.values() for d in domains)
        message = (
            f"{count} released {_plural(count, 'pod')} of {', '.join(sorted(stuck))} "
            f"unschedulable for {wait:.0f}s or more on {_plural(len(nodes), 'node')} "
            f"{', '.join(nodes) or '(none)'}"
        )
        self._request(admitted, stuck, nodes, message, "Unschedulable")

    def _request(
        self,
        admitted: Admitted,
        lost: dict[str, list[DomainCount]],
        nodes: list[str],
        message: str,
        cause: ReplaceCause,
    ) -> None:
        """A ``replace-requested`` for ``lost``, unless the same one was sent less than
        ``replace_retry_seconds`` ago."""
        payload: list[object] = [lost, nodes] if cause == "NodeFailed" else [lost, nodes, cause]
        record = self._ask(self.asked, admitted.sequence, payload)
        if record is None:
            return
        self.asked = record
        request = ReplaceRequested(
            workload=admitted.workload,
            uid=admitted.uid,
            admitted_sequence=admitted.sequence,
            lost=lost,
            nodes=nodes,
            message=message,
            cause=cause,
        )
        kind = "replace" if cause == "NodeFailed" else "unschedulable"
        event_id = (
            f"{SOURCE}-{kind}-{admitted.uid}-{admitted.sequence}-"
            f"{record.signature}-{record.attempt}"
        )
        self.intents.append(RequestReplacement(request=request, event_id=event_id))

    # ------------------------------------------------------------------ taking pods away

    def _stranded(self, admitted: Admitted, members: list[PodState]) -> None:
        """Take away the released pods the scheduler found no room for whose slots a
        replacement moved elsewhere (:func:`slots.stranded`): their controller re-creates them
        gated, and they are released into the new slots."""
        if not any(slots.stuck_since(pod) for pod in members):
            return  # the usual case: nothing to look for, so no grouping per plan
        grouped = _by_podset(members)
        stranded = [
            pod
            for podset, assignment in sorted(admitted.assignments.items())
            for pod in slots.stranded(assignment, grouped.get(podset, []), self.view.node_ready)
        ]
        moved = "moved: the scheduler found no room for its pods"
        if stranded and self._requeues(admitted.sequence, stranded, moved):
            return
        for pod in stranded:
            self._evict(pod, "its slot was moved elsewhere")

    def _requeues(self, sequence: int, pods: list[PodState], why: str) -> bool:
        """For a Job or JobSet, take ``pods`` away by suspending the owner (once per decision
        ``sequence``), not by evicting them: an evicted pod is a failure to the Job
        controller. False for other kinds (their pods are evicted)."""
        workload = self.workload
        if workload is None or workload.owner_kind not in REQUEUE_KINDS:
            return False
        marker = (workload.uid, sequence)
        if self.requeuing != marker:
            self.requeuing = marker
            self.intents.append(RequeueOwner(workload=workload, pods=tuple(pods), why=why))
        return True

    def _evictions(self, members: list[PodState], sequence: int, admitted: Admitted | None) -> None:
        """Take away the pods released before the eviction decision ``sequence``: those this
        process released under an older admission; after a restart, when it cannot know,
        every released pod unless the workload was admitted again and the pod sits in a slot
        domain of the new admission (:func:`slots.must_evict`)."""
        pods = slots.must_evict(
            members, sequence=sequence, released_under=self.released_under, admitted=admitted
        )
        evicted = "evicted: no room for its replacement pods"
        if pods and self._requeues(sequence, pods, evicted):
            return
        for pod in pods:
            self._evict(pod, "no replacement after a node failure")

    def _evict(self, pod: PodState, why: str) -> None:
        """Evict ``pod``, unless its eviction was sent already."""
        if pod.uid not in self.evicting:
            self.evicting.add(pod.uid)
            self.intents.append(EvictPod(pod=pod, why=why))

    # ------------------------------------------------------------------ resume, status

    def _resume(self, admitted: Admitted, members: list[PodState]) -> None:
        """Unsuspend a workload admitted while suspended for tidegate, once per admission."""
        workload = self.workload
        if workload is None or workload.uid != admitted.uid:
            return
        if not workload.suspended:
            if self.resumed is not None and self.resumed[0] == workload.uid:
                # Seen unsuspended: a later suspension by tidegate is resumed again.
                self.resumed = None
            return
        if not workload.resume_on_admission:
            return
        if any(active(pod) for pod in members):
            return  # re-queued: its controller is still deleting the old pods
        if workload.owner_kind not in RESUMABLE_KINDS:
            return
        marker = (workload.uid, admitted.sequence)
        if self.resumed == marker:
            return
        self.resumed = marker
        self.intents.append(ResumeOwner(workload=workload))

    def _status(
        self,
        workload: WorkloadState,
        members: list[PodState],
        admitted: Admitted | None,
        released: Released | None,
        pending: Pending | None,
        stamp: str,
    ) -> None:
        previous = self.status
        conditions = previous.get("conditions") if previous else None
        desired = podgroup.podgroup_status(
            workload,
            members,
            admitted=admitted,
            released=released,
            pending=pending,
            now=stamp,
            previous=conditions if isinstance(conditions, list) else (),
        )
        if previous is not None and podgroup.same_status(previous, desired):
            return
        self.status = desired
        self.intents.append(
            WritePodGroupStatus(workload=workload, status=desired, first=previous is None)
        )
