"""Whether a workload ran to the end, read from its top owner's status or its pods' phases.

Admission charges a workload's quota when it admits it and must give it back when the workload
finishes, or a queue whose training Jobs ran to completion would starve. Kubernetes says so
differently per owner kind; :func:`workload_finished` reads each one:

- **Job**: the ``Complete`` or ``Failed`` condition with status ``"True"`` (the real Job
  controller's terminal conditions; the interim ``SuccessCriteriaMet``/``FailureTarget`` ones
  are not enough, since pods may still be terminating).
- **JobSet**: the ``Completed`` or ``Failed`` condition with status ``"True"``.
- **bare Pod**: phase ``Succeeded`` or ``Failed``, unless it is being deleted.
- **PodGroup**: from its member pods (the group has no controller that says so): finished once
  every member is ``Succeeded`` or ``Failed`` and none is being deleted, and then
  ``Completed`` when at least ``minMember`` members (every member, without a minMember)
  succeeded, ``Failed`` when fewer did although the group had its ``minMember`` pods.
- **Deployment, ReplicaSet** and owners tidegate cannot read (StatefulSets, custom resources):
  never; their quota is given back when they are deleted.

A pod being deleted says nothing about how its work went: since Kubernetes 1.27 the kubelet
moves a deleted pod to a terminal phase before it is removed, so an evicted gang (tidal
preemption in restart mode, a drained node) would otherwise read as ``Failed`` — or, if its
containers exit 0 on SIGTERM, as ``Completed`` — while its controller is about to re-create
the pods.

Pure code: no I/O. Keeping the verdict once reached (pods of a finished group may be deleted
afterwards) is the index's job (:mod:`tidegate.kube.read.index`).
"""

from collections.abc import Sequence
from typing import Literal

from tidegate.kube.read.objects import Job, JobSet, Pod, PodGroup, ReplicaOwner
from tidegate.model.pods import TERMINAL_PHASES

Finished = Literal["Completed", "Failed"]
"""How a workload ended (the values of ``WorkloadState.finished``)."""


def workload_finished(
    owner: Job | JobSet | ReplicaOwner | PodGroup | Pod | None, members: Sequence[Pod]
) -> Finished | None:
    """How the workload of top owner ``owner`` (a decoded object, or None when its spec could
    not be read) with member pods ``members`` ended, or None while it may still run."""
    if isinstance(owner, Job):
        return _from_conditions(owner.status.is_true("Complete"), owner.status.is_true("Failed"))
    if isinstance(owner, JobSet):
        return _from_conditions(owner.status.is_true("Completed"), owner.status.is_true("Failed"))
    if isinstance(owner, Pod):
        if not settled(owner):
            return None
        return "Completed" if owner.status.phase == "Succeeded" else "Failed"
    if isinstance(owner, PodGroup):
        return podgroup_finished(owner.spec.min_member, members)
    return None


def podgroup_finished(min_member: int | None, members: Sequence[Pod]) -> Finished | None:
    """The PodGroup rule (module docstring) for a group of ``min_member`` with ``members``."""
    if not members or not all(settled(p) for p in members):
        return None
    needed = min_member if min_member is not None and min_member > 0 else len(members)
    succeeded = sum(1 for p in members if p.status.phase == "Succeeded")
    if succeeded >= needed:
        return "Completed"
    if len(members) >= needed:
        return "Failed"
    return None


def settled(pod: Pod) -> bool:
    """Whether ``pod`` ended by itself: in a terminal phase and not being deleted."""
    return pod.status.phase in TERMINAL_PHASES and pod.metadata.deletion_timestamp is None


def _from_conditions(complete: bool, failed: bool) -> Finished | None:
    # The real controllers never set both; if a writer did, the failure is the safer reading
    # (the work is not done either way, and the quota is released all the same).
    if failed:
        return "Failed"
    return "Completed" if complete else None
