"""Workload recognition: a top owner and its pods → one normalized :class:`WorkloadState`.

A workload is a gang tidegate admits as a whole. Its identity is its top owner (Pod → Job →
JobSet; Pod → ReplicaSet → Deployment; a bare Pod) or the PodGroup its pods name; which pods
belong to which owner is worked out by :mod:`tidegate.kube.read.index`. Here, given the owner (as
an :class:`Owner`) and its member pods, we build the podsets (per pod template, JobSet
replicated job, or PodGroup role), their expected pod counts from the owner's spec, and the
workload's settings from the labels and annotations of four families
(:mod:`tidegate.kube.read.annotations`).

Nothing here raises on bad input: every problem becomes part of ``invalid_reason`` (a sentence
naming the field or annotation, the object and the bad value), and the rest of the workload is
still filled in as well as it can be. Pure code: no I/O, no clock.
"""

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from tidegate.kube.read import keys
from tidegate.kube.read.annotations import (
    Found,
    Layer,
    PodSetSettings,
    check_levels,
    podset_settings,
    workload_settings,
)
from tidegate.kube.read.convert import toleration
from tidegate.kube.read.finish import workload_finished
from tidegate.kube.read.objects import (
    Job,
    JobSet,
    JobSpec,
    ObjectMeta,
    Pod,
    PodGroup,
    PodSpec,
    PodTemplateSpec,
    ReplicaOwner,
    timestamp,
)
from tidegate.kube.read.requests import pod_requests
from tidegate.kube.read.suspend import suspension
from tidegate.model.events import PodSetSpec, ServiceType, TopologyRequest, WorkloadState
from tidegate.policy.cards import GPU_PRODUCT_LABEL
from tidegate.policy.service_type import (
    DEFAULT_OWNER_KIND_SERVICE_TYPES,
    SERVICE_TYPES,
    ServiceTypeError,
    resolve_service_type,
)
from tidegate.telemetry import workload_trace_context

MAIN_PODSET = "main"
"""Name of the only podset of a Job, Deployment, ReplicaSet or bare Pod (as in Kueue)."""

OwnerObject = Job | JobSet | ReplicaOwner | PodGroup | Pod
"""Decoded owners whose spec recognition reads."""


@dataclass(frozen=True)
class Owner:
    """A workload's top owner.

    ``obj`` is the decoded object for kinds the index reads (Job, JobSet, Deployment,
    ReplicaSet, PodGroup, Pod), or None for an owner of another kind (a StatefulSet, a custom
    resource) known only from a pod's ownerReference: its podsets then come from its pods.
    """

    kind: str
    api_version: str
    meta: ObjectMeta
    obj: OwnerObject | None = None
    error: str | None = None
    """Why the owner's spec could not be read, if it could not (its metadata could)."""

    @property
    def key(self) -> str:
        """The workload key, ``namespace/name``."""
        return f"{self.meta.namespace}/{self.meta.name}"

    def describe(self) -> str:
        """E.g. "Job default/train"."""
        return f"{self.kind} {self.key}"


@dataclass(frozen=True)
class Context:
    """What recognition needs beyond the owner and its pods; kept current by the index."""

    priority_classes: Mapping[str, int] = field(default_factory=dict)
    default_priority: int | None = None
    """Value of the PriorityClass with globalDefault, if there is one."""
    topologies: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Topology name → its level labels, widest first."""
    owner_kind_service_types: Mapping[str, ServiceType] = field(
        default_factory=lambda: dict(DEFAULT_OWNER_KIND_SERVICE_TYPES)
    )
    profiles: Collection[str] | None = None
    """Placement profile names accepted; None accepts any."""
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """Kueue LocalQueues: (namespace, name) → the ClusterQueue a workload naming it with
    ``kueue.x-k8s.io/queue-name`` is queued in."""

    @property
    def placement_levels(self) -> frozenset[str]:
        """Node labels of every known Topology level (a release always sets some)."""
        return frozenset(level for topology in self.topologies.values() for level in topology)

    @property
    def placement_labels(self) -> frozenset[str]:
        """Node labels the ungater may add to a pod's nodeSelector when it releases it: every
        known Topology level and the GPU product label."""
        levels = {level for topology in self.topologies.values() for level in topology}
        return frozenset(levels | {GPU_PRODUCT_LABEL})


# --------------------------------------------------------------------------- pod positions


def job_pod_count(spec: JobSpec) -> int:
    """Pods a Job runs at once: parallelism (default 1), at most completions."""
    parallelism = 1 if spec.parallelism is None else spec.parallelism
    if spec.completions is not None:
        return min(parallelism, spec.completions)
    return parallelism


def _index(meta: ObjectMeta, name: str) -> str | None:
    return meta.annotations.get(name, meta.labels.get(name))


def _int_label(meta: ObjectMeta, name: str, problems: list[str]) -> int | None:
    text = _index(meta, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        problems.append(f"{name} on Pod {meta.namespace}/{meta.name}: {text!r} is not an integer")
        return None
    if value < 0:
        problems.append(f"{name} on Pod {meta.namespace}/{meta.name}: {text!r} is negative")
        return None
    return value


def own_node_selector(pod: Pod, placement_labels: Collection[str]) -> dict[str, str]:
    """The nodeSelector the pod was created with.

    Once released (tidegate's gate gone) a managed pod also carries what the ungater added —
    the levels of its slot's domain and the GPU product — which pins it to a host: those keys
    (``placement_labels``) are not the pod's own. A gated pod's selector is all its own.
    """
    selector = pod.spec.node_selector
    if pod.gated():
        return dict(selector)
    return {key: value for key, value in selector.items() if key not in placement_labels}


def pod_role(pod: Pod, placement_labels: Collection[str] = frozenset()) -> str:
    """The podset of a PodGroup member (or a pod of an owner whose spec tidegate cannot read).

    The ``tidegate.io/role`` label, else the ``pod-template-hash`` label, else ``pods-<hash>``
    of the pod's shape (containers, init containers, overhead, its own nodeSelector — without
    what the ungater added on release, see :func:`own_node_selector` — tolerations), so
    identical pods share a podset before and after their release.
    """
    labels = pod.metadata.labels
    if labels.get(keys.TG_ROLE):
        return labels[keys.TG_ROLE]
    if labels.get(keys.POD_TEMPLATE_HASH):
        return labels[keys.POD_TEMPLATE_HASH]
    spec = pod.spec
    shape = msgspec.json.encode(
        [
            spec.containers,
            spec.init_containers,
            spec.overhead,
            own_node_selector(pod, placement_labels),
            spec.tolerations,
        ],
        order="deterministic",
    )
    return "pods-" + hashlib.sha256(shape).hexdigest()[:8]


def pod_position(
    owner: Owner, pod: Pod, placement_labels: Collection[str] = frozenset()
) -> tuple[str, int | None, list[str]]:
    """The pod's podset and rank within it, and problems with its index labels
    (``placement_labels``: see :func:`own_node_selector`).

    Rank: the Job completion index; for a JobSet, job index × pods per job + completion index;
    for a PodGroup member, ``tidegate.io/pod-index`` (else its completion index); else None.
    """
    problems: list[str] = []
    meta = pod.metadata
    completion = _int_label(meta, keys.JOB_COMPLETION_INDEX, problems)
    obj = owner.obj
    if isinstance(obj, Job):
        return MAIN_PODSET, completion, problems
    if isinstance(obj, JobSet):
        replicated = meta.labels.get(keys.JOBSET_REPLICATED_JOB_NAME, "")
        job_index = _int_label(meta, keys.JOBSET_JOB_INDEX, problems)
        rank = None
        for job in obj.spec.replicated_jobs:
            if job.name == replicated and job_index is not None:
                rank = job_index * job_pod_count(job.template.spec) + (completion or 0)
        return replicated or MAIN_PODSET, rank, problems
    if isinstance(obj, ReplicaOwner):
        return MAIN_PODSET, None, problems
    if owner.kind == "Pod":
        return MAIN_PODSET, _int_label(meta, keys.TG_POD_INDEX, problems), problems
    rank = _int_label(meta, keys.TG_POD_INDEX, problems)
    return pod_role(pod, placement_labels), completion if rank is None else rank, problems


# --------------------------------------------------------------------------- podsets


@dataclass(frozen=True)
class _PodSetSource:
    """One podset before its settings are read: a template and how many pods it makes."""

    name: str
    count: int
    spec: PodSpec
    spec_path: str
    """Where ``spec`` lives, for messages: "Job default/a spec.template.spec"."""
    layers: tuple[Layer, ...]
    """Template first, owner last."""
    pods_per_index_group: int | None = None
    node_selector: Mapping[str, str] | None = None
    """The podset's nodeSelector when not ``spec``'s (pods released by the ungater)."""


def _owner_layer(owner: Owner) -> Layer:
    return Layer(owner.describe(), owner.meta.labels, owner.meta.annotations)


def _one_template(
    template: PodTemplateSpec, count: int, *, where: str, top: Layer
) -> list[_PodSetSource]:
    """The single podset of an owner with one pod template at ``spec.template`` (a Job, a
    Deployment or a ReplicaSet); a negative ``count`` (reported by the caller) counts as 0."""
    layer = Layer(
        f"the pod template of {where}", template.metadata.labels, template.metadata.annotations
    )
    return [
        _PodSetSource(
            MAIN_PODSET, max(count, 0), template.spec, f"{where} spec.template.spec", (layer, top)
        )
    ]


def _sources(
    owner: Owner,
    members: Sequence[Pod],
    problems: list[str],
    placement_labels: Collection[str] = frozenset(),
    rollout_replicas: int | None = None,
) -> list[_PodSetSource]:
    obj = owner.obj
    top = _owner_layer(owner)
    where = owner.describe()
    if isinstance(obj, Job):
        count = job_pod_count(obj.spec)
        if count < 0:
            problems.append(f"{where}: spec.parallelism/completions give {count} pods")
        return _one_template(obj.spec.template, count, where=where, top=top)
    if isinstance(obj, JobSet):
        sources = []
        if not obj.spec.replicated_jobs:
            problems.append(f"{where}: spec.replicatedJobs is empty")
        for i, job in enumerate(obj.spec.replicated_jobs):
            per_job = job_pod_count(job.template.spec)
            if job.replicas < 0 or per_job < 0:
                problems.append(
                    f"{where}: spec.replicatedJobs[{i}] ({job.name}) gives a negative pod count"
                )
            job_layer = Layer(
                f"the job template {job.name} of {where}",
                job.template.metadata.labels,
                job.template.metadata.annotations,
            )
            template = job.template.spec.template
            pod_layer = Layer(
                f"the pod template of {job.name} in {where}",
                template.metadata.labels,
                template.metadata.annotations,
            )
            sources.append(
                _PodSetSource(
                    job.name,
                    max(job.replicas, 0) * max(per_job, 0),
                    template.spec,
                    f"{where} spec.replicatedJobs[{i}].template.spec.template.spec",
                    (pod_layer, job_layer, top),
                    pods_per_index_group=max(per_job, 0),
                )
            )
        return sources
    if isinstance(obj, ReplicaOwner):
        replicas = 1 if obj.spec.replicas is None else obj.spec.replicas
        if replicas < 0:
            problems.append(f"{where}: spec.replicas {replicas} is negative")
        if rollout_replicas is not None:
            # A Deployment rolling out runs its ReplicaSets' replicas, surge pods included.
            replicas = max(replicas, rollout_replicas)
        return _one_template(obj.spec.template, replicas, where=where, top=top)
    # PodGroup, bare Pod, or an owner tidegate cannot read: podsets from the pods themselves.
    roles: dict[str, list[Pod]] = {}
    for pod in sorted(members, key=lambda p: p.metadata.name):
        name = MAIN_PODSET if owner.kind == "Pod" else pod_role(pod, placement_labels)
        roles.setdefault(name, []).append(pod)
    sources = []
    for name in sorted(roles):
        pods = roles[name]
        first = pods[0]
        pod_where = f"Pod {first.metadata.namespace}/{first.metadata.name}"
        layers: tuple[Layer, ...] = (
            Layer(pod_where, first.metadata.labels, first.metadata.annotations),
        )
        if owner.kind != "Pod":
            layers = (*layers, top)
        sources.append(
            _PodSetSource(
                name,
                len(pods),
                first.spec,
                f"{pod_where} spec",
                layers,
                node_selector=own_node_selector(first, placement_labels),
            )
        )
    return sources


def _podset(
    source: _PodSetSource,
    settings: PodSetSettings,
    topology: TopologyRequest,
    problems: list[str],
) -> PodSetSpec:
    requests, request_problems = pod_requests(source.spec)
    problems.extend(f"{source.spec_path}: {p.removeprefix('spec.')}" for p in request_problems)
    if topology.slice_size is not None and topology.slice_size > source.count > 0:
        problems.append(
            f"podset {source.name}: slice size {topology.slice_size} is larger than its "
            f"{source.count} pods"
        )
    return PodSetSpec(
        name=source.name,
        count=source.count,
        requests=requests,
        topology=topology,
        node_selector=dict(
            source.spec.node_selector if source.node_selector is None else source.node_selector
        ),
        tolerations=[toleration(t) for t in source.spec.tolerations],
        group=settings.group,
        pods_per_index_group=source.pods_per_index_group,
        card_name=settings.card_name,
    )


# --------------------------------------------------------------------------- workloads


def derived_trace_context(uid: str) -> dict[str, str]:
    """A W3C traceparent derived from the workload's UID, so every service that continues it
    lands in the same trace, and republishing the workload never changes it."""
    return workload_trace_context(uid)


def _priority(
    owner: Owner,
    sources: Sequence[_PodSetSource],
    members: Sequence[Pod],
    context: Context,
) -> tuple[int, str | None]:
    class_name: str | None = None
    if isinstance(owner.obj, PodGroup) and owner.obj.spec.priority_class_name:
        class_name = owner.obj.spec.priority_class_name
    for source in sources:
        if class_name is None and source.spec.priority_class_name:
            class_name = source.spec.priority_class_name
    if class_name is not None and class_name in context.priority_classes:
        return context.priority_classes[class_name], class_name
    # Kubernetes rejects pods naming an unknown class, and resolves the value into
    # spec.priority at creation: trust a member pod's value if there is one.
    for pod in members:
        if pod.spec.priority is not None:
            return pod.spec.priority, class_name
    if class_name is None and context.default_priority is not None:
        return context.default_priority, None
    return 0, class_name


def _service_type(
    owner: Owner,
    members: Sequence[Pod],
    found_value: str | None,
    settings_found: Found | None,
    context: Context,
    problems: list[str],
) -> ServiceType:
    found = settings_found
    if found is not None and found.value.strip() not in ("", *SERVICE_TYPES):
        problems.append(f"{found.describe()}: {found.value!r} is not inference or training")
        return "unknown"
    kind = owner.kind
    if kind not in context.owner_kind_service_types:
        for pod in sorted(members, key=lambda p: p.metadata.name):
            ref = pod.metadata.controller_ref()
            if ref is not None:
                kind = ref.kind
                break
    try:
        return resolve_service_type(found_value, kind, context.owner_kind_service_types)
    except ServiceTypeError as exc:
        problems.append(str(exc))
        return "unknown"


def recognize(
    owner: Owner,
    members: Sequence[Pod],
    context: Context,
    *,
    rollout_replicas: int | None = None,
) -> WorkloadState:
    """The normalized workload of ``owner`` with pods ``members`` (its pods tidegate has seen).

    Podset counts come from the owner's spec for Jobs, JobSets, Deployments and ReplicaSets,
    and from the pods seen for PodGroups, bare Pods and owners of other kinds; ``finished``
    from the owner's status (:mod:`tidegate.kube.read.finish`). A Deployment counts the larger
    of its ``spec.replicas`` and ``rollout_replicas``, the sum of its ReplicaSets' replicas:
    while it rolls out, its surge pods are a temporary growth (docs/workloads.md, "Elastic
    workloads"). Never raises.
    """
    problems: list[str] = []
    if owner.error is not None:
        problems.append(f"{owner.describe()}: {owner.error}")
    placement_labels = context.placement_labels
    sources = _sources(owner, members, problems, placement_labels, rollout_replicas)

    workload_layers: list[Layer] = [_owner_layer(owner)]
    for source in sources:
        workload_layers.extend(layer for layer in source.layers if layer not in workload_layers)
    settings = workload_settings(workload_layers, problems)

    queue = settings.queue
    if queue is not None and settings.queue_key == keys.KUEUE_QUEUE_NAME:
        queue = context.local_queues.get((owner.meta.namespace, queue), queue)
    min_members = None
    if isinstance(owner.obj, PodGroup):
        spec = owner.obj.spec
        queue = spec.queue or queue
        min_members = spec.min_member
        if min_members is not None and min_members < 1:
            problems.append(f"{owner.describe()}: spec.minMember {min_members} is not positive")
            min_members = None

    if (
        settings.profile is not None
        and context.profiles is not None
        and settings.profile not in context.profiles
        and settings.profile_found is not None
    ):
        problems.append(
            f"{settings.profile_found.describe()}: {settings.profile!r} is not a placement "
            f"profile (known: {', '.join(sorted(context.profiles))})"
        )

    levels = context.topologies.get(settings.topology) if settings.topology else None
    podsets = []
    for source in sources:
        podset_problems: list[str] = []
        ps_settings = podset_settings(source.layers, podset_problems)
        topology = ps_settings.topology
        if levels is not None and settings.topology is not None:
            topology = check_levels(ps_settings, levels, settings.topology, podset_problems)
        problems.extend(p for p in podset_problems if p not in problems)
        podsets.append(_podset(source, ps_settings, topology, problems))

    for pod in members:
        for problem in pod_position(owner, pod, placement_labels)[2]:
            if problem not in problems:
                problems.append(problem)

    priority, priority_class = _priority(owner, sources, members, context)
    service_type = _service_type(
        owner, members, settings.service_type, settings.service_type_found, context, problems
    )
    meta = owner.meta
    suspended, resume_on_admission = suspension(meta, owner.obj)
    return WorkloadState(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        owner_kind=owner.kind,
        owner_api_version=owner.api_version,
        queue=queue,
        priority=priority,
        priority_class=priority_class,
        service_type=service_type,
        preemptable=settings.preemptable,
        min_members=min_members,
        podsets=podsets,
        card_request=settings.card_request,
        profile=settings.profile,
        topology=settings.topology,
        on_preemption=settings.on_preemption,
        created_at=timestamp(meta.creation_timestamp),
        invalid_reason="; ".join(problems) if problems else None,
        trace_context=settings.trace_context or derived_trace_context(meta.uid),
        finished=workload_finished(owner.obj, members),
        suspended=suspended,
        resume_on_admission=resume_on_admission,
    )
