"""Every message tidegate puts on the bus, as frozen, keyword-only msgspec Structs.

A message on the wire is an :class:`Envelope` whose ``body`` is one member of the tagged union
:data:`Message` (the tag is the ``kind`` field). Encode and decode with
:mod:`tidegate.model.codec`, never with ad-hoc JSON. Schema evolution follows msgspec's rules:
a new field always has a default; a field is never retyped, renamed or removed. Bump
:data:`SCHEMA_VERSION` only for a change a consumer must notice.

Amounts are integers: cpu in millicores, everything else in base units (bytes, devices).
"""

from typing import Literal

import msgspec

from tidegate.model.resources import Resources

SCHEMA_VERSION = 1
"""Version of this schema, carried in every envelope."""

ServiceType = Literal["inference", "training", "unknown"]
"""Volcano's service type: only inference reclaims, only training is reclaimed."""

OnPreemption = Literal["restart", "abort"]
"""What happens to a preempted training gang: re-queued (restart) or suspended (abort)."""

QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
"""StrictFIFO: the head blocks its queue. BestEffortFIFO: smaller workloads may pass a head."""

ReclaimPolicy = Literal["Never", "LowerPriority", "Any"]
"""Kueue's ``reclaimWithinCohort``: which borrowing gangs of other queues may be preempted."""

BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]
"""Kueue's ``borrowWithinCohort.policy``: may a workload that still borrows preempt others."""

WithinQueuePolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
"""Kueue's ``withinClusterQueue``: which gangs of the same queue may be preempted."""

PendingReason = Literal[
    "QueueNotFound",
    "Invalid",
    "ExceedsQuota",
    "CardQuotaExceeded",
    "TopologyPlacementFailed",
    "WaitingForCapacity",
    "WaitingForPreemption",
    "RequiredDomainFull",
]
"""Stable reason tokens of a pending decision; users alert on them, never change one."""

EventReason = Literal[
    "Admitted",
    "Resized",
    "Replaced",
    "Pending",
    "Invalid",
    "Preempted",
    "Evicted",
    "Suspended",
    "PreemptionBlocked",
    "PreemptionAbortFailed",
    "BypassedGate",
]
"""Reasons of the Kubernetes Events tidegate records on a workload's owner (the ungater's,
about its decisions and pods that bypassed the gate; the preemption service's warnings): users
filter on them, never change one."""

VictimSearchOutcome = Literal[
    "fits",
    "preempts",
    "queue-not-found",
    "invalid",
    "exceeds-quota",
    "card-quota-exceeded",
    "not-a-reclaimer",
    "no-victims",
]
"""How a victim search ended: the first two admit the gang, the others do not."""

PreemptionOutcome = Literal[
    VictimSearchOutcome,
    "resumed",
    "duplicate",
    "unknown",
    "stale",
    "nominated",
    "unanswerable",
    "budget-blocked",
]
"""How the preemption service answered one preempt request (its search's outcome, or why it
ran none): the ``outcome`` label of ``tidegate_preemption_requests_total``."""

EvictionOutcome = Literal["evicted", "gone", "refused", "failed", "requeued"]
"""What became of one victim pod's eviction: the ``result`` label of
``tidegate_preemption_pod_evictions_total``."""

ReleaseReason = Literal["Completed", "Deleted", "Evicted", "Failed", "Suspended"]
"""Why a workload gave its admitted capacity back."""

ReplaceCause = Literal["NodeFailed", "Unschedulable"]
"""Why a :class:`ReplaceRequested` asks for new slots."""

CardRequest = dict[str, int]
"""GPU card model → number of cards for the whole workload, e.g. {"NVIDIA-H200": 8}; MIG
models are named like "NVIDIA-H200/mig-1g.18gb-mixed"."""


class _Base(msgspec.Struct, frozen=True, kw_only=True):
    """Common options: frozen, keyword-only; unknown fields from newer writers are ignored."""


class _Body(_Base, frozen=True, kw_only=True, tag_field="kind"):
    """Base of every message body: the ``kind`` field names the member of :data:`Message`."""


class Taint(_Base, frozen=True, kw_only=True):
    """A node taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


class Toleration(_Base, frozen=True, kw_only=True):
    """A pod toleration (Kubernetes semantics: operator Equal or Exists; empty key+Exists matches all)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""


class TopologyRequest(_Base, frozen=True, kw_only=True):
    """Where a podset's pods must or should sit, by topology level label ("auto" allowed)."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_size: int | None = None
    slice_required: str | None = None


class PodSetSpec(_Base, frozen=True, kw_only=True):
    """A set of identical pods of one workload (a pod template, a replicated job, a role)."""

    name: str
    count: int
    requests: Resources = msgspec.field(default_factory=dict)
    """Per-pod requests (init containers and overhead included)."""
    topology: TopologyRequest = msgspec.field(default_factory=TopologyRequest)
    node_selector: dict[str, str] = msgspec.field(default_factory=dict)
    tolerations: list[Toleration] = msgspec.field(default_factory=list)
    group: str | None = None
    """Podsets with the same group are placed in the same domain (leader + workers)."""
    min_count: int | None = None
    """Pods of this podset needed to run at all (defaults to count)."""
    pods_per_index_group: int | None = None
    """For JobSet replicated jobs: pods per child job, so jobs are placed one by one."""
    card_name: str | None = None
    """GPU card model its pods run on (``volcano.sh/card.name``), e.g. "NVIDIA-H200" or
    "NVIDIA-H200/mig-1g.18gb-mixed"; the pods' GPU requests are counted as cards of it."""


class DomainCount(_Base, frozen=True, kw_only=True):
    """A number of pods placed in one domain, named by its values at every level, widest first."""

    values: list[str]
    count: int


class TopologyAssignment(_Base, frozen=True, kw_only=True):
    """Where a podset's pods go, in rank order (Kueue's TopologyAssignment)."""

    levels: list[str]
    domains: list[DomainCount]


# --------------------------------------------------------------------------- state (last value)


class NodeState(_Body, frozen=True, kw_only=True, tag="node"):
    """A node as tidegate sees it. Subject ``tg.<cluster>.node.<name>``."""

    name: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    allocatable: Resources = msgspec.field(default_factory=dict)
    taints: list[Taint] = msgspec.field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False


class PodState(_Body, frozen=True, kw_only=True, tag="pod"):
    """A pod, reduced to what capacity and ungating need. Subject ``tg.<cluster>.pod.<ns>.<name>``."""

    namespace: str
    name: str
    uid: str
    node_name: str | None = None
    phase: str = "Pending"
    requests: Resources = msgspec.field(default_factory=dict)
    scheduling_gates: list[str] = msgspec.field(default_factory=list)
    node_selector: dict[str, str] = msgspec.field(default_factory=dict)
    workload: str | None = None
    """Key of the workload the pod belongs to, None for pods tidegate does not manage."""
    podset: str | None = None
    rank: int | None = None
    """The pod's index within its workload (completion index, JobSet index, pod-index label)."""
    terminating: bool = False
    created_at: float = 0.0
    unschedulable_since: float | None = None
    """When the scheduler last found no node for the pod (``PodScheduled=False``, reason
    ``Unschedulable``: its ``lastTransitionTime``, Unix seconds); None once it is bound, or
    while no attempt failed."""


class WorkloadState(_Body, frozen=True, kw_only=True, tag="workload"):
    """The normalized gang. Subject ``tg.<cluster>.workload.<ns>.<name>``."""

    namespace: str
    name: str
    uid: str
    owner_kind: str
    owner_api_version: str = ""
    queue: str | None = None
    priority: int = 0
    priority_class: str | None = None
    service_type: ServiceType = "unknown"
    preemptable: bool = True
    min_members: int | None = None
    """Pods that must run at once (PodGroup minMember); None means every pod of every podset."""
    podsets: list[PodSetSpec] = msgspec.field(default_factory=list)
    card_request: CardRequest | None = None
    profile: str | None = None
    topology: str | None = None
    """The Topology it asked to be placed on (``tidegate.io/topology``); None = its queue's."""
    on_preemption: OnPreemption = "restart"
    created_at: float = 0.0
    invalid_reason: str | None = None
    """Set when the workload's spec or annotations are malformed: a sentence naming the field."""
    trace_context: dict[str, str] = msgspec.field(default_factory=dict)
    """W3C traceparent/tracestate that later decisions about this workload continue."""
    finished: Literal["Completed", "Failed"] | None = None
    """The workload ran to the end; set by the watcher from the owner's status (a Job's
    Complete/Failed condition, a Pod's phase, …). Admission releases a finished workload's
    quota and never admits it again; None while it may still run."""
    suspended: bool = False
    """The top owner (a Job or JobSet) has ``spec.suspend: true``: its controller runs no pods."""
    resume_on_admission: bool = False
    """Set with ``suspended`` when tidegate is the one to unsuspend it (docs/workloads.md,
    "Suspended Jobs"): it was created suspended naming a queue, Kueue's way, and no one has
    resumed it yet. Admission queues and admits it; the ungater then unsuspends it. A suspended
    workload without this flag is someone else's suspension: never admitted, and an admission
    in force is released (reason ``Suspended``)."""
    namespace_deleting: bool = False
    """The workload's namespace is being deleted: never admitted (its objects are about to go,
    and a pod its controller cannot re-create there would hold the room for nothing), and an
    admission in force is released (reason ``Deleted``)."""
    bypassed_pods: int = 0
    """Its pods running without having passed tidegate's gate (created ungated while the
    webhook was down under ``failurePolicy: Ignore``, or not sent to it, and bound by
    kube-scheduler; :func:`tidegate.model.pods.bypassed_gate`). Admission charges their
    requests to the queue while the workload holds no admission."""
    bypassed_requests: Resources = msgspec.field(default_factory=dict)
    """The requests of those pods, summed."""


class TopologyConfig(_Body, frozen=True, kw_only=True, tag="topology"):
    """A Topology: node label levels, widest first. Subject ``tg.<cluster>.config.topology.<name>``."""

    name: str
    levels: list[str]


class QueuePreemption(_Base, frozen=True, kw_only=True):
    """A queue's preemption policies, under Kueue's names (ClusterQueue ``spec.preemption``).

    They govern preemption *for quota* between training workloads of a queue tree; the tidal
    rules hold whatever they say (docs/queues.md, "Reclaim"): inference and unknown workloads
    are never victims, and an inference workload reclaims from lower-priority training in other
    queues of its tree even under ``Never``. The defaults (all ``Never``) are the tidal
    defaults: training never preempts training.
    """

    reclaim_within_cohort: ReclaimPolicy = "Never"
    """Whether a workload of this queue, which is below its nominal quota, may preempt gangs of
    other queues of its tree that borrow: never, those of lower priority, or any."""
    borrow_within_cohort: BorrowWithinCohortPolicy = "Never"
    """Whether a workload that would still borrow after the preemption may preempt
    lower-priority gangs of other queues (Kueue's ``borrowWithinCohort.policy``)."""
    max_priority_threshold: int | None = None
    """With ``borrow_within_cohort``: only gangs of at most this priority may be preempted
    while borrowing (Kueue's ``borrowWithinCohort.maxPriorityThreshold``); None: no bound."""
    within_cluster_queue: WithinQueuePolicy = "Never"
    """Whether a workload may preempt gangs of its own queue: never, those of lower priority,
    or those of lower priority and those of equal priority created after it."""


class QueueConfig(_Body, frozen=True, kw_only=True, tag="queue"):
    """A Queue. Subject ``tg.<cluster>.config.queue.<name>``."""

    name: str
    priority: int = 0
    reclaimable: bool = True
    quota: Resources | None = None
    """Capability per resource; None means unlimited, a resource missing from a dict is not
    limited (Volcano's capability semantics)."""
    card_quota: dict[str, int] | None = None
    """Cards per card model; None means unlimited, a model missing from a dict has quota 0."""
    profile: str | None = None
    strategy: QueueingStrategy = "BestEffortFIFO"
    topology: str | None = None
    invalid_reason: str | None = None
    parent: str | None = None
    """The Cohort it shares quota with (``spec.parent``); None: it shares with no one."""
    nominal: Resources | None = None
    """Guaranteed amount per resource (Kueue's ``nominalQuota``); None: none named. In a tree
    that names a resource anywhere, a queue not naming it has nominal 0 and may borrow it."""
    borrowing_limit: Resources | None = None
    """Most it may borrow above its nominal, per resource; a resource not named: no limit."""
    lending_limit: Resources | None = None
    """Most of its unused nominal its cohort may lend to others, per resource; a resource not
    named: all of it."""
    card_nominal: dict[str, int] | None = None
    """Guaranteed cards per card model; the same rules as ``nominal``."""
    card_borrowing_limit: dict[str, int] | None = None
    """Most cards it may borrow above its card nominal, per card model."""
    card_lending_limit: dict[str, int] | None = None
    """Most of its unused card nominal its cohort may lend, per card model."""
    fair_weight: float = 1.0
    """Fair-sharing weight (Kueue's ``fairSharing.weight``): its borrowed share is divided by it
    when competing queues are ordered and in fair-share preemption; 0 means it only gets what
    no other queue wants."""
    preemption: QueuePreemption = msgspec.field(default_factory=QueuePreemption)


class CohortConfig(_Body, frozen=True, kw_only=True, tag="cohort"):
    """A Cohort: an inner node of a queue tree, holding no workloads. Subject
    ``tg.<cluster>.config.cohort.<name>``.

    Its quota fields mean what a queue's do, for its whole subtree: ``nominal`` is quota the
    cohort itself adds to the pool its children share, the limits bound what the subtree
    borrows from and lends to the cohort's own parent, and ``quota`` / ``card_quota`` are a hard
    ceiling on what the subtree's admitted workloads hold together. A parent that names no
    Cohort object is an empty cohort at the root (Kueue's implicit cohort)."""

    name: str
    parent: str | None = None
    """The Cohort it belongs to (``spec.parent``); None: it is a root."""
    quota: Resources | None = None
    """Capability of the whole subtree per resource; the rules of :attr:`QueueConfig.quota`."""
    card_quota: dict[str, int] | None = None
    """Card capability of the whole subtree per card model; the rules of
    :attr:`QueueConfig.card_quota`."""
    nominal: Resources | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None
    card_nominal: dict[str, int] | None = None
    card_borrowing_limit: dict[str, int] | None = None
    card_lending_limit: dict[str, int] | None = None
    fair_weight: float = 1.0
    invalid_reason: str | None = None
    """Set when the Cohort's spec is malformed: a sentence naming the field."""


class DisruptionBudgetState(_Body, frozen=True, kw_only=True, tag="pdb"):
    """A PodDisruptionBudget (policy/v1) and the managed workloads whose pods it covers.
    Subject ``tg.<cluster>.config.pdb.<ns>.<name>``."""

    namespace: str
    name: str
    uid: str
    disruptions_allowed: int = 0
    """``status.disruptionsAllowed`` as the disruption controller computed it (0 until it has):
    how many of its pods may be evicted now."""
    expected_pods: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    workloads: dict[str, int] = msgspec.field(default_factory=dict)
    """Workload key → how many of that workload's live pods the budget's selector selects."""


StateKind = Literal["node", "pod", "workload", "topology", "queue", "pdb", "cohort"]
"""The kinds of object whose state the watcher mirrors onto the bus, one subject each."""


class Tombstone(_Body, frozen=True, kw_only=True, tag="tombstone"):
    """The object on this subject was deleted; last-value streams keep this as its final state."""

    object_kind: StateKind
    name: str
    namespace: str | None = None
    uid: str | None = None


# --------------------------------------------------------------------------- capacity view


class CapacityNode(_Body, frozen=True, kw_only=True, tag="capacity-node"):
    """Free capacity of one node. Subject ``tg.<cluster>.capacity.<topology>.node.<name>``."""

    topology: str
    node: str
    domain: list[str]
    """The node's values at every level of the topology, widest first."""
    allocatable: Resources
    free: Resources
    schedulable: bool = True
    applied_sequence: int = 0
    """The last admission decision sequence this view reflects."""


class CapacityDomain(_Body, frozen=True, kw_only=True, tag="capacity-domain"):
    """Aggregate free capacity of one domain (sum over its schedulable nodes). Informational:
    placement uses per-node capacity, since a domain's room is what its nodes can each hold."""

    topology: str
    level: str
    domain: list[str]
    free: Resources
    nodes: int
    applied_sequence: int = 0


# --------------------------------------------------------------------------- decisions (log)


class Admitted(_Body, frozen=True, kw_only=True, tag="admitted"):
    """A workload is admitted. Subject ``tg.<cluster>.decision.admitted.<ns>.<name>``."""

    workload: str
    uid: str
    queue: str
    sequence: int
    """Admission's monotonic decision sequence (the capacity view reports it once applied)."""
    epoch: int
    """The admission leader's fencing epoch."""
    assignments: dict[str, TopologyAssignment]
    """Podset name → where its pods go."""
    charged: Resources = msgspec.field(default_factory=dict)
    charged_cards: dict[str, int] = msgspec.field(default_factory=dict)
    card_model: str | None = None
    nominated_by: str | None = None
    """The preempt request whose freed capacity this admission used, if any."""
    requests: dict[str, Resources] = msgspec.field(default_factory=dict)
    """Podset name → per-pod requests the placement used (a missing ``pods`` counts as 1), so
    the topology-cache reserves count × requests for pods not bound yet without the workload."""
    replaces: int | None = None
    """The sequence of the admission of the same workload this one supersedes: set when
    admission moved lost slots elsewhere (answering a replace-requested: their nodes failed,
    or the scheduler found no room there);
    the assignments are then the whole new placement, not only the moved pods."""
    resized: bool = False
    """Set with ``replaces`` when the admission follows the workload's new size (it grew, or
    gave back slots its pods left) rather than moving slots lost to failed nodes."""
    origin: int | None = None
    """Set with ``replaces``: the sequence of the first admission of this object that this one
    continues, through any number of replacements and resizes (None on a first admission)."""
    replace_cause: ReplaceCause | None = None
    """Set with ``replaces`` when slots were moved (not ``resized``): the
    :attr:`ReplaceRequested.cause` answered."""
    unschedulable_moves: int = 0
    """How often slots of this workload were moved because the scheduler found no room for
    their pods (``replace_cause`` ``Unschedulable``), counted along the chain of replacements
    and carried over when such a move found no room and the gang was re-queued; 0 on a first
    admission. The ungater waits longer before each further move (docs/ungater.md)."""

    def chain_start(self) -> int:
        """The sequence of the first admission this one continues (its own when it is one)."""
        return self.origin if self.origin is not None else self.sequence


class Pending(_Body, frozen=True, kw_only=True, tag="pending"):
    """A workload waits. Subject ``tg.<cluster>.decision.pending.<ns>.<name>``; republished only
    when the reason changes."""

    workload: str
    uid: str
    queue: str | None
    reason: PendingReason
    message: str
    sequence: int = 0


class PreemptRequested(_Body, frozen=True, kw_only=True, tag="preempt-requested"):
    """An inference workload needs capacity that only evictions can free.
    Subject ``tg.<cluster>.decision.preempt-requested.<ns>.<name>``."""

    workload: str
    uid: str
    queue: str
    """The queue admission put it in (its own, else admission's default queue)."""
    sequence: int
    message: str = ""
    topology: str | None = None
    """The Topology admission tried to place it on (None from writers older than the field)."""
    podsets: list[PodSetSpec] = msgspec.field(default_factory=list)
    """For an admitted workload that grew: only its extra pods, pinned inside its required
    domain (the room to free); empty: the whole workload, as it is not admitted yet."""
    admitted_sequence: int | None = None
    """For a growth request: the sequence of the admission in force that grows."""


class LostAdmission(_Base, frozen=True, kw_only=True):
    """The admission a preemption victim loses: which object, and which admitted decision."""

    uid: str
    """The victim's uid when it was chosen."""
    sequence: int
    """The ``sequence`` of the victim's admitted decision that ends."""
    origin: int | None = None
    """That admission's :meth:`Admitted.chain_start`, so that the decision also ends the
    resizes and replacements that followed it (None from writers older than this field)."""


class Preempted(_Body, frozen=True, kw_only=True, tag="preempted"):
    """Victims were evicted for a preemptor. Subject
    ``tg.<cluster>.decision.preempted.<ns>.<name>`` (the preemptor's name)."""

    preemptor: str
    preemptor_uid: str
    victims: list[str]
    mode: dict[str, OnPreemption] = msgspec.field(default_factory=dict)
    """Victim key → restart or abort."""
    nominated: dict[str, Resources] = msgspec.field(default_factory=dict)
    """Node → capacity freed and nominated for the preemptor."""
    message: str = ""
    lost: dict[str, LostAdmission] = msgspec.field(default_factory=dict)
    """Victim key → the admission it loses. A consumer ends only that admission (see
    :meth:`ends`): a victim admitted again since, or re-created, keeps its new admission. A
    victim missing here (a writer older than this field) loses whatever admission it holds."""
    request_sequence: int | None = None
    """The ``sequence`` of the ``preempt-requested`` this answers: orders the decisions on the
    preemptor's subject (None from writers older than this field)."""

    def ends(
        self,
        victim: str,
        *,
        uid: str,
        sequence: int,
        replaces: int | None = None,
        origin: int | None = None,
    ) -> bool:
        """Whether this decision ends ``victim``'s admission of object ``uid`` made by the
        admitted decision ``sequence`` (which ``replaces`` an earlier one and continues the
        chain started by ``origin``, if set): the one named in :attr:`lost`, an older one, or
        one that continues it (after any number of resizes or replacements). A later
        admission (the victim re-admitted) or another object is never ended."""
        if victim not in self.victims:
            return False
        named = self.lost.get(victim)
        if named is None:
            return True
        if named.uid != uid:
            return False
        if sequence <= named.sequence or replaces == named.sequence:
            return True
        start = named.origin if named.origin is not None else named.sequence
        return origin is not None and origin == start

    def aborts(self, victim: str, *, uid: str) -> bool:
        """Whether this decision aborts the object ``uid`` of ``victim`` (abort mode, and the
        object named in :attr:`lost` if it names one)."""
        if victim not in self.victims or self.mode.get(victim, "restart") != "abort":
            return False
        named = self.lost.get(victim)
        return named is None or named.uid == uid


class Released(_Body, frozen=True, kw_only=True, tag="released"):
    """A workload gave its capacity and quota back. Subject
    ``tg.<cluster>.decision.released.<ns>.<name>``."""

    workload: str
    uid: str
    queue: str | None
    reason: ReleaseReason
    sequence: int = 0
    message: str = ""
    evict_pods: bool = False
    """The workload's remaining pods must be evicted (the ungater does it): admission found no
    replacement for pods lost to failed nodes, so the gang restarts whole from its queue."""


class ReplaceRequested(_Body, frozen=True, kw_only=True, tag="replace-requested"):
    """Slots of an admitted workload were lost: their nodes were deleted or went NotReady, or
    the scheduler found no room there for the pods released into them (``cause``); the ungater
    asks admission for replacement slots inside the workload's required domain.
    Subject ``tg.<cluster>.decision.replace-requested.<ns>.<name>``. Admission answers with an
    :class:`Admitted` whose ``replaces`` is ``admitted_sequence``, or, when there is no room,
    with a :class:`Released` of reason ``Evicted`` and ``evict_pods`` set."""

    workload: str
    uid: str
    admitted_sequence: int
    """The sequence of the admission whose slots were lost (a request about an admission that
    was superseded meanwhile is ignored)."""
    lost: dict[str, list[DomainCount]]
    """Podset name → the lost slots: domains of its assignment (values widest first) and how
    many of its pods each held."""
    nodes: list[str] = msgspec.field(default_factory=list)
    """The nodes replacements must avoid: the failed ones (deleted or NotReady), or those of
    the domains the scheduler found full."""
    message: str = ""
    cause: ReplaceCause = "NodeFailed"
    """Why the slots are lost: their nodes failed, or the scheduler found no room for their
    released pods there for ``TIDEGATE_UNSCHEDULABLE_SECONDS`` (``nodes`` are then the nodes
    of those domains)."""
    give_back: bool = False
    """The workload shrank: ``lost`` names free slots (no pod holds them) that it no longer
    needs, to be given back rather than placed again. Admission answers with an
    :class:`Admitted` (``replaces`` and ``resized`` set) without them."""


Message = (
    NodeState
    | PodState
    | WorkloadState
    | TopologyConfig
    | QueueConfig
    | CohortConfig
    | DisruptionBudgetState
    | Tombstone
    | CapacityNode
    | CapacityDomain
    | Admitted
    | Pending
    | PreemptRequested
    | Preempted
    | Released
    | ReplaceRequested
)
"""Every message body; the ``kind`` field says which."""


class Envelope(_Base, frozen=True, kw_only=True):
    """What travels on the bus: the body plus where and when it came from."""

    event_id: str
    """Deterministic id of this event; also the Nats-Msg-Id, so a retried publish is dropped."""
    cluster: str
    source: str
    """The publishing service (watcher, admission, …)."""
    time: float
    """Seconds since the epoch when the event was made."""
    body: Message
    schema_version: int = SCHEMA_VERSION
    source_uid: str | None = None
    """UID of the Kubernetes object the event is about, if any."""
    resource_version: str | None = None
    """Its resourceVersion at the time, if any."""
