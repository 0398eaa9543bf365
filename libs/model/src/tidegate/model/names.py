"""Kubernetes names tidegate itself defines, in one place for every package that uses them."""

from typing import Final

ADMISSION_GATE: Final = "tidegate.io/admission"
"""The scheduling gate that holds a managed pod until admission has placed it."""

MANAGED_NAMESPACE_LABEL: Final = "tidegate.io/managed"
"""On a Namespace, ``true``: every pod created there is tidegate's (the chart's webhook sends
them all; the watcher counts one that started ungated as having bypassed the gate)."""

RESUME_ANNOTATION: Final = "tidegate.io/resume"
"""On a Job or JobSet: ``manual`` means tidegate does not unsuspend it (docs/workloads.md,
"Suspended Jobs and JobSets"). tidegate writes it when it unsuspends an object on admission
(any later suspension is someone else's) and when it aborts a preemption victim."""

RESUME_MANUAL: Final = "manual"
"""The value of :data:`RESUME_ANNOTATION` that hands resuming to people."""

PREEMPTED_BY_ANNOTATION: Final = "tidegate.io/preempted-by"
"""Set on an aborted victim's top owner: the key of the workload it was preempted for."""

REQUEUE_ANNOTATION: Final = "tidegate.io/requeued"
"""On a Job or JobSet tidegate suspended to send it back to its queue (a restarted preemption
victim, a gang evicted after a node failure or a move): why, e.g. ``preempted by ns/name``.
While it is there the suspension is tidegate's own: the workload is queued and unsuspended on
its next admission, which removes the annotation (docs/workloads.md, "Suspended Jobs and
JobSets"). Suspending, not evicting, is what keeps the Job controller from counting the pods
as failures (backoffLimit, the pod failure backoff)."""

REQUEUE_KINDS: Final = frozenset({"Job", "JobSet"})
"""Top-owner kinds tidegate re-queues by suspending them; other kinds' pods are evicted."""
