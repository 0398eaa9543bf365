"""Builders of the bus messages tests publish or feed to pure code (tidegate.model bodies).

A suite makes one :class:`Messages` with its own defaults (namespace, topology levels, queue)
and builds every node, pod, workload and decision through it, so a test names only what it
is about: ``msg.pod("p0", "n0", gpus=2)``, ``msg.admitted("team/train", {("b1", "r1", "n0"):
2}, sequence=3)``. Any field of the message not covered by a parameter may be given as a
keyword and is passed through unchanged. The builders fill what every test would write the
same way (uids ``uid-<name>``, the ``owner_kind`` of a Job, epoch 1) and nothing more: what a
test checks stays in the test. The counterpart for Kubernetes manifests is
:class:`tidegate.testing.manifests.Builders`.
"""

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from tidegate.model import (
    Admitted,
    CapacityNode,
    DisruptionBudgetState,
    DomainCount,
    NodeState,
    Pending,
    PodSetSpec,
    PodState,
    Preempted,
    PreemptRequested,
    QueueConfig,
    Released,
    ReplaceRequested,
    Resources,
    Tombstone,
    TopologyAssignment,
    TopologyConfig,
    TopologyRequest,
    WorkloadState,
)

GPU = "nvidia.com/gpu"
LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
"""The three topology levels most suites use, widest first."""

_DEFAULT: Any = object()

Domains = Mapping[Sequence[str], int] | Iterable[tuple[Sequence[str], int]]
"""Pods per domain: ``{("b1", "r1", "n0"): 2}`` or ``[(("b1", "r1", "n0"), 2)]``."""


P = ParamSpec("P")
R = TypeVar("R")


def _name_of(key: str) -> str:
    return key.partition("/")[2] or key


def _suite_defaults(
    build: "Callable[Concatenate[Messages, P], R]",
) -> "Callable[Concatenate[Messages, P], R]":
    """Give ``build`` the keywords the suite set for it (``defaults[build.__name__]``) unless
    the caller gives them."""

    @functools.wraps(build)
    def with_defaults(self: "Messages", /, *args: P.args, **kwargs: P.kwargs) -> R:
        preset = self.defaults.get(build.__name__)
        if preset:
            kwargs = {**preset, **kwargs}  # type: ignore[assignment]
        return build(self, *args, **kwargs)

    return with_defaults


class Messages:
    """Message builders with one suite's defaults.

    ``namespace``: of pods and workloads; ``levels``: topology levels (widest first, the
    host last); ``queue``: of workloads and decisions; ``gpu``: the GPU resource name;
    ``node_labels``: labels every node has besides its topology; ``node_cpu`` /
    ``node_pods``: every node's allocatable cpu (millicores) and pods (none if None);
    ``node_domain``: a node's domain when a test names none. ``defaults``: keywords per
    builder (``{"pod": {"workload": "team/train"}}``) used unless a call gives them.
    """

    def __init__(
        self,
        *,
        namespace: str = "team",
        levels: Sequence[str] = LEVELS,
        queue: str | None = "q",
        gpu: str = GPU,
        node_labels: Mapping[str, str] | None = None,
        node_cpu: int = 64_000,
        node_pods: int | None = None,
        node_domain: Sequence[str] = (),
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.namespace = namespace
        self.levels = list(levels)
        self.queue = queue
        self.gpu = gpu
        self.node_labels = dict(node_labels or {})
        self.node_cpu = node_cpu
        self.node_pods = node_pods
        self.node_domain = tuple(node_domain)
        self.defaults = {name: dict(fields) for name, fields in (defaults or {}).items()}

    # ------------------------------------------------------------------ resources

    def requests(self, *, cpu: int = 1000, gpus: int | None = 1, **extra: int) -> Resources:
        """Resource amounts: ``cpu`` millicores and ``gpus`` (left out when None)."""
        out: Resources = {"cpu": cpu}
        if gpus is not None:
            out[self.gpu] = gpus
        out.update(extra)
        return out

    # ------------------------------------------------------------------ state

    def topology(
        self, name: str = "default", levels: Sequence[str] | None = None
    ) -> TopologyConfig:
        """A Topology with this suite's levels (or ``levels``)."""
        return TopologyConfig(name=name, levels=list(levels if levels is not None else self.levels))

    @_suite_defaults
    def node(
        self,
        /,
        name: str,
        *domain: str,
        gpus: int = 8,
        allocatable: Resources | None = None,
        labels: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> NodeState:
        """A node labelled with its ``domain`` values (widest first), its own name as the
        last level, and the suite's node labels plus ``labels``; ``allocatable`` defaults to
        the suite's cpu and pods and ``gpus``. Without ``domain``, the suite's node domain."""
        values = [*(domain or self.node_domain), name]
        assert len(values) <= len(self.levels), f"{name}: more domain values than levels"
        all_labels = dict(zip(self.levels[-len(values) :], values, strict=True))
        all_labels.update(self.node_labels)
        all_labels.update(labels or {})
        if allocatable is None:
            allocatable = {"cpu": self.node_cpu, self.gpu: gpus}
            if self.node_pods is not None:
                allocatable["pods"] = self.node_pods
        return NodeState(name=name, labels=all_labels, allocatable=allocatable, **fields)

    @_suite_defaults
    def pod(
        self,
        /,
        name: str,
        node: str | None = None,
        *,
        gpus: int | None = 1,
        cpu: int = 1000,
        requests: Resources | None = None,
        phase: str = "Running",
        namespace: str | None = None,
        uid: str | None = None,
        **fields: Any,
    ) -> PodState:
        """A pod (bound to ``node`` if given) requesting ``cpu`` and ``gpus`` (or exactly
        ``requests``)."""
        return PodState(
            namespace=namespace or self.namespace,
            name=name,
            uid=uid or f"uid-{name}",
            node_name=node,
            phase=phase,
            requests=requests if requests is not None else self.requests(cpu=cpu, gpus=gpus),
            **fields,
        )

    @_suite_defaults
    def podset(
        self,
        /,
        name: str = "workers",
        count: int = 1,
        *,
        gpus: int | None = 1,
        cpu: int = 1000,
        requests: Resources | None = None,
        required: str | None = None,
        preferred: str | None = None,
        **fields: Any,
    ) -> PodSetSpec:
        """A pod set of ``count`` pods each requesting ``cpu`` and ``gpus`` (or exactly
        ``requests``), its topology ``required`` / ``preferred`` at a level if given."""
        if required is not None or preferred is not None:
            fields.setdefault("topology", TopologyRequest(required=required, preferred=preferred))
        return PodSetSpec(
            name=name,
            count=count,
            requests=requests if requests is not None else self.requests(cpu=cpu, gpus=gpus),
            **fields,
        )

    @_suite_defaults
    def workload(
        self,
        /,
        name: str,
        *podsets: PodSetSpec,
        namespace: str | None = None,
        uid: str | None = None,
        owner_kind: str = "Job",
        queue: str | None = _DEFAULT,
        **fields: Any,
    ) -> WorkloadState:
        """A workload (a Job's, unless ``owner_kind``) in this suite's queue, with the given
        pod sets (none if none are given)."""
        return WorkloadState(
            namespace=namespace or self.namespace,
            name=name,
            uid=uid or f"uid-{name}",
            owner_kind=owner_kind,
            queue=self.queue if queue is _DEFAULT else queue,
            podsets=list(podsets),
            **fields,
        )

    def queue_config(self, name: str | None = None, **fields: Any) -> QueueConfig:
        """A Queue (this suite's, unless ``name``)."""
        return QueueConfig(name=name or str(self.queue), **fields)

    @_suite_defaults
    def capacity_node(
        self,
        /,
        name: str,
        *domain: str,
        gpus: int = 8,
        free_gpus: int | None = None,
        cpu: int = 64_000,
        pods: int | None = 110,
        topology: str = "default",
        applied: int = 0,
        **fields: Any,
    ) -> CapacityNode:
        """A node's capacity record (as the topology-cache publishes it), in ``domain``
        (widest first, the node itself last, unless the suite's levels stop above the host:
        one value per level); all of it free but ``free_gpus`` if given."""
        allocatable: Resources = {"cpu": cpu, self.gpu: gpus}
        if pods is not None:
            allocatable["pods"] = pods
        free = dict(allocatable)
        if free_gpus is not None:
            free[self.gpu] = free_gpus
        return CapacityNode(
            topology=topology,
            node=name,
            domain=[*domain, name][: max(len(self.levels), len(domain))],
            allocatable=allocatable,
            free=free,
            applied_sequence=applied,
            **fields,
        )

    @_suite_defaults
    def disruption_budget(
        self,
        /,
        name: str,
        workloads: Mapping[str, int] | None = None,
        *,
        allowed: int = 0,
        namespace: str | None = None,
        uid: str | None = None,
        **fields: Any,
    ) -> DisruptionBudgetState:
        """A PodDisruptionBudget as the watcher publishes it: ``allowed`` disruptions now, and
        how many of each workload's pods (by key) it selects."""
        return DisruptionBudgetState(
            namespace=namespace or self.namespace,
            name=name,
            uid=uid or f"uid-{name}",
            disruptions_allowed=allowed,
            workloads={self.key(key): count for key, count in (workloads or {}).items()},
            **fields,
        )

    @_suite_defaults
    def tombstone(
        self, /, kind: str, name: str, namespace: str | None = None, **fields: Any
    ) -> Tombstone:
        """The tombstone of a node, pod, workload, topology, queue or pdb."""
        return Tombstone(object_kind=kind, name=name, namespace=namespace, **fields)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ decisions

    def key(self, name: str) -> str:
        """``name`` as a workload key (``namespace/name``), unless it is one already."""
        return name if "/" in name else f"{self.namespace}/{name}"

    def assignment(
        self, domains: Domains, levels: Sequence[str] | None = None
    ) -> TopologyAssignment:
        """Pods per domain at ``levels`` (default: this suite's)."""
        pairs = domains.items() if isinstance(domains, Mapping) else domains
        return TopologyAssignment(
            levels=list(levels if levels is not None else self.levels),
            domains=[DomainCount(values=list(values), count=count) for values, count in pairs],
        )

    @_suite_defaults
    def admitted(
        self,
        /,
        workload: str,
        domains: Domains | None = None,
        *,
        sequence: int,
        podset: str = "workers",
        levels: Sequence[str] | None = None,
        per_pod: Resources | None = None,
        uid: str | None = None,
        queue: str | None = _DEFAULT,
        epoch: int = 1,
        **fields: Any,
    ) -> Admitted:
        """An admitted decision about ``workload`` (a name or a key) placing ``podset``'s pods
        in ``domains`` (no assignment when None, unless ``assignments=`` is given), each pod
        requesting ``per_pod`` if given."""
        if "assignments" not in fields:
            fields["assignments"] = (
                {} if domains is None else {podset: self.assignment(domains, levels)}
            )
        if per_pod is not None:
            fields["requests"] = {podset: per_pod}
        return Admitted(
            workload=self.key(workload),
            uid=uid or f"uid-{_name_of(workload)}",
            queue=str(self.queue if queue is _DEFAULT else queue),
            sequence=sequence,
            epoch=epoch,
            **fields,
        )

    @_suite_defaults
    def released(
        self,
        /,
        workload: str,
        *,
        reason: str = "Completed",
        sequence: int = 0,
        uid: str | None = None,
        queue: str | None = _DEFAULT,
        **fields: Any,
    ) -> Released:
        """A released decision about ``workload`` (a name or a key)."""
        return Released(
            workload=self.key(workload),
            uid=uid or f"uid-{_name_of(workload)}",
            queue=self.queue if queue is _DEFAULT else queue,
            reason=reason,  # type: ignore[arg-type]
            sequence=sequence,
            **fields,
        )

    @_suite_defaults
    def pending(
        self,
        /,
        workload: str,
        *,
        reason: str = "WaitingForCapacity",
        message: str = "",
        sequence: int = 0,
        uid: str | None = None,
        queue: str | None = _DEFAULT,
        **fields: Any,
    ) -> Pending:
        """A pending decision about ``workload`` (a name or a key)."""
        return Pending(
            workload=self.key(workload),
            uid=uid or f"uid-{_name_of(workload)}",
            queue=self.queue if queue is _DEFAULT else queue,
            reason=reason,  # type: ignore[arg-type]
            message=message,
            sequence=sequence,
            **fields,
        )

    @_suite_defaults
    def preempted(
        self, /, preemptor: str, victims: Sequence[str], *, uid: str | None = None, **fields: Any
    ) -> Preempted:
        """A preempted decision: ``preemptor`` (a name or a key) displaces ``victims``."""
        return Preempted(
            preemptor=self.key(preemptor),
            preemptor_uid=uid or f"uid-{_name_of(preemptor)}",
            victims=[self.key(v) for v in victims],
            **fields,
        )

    @_suite_defaults
    def preempt_requested(
        self,
        /,
        workload: str,
        *,
        sequence: int,
        admitted_sequence: int | None = None,
        uid: str | None = None,
        queue: str | None = _DEFAULT,
        **fields: Any,
    ) -> PreemptRequested:
        """Admission's request to free room for ``workload`` (a name or a key); for the
        growth of its admission ``admitted_sequence`` if given."""
        return PreemptRequested(
            workload=self.key(workload),
            uid=uid or f"uid-{_name_of(workload)}",
            queue=str(self.queue if queue is _DEFAULT else queue),
            sequence=sequence,
            admitted_sequence=admitted_sequence,
            **fields,
        )

    @_suite_defaults
    def replace_requested(
        self,
        /,
        workload: str,
        lost: Mapping[str, Sequence[DomainCount]],
        *,
        admitted_sequence: int,
        uid: str | None = None,
        **fields: Any,
    ) -> ReplaceRequested:
        """The ungater's request for new slots for ``workload`` (a name or a key) in place of
        the ``lost`` domains of each pod set, under its admission ``admitted_sequence`` (a
        shrink's surplus given back with ``give_back=True``)."""
        return ReplaceRequested(
            workload=self.key(workload),
            uid=uid or f"uid-{_name_of(workload)}",
            admitted_sequence=admitted_sequence,
            lost={podset: list(domains) for podset, domains in lost.items()},
            **fields,
        )
