"""Whose suspension is it: the rule that tells a Job queued for tidegate from a stopped one.

A Job or JobSet with ``spec.suspend: true`` runs no pods. Two very different things look the
same on the object:

- **queued for tidegate** (Kueue's convention): the object was created suspended and names a
  queue on itself (label or annotation ``tidegate.io/queue``, ``kueue.x-k8s.io/queue-name``,
  ``kai.scheduler/queue`` or ``scheduling.volcano.sh/queue-name``): the queueing system owns
  ``suspend`` and unsuspends it on admission;
- **stopped**: someone suspended it — a person, another controller, or tidegate's preemption
  aborting a victim. That suspension is respected: the workload reserves nothing until it is
  resumed by whoever suspended it.

tidegate tells them apart with an annotation it writes itself, ``tidegate.io/resume: manual``
(:data:`~tidegate.model.names.RESUME_ANNOTATION`): the ungater sets it on every admitted Job
or JobSet (with the trace-context annotation), in the same patch that unsuspends an object
admitted while suspended, and preemption in the same patch that suspends an aborted victim. So a suspended object is queued for tidegate iff it names a queue and carries neither
that annotation nor ``tidegate.io/preempted-by``. Everything else suspended is stopped.

A third kind is tidegate's own **re-queue**: a restarted preemption victim, or a gang evicted
after a node failure, is suspended by tidegate with ``tidegate.io/requeued``
(:data:`~tidegate.model.names.REQUEUE_ANNOTATION`) and ``tidegate.io/resume`` removed, in one
patch, so that its Job controller deletes the pods without counting them as failures. Such an
object is queued for tidegate whether or not it names a queue (a gate-all namespace's Job
names none), until the ungater unsuspends it on admission and removes the annotation. A
``resume: manual`` seen beside the re-queue marker is a late write meant for the admission
before the re-queue (the re-queue removed the mark), so it does not hand the object back.
Pure code.
"""

from typing import NamedTuple

from tidegate.kube.read import keys
from tidegate.kube.read.objects import Job, JobSet, ObjectMeta
from tidegate.model.names import (
    PREEMPTED_BY_ANNOTATION,
    REQUEUE_ANNOTATION,
    RESUME_ANNOTATION,
    RESUME_MANUAL,
)


class Suspension(NamedTuple):
    """``suspended``: spec.suspend is true; ``resume_on_admission``: tidegate unsuspends it."""

    suspended: bool
    resume_on_admission: bool


NOT_SUSPENDED = Suspension(False, False)
"""What every object that is not a suspended Job or JobSet has."""


def suspension(meta: ObjectMeta, obj: object) -> Suspension:
    """The suspension of a top owner ``obj`` with metadata ``meta`` (module docstring)."""
    if not isinstance(obj, Job | JobSet) or obj.spec.suspend is not True:
        return NOT_SUSPENDED
    names_queue = REQUEUE_ANNOTATION in meta.annotations or any(
        meta.labels.get(k) or meta.annotations.get(k) for k in keys.QUEUE_KEYS
    )
    requeued = REQUEUE_ANNOTATION in meta.annotations
    # A re-queue removes ``resume: manual`` in its own patch: seen beside the re-queue marker,
    # that mark is a stale one for an earlier admission that landed late.
    marked_manual = meta.annotations.get(RESUME_ANNOTATION) == RESUME_MANUAL and not requeued
    handed_back = marked_manual or PREEMPTED_BY_ANNOTATION in meta.annotations
    return Suspension(True, names_queue and not handed_back)
