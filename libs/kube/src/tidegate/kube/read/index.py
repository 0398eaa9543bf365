"""The in-memory index of the cluster: enough of it to group pods into workloads.

Kubernetes events arrive one object at a time, on separate watch streams, in no guaranteed order
across kinds. :class:`ClusterIndex` keeps the decoded objects (only the fields tidegate reads),
the owner chain of every pod (Pod → Job → JobSet, Pod → ReplicaSet → Deployment, PodGroup
membership), and which workloads tidegate manages. :meth:`ClusterIndex.apply` takes one event
and says which state messages may have changed; :meth:`ClusterIndex.desired` computes the
message a subject should now hold (None: the object is gone and the subject needs a tombstone).

Rules kept here:

- A workload is *managed* once one of its pods has been seen carrying the ``tidegate.io/admission``
  gate (or, after a restart, once the state stream says it was published before), and stays
  managed while its owner exists. Unmanaged workloads are never published, and their pods are
  published with ``workload`` null (they still count for capacity).
- A workload none of whose pods was seen gated is managed too once one of its pods runs
  bound and ungated while it names a queue (a label or annotation) or sits in a namespace
  labelled ``tidegate.io/managed=true``: it was created while the webhook was down (or not sent
  to it) and *bypassed the gate*; its workload carries those pods (``bypassed_pods``,
  ``bypassed_requests``, and ``bypassed_cards`` by the GPU model label of each pod's node) so
  that admission charges them to the queue, its card quota included. DaemonSet and mirror pods
  are never counted (the webhook never gates them).
- A Job or JobSet created suspended that names a queue, Kueue's way, is managed from the
  start, without pods (it has none until tidegate unsuspends it; :mod:`tidegate.kube.read.suspend`).
- A pod whose owner chain names an object not seen yet (a ReplicaSet whose event has not arrived)
  waits: it is published without a workload until the owner arrives, and its workload is not
  created from it, so no spurious workload keyed by the ReplicaSet ever appears.
- A pod naming a PodGroup that does not exist yet waits the same way (as in the coscheduling
  KEP, the group's pods are not scheduled before the group exists), and a PodGroup is
  published only once it has ``minMember`` pods (fewer cannot be admitted anyway).
- A workload seen finished (:mod:`tidegate.kube.read.finish`) stays finished while its owner
  (same uid) exists, even if the evidence goes away (a finished group's pods are deleted), and
  across a restart (the state stream says so): admission must never see it unfinished again,
  or it would admit it a second time.

Two top owners with the same namespace/name (a Job and a Deployment both called "x") share a
workload key; the one seen last wins. Pure code: no I/O, no clock; the service feeds it events.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import msgspec

from tidegate.kube.read import keys
from tidegate.kube.read.convert import node_state, parse_resource_list, pod_state, topology_config
from tidegate.kube.read.finish import Finished, settled, workload_finished
from tidegate.kube.read.objects import (
    Job,
    JobSet,
    Meta,
    Node,
    ObjectError,
    ObjectMeta,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    PriorityClass,
    ReplicaOwner,
    Topology,
    decode,
    describe_error,
    slim_pod,
)
from tidegate.kube.read.queues import QUEUE_SOURCES, Definitions, QueueSource, definitions
from tidegate.kube.read.recognize import Context, Owner, OwnerObject, pod_position, recognize
from tidegate.kube.read.suspend import suspension
from tidegate.model import resources as res
from tidegate.model.events import (
    DisruptionBudgetState,
    Message,
    PodState,
    ServiceType,
    StateKind,
    WorkloadState,
)
from tidegate.model.names import MANAGED_NAMESPACE_LABEL
from tidegate.model.pods import bypassed_gate
from tidegate.policy.cards import GPU_PRODUCT_LABEL, cards_on_node
from tidegate.policy.service_type import DEFAULT_OWNER_KIND_SERVICE_TYPES

ObjectKind = Literal[
    "Node",
    "Pod",
    "Job",
    "JobSet",
    "Deployment",
    "ReplicaSet",
    "PodGroup",
    "Topology",
    "KueueTopology",
    "Queue",
    "Cohort",
    "KueueClusterQueue",
    "KueueCohort",
    "KueueLocalQueue",
    "KueueResourceFlavor",
    "VolcanoQueue",
    "KaiQueue",
    "PriorityClass",
    "PodDisruptionBudget",
    "Namespace",
]
"""The kinds the index reads; "KueueTopology" is kueue.x-k8s.io's Topology, and the queue
kinds are named as in :data:`tidegate.kube.read.queues.QueueSource`."""

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

OWNER_KINDS: Mapping[ObjectKind, type[Job | JobSet | ReplicaOwner]] = {
    "Job": Job,
    "JobSet": JobSet,
    "Deployment": ReplicaOwner,
    "ReplicaSet": ReplicaOwner,
}
"""Owner kinds whose spec gives podsets and counts."""

PARENT_KINDS: Mapping[str, str] = {"Job": "JobSet", "ReplicaSet": "Deployment"}
"""Intermediate owner kind → the kind that may own it in turn."""


class StateKey(NamedTuple):
    """Which state subject: its kind, namespace (namespaced kinds) and name."""

    kind: StateKind
    namespace: str | None
    name: str


@dataclass(frozen=True)
class Desired:
    """What a state subject should hold now, and problems worth logging about it."""

    message: Message | None
    """None: the object is gone (publish a tombstone if anything was published)."""
    uid: str | None = None
    problems: tuple[str, ...] = ()


@dataclass
class Applied:
    """What one event changed."""

    affected: set[StateKey] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    """Objects that could not be read at all (the event was ignored)."""


@dataclass(frozen=True)
class _Resolution:
    """Where a pod belongs: its workload key and owner, or what it waits for."""

    workload: tuple[str, str] | None
    owner: tuple[str, str] | None = None
    """(kind, uid) of the top owner; ("PodGroup", "ns/name") for groups."""
    waits_for: str | None = None


def _version_key(version: str) -> tuple[int, str]:
    return (len(version), version) if version.isdigit() else (0, version)


class ClusterIndex:
    """Decoded objects, owner chains, memberships and managed workloads (see module doc)."""

    def __init__(
        self,
        *,
        owner_kind_service_types: Mapping[str, ServiceType] | None = None,
        profiles: Iterable[str] | None = None,
    ) -> None:
        """Start empty; ``owner_kind_service_types`` and ``profiles`` configure recognition."""
        self._service_types = dict(
            DEFAULT_OWNER_KIND_SERVICE_TYPES
            if owner_kind_service_types is None
            else owner_kind_service_types
        )
        self._profiles = frozenset(profiles) if profiles is not None else None
        self.nodes: dict[str, Node] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self._pod_states: dict[tuple[str, str], tuple[Pod, PodState]] = {}
        """Each pod's :func:`pod_state` without its workload, for the pod object it was
        computed from: a gang's state reads every member's at each change of one."""
        self.owners: dict[str, Owner] = {}
        """Jobs, JobSets, Deployments, ReplicaSets by UID."""
        self.podgroups: dict[tuple[str, str], Owner] = {}
        self.foreign: dict[str, Owner] = {}
        """Owners of kinds tidegate does not read, known from ownerReferences, by UID."""
        self.topologies: dict[tuple[ObjectKind, str], Topology] = {}
        self.queue_sources: dict[QueueSource, dict[str, object]] = {}
        """Objects defining queues, cohorts and Kueue LocalQueues as received, by kind and
        name (``namespace/name`` for LocalQueues); decoded when published, so errors become
        invalid_reason."""
        self._definitions: Definitions | None = None
        self.allocatable: dict[str, int] = {}
        """What the nodes offer, allocatable summed per resource: the cluster Volcano's and
        KAI's roots share out (:func:`~tidegate.kube.read.queues.definitions`)."""
        self.priority_classes: dict[str, PriorityClass] = {}
        self.budgets: dict[tuple[str, str], PodDisruptionBudget] = {}
        """PodDisruptionBudgets by (namespace, name)."""
        self.managed: set[tuple[str, str]] = set()
        self.deleting_namespaces: set[str] = set()
        """Namespaces being deleted (a ``deletionTimestamp``): their workloads say so."""
        self.managed_namespaces: set[str] = set()
        """Namespaces labelled ``tidegate.io/managed=true``: their pods are tidegate's."""
        self._resolution: dict[tuple[str, str], _Resolution] = {}
        self._members: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._sources: dict[tuple[str, str], tuple[str, str]] = {}
        self._by_ref: dict[str, set[tuple[str, str]]] = {}
        self._pod_refs: dict[tuple[str, str], list[str]] = {}
        """Owner UID or "group:ns/name" → pods that reference it directly."""
        self._children: dict[str, set[str]] = {}
        """Owner UID → UIDs of owners it owns (JobSet → Jobs, Deployment → ReplicaSets)."""
        self._versions: dict[StateKey, str] = {}
        self._quorum: set[tuple[str, str]] = set()
        """PodGroups that have had their minMember pods (published from then on)."""
        self._finished: dict[tuple[str, str], tuple[str, Finished]] = {}
        """Workload → (owner uid, how it ended), once seen finished (kept: module doc)."""
        self._context: Context | None = None

    # ------------------------------------------------------------------ public API

    def apply(self, kind: ObjectKind, event: EventType, obj: Mapping[str, object]) -> Applied:
        """Apply one watch event (the object as the API server sent it).

        Returns the state keys whose message may have changed. An object whose metadata cannot
        be read is ignored and reported in ``problems``; nothing raises.
        """
        applied = Applied()
        try:
            meta = decode(obj, Meta).metadata
        except ObjectError as exc:
            applied.problems.append(f"{kind}: unreadable object ({describe_error(exc)})")
            return applied
        deleted = event == "DELETED"
        if kind == "Node":
            self._apply_node(meta, obj, deleted, applied)
        elif kind == "Pod":
            self._apply_pod(meta, obj, deleted, applied)
        elif kind in OWNER_KINDS:
            self._apply_owner(kind, meta, obj, deleted, applied)
        elif kind == "PodGroup":
            self._apply_podgroup(meta, obj, deleted, applied)
        elif kind in ("Topology", "KueueTopology"):
            self._apply_topology(kind, meta, obj, deleted, applied)
        elif kind in QUEUE_SOURCES:
            self._apply_queue_source(kind, meta, obj, deleted, applied)
        elif kind == "PriorityClass":
            self._apply_priority_class(meta, obj, deleted, applied)
        elif kind == "PodDisruptionBudget":
            self._apply_budget(meta, obj, deleted, applied)
        elif kind == "Namespace":
            self._apply_namespace(meta, deleted, applied)
        if kind == "Pod" or kind in OWNER_KINDS:
            # A budget counts the managed pods it selects by workload.
            applied.affected.update(
                StateKey("pdb", ns, name) for ns, name in self.budgets if ns == meta.namespace
            )
        if meta.resource_version:
            for key in applied.affected:
                old = self._versions.get(key)
                if old is None or _version_key(meta.resource_version) > _version_key(old):
                    self._versions[key] = meta.resource_version
        return applied

    def seed_managed(self, workloads: Iterable[tuple[str, str]]) -> None:
        """Mark workloads as managed because they were published before (restart)."""
        seeded = set(workloads)
        self.managed.update(seeded)
        self._quorum.update(seeded)

    def seed_finished(self, workload: tuple[str, str], *, uid: str, finished: Finished) -> None:
        """Remember that the workload of owner ``uid`` was published finished before (restart)."""
        self._finished[workload] = (uid, finished)

    def forget(self, key: StateKey) -> None:
        """Drop what is kept about ``key`` once its tombstone is published."""
        self._versions.pop(key, None)
        if key.kind == "workload":
            workload = (key.namespace or "", key.name)
            if self._owner_of(workload) is None:
                self._finished.pop(workload, None)

    def version(self, key: StateKey) -> str | None:
        """The newest resourceVersion of any event that affected ``key``."""
        return self._versions.get(key)

    def state_keys(self) -> set[StateKey]:
        """Every state key that has (or may have) a message now."""
        out = {StateKey("node", None, name) for name in self.nodes}
        out.update(StateKey("pod", ns, name) for ns, name in self.pods)
        out.update(StateKey("workload", ns, name) for ns, name in self.managed)
        out.update(StateKey("topology", None, name) for _, name in self.topologies)
        out.update(self._queue_keys(self.definitions()))
        out.update(StateKey("pdb", ns, name) for ns, name in self.budgets)
        return out

    def desired(self, key: StateKey) -> Desired:
        """The message ``key``'s subject should hold now (None: gone)."""
        if key.kind == "node":
            node = self.nodes.get(key.name)
            if node is None:
                return Desired(None)
            message, problems = node_state(node)
            return Desired(
                message, node.metadata.uid, tuple(f"Node {key.name}: {p}" for p in problems)
            )
        if key.kind == "pod":
            return self._desired_pod((key.namespace or "", key.name))
        if key.kind == "workload":
            return self._desired_workload((key.namespace or "", key.name))
        if key.kind == "topology":
            return self._desired_topology(key.name)
        if key.kind == "pdb":
            return self._desired_budget((key.namespace or "", key.name))
        found = self.definitions()
        definition = (found.queues if key.kind == "queue" else found.cohorts).get(key.name)
        if definition is None:
            return Desired(None)
        return Desired(definition.message, definition.uid or None, definition.problems)

    def definitions(self) -> Definitions:
        """Every queue and cohort the queue objects define, cached until one changes."""
        if self._definitions is None:
            self._definitions = definitions(self.queue_sources, self.allocatable)
        return self._definitions

    def context(self) -> Context:
        """The recognition context (priority classes, topologies, configuration), cached."""
        if self._context is None:
            defaults = [pc.value for pc in self.priority_classes.values() if pc.global_default]
            topologies: dict[str, list[str]] = {}
            for source in ("KueueTopology", "Topology"):  # tidegate's own wins a name clash
                for (kind, name), topology in self.topologies.items():
                    config, _ = topology_config(topology)
                    if kind == source and config is not None:
                        topologies[name] = config.levels
            self._context = Context(
                priority_classes={name: pc.value for name, pc in self.priority_classes.items()},
                default_priority=max(defaults) if defaults else None,
                topologies=topologies,
                local_queues=self.definitions().local_queues,
                owner_kind_service_types=self._service_types,
                profiles=self._profiles,
            )
        return self._context

    def members(self, workload: tuple[str, str]) -> set[tuple[str, str]]:
        """Pods (namespace, name) that belong to ``workload``."""
        return set(self._members.get(workload, ()))

    # ------------------------------------------------------------------ nodes and config

    def _apply_node(
        self, meta: ObjectMeta, obj: Mapping[str, object], deleted: bool, applied: Applied
    ) -> None:
        product = self._gpu_product(meta.name)
        offered = _allocatable(self.nodes.get(meta.name))
        if deleted:
            self.nodes.pop(meta.name, None)
        else:
            try:
                self.nodes[meta.name] = decode(obj, Node)
            except ObjectError as exc:
                applied.problems.append(f"Node {meta.name}: {describe_error(exc)}")
                return
        applied.affected.add(StateKey("node", None, meta.name))
        now = _allocatable(self.nodes.get(meta.name))
        if now != offered:
            self.allocatable = res.non_zero(res.add(res.subtract(self.allocatable, offered), now))
            if "VolcanoQueue" in self.queue_sources or "KaiQueue" in self.queue_sources:
                # Their roots share out the cluster: their quota changed with it.
                applied.affected.update(self._queue_keys(self.definitions()))
                self._definitions = None
        if self._gpu_product(meta.name) != product:
            # The cards its bypassing pods hold are of another model now (or of none).
            for key, pod in self.pods.items():
                resolution = self._resolution.get(key)
                if pod.spec.node_name == meta.name and resolution and resolution.workload:
                    applied.affected.add(StateKey("workload", *resolution.workload))

    def _apply_topology(
        self,
        kind: ObjectKind,
        meta: ObjectMeta,
        obj: Mapping[str, object],
        deleted: bool,
        applied: Applied,
    ) -> None:
        if deleted:
            self.topologies.pop((kind, meta.name), None)
        else:
            try:
                self.topologies[(kind, meta.name)] = decode(obj, Topology)
            except ObjectError as exc:
                applied.problems.append(f"Topology {meta.name}: {describe_error(exc)}")
                self.topologies.pop((kind, meta.name), None)
        applied.affected.add(StateKey("topology", None, meta.name))
        self._context_changed(applied)

    def _apply_queue_source(
        self,
        kind: QueueSource,
        meta: ObjectMeta,
        obj: Mapping[str, object],
        deleted: bool,
        applied: Applied,
    ) -> None:
        # One object may change others' messages (a Volcano or KAI child makes its parent a
        # cohort; a name clash), so every queue and cohort is looked at again: they are few.
        before = self.definitions()
        name = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        objects = self.queue_sources.setdefault(kind, {})
        if deleted:
            objects.pop(name, None)
            if not objects:
                del self.queue_sources[kind]
        else:
            objects[name] = obj
        self._definitions = None
        after = self.definitions()
        applied.affected.update(self._queue_keys(before) | self._queue_keys(after))
        if before.local_queues != after.local_queues:
            self._context_changed(applied)

    @staticmethod
    def _queue_keys(found: Definitions) -> set[StateKey]:
        keys_ = {StateKey("queue", None, name) for name in found.queues}
        keys_.update(StateKey("cohort", None, name) for name in found.cohorts)
        return keys_

    def _apply_priority_class(
        self, meta: ObjectMeta, obj: Mapping[str, object], deleted: bool, applied: Applied
    ) -> None:
        if deleted:
            self.priority_classes.pop(meta.name, None)
        else:
            try:
                self.priority_classes[meta.name] = decode(obj, PriorityClass)
            except ObjectError as exc:
                applied.problems.append(f"PriorityClass {meta.name}: {describe_error(exc)}")
                return
        self._context_changed(applied)

    def _apply_namespace(self, meta: ObjectMeta, deleted: bool, applied: Applied) -> None:
        managed = not deleted and meta.labels.get(MANAGED_NAMESPACE_LABEL) == "true"
        if managed != (meta.name in self.managed_namespaces):
            if managed:
                self.managed_namespaces.add(meta.name)
                for key, pod in list(self.pods.items()):
                    if key[0] == meta.name:
                        self._link(key, pod, applied)
            else:
                self.managed_namespaces.discard(meta.name)
        deleting = not deleted and meta.deletion_timestamp is not None
        if deleting == (meta.name in self.deleting_namespaces):
            return
        if deleting:
            self.deleting_namespaces.add(meta.name)
        else:
            self.deleting_namespaces.discard(meta.name)
        applied.affected.update(
            StateKey("workload", ns, name) for ns, name in self.managed if ns == meta.name
        )

    def _apply_budget(
        self, meta: ObjectMeta, obj: Mapping[str, object], deleted: bool, applied: Applied
    ) -> None:
        key = (meta.namespace, meta.name)
        applied.affected.add(StateKey("pdb", *key))
        if deleted:
            self.budgets.pop(key, None)
            return
        try:
            self.budgets[key] = decode(obj, PodDisruptionBudget)
        except ObjectError as exc:
            self.budgets.pop(key, None)
            applied.problems.append(f"PodDisruptionBudget {key[0]}/{key[1]}: {describe_error(exc)}")

    def _desired_budget(self, key: tuple[str, str]) -> Desired:
        """The budget with the managed workloads whose live pods it selects, counted."""
        budget = self.budgets.get(key)
        if budget is None:
            return Desired(None)
        covered: dict[str, int] = {}
        selector = budget.spec.selector
        if selector is not None:
            # Only managed workloads count, so only their members are looked at.
            for workload in sorted(w for w in self.managed if w[0] == key[0]):
                for pod in self._member_pods(workload):
                    if settled(pod) or pod.metadata.deletion_timestamp:
                        continue
                    if selector.matches(pod.metadata.labels):
                        name = "/".join(workload)
                        covered[name] = covered.get(name, 0) + 1
        status = budget.status
        message = DisruptionBudgetState(
            namespace=key[0],
            name=key[1],
            uid=budget.metadata.uid,
            disruptions_allowed=status.disruptions_allowed,
            expected_pods=status.expected_pods,
            current_healthy=status.current_healthy,
            desired_healthy=status.desired_healthy,
            workloads=dict(sorted(covered.items())),
        )
        return Desired(message, budget.metadata.uid)

    def _context_changed(self, applied: Applied) -> None:
        self._context = None
        applied.affected.update(StateKey("workload", ns, name) for ns, name in self.managed)

    def _desired_topology(self, name: str) -> Desired:
        problems: list[str] = []
        for kind in ("Topology", "KueueTopology"):
            topology = self.topologies.get((kind, name))
            if topology is None:
                continue
            config, found = topology_config(topology)
            if config is not None:
                return Desired(config, topology.metadata.uid)
            problems.extend(f"{kind} {name}: {p} (not published)" for p in found)
        return Desired(None, problems=tuple(problems))

    # ------------------------------------------------------------------ pods

    def _apply_pod(
        self, meta: ObjectMeta, obj: Mapping[str, object], deleted: bool, applied: Applied
    ) -> None:
        key = (meta.namespace, meta.name)
        applied.affected.add(StateKey("pod", *key))
        if deleted:
            self.pods.pop(key, None)
            self._pod_states.pop(key, None)
            self._unlink(key, applied, deleted=True)
            return
        try:
            pod = slim_pod(decode(obj, Pod))
        except ObjectError as exc:
            applied.problems.append(f"Pod {meta.namespace}/{meta.name}: {describe_error(exc)}")
            return
        self.pods[key] = pod
        self._link(key, pod, applied)

    def _unlink(self, key: tuple[str, str], applied: Applied, *, deleted: bool = False) -> None:
        for ref in self._pod_refs.pop(key, ()):
            pods = self._by_ref.get(ref)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._by_ref[ref]
        old = self._resolution.pop(key, None)
        if old is not None and old.workload is not None:
            members = self._members.get(old.workload)
            if members is not None:
                members.discard(key)
                if not members:
                    del self._members[old.workload]
                    if old.owner is not None and old.owner[0] in ("foreign", "Pod"):
                        # Known only through its pods: forget it with the last one.
                        self.foreign.pop(old.owner[1], None)
                        if deleted:
                            self._forget_source(old.workload, old.owner)
            applied.affected.add(StateKey("workload", *old.workload))

    def _link(self, key: tuple[str, str], pod: Pod, applied: Applied) -> None:
        self._unlink(key, applied)
        resolution = self._resolve(pod)
        self._resolution[key] = resolution
        refs = self._refs_of(pod)
        self._pod_refs[key] = refs
        for ref in refs:
            self._by_ref.setdefault(ref, set()).add(key)
        workload = resolution.workload
        if workload is None:
            return
        self._members.setdefault(workload, set()).add(key)
        if resolution.owner is not None:
            self._sources[workload] = resolution.owner
        self._check_quorum(workload)
        applied.affected.add(StateKey("workload", *workload))
        gated = pod.gated()
        if workload not in self.managed and (gated or self._started_ungated(pod)):
            self.managed.add(workload)
            applied.affected.update(StateKey("pod", *m) for m in self._members[workload])
        if settled(pod) and workload in self.managed:
            # Now, not only when the workload is next published: its pods may be gone by then.
            self._note_finished(workload)

    def _started_ungated(self, pod: Pod) -> bool:
        """Whether ``pod`` is tidegate's by what it names (a queue, or its namespace) and was
        bound without the gate: its workload is managed although no pod of it was gated."""
        meta = pod.metadata
        if not pod.spec.node_name or meta.annotations.get(keys.MIRROR_ANNOTATION) is not None:
            return False
        if any(ref.kind == "DaemonSet" for ref in meta.owner_references):
            return False
        if meta.namespace in self.managed_namespaces:
            return True
        return any(k in meta.labels or k in meta.annotations for k in keys.QUEUE_KEYS)

    @staticmethod
    def _refs_of(pod: Pod) -> list[str]:
        refs = [ref.uid for ref in pod.metadata.owner_references]
        group = _group_name(pod.metadata)
        if group is not None:
            refs.append(f"group:{pod.metadata.namespace}/{group}")
        return refs

    def _resolve(self, pod: Pod) -> _Resolution:
        meta = pod.metadata
        ns = meta.namespace
        group = _group_name(meta)
        if group is not None:
            if (ns, group) not in self.podgroups:
                return _Resolution(None, waits_for=f"group:{ns}/{group}")
            return _Resolution((ns, group), ("PodGroup", f"{ns}/{group}"))
        ref = meta.controller_ref()
        if ref is None:
            return _Resolution((ns, meta.name), ("Pod", meta.uid))
        if ref.kind not in OWNER_KINDS:
            self.foreign.setdefault(
                ref.uid,
                Owner(
                    kind=ref.kind,
                    api_version=ref.api_version,
                    meta=ObjectMeta(name=ref.name, namespace=ns, uid=ref.uid),
                ),
            )
            return _Resolution((ns, ref.name), ("foreign", ref.uid))
        owner = self.owners.get(ref.uid)
        if owner is None:
            return _Resolution(None, waits_for=ref.uid)
        return self._top(owner)

    def _top(self, owner: Owner) -> _Resolution:
        """The workload of an intermediate or top owner (Job → JobSet, ReplicaSet → Deployment)."""
        parent_ref = owner.meta.controller_ref()
        if parent_ref is not None and parent_ref.kind == PARENT_KINDS.get(owner.kind):
            parent = self.owners.get(parent_ref.uid)
            if parent is None:
                return _Resolution(None, waits_for=parent_ref.uid)
            owner = parent
        return _Resolution((owner.meta.namespace, owner.meta.name), ("owner", owner.meta.uid))

    def _pod_state(self, pod: Pod) -> PodState:
        """``pod_state(pod)`` (no workload), computed once per pod object."""
        key = (pod.metadata.namespace, pod.metadata.name)
        known = self._pod_states.get(key)
        if known is None or known[0] is not pod:
            known = self._pod_states[key] = (pod, pod_state(pod)[0])
        return known[1]

    def _desired_pod(self, key: tuple[str, str]) -> Desired:
        pod = self.pods.get(key)
        if pod is None:
            return Desired(None)
        resolution = self._resolution.get(key)
        workload = podset = rank = None
        if resolution is not None and resolution.workload in self.managed:
            owner = self._owner_of(resolution.workload)
            if owner is not None:
                workload = f"{resolution.workload[0]}/{resolution.workload[1]}"
                placement = self.context().placement_labels
                podset, rank, _ = pod_position(owner, pod, placement)
        message, problems = pod_state(pod, workload=workload, podset=podset, rank=rank)
        where = f"Pod {key[0]}/{key[1]}"
        return Desired(message, pod.metadata.uid, tuple(f"{where}: {p}" for p in problems))

    # ------------------------------------------------------------------ owners

    def _apply_owner(
        self,
        kind: ObjectKind,
        meta: ObjectMeta,
        obj: Mapping[str, object],
        deleted: bool,
        applied: Applied,
    ) -> None:
        previous = self.owners.get(meta.uid)
        if previous is not None:
            applied.affected.update(self._owner_workloads(previous))
        relink = True
        if deleted:
            self.owners.pop(meta.uid, None)
            self._forget_source((meta.namespace, meta.name), ("owner", meta.uid))
        else:
            owner = self._decode_owner(kind, meta, obj)
            self.owners[meta.uid] = owner
            parent = meta.controller_ref()
            if parent is not None:
                self._children.setdefault(parent.uid, set()).add(meta.uid)
            applied.affected.update(self._owner_workloads(owner))
            newly_managed = self._manage_if_queued(owner)
            # A status update (a Job counting its pods) changes no pod's workload or position:
            # relinking every pod of a big gang on each would cost O(pods) per event.
            relink = previous is None or newly_managed or not _same_for_pods(previous, owner)
        if relink:
            self._relink([meta.uid, *self._children.get(meta.uid, ())], applied)
        if deleted:
            self._children.pop(meta.uid, None)
            parent = meta.controller_ref()
            siblings = self._children.get(parent.uid) if parent is not None else None
            if parent is not None and siblings is not None:
                siblings.discard(meta.uid)
                if not siblings:
                    del self._children[parent.uid]

    def _decode_owner(self, kind: ObjectKind, meta: ObjectMeta, obj: Mapping[str, object]) -> Owner:
        api_version = str(obj.get("apiVersion", ""))
        decoded: OwnerObject
        try:
            if kind == "Job":
                decoded = decode(obj, Job)
            elif kind == "JobSet":
                decoded = decode(obj, JobSet)
            elif kind == "PodGroup":
                decoded = decode(obj, PodGroup)
            else:
                decoded = decode(obj, ReplicaOwner)
        except ObjectError as exc:
            return Owner(kind, api_version, meta, None, describe_error(exc))
        return Owner(kind, api_version, meta, decoded)

    def _manage_if_queued(self, owner: Owner) -> bool:
        """A top owner created suspended for tidegate is managed before it has any pod;
        whether it became managed now."""
        resolution = self._top(owner)
        workload = resolution.workload
        if resolution.owner != ("owner", owner.meta.uid) or workload is None:
            return False
        if workload in self.managed or not suspension(owner.meta, owner.obj).resume_on_admission:
            return False
        self.managed.add(workload)
        return True

    def _owner_workloads(self, owner: Owner) -> set[StateKey]:
        resolution = self._top(owner)
        if resolution.workload is None:
            return set()
        if resolution.owner is not None:
            self._sources[resolution.workload] = resolution.owner
        return {StateKey("workload", *resolution.workload)}

    def _relink(self, refs: Iterable[str], applied: Applied) -> None:
        pods: set[tuple[str, str]] = set()
        for ref in refs:
            pods.update(self._by_ref.get(ref, ()))
        for key in pods:
            pod = self.pods.get(key)
            if pod is not None:
                applied.affected.add(StateKey("pod", *key))
                self._link(key, pod, applied)

    def _forget_source(self, workload: tuple[str, str], source: tuple[str, str]) -> None:
        """The top owner ``source`` of ``workload`` is gone: so is the workload."""
        if self._sources.get(workload) == source:
            del self._sources[workload]
            self.managed.discard(workload)
            self._quorum.discard(workload)
            self._finished.pop(workload, None)

    def _apply_podgroup(
        self, meta: ObjectMeta, obj: Mapping[str, object], deleted: bool, applied: Applied
    ) -> None:
        key = (meta.namespace, meta.name)
        if deleted:
            self.podgroups.pop(key, None)
            self._forget_source(key, ("PodGroup", f"{key[0]}/{key[1]}"))
        else:
            self.podgroups[key] = self._decode_owner("PodGroup", meta, obj)
            # Its own source even without pods: a restarted watcher must keep publishing a
            # finished group whose pods were deleted, not tombstone it.
            self._sources[key] = ("PodGroup", f"{key[0]}/{key[1]}")
        applied.affected.add(StateKey("workload", *key))
        self._relink([f"group:{key[0]}/{key[1]}"], applied)
        self._check_quorum(key)

    def _check_quorum(self, workload: tuple[str, str]) -> None:
        """Note when a PodGroup has its minMember pods: it is published from then on, whatever
        its pods do later (members finish and go away)."""
        group = self.podgroups.get(workload)
        if group is None or workload in self._quorum:
            return
        min_member = group.obj.spec.min_member if isinstance(group.obj, PodGroup) else None
        if len(self._members.get(workload, ())) >= (min_member or 0):
            self._quorum.add(workload)

    def _owner_of(self, workload: tuple[str, str]) -> Owner | None:
        source = self._sources.get(workload)
        if source is None:
            return None
        kind, ident = source
        if kind == "PodGroup":
            return self.podgroups.get(workload)
        if kind == "Pod":
            pod = self.pods.get(workload)
            if pod is None or pod.metadata.uid != ident:
                return None
            return Owner("Pod", "v1", pod.metadata, pod)
        if kind == "foreign":
            if not self._members.get(workload):
                return None
            return self.foreign.get(ident)
        return self.owners.get(ident)

    def _member_pods(self, workload: tuple[str, str]) -> list[Pod]:
        return [
            self.pods[key] for key in sorted(self._members.get(workload, ())) if key in self.pods
        ]

    def _note_finished(self, workload: tuple[str, str]) -> None:
        owner = self._owner_of(workload)
        if owner is None:
            return
        # Only a PodGroup's end is read from its pods; listing a big gang's members on each of
        # its pods' events would cost O(pods) per event.
        members = self._member_pods(workload) if isinstance(owner.obj, PodGroup) else []
        finished = workload_finished(owner.obj, members)
        if finished is not None:
            self._finished[workload] = (owner.meta.uid, finished)

    def _keep_finished(self, workload: tuple[str, str], message: WorkloadState) -> WorkloadState:
        """``message`` with ``finished`` as first seen for this owner (module doc)."""
        known = self._finished.get(workload)
        if known is not None and known[0] == message.uid:
            if message.finished != known[1]:
                return msgspec.structs.replace(message, finished=known[1])
            return message
        if message.finished is not None:
            self._finished[workload] = (message.uid, message.finished)
        return message

    def _desired_workload(self, workload: tuple[str, str]) -> Desired:
        if workload not in self.managed:
            return Desired(None)
        owner = self._owner_of(workload)
        if owner is None:
            return Desired(None)
        members = self._member_pods(workload)
        if isinstance(owner.obj, PodGroup) and workload not in self._quorum:
            return Desired(None)
        rollout = self._rollout_replicas(owner)
        message = self._keep_finished(
            workload, recognize(owner, members, self.context(), rollout_replicas=rollout)
        )
        if workload[0] in self.deleting_namespaces:
            message = msgspec.structs.replace(message, namespace_deleting=True)
        levels = self.context().placement_levels
        bypassing = [
            state for pod in members if bypassed_gate(state := self._pod_state(pod), levels)
        ]
        if bypassing:
            message = msgspec.structs.replace(
                message,
                bypassed_pods=len(bypassing),
                bypassed_requests=res.total(state.requests for state in bypassing),
                bypassed_cards=res.total(
                    cards_on_node(state.requests, self._gpu_product(state.node_name))
                    for state in bypassing
                ),
            )
        problems = (message.invalid_reason,) if message.invalid_reason else ()
        return Desired(message, message.uid, problems)

    def _gpu_product(self, node_name: str | None) -> str | None:
        """The GPU model label of the node ``node_name`` (None: unknown node, or no label)."""
        node = self.nodes.get(node_name) if node_name else None
        return None if node is None else node.metadata.labels.get(GPU_PRODUCT_LABEL)

    def _rollout_replicas(self, owner: Owner) -> int | None:
        """For a Deployment: the replicas of its ReplicaSets summed (old ones included while
        it rolls out); None for other owners or before any ReplicaSet is seen."""
        if owner.kind != "Deployment":
            return None
        total: int | None = None
        for uid in self._children.get(owner.meta.uid, ()):
            child = self.owners.get(uid)
            if child is None or not isinstance(child.obj, ReplicaOwner):
                continue
            replicas = child.obj.spec.replicas
            total = (total or 0) + max(1 if replicas is None else replicas, 0)
        return total


def _same_for_pods(before: Owner, after: Owner) -> bool:
    """Whether the pods of an owner resolve and read the same after an update of it: same
    controller, same spec (only its status, labels or annotations changed)."""
    return (
        before.meta.controller_ref() == after.meta.controller_ref()
        and before.error == after.error
        and getattr(before.obj, "spec", None) == getattr(after.obj, "spec", None)
    )


def _group_name(meta: ObjectMeta) -> str | None:
    for name in keys.POD_GROUP_KEYS:
        value = meta.labels.get(name) or meta.annotations.get(name)
        if value:
            return value
    return None


def _allocatable(node: Node | None) -> dict[str, int]:
    """What ``node`` offers (its allocatable; a value that is not a quantity counts as 0, and
    is reported with the node)."""
    if node is None:
        return {}
    return parse_resource_list(node.status.allocatable, "status.allocatable", [])
