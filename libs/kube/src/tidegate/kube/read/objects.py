"""Typed views of the parts of Kubernetes objects tidegate reads, decoded with msgspec.

The API server sends whole objects; tidegate needs a few fields of each. These Structs name only
those fields (unknown ones are ignored), so decoding is fast and a field of the wrong type is
reported with its JSON path. Field names are snake_case here and camelCase on the wire
(``rename="camel"``). Nothing here is put on the bus: :mod:`tidegate.kube.read.convert` and
:mod:`tidegate.kube.read.recognize` turn these into :mod:`tidegate.model` messages.

Quantities stay as the API server wrote them (``"500m"``); parsing them is the converters' job,
so a bad quantity names its field instead of failing the whole object.
"""

from datetime import datetime
from typing import TypeVar

import msgspec

from tidegate.model.pods import admission_gated

Quantity = str | int | float
"""A Kubernetes quantity as it appears in JSON."""

ResourceList = dict[str, Quantity]
"""A Kubernetes ResourceList before parsing."""


class _K8s(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Base of every Kubernetes view: frozen, keyword-only, camelCase on the wire."""


class OwnerReference(_K8s, frozen=True, kw_only=True):
    """metadata.ownerReferences[]."""

    api_version: str = ""
    kind: str
    name: str
    uid: str
    controller: bool = False


class ObjectMeta(_K8s, frozen=True, kw_only=True):
    """metadata."""

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    owner_references: list[OwnerReference] = msgspec.field(default_factory=list)
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None

    def controller_ref(self) -> OwnerReference | None:
        """The controlling owner (``controller: true``), else the first owner, else None."""
        for ref in self.owner_references:
            if ref.controller:
                return ref
        return self.owner_references[0] if self.owner_references else None


class Meta(_K8s, frozen=True, kw_only=True):
    """Just apiVersion, kind and metadata: decoded first, so a bad spec still has a name."""

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta


# --------------------------------------------------------------------------- pods


class ResourceRequirements(_K8s, frozen=True, kw_only=True):
    """containers[].resources."""

    requests: ResourceList = msgspec.field(default_factory=dict)
    limits: ResourceList = msgspec.field(default_factory=dict)


class Container(_K8s, frozen=True, kw_only=True):
    """containers[] / initContainers[]."""

    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    restart_policy: str | None = None
    """"Always" on an init container makes it a sidecar."""


class K8sToleration(_K8s, frozen=True, kw_only=True):
    """spec.tolerations[]."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class SchedulingGate(_K8s, frozen=True, kw_only=True):
    """spec.schedulingGates[]."""

    name: str


class PodSpec(_K8s, frozen=True, kw_only=True):
    """The pod spec fields tidegate needs."""

    containers: list[Container] = msgspec.field(default_factory=list)
    init_containers: list[Container] = msgspec.field(default_factory=list)
    overhead: ResourceList = msgspec.field(default_factory=dict)
    node_selector: dict[str, str] = msgspec.field(default_factory=dict)
    node_name: str = ""
    scheduling_gates: list[SchedulingGate] = msgspec.field(default_factory=list)
    tolerations: list[K8sToleration] = msgspec.field(default_factory=list)
    priority_class_name: str = ""
    priority: int | None = None


class PodTemplateMeta(_K8s, frozen=True, kw_only=True):
    """metadata of a pod or job template (no name)."""

    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


class PodTemplateSpec(_K8s, frozen=True, kw_only=True):
    """spec.template of a Job, ReplicaSet or Deployment."""

    metadata: PodTemplateMeta = msgspec.field(default_factory=PodTemplateMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class PodCondition(_K8s, frozen=True, kw_only=True):
    """status.conditions[] of a pod."""

    type: str
    status: str = "Unknown"
    reason: str = ""
    last_transition_time: str | None = None


class PodStatus(_K8s, frozen=True, kw_only=True):
    """status of a pod."""

    phase: str = "Pending"
    conditions: list[PodCondition] = msgspec.field(default_factory=list)


class Pod(_K8s, frozen=True, kw_only=True):
    """A pod."""

    metadata: ObjectMeta
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    def gated(self) -> bool:
        """Whether the pod still carries tidegate's admission gate
        (:func:`tidegate.model.pods.admission_gated`)."""
        return admission_gated(gate.name for gate in self.spec.scheduling_gates)


def slim_pod(pod: Pod) -> Pod:
    """``pod`` keeping only the condition tidegate reads (an unbound pod's failed
    ``PodScheduled``), so the index's cache of every pod does not hold the others."""
    conditions = pod.status.conditions
    if not conditions:
        return pod
    kept = (
        []
        if pod.spec.node_name
        else [c for c in conditions if c.type == "PodScheduled" and c.status == "False"]
    )
    if len(kept) == len(conditions):
        return pod
    return msgspec.structs.replace(pod, status=PodStatus(phase=pod.status.phase, conditions=kept))


# --------------------------------------------------------------------------- nodes


class K8sTaint(_K8s, frozen=True, kw_only=True):
    """spec.taints[]."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


class NodeSpec(_K8s, frozen=True, kw_only=True):
    """spec of a node."""

    unschedulable: bool = False
    taints: list[K8sTaint] = msgspec.field(default_factory=list)


class NodeCondition(_K8s, frozen=True, kw_only=True):
    """status.conditions[]."""

    type: str
    status: str = "Unknown"


class NodeStatus(_K8s, frozen=True, kw_only=True):
    """status of a node."""

    allocatable: ResourceList = msgspec.field(default_factory=dict)
    conditions: list[NodeCondition] = msgspec.field(default_factory=list)


class Node(_K8s, frozen=True, kw_only=True):
    """A node."""

    metadata: ObjectMeta
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


# --------------------------------------------------------------------------- owners


class StatusCondition(_K8s, frozen=True, kw_only=True):
    """status.conditions[] of a Job or JobSet (only what says whether it finished).

    Both fields have defaults: status is written by controllers, and a condition missing one
    must not make the owner unreadable."""

    type: str = ""
    status: str = "Unknown"


class OwnerStatus(_K8s, frozen=True, kw_only=True):
    """status of a Job or JobSet: its conditions."""

    conditions: list[StatusCondition] = msgspec.field(default_factory=list)

    def is_true(self, condition: str) -> bool:
        """Whether ``condition`` is present with status "True"."""
        return any(c.type == condition and c.status == "True" for c in self.conditions)


class JobSpec(_K8s, frozen=True, kw_only=True):
    """spec of a batch/v1 Job (also a JobSet's job template)."""

    parallelism: int | None = None
    completions: int | None = None
    suspend: bool | None = None
    active_deadline_seconds: int | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)


class Job(_K8s, frozen=True, kw_only=True):
    """A batch/v1 Job."""

    metadata: ObjectMeta
    spec: JobSpec = msgspec.field(default_factory=JobSpec)
    status: OwnerStatus = msgspec.field(default_factory=OwnerStatus)


class JobTemplateSpec(_K8s, frozen=True, kw_only=True):
    """A JobSet replicated job's template."""

    metadata: PodTemplateMeta = msgspec.field(default_factory=PodTemplateMeta)
    spec: JobSpec = msgspec.field(default_factory=JobSpec)


class ReplicatedJob(_K8s, frozen=True, kw_only=True):
    """spec.replicatedJobs[] of a JobSet."""

    name: str
    replicas: int = 1
    template: JobTemplateSpec = msgspec.field(default_factory=JobTemplateSpec)


class JobSetSpec(_K8s, frozen=True, kw_only=True):
    """spec of a jobset.x-k8s.io JobSet."""

    replicated_jobs: list[ReplicatedJob] = msgspec.field(default_factory=list)
    suspend: bool | None = None


class JobSet(_K8s, frozen=True, kw_only=True):
    """A JobSet."""

    metadata: ObjectMeta
    spec: JobSetSpec = msgspec.field(default_factory=JobSetSpec)
    status: OwnerStatus = msgspec.field(default_factory=OwnerStatus)


class ReplicasSpec(_K8s, frozen=True, kw_only=True):
    """spec of a Deployment or ReplicaSet."""

    replicas: int | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)


class ReplicaOwner(_K8s, frozen=True, kw_only=True):
    """A Deployment or ReplicaSet."""

    metadata: ObjectMeta
    spec: ReplicasSpec = msgspec.field(default_factory=ReplicasSpec)


class PodGroupSpec(_K8s, frozen=True, kw_only=True):
    """spec of a tidegate.io/v1alpha1 PodGroup."""

    min_member: int | None = None
    min_resources: ResourceList = msgspec.field(default_factory=dict)
    queue: str | None = None
    priority_class_name: str | None = None


class PodGroup(_K8s, frozen=True, kw_only=True):
    """A PodGroup."""

    metadata: ObjectMeta
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)


# --------------------------------------------------------------------------- configuration


class TopologyLevel(_K8s, frozen=True, kw_only=True):
    """spec.levels[] of a Topology."""

    node_label: str


class TopologySpec(_K8s, frozen=True, kw_only=True):
    """spec of a Topology (tidegate.io or kueue.x-k8s.io: same shape)."""

    levels: list[TopologyLevel] = msgspec.field(default_factory=list)


class Topology(_K8s, frozen=True, kw_only=True):
    """A Topology."""

    metadata: ObjectMeta
    spec: TopologySpec = msgspec.field(default_factory=TopologySpec)


class FairSharing(_K8s, frozen=True, kw_only=True):
    """spec.fairSharing of a Queue, Cohort or Kueue ClusterQueue / Cohort."""

    weight: Quantity | None = None


class BorrowWithinCohort(_K8s, frozen=True, kw_only=True):
    """spec.preemption.borrowWithinCohort (Kueue's shape)."""

    policy: str | None = None
    max_priority_threshold: int | None = None


class PreemptionSpec(_K8s, frozen=True, kw_only=True):
    """spec.preemption of a Queue or Kueue ClusterQueue (Kueue's names)."""

    reclaim_within_cohort: str | None = None
    borrow_within_cohort: BorrowWithinCohort | None = None
    within_cluster_queue: str | None = None


class AgingSpec(_K8s, frozen=True, kw_only=True):
    """spec.aging of a Queue: +1 effective priority per ``step`` waited, at most ``maxBoost``."""

    step: str | int | float | None = None
    max_boost: int | None = None


class QueueSpec(_K8s, frozen=True, kw_only=True):
    """spec of a tidegate.io/v1alpha1 Queue."""

    priority: int = 0
    reclaimable: bool = True
    capability: ResourceList | None = None
    card_quota: dict[str, int] | None = None
    placement_profile: str | None = None
    queueing_strategy: str | None = None
    topology: str | None = None
    cohort: str | None = None
    nominal_quota: ResourceList | None = None
    borrowing_limit: ResourceList | None = None
    lending_limit: ResourceList | None = None
    card_nominal_quota: dict[str, int] | None = None
    card_borrowing_limit: dict[str, int] | None = None
    card_lending_limit: dict[str, int] | None = None
    fair_sharing: FairSharing | None = None
    preemption: PreemptionSpec | None = None
    default_max_runtime: str | int | float | None = None
    max_reservations: int | None = None
    aging: AgingSpec | None = None


class Queue(_K8s, frozen=True, kw_only=True):
    """A Queue."""

    metadata: ObjectMeta
    spec: QueueSpec = msgspec.field(default_factory=QueueSpec)


class CohortSpec(_K8s, frozen=True, kw_only=True):
    """spec of a tidegate.io/v1alpha1 Cohort."""

    parent: str | None = None
    capability: ResourceList | None = None
    card_quota: dict[str, int] | None = None
    nominal_quota: ResourceList | None = None
    borrowing_limit: ResourceList | None = None
    lending_limit: ResourceList | None = None
    card_nominal_quota: dict[str, int] | None = None
    card_borrowing_limit: dict[str, int] | None = None
    card_lending_limit: dict[str, int] | None = None
    fair_sharing: FairSharing | None = None


class Cohort(_K8s, frozen=True, kw_only=True):
    """A tidegate.io Cohort."""

    metadata: ObjectMeta
    spec: CohortSpec = msgspec.field(default_factory=CohortSpec)


# --------------------------------------------------------------------------- foreign queues


class KueueResourceQuota(_K8s, frozen=True, kw_only=True):
    """resourceGroups[].flavors[].resources[] of a Kueue ClusterQueue or Cohort."""

    name: str
    nominal_quota: Quantity | None = None
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class KueueFlavorQuotas(_K8s, frozen=True, kw_only=True):
    """resourceGroups[].flavors[]."""

    name: str = ""
    resources: list[KueueResourceQuota] = msgspec.field(default_factory=list)


class KueueResourceGroup(_K8s, frozen=True, kw_only=True):
    """resourceGroups[]."""

    covered_resources: list[str] = msgspec.field(default_factory=list)
    flavors: list[KueueFlavorQuotas] = msgspec.field(default_factory=list)


class KueueClusterQueueSpec(_K8s, frozen=True, kw_only=True):
    """spec of a kueue.x-k8s.io ClusterQueue (``cohort`` in v1beta1, ``cohortName`` later)."""

    cohort: str | None = None
    cohort_name: str | None = None
    resource_groups: list[KueueResourceGroup] = msgspec.field(default_factory=list)
    queueing_strategy: str | None = None
    fair_sharing: FairSharing | None = None
    preemption: PreemptionSpec | None = None


class KueueClusterQueue(_K8s, frozen=True, kw_only=True):
    """A Kueue ClusterQueue."""

    metadata: ObjectMeta
    spec: KueueClusterQueueSpec = msgspec.field(default_factory=KueueClusterQueueSpec)


class KueueCohortSpec(_K8s, frozen=True, kw_only=True):
    """spec of a kueue.x-k8s.io Cohort (``parent`` in v1alpha1, ``parentName`` later)."""

    parent: str | None = None
    parent_name: str | None = None
    resource_groups: list[KueueResourceGroup] = msgspec.field(default_factory=list)
    fair_sharing: FairSharing | None = None


class KueueCohort(_K8s, frozen=True, kw_only=True):
    """A Kueue Cohort."""

    metadata: ObjectMeta
    spec: KueueCohortSpec = msgspec.field(default_factory=KueueCohortSpec)


class KueueResourceFlavorSpec(_K8s, frozen=True, kw_only=True):
    """spec of a kueue.x-k8s.io ResourceFlavor (only what says which nodes it stands for)."""

    node_labels: dict[str, str] = msgspec.field(default_factory=dict)


class KueueResourceFlavor(_K8s, frozen=True, kw_only=True):
    """A Kueue ResourceFlavor: the nodes a ClusterQueue's quota of that flavor is for."""

    metadata: ObjectMeta
    spec: KueueResourceFlavorSpec = msgspec.field(default_factory=KueueResourceFlavorSpec)


class KueueLocalQueueSpec(_K8s, frozen=True, kw_only=True):
    """spec of a kueue.x-k8s.io LocalQueue."""

    cluster_queue: str = ""


class KueueLocalQueue(_K8s, frozen=True, kw_only=True):
    """A Kueue LocalQueue (namespaced): the name workloads give, pointing at a ClusterQueue."""

    metadata: ObjectMeta
    spec: KueueLocalQueueSpec = msgspec.field(default_factory=KueueLocalQueueSpec)


class VolcanoGuarantee(_K8s, frozen=True, kw_only=True):
    """spec.guarantee of a Volcano Queue."""

    resource: ResourceList = msgspec.field(default_factory=dict)


class VolcanoQueueSpec(_K8s, frozen=True, kw_only=True):
    """spec of a scheduling.volcano.sh Queue."""

    weight: int | None = None
    capability: ResourceList | None = None
    deserved: ResourceList | None = None
    guarantee: VolcanoGuarantee | None = None
    reclaimable: bool | None = None
    parent: str | None = None
    priority: int | None = None


class VolcanoQueue(_K8s, frozen=True, kw_only=True):
    """A Volcano Queue."""

    metadata: ObjectMeta
    spec: VolcanoQueueSpec = msgspec.field(default_factory=VolcanoQueueSpec)


class KaiQueueResource(_K8s, frozen=True, kw_only=True):
    """spec.resources.<gpu|cpu|memory> of a KAI Queue (-1: unlimited)."""

    quota: float | None = None
    over_quota_weight: float | None = None
    limit: float | None = None


class KaiQueueResources(_K8s, frozen=True, kw_only=True):
    """spec.resources of a KAI Queue."""

    gpu: KaiQueueResource | None = None
    cpu: KaiQueueResource | None = None
    memory: KaiQueueResource | None = None


class KaiQueueSpec(_K8s, frozen=True, kw_only=True):
    """spec of a scheduling.run.ai Queue (KAI-Scheduler)."""

    parent_queue: str | None = None
    priority: int | None = None
    resources: KaiQueueResources | None = None


class KaiQueue(_K8s, frozen=True, kw_only=True):
    """A KAI-Scheduler Queue."""

    metadata: ObjectMeta
    spec: KaiQueueSpec = msgspec.field(default_factory=KaiQueueSpec)


class PriorityClass(_K8s, frozen=True, kw_only=True):
    """A scheduling.k8s.io/v1 PriorityClass."""

    metadata: ObjectMeta
    value: int = 0
    global_default: bool = False


class LabelSelectorRequirement(_K8s, frozen=True, kw_only=True):
    """matchExpressions[] of a LabelSelector."""

    key: str
    operator: str
    values: list[str] = msgspec.field(default_factory=list)


class LabelSelector(_K8s, frozen=True, kw_only=True):
    """A metav1.LabelSelector."""

    match_labels: dict[str, str] = msgspec.field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = msgspec.field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy the selector (an empty selector matches everything)."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for requirement in self.match_expressions:
            present = requirement.key in labels
            value = labels.get(requirement.key)
            match requirement.operator:
                case "In":
                    ok = present and value in requirement.values
                case "NotIn":
                    ok = not present or value not in requirement.values
                case "Exists":
                    ok = present
                case "DoesNotExist":
                    ok = not present
                case _:
                    ok = False
            if not ok:
                return False
        return True


class PodDisruptionBudgetSpec(_K8s, frozen=True, kw_only=True):
    """spec of a policy/v1 PodDisruptionBudget (only what tidegate reads)."""

    selector: LabelSelector | None = None


class PodDisruptionBudgetStatus(_K8s, frozen=True, kw_only=True):
    """status of a PodDisruptionBudget, as the disruption controller writes it."""

    disruptions_allowed: int = 0
    expected_pods: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0


class PodDisruptionBudget(_K8s, frozen=True, kw_only=True):
    """A policy/v1 PodDisruptionBudget."""

    metadata: ObjectMeta
    spec: PodDisruptionBudgetSpec = msgspec.field(default_factory=PodDisruptionBudgetSpec)
    status: PodDisruptionBudgetStatus = msgspec.field(default_factory=PodDisruptionBudgetStatus)


# --------------------------------------------------------------------------- decoding

T = TypeVar("T", bound=_K8s)


class ObjectError(ValueError):
    """An object that cannot be read at all; the message names the field (JSON path)."""


def decode(obj: object, kind: type[T]) -> T:
    """Decode a JSON object (as the API server sent it) into ``kind``.

    Raises :class:`ObjectError` whose message carries msgspec's JSON path, e.g.
    "Expected `int`, got `str` - at `$.spec.parallelism`".
    """
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise ObjectError(str(exc)) from exc


def describe_error(error: ObjectError) -> str:
    """Turn msgspec's "Expected `int`, got `str` - at `$.spec.x`" into "spec.x: expected int, got str"."""
    text = str(error)
    message, sep, path = text.rpartition(" - at `")
    if not sep:
        return text
    field = path.rstrip("`").removeprefix("$").removeprefix(".")
    message = message.replace("`", "")
    return f"{field}: {message[:1].lower()}{message[1:]}"


def timestamp(value: str | None) -> float:
    """An RFC 3339 timestamp ("2024-05-01T10:00:00Z") as Unix seconds; 0.0 when absent or bad."""
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
