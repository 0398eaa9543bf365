"""Simulated workload controllers: Job (batch/v1), ReplicaSet and Deployment (apps/v1).

Each creates pods from its template, the way kube-controller-manager does: generated names,
the template's labels and annotations, an ``ownerReference`` with ``controller: true``, and
replacements for pods that failed, were evicted or were deleted. Pods go through the same
create path as clients' pods, so tidegate-managed templates get the admission gate when the
webhook emulation is on.

Job: ``parallelism``, ``completions``, ``completionMode: Indexed`` (index in the
``batch.kubernetes.io/job-completion-index`` annotation and label, ``<job>-<index>-`` name
prefix), ``suspend`` (active pods deleted, ``Suspended`` condition), ``backoffLimit``
(``Failed`` with ``BackoffLimitExceeded``), the ``Complete`` condition, and status counters
(active, ready, succeeded, failed, terminating, completedIndexes, start/completion time). As
the real controller does (``syncJobBatchPeriod``, 1 s in kube-controller-manager), a change of
its pods syncs the Job at most once per :data:`JOB_POD_SYNC_BATCH_SECONDS`, a change of the
Job itself at once: a 256-pod gang finishing writes its status a few times, not 256. A pod
deleted before it finished counts as failed, as with the real controller's tracking
finalizers, unless the controller deleted it itself (suspend); a terminating pod does not
block its replacement (podReplacementPolicy TerminatingOrFailed) unless the Job has a pod
failure policy. Failures are judged as kube-controller-manager does
(:mod:`tidegate.sim.jobfailure`): podFailurePolicy, the pod failure backoff before
replacements (10 s doubling, at most 10 minutes, wall clock), backoffLimit,
backoffLimitPerIndex with maxFailedIndexes and failedIndexes.

ReplicaSet keeps ``replicas`` live pods. Deployment owns one ReplicaSet per pod-template hash
and rolls out a new template by its strategy (:func:`rollout`): ``RollingUpdate`` with
``maxSurge`` / ``maxUnavailable`` (integers or percentages, 25% each by default), old pods
scaled down only as new ones become available (Ready); ``Recreate``. It reports
replicas/updated/ready/available and the Available condition.

JobSet (jobset.x-k8s.io/v1alpha2, when its CRD is served): one Job per replicated job and
index, suspend propagated, Completed/Failed conditions (see :class:`JobSetController`).

Not simulated: successPolicy, activeDeadlineSeconds, TTL after finished,
revision history limits, minReadySeconds, progress deadlines, JobSet restarts.
"""

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from tidegate.sim import jobfailure
from tidegate.sim import pods as podrules
from tidegate.sim.apiserver import ApiServer
from tidegate.sim.errors import ApiError, JsonObject
from tidegate.sim.kinds import DEPLOYMENTS, JOBS, PODS, REPLICASETS, STATUS, ResourceType
from tidegate.sim.loop import Reconciler
from tidegate.sim.names import rfc3339
from tidegate.sim.store import DELETED, WatchEvent, object_key

COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
JOB_POD_SYNC_BATCH_SECONDS: Final = 1.0
"""Pod events of one Job are synced together after this long (Kubernetes' syncJobBatchPeriod)."""
CREATE_RETRY_SECONDS: Final = 1.0
"""How soon an owner whose pod create a webhook refused (or could not be called) tries again."""
_LOG: Final = logging.getLogger(__name__)
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})

Key = tuple[str, str]


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _copy(value: JsonObject) -> JsonObject:
    copied = msgspec.json.decode(msgspec.json.encode(value))
    assert isinstance(copied, dict)
    return copied


def controller_of(obj: JsonObject) -> JsonObject | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in _list(_dict(obj.get("metadata")).get("ownerReferences")):
        if _dict(ref).get("controller") is True:
            return _dict(ref)
    return None


def owner_reference(owner: JsonObject, rtype: ResourceType) -> JsonObject:
    """A controller ownerReference pointing at ``owner``."""
    metadata = _dict(owner.get("metadata"))
    return {
        "apiVersion": rtype.api_version,
        "kind": rtype.kind,
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_ready(pod: JsonObject) -> bool:
    """Whether the pod's Ready condition is True."""
    for condition in _list(_dict(pod.get("status")).get("conditions")):
        if _dict(condition).get("type") == "Ready":
            return _dict(condition).get("status") == "True"
    return False


def _set_condition(status: JsonObject, kind: str, value: str, reason: str, message: str) -> None:
    now = rfc3339()
    podrules.set_condition(
        status,
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        },
    )


def _condition_true(status: JsonObject, kind: str) -> bool:
    return any(
        _dict(c).get("type") == kind and _dict(c).get("status") == "True"
        for c in _list(status.get("conditions"))
    )


def compress_indexes(indexes: set[int]) -> str:
    """Sorted indexes as the API's interval string ("0-3,5,7-8")."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = prev = None
    for index in [*ordered, None]:
        if start is None:
            start = prev = index
            continue
        if index is not None and prev is not None and index == prev + 1:
            prev = index
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = index
    return ",".join(parts)


class _OwnedPods(Reconciler):
    """Shared plumbing: index pods by controlling owner uid and wake the owner on changes."""

    owner_type: ResourceType
    owned_type: ResourceType = PODS

    def __init__(self, api: ApiServer) -> None:
        super().__init__()
        self.api = api
        self.owned: dict[str, set[Key]] = {}
        self.owner_key_by_uid: dict[str, Key] = {}
        self._unsubscribe: list[Callable[[], None]] = []
        self._admitting: dict[Key, int] = {}
        """Owners with pod creates waiting for webhooks (not reconciled meanwhile)."""
        self._creates: set[asyncio.Task[None]] = set()

    def admitting(self, owner: Key) -> bool:
        """Whether pods of ``owner`` are being created through webhooks (the real controllers'
        expectations: the owner is reconciled again once they are created or refused)."""
        return bool(self._admitting.get(owner))

    def create_pod(self, owner: JsonObject, pod: JsonObject) -> JsonObject | None:
        """Create a pod of ``owner``: at once (the pod) or, when a stored webhook selects it,
        by a task that awaits the webhooks first (None). A refused create is logged, as the
        real controllers' ``FailedCreate``, and the owner retried after
        :data:`CREATE_RETRY_SECONDS`."""
        namespace = str(_dict(owner.get("metadata")).get("namespace"))
        if not self.api.webhooks.matching(PODS, namespace, pod):
            return self.api.create(PODS, namespace, pod)
        key = object_key(owner)
        self._admitting[key] = self._admitting.get(key, 0) + 1
        task = asyncio.get_running_loop().create_task(self._admit(key, namespace, pod))
        self._creates.add(task)
        task.add_done_callback(self._creates.discard)
        return None

    async def _admit(self, owner: Key, namespace: str, pod: JsonObject) -> None:
        retry_at = None
        try:
            admitted = await self.api.webhooks.admit(PODS, namespace, pod)
            self.api.create(PODS, namespace, admitted)
        except ApiError as exc:
            _LOG.warning("%s: %s/%s: FailedCreate: %s", self.name, *owner, exc.message)
            retry_at = time.monotonic() + CREATE_RETRY_SECONDS
        finally:
            left = self._admitting.get(owner, 1) - 1
            if left > 0:
                self._admitting[owner] = left
            else:
                self._admitting.pop(owner, None)
        if retry_at is None:
            self.mark(owner)
        else:
            self.at(retry_at, owner)

    def start(self) -> None:
        """Follow owners and owned objects; reconcile every existing owner."""
        store = self.api.store
        self._unsubscribe.append(store.subscribe(self.owner_type.key, self._on_owner))
        self._unsubscribe.append(store.subscribe(self.owned_type.key, self._on_owned))
        for obj in store.objects(self.owned_type.key):
            self._index(obj, add=True)
        for owner in store.objects(self.owner_type.key):
            self._remember_owner(owner)
            self.mark(object_key(owner))

    def stop(self) -> None:
        """Stop following the store and the pod creates in flight."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        for task in self._creates:
            task.cancel()

    def _remember_owner(self, owner: JsonObject) -> None:
        uid = _dict(owner.get("metadata")).get("uid")
        if uid:
            self.owner_key_by_uid[str(uid)] = object_key(owner)

    def _on_owner(self, event: WatchEvent) -> None:
        if event.type == DELETED:
            uid = str(_dict(event.obj.get("metadata")).get("uid"))
            self.owner_key_by_uid.pop(uid, None)
            return
        self._remember_owner(event.obj)
        self.mark(object_key(event.obj))

    def _on_owned(self, event: WatchEvent) -> None:
        ref = controller_of(event.obj)
        old_ref = controller_of(event.old) if event.old is not None else None
        if old_ref != ref or event.type == DELETED:
            if event.old is not None:
                self._index(event.old, add=False)
            if event.type != DELETED:
                self._index(event.obj, add=True)
        elif event.old is None:
            self._index(event.obj, add=True)
        if ref is None or ref.get("kind") != self.owner_type.kind:
            return
        uid = str(ref.get("uid"))
        if event.type == DELETED:
            self.on_owned_deleted(uid, event.obj)
        owner = self.owner_key_by_uid.get(uid)
        if owner is not None:
            self.owned_changed(owner)

    def on_owned_deleted(self, owner_uid: str, obj: JsonObject) -> None:
        """Hook: an owned object disappeared."""

    def owned_changed(self, owner: Key) -> None:
        """Hook: an object ``owner`` controls changed (default: reconcile it soon)."""
        self.mark(owner)

    def _index(self, obj: JsonObject, *, add: bool) -> None:
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != self.owner_type.kind:
            return
        uid = str(ref.get("uid"))
        if add:
            self.owned.setdefault(uid, set()).add(object_key(obj))
        else:
            members = self.owned.get(uid)
            if members is not None:
                members.discard(object_key(obj))
                if not members:
                    del self.owned[uid]

    def owned_objects(self, uid: str) -> list[JsonObject]:
        """Current objects controlled by the owner with ``uid``."""
        found: list[JsonObject] = []
        for key in sorted(self.owned.get(uid, ())):
            obj = self.api.store.get(self.owned_type.key, *key)
            if obj is not None:
                found.append(obj)
        return found

    def write_status(self, rtype: ResourceType, owner: JsonObject, status: JsonObject) -> None:
        """Write the owner's status if it changed."""
        if owner.get("status") == status:
            return
        key = object_key(owner)
        self.api.update(rtype, key[0], key[1], {**owner, "status": status}, subresource=STATUS)

    def new_pod(
        self,
        owner: JsonObject,
        *,
        prefix: str,
        extra_labels: dict[str, str],
        extra_annotations: dict[str, str],
    ) -> JsonObject:
        """A pod from the owner's template (not yet created)."""
        template = _dict(_dict(owner.get("spec")).get("template"))
        metadata = _dict(template.get("metadata"))
        labels = {**_dict(metadata.get("labels")), **extra_labels}
        annotations = {**_dict(metadata.get("annotations")), **extra_annotations}
        pod_meta: JsonObject = {
            "generateName": prefix,
            "labels": labels,
            "ownerReferences": [owner_reference(owner, self.owner_type)],
        }
        if annotations:
            pod_meta["annotations"] = annotations
        if metadata.get("finalizers"):
            pod_meta["finalizers"] = metadata["finalizers"]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": pod_meta,
            "spec": _copy(_dict(template.get("spec"))),
        }


@dataclass(slots=True)
class _JobFailures:
    """What the Job controller remembers of one Job's finished pods (the real one keeps it in
    the Job's status and its pods' tracking finalizers)."""

    counted: set[str] = field(default_factory=set)
    """Pods whose end was counted (failed or succeeded)."""
    own: set[str] = field(default_factory=set)
    """Pods the controller deleted itself (suspend, a failed Job or index): never counted."""
    lost: dict[str, JsonObject] = field(default_factory=dict)
    """Pods removed before they finished (their last state), counted as failed."""
    failed: int = 0
    """Failures counted against the limits (``status.failed``; ignored ones are not)."""
    backoff: dict[int | None, jobfailure.BackoffRecord] = field(default_factory=dict)
    """Pod failure backoff per Job (None) or per index."""
    index_failures: dict[int, int] = field(default_factory=dict)
    index_ignored: dict[int, int] = field(default_factory=dict)
    failed_indexes: set[int] = field(default_factory=set)
    fail: tuple[str, str] | None = None
    """(reason, message) once a pod failure policy's FailJob rule matched."""
    synced: bool = False
    """Whether the Job was synced since this controller started."""


def _index_of(pod: JsonObject) -> int | None:
    value = _dict(_dict(pod.get("metadata")).get("annotations")).get(COMPLETION_INDEX)
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def _uid(obj: JsonObject) -> str:
    return str(_dict(obj.get("metadata")).get("uid"))


class JobController(_OwnedPods):
    """batch/v1 Job controller (see module docstring and :mod:`tidegate.sim.jobfailure`)."""

    name = "job-controller"
    owner_type = JOBS

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api)
        self._failures: dict[str, _JobFailures] = {}
        self._batched: set[Key] = set()
        """Jobs with a batched sync pending."""

    def owned_changed(self, owner: Key) -> None:
        """A pod of the Job changed: sync it with the others changing within the batch."""
        if owner not in self._batched:
            self._batched.add(owner)
            self.at(time.monotonic() + JOB_POD_SYNC_BATCH_SECONDS, owner)

    def on_owned_deleted(self, owner_uid: str, obj: JsonObject) -> None:
        """A pod removed before its failure was counted (before finishing, or failed and gone
        within one sync batch) counts as failed, unless the controller removed it."""
        tracked = self._failures.setdefault(owner_uid, _JobFailures())
        uid = _uid(obj)
        if uid in tracked.own:
            tracked.own.discard(uid)
            return
        if uid not in tracked.counted and _dict(obj.get("status")).get("phase") != "Succeeded":
            tracked.lost[uid] = obj

    def _tracked(self, uid: str, pods: list[JsonObject], old_status: JsonObject) -> _JobFailures:
        """This Job's memory; on first sight (a new Job, or after a restart) the pods that
        finished already are taken as counted in its status."""
        tracked = self._failures.setdefault(uid, _JobFailures())
        if not tracked.synced:
            tracked.synced = True
            tracked.failed = _int(old_status.get("failed"), 0)
            tracked.failed_indexes = _parse_indexes(str(old_status.get("failedIndexes", "")))
            tracked.counted |= {
                _uid(p) for p in pods if _dict(p.get("status")).get("phase") in _TERMINAL
            }
        return tracked

    def _count(
        self, spec: JsonObject, tracked: _JobFailures, pods: list[JsonObject], per_index: int | None
    ) -> None:
        """Count the pods that finished since the last sync (pod failure policy, limits,
        backoff records)."""
        now = time.time()
        new_failed = [
            p
            for p in pods
            if _dict(p.get("status")).get("phase") == "Failed"
            and _uid(p) not in tracked.counted
            and _uid(p) not in tracked.own
        ]
        new_failed += [p for u, p in tracked.lost.items() if u not in tracked.counted]
        tracked.lost.clear()
        new_succeeded = [
            p
            for p in pods
            if _dict(p.get("status")).get("phase") == "Succeeded" and _uid(p) not in tracked.counted
        ]
        tracked.counted |= {_uid(p) for p in (*new_failed, *new_succeeded)}
        for pod in new_failed:
            action, rule = jobfailure.failure_action(spec, pod)
            index = _index_of(pod)
            if action == "FailIndex" and per_index is None:
                action = "Count"
            if action == "FailJob" and tracked.fail is None and rule is not None:
                tracked.fail = ("PodFailurePolicy", jobfailure.fail_job_message(pod, rule))
            if action != "Ignore":
                tracked.failed += 1
            key = index if per_index is not None else None
            tracked.backoff.setdefault(key, jobfailure.BackoffRecord()).note(
                failed=[now], succeeded=[]
            )
            if per_index is None or index is None:
                continue
            if action == "Ignore":
                tracked.index_ignored[index] = tracked.index_ignored.get(index, 0) + 1
                continue
            tracked.index_failures[index] = tracked.index_failures.get(index, 0) + 1
            if action == "FailIndex" or tracked.index_failures[index] > per_index:
                tracked.failed_indexes.add(index)
        if per_index is None and new_succeeded:
            tracked.backoff.setdefault(None, jobfailure.BackoffRecord()).note(
                failed=[], succeeded=[now]
            )

    def reconcile(self, key: Hashable) -> None:
        """Converge one Job."""
        assert isinstance(key, tuple)
        self._batched.discard(key)
        job = self.api.store.get(JOBS.key, *key)
        if job is None or self.admitting(key):
            return
        metadata = _dict(job.get("metadata"))
        uid = str(metadata.get("uid"))
        spec = _dict(job.get("spec"))
        old_status = _dict(job.get("status"))
        status = _copy(old_status)
        pods = self.owned_objects(uid)
        tracked = self._tracked(uid, pods, old_status)
        indexed = spec.get("completionMode") == "Indexed"
        per_index = (
            _int(spec.get("backoffLimitPerIndex"), 0)
            if indexed and spec.get("backoffLimitPerIndex") is not None
            else None
        )
        self._count(spec, tracked, pods, per_index)
        succeeded_pods = [p for p in pods if _dict(p.get("status")).get("phase") == "Succeeded"]
        terminating = [
            p
            for p in pods
            if _dict(p.get("metadata")).get("deletionTimestamp")
            and _dict(p.get("status")).get("phase") not in _TERMINAL
        ]
        active = [
            p
            for p in pods
            if not _dict(p.get("metadata")).get("deletionTimestamp")
            and _dict(p.get("status")).get("phase") not in _TERMINAL
        ]
        completions = spec.get("completions")
        parallelism = _int(spec.get("parallelism"), 1)
        backoff_limit = _int(spec.get("backoffLimit"), 2**31 - 1 if per_index is not None else 6)
        succeeded_indexes = {_index_of(p) for p in succeeded_pods}
        succeeded_indexes.discard(None)
        done_indexes: set[int] = {i for i in succeeded_indexes if i is not None}
        done_indexes |= _parse_indexes(str(old_status.get("completedIndexes", "")))
        succeeded = max(
            _int(old_status.get("succeeded"), 0),
            len(done_indexes) if indexed else len(succeeded_pods),
        )
        failed = max(tracked.failed, _int(old_status.get("failed"), 0))
        finished = _condition_true(status, "Complete") or _condition_true(status, "Failed")
        suspended = spec.get("suspend") is True
        if not finished:
            failure = self._failure(spec, tracked, failed, backoff_limit, per_index)
            every = set(range(_int(completions, 1)))
            if (
                failure is None
                and tracked.failed_indexes
                and every <= done_indexes | (tracked.failed_indexes)
            ):
                failure = ("FailedIndexes", "Job has failed indexes")
            if failure is not None:
                _set_condition(status, "Failed", "True", *failure)
                finished = True
                for pod in active:
                    self._delete(uid, pod)
                active = []
            elif self._complete(indexed, completions, succeeded, done_indexes, active):
                _set_condition(
                    status,
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
                status["completionTime"] = rfc3339()
                finished = True
        if not finished:
            if suspended:
                for pod in active:
                    self._delete(uid, pod)
                active = []
                _set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
            else:
                if _condition_true(status, "Suspended"):
                    _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                    status["startTime"] = rfc3339()
                status.setdefault("startTime", rfc3339())
                for pod in [p for p in active if _index_of(p) in tracked.failed_indexes]:
                    self._delete(uid, pod)
                    active.remove(pod)
                # With a pod failure policy (or podReplacementPolicy: Failed) a terminating
                # pod is replaced only once it has failed.
                waits_for_terminal = (
                    spec.get("podFailurePolicy") is not None
                    or spec.get("podReplacementPolicy") == "Failed"
                )
                occupying = [*active, *terminating] if waits_for_terminal else active
                active += self._create_missing(
                    job,
                    tracked,
                    key,
                    indexed=indexed,
                    per_index=per_index,
                    completions=completions,
                    parallelism=parallelism,
                    succeeded=succeeded,
                    skip=done_indexes | tracked.failed_indexes,
                    occupying=occupying,
                )
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if is_ready(p))
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["terminating"] = len(terminating)
        if indexed:
            status["completedIndexes"] = compress_indexes(done_indexes)
        if per_index is not None:
            status["failedIndexes"] = compress_indexes(tracked.failed_indexes)
        status.setdefault("uncountedTerminatedPods", {})
        for name in ("active", "succeeded", "failed", "ready", "terminating"):
            if status.get(name) == 0 and name not in old_status:
                status.pop(name)
        self.write_status(JOBS, job, status)

    @staticmethod
    def _failure(
        spec: JsonObject,
        tracked: _JobFailures,
        failed: int,
        backoff_limit: int,
        per_index: int | None,
    ) -> tuple[str, str] | None:
        """(reason, message) of the Failed condition the Job reached, if any."""
        if tracked.fail is not None:
            return tracked.fail
        if failed > backoff_limit:
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        most = spec.get("maxFailedIndexes")
        if per_index is not None and isinstance(most, int) and len(tracked.failed_indexes) > most:
            return (
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            )
        return None

    def _complete(
        self,
        indexed: bool,
        completions: object,
        succeeded: int,
        succeeded_indexes: set[int],
        active: list[JsonObject],
    ) -> bool:
        if indexed:
            total = _int(completions, 1)
            return all(i in succeeded_indexes for i in range(total))
        if completions is None:
            return succeeded > 0 and not active
        return succeeded >= _int(completions, 1)

    def _create_missing(
        self,
        job: JsonObject,
        tracked: _JobFailures,
        key: Key,
        *,
        indexed: bool,
        per_index: int | None,
        completions: object,
        parallelism: int,
        succeeded: int,
        skip: set[int],
        occupying: list[JsonObject],
    ) -> list[JsonObject]:
        """Create the pods the Job lacks, once the pod failure backoff allows (a later sync is
        timed for when it does)."""
        metadata = _dict(job.get("metadata"))
        name = str(metadata.get("name"))
        uid = str(metadata.get("uid"))
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        now = time.time()
        wait = 0.0
        created: list[JsonObject] = []
        room = max(parallelism - len(occupying), 0)
        if per_index is None:
            record = tracked.backoff.get(None)
            wait = record.remaining(now) if record is not None else 0.0
        if indexed:
            total = _int(completions, 1)
            running = {_index_of(p) for p in occupying}
            wanted = [i for i in range(total) if i not in skip and i not in running]
            for index in wanted[:room]:
                record = tracked.backoff.get(index) if per_index is not None else None
                index_wait = record.remaining(now) if record is not None else wait
                if index_wait > 0:
                    wait = index_wait if per_index is None else min(wait or index_wait, index_wait)
                    continue
                annotations = {COMPLETION_INDEX: str(index)}
                if per_index is not None:
                    annotations[jobfailure.FAILURE_COUNT] = str(
                        tracked.index_failures.get(index, 0)
                    )
                    if tracked.index_ignored.get(index):
                        annotations[jobfailure.IGNORED_FAILURE_COUNT] = str(
                            tracked.index_ignored[index]
                        )
                pod = self.new_pod(
                    job,
                    prefix=f"{name}-{index}-",
                    extra_labels={**labels, COMPLETION_INDEX: str(index)},
                    extra_annotations=annotations,
                )
                _dict(pod["spec"]).setdefault("hostname", f"{name}-{index}")
                self._create(job, pod, created)
        else:
            if completions is None:
                want = parallelism if succeeded == 0 else 0
            else:
                want = min(parallelism, _int(completions, 1) - succeeded)
            missing = max(want - len(occupying), 0)
            if missing and wait <= 0:
                for _ in range(missing):
                    pod = self.new_pod(
                        job, prefix=f"{name}-", extra_labels=labels, extra_annotations={}
                    )
                    self._create(job, pod, created)
        if wait > 0:
            self.at(time.monotonic() + wait + 0.01, key)
        return created

    def _create(self, job: JsonObject, pod: JsonObject, created: list[JsonObject]) -> None:
        done = self.create_pod(job, pod)
        if done is not None:
            created.append(done)

    def _delete(self, job_uid: str, pod: JsonObject) -> None:
        """Delete a pod the controller no longer wants; it is never counted as failed."""
        self._failures.setdefault(job_uid, _JobFailures()).own.add(_uid(pod))
        key = object_key(pod)
        try:
            self.api.delete(PODS, key[0], key[1], {})
        except ApiError as exc:
            if exc.code != 404:
                raise


def _parse_indexes(text: str) -> set[int]:
    indexes: set[int] = set()
    for part in text.split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            indexes.update(range(int(low), int(high or low) + 1))
        except ValueError:
            continue
    return indexes


class ReplicaSetController(_OwnedPods):
    """apps/v1 ReplicaSet controller."""

    name = "replicaset-controller"
    owner_type = REPLICASETS

    def reconcile(self, key: Hashable) -> None:
        """Converge one ReplicaSet to its replica count."""
        assert isinstance(key, tuple)
        rs = self.api.store.get(REPLICASETS.key, *key)
        if rs is None or self.admitting(key):
            return
        metadata = _dict(rs.get("metadata"))
        if metadata.get("deletionTimestamp"):
            return
        spec = _dict(rs.get("spec"))
        replicas = _int(spec.get("replicas"), 1)
        pods = self.owned_objects(str(metadata.get("uid")))
        active = [
            p
            for p in pods
            if not _dict(p.get("metadata")).get("deletionTimestamp")
            and _dict(p.get("status")).get("phase") not in _TERMINAL
        ]
        if len(active) < replicas:
            name = str(metadata.get("name"))
            for _ in range(replicas - len(active)):
                pod = self.new_pod(rs, prefix=f"{name}-", extra_labels={}, extra_annotations={})
                done = self.create_pod(rs, pod)
                if done is not None:
                    active.append(done)
        elif len(active) > replicas:
            # Like the real controller: unscheduled and not-ready pods go first, newest first.
            ranked = sorted(
                active,
                key=lambda p: (
                    bool(_dict(p.get("spec")).get("nodeName")),
                    is_ready(p),
                    -_creation_order(p),
                ),
            )
            for pod in ranked[: len(active) - replicas]:
                pod_key = object_key(pod)
                try:
                    self.api.delete(PODS, pod_key[0], pod_key[1], {})
                except ApiError as exc:
                    if exc.code != 404:
                        raise
                active.remove(pod)
        template_labels = _dict(_dict(_dict(spec.get("template")).get("metadata")).get("labels"))
        ready = sum(1 for p in active if is_ready(p))
        status: JsonObject = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(
                1
                for p in active
                if all(
                    _dict(_dict(p.get("metadata")).get("labels")).get(k) == v
                    for k, v in template_labels.items()
                )
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": metadata.get("generation", 1),
        }
        self.write_status(REPLICASETS, rs, status)


def _creation_order(pod: JsonObject) -> int:
    return int(str(_dict(pod.get("metadata")).get("resourceVersion", 0)))


def template_hash(template: JsonObject) -> str:
    """A short, stable hash of a pod template (the ``pod-template-hash`` label value)."""
    digest = hashlib.sha256(msgspec.json.encode(template, order="sorted")).hexdigest()
    return digest[:10]


def _resolve(value: object, replicas: int, *, round_up: bool) -> int:
    """maxSurge / maxUnavailable: an integer, or a percentage of ``replicas`` (surge rounded
    up, unavailable down, as kube-controller-manager does)."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            percent = 25
        scaled = percent * replicas
        return -(-scaled // 100) if round_up else scaled // 100
    return _int(value, 0) if value is not None else _resolve("25%", replicas, round_up=round_up)


def rollout(
    strategy: JsonObject,
    replicas: int,
    current: JsonObject,
    owned: list[JsonObject],
    *,
    old_pods_running: bool = False,
) -> dict[tuple[str, str], int]:
    """The replicas each ReplicaSet of a Deployment should have now (``current``: the one of
    its template), by kube-controller-manager's rules: ``Recreate`` scales the old ones to
    zero and the new one up once no old pod is left (``old_pods_running``: a pod of an old
    ReplicaSet has not finished, Terminating ones included); ``RollingUpdate`` (the default)
    keeps at most ``replicas + maxSurge`` pods and at least ``replicas - maxUnavailable``
    available, scaling old ReplicaSets down only as new pods become available."""
    key = object_key(current)
    old = [rs for rs in owned if object_key(rs) != key]

    def spec_of(rs: JsonObject) -> int:
        return _int(_dict(rs.get("spec")).get("replicas"), 1)

    def status_of(rs: JsonObject, field: str) -> int:
        return _int(_dict(rs.get("status")).get(field), 0)

    wanted = {object_key(rs): spec_of(rs) for rs in owned}
    recreate = strategy.get("type") == "Recreate"
    if not any(spec_of(rs) or status_of(rs, "replicas") for rs in old) and not (
        recreate and old_pods_running
    ):
        wanted[key] = replicas
        return wanted
    if recreate:
        for rs in old:
            wanted[object_key(rs)] = 0
        wanted[key] = 0
        return wanted
    rolling = _dict(strategy.get("rollingUpdate"))
    surge = _resolve(rolling.get("maxSurge"), replicas, round_up=True)
    unavailable = _resolve(rolling.get("maxUnavailable"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    # Scale the new ReplicaSet up within the surge.
    total = sum(wanted.values())
    new = wanted[key]
    if new > replicas:
        new = replicas
    elif new < replicas:
        new = min(replicas, new + max(replicas + surge - total, 0))
    wanted[key] = new
    # Scale old ReplicaSets down as far as availability allows: unhealthy pods first, then
    # available ones, oldest ReplicaSet first.
    min_available = replicas - unavailable
    new_unavailable = new - status_of(current, "availableReplicas")
    room = sum(wanted.values()) - min_available - new_unavailable
    ordered = sorted(old, key=_creation_order)
    for rs in ordered:
        if room <= 0:
            break
        unhealthy = max(wanted[object_key(rs)] - status_of(rs, "availableReplicas"), 0)
        cut = min(unhealthy, room)
        wanted[object_key(rs)] -= cut
        room -= cut
    available = sum(status_of(rs, "availableReplicas") for rs in owned)
    scale_down = min(available - min_available, room)
    for rs in ordered:
        if scale_down <= 0:
            break
        cut = min(wanted[object_key(rs)], scale_down)
        wanted[object_key(rs)] -= cut
        scale_down -= cut
    return wanted


class DeploymentController(_OwnedPods):
    """apps/v1 Deployment controller (one ReplicaSet per template, rolled out by its
    strategy: :func:`rollout`)."""

    name = "deployment-controller"
    owner_type = DEPLOYMENTS
    owned_type = REPLICASETS

    def start(self) -> None:
        """Also follow pods: a ``Recreate`` rollout goes on when the last old pod has ended."""
        super().start()
        self._unsubscribe.append(self.api.store.subscribe(PODS.key, self._on_pod))

    def _on_pod(self, event: WatchEvent) -> None:
        ended = _dict(event.obj.get("status")).get("phase") in ("Succeeded", "Failed")
        if event.type != DELETED and not ended:
            return
        ref = controller_of(event.obj)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        namespace = str(_dict(event.obj.get("metadata")).get("namespace"))
        replica_set = self.api.store.get(REPLICASETS.key, namespace, str(ref.get("name")))
        owner = controller_of(replica_set) if replica_set is not None else None
        deployment = self.owner_key_by_uid.get(str(owner.get("uid"))) if owner else None
        if deployment is not None:
            self.mark(deployment)

    def _old_pods_running(self, namespace: str, old: list[JsonObject]) -> bool:
        """Whether a pod of the ReplicaSets ``old`` has not finished (Terminating included)."""
        uids = {_dict(rs.get("metadata")).get("uid") for rs in old}
        for pod in self.api.store.objects(PODS.key, namespace):
            ref = controller_of(pod)
            phase = _dict(pod.get("status")).get("phase")
            if ref is not None and ref.get("uid") in uids and phase not in ("Succeeded", "Failed"):
                return True
        return False

    def reconcile(self, key: Hashable) -> None:
        """Converge one Deployment."""
        assert isinstance(key, tuple)
        deployment = self.api.store.get(DEPLOYMENTS.key, *key)
        if deployment is None:
            return
        metadata = _dict(deployment.get("metadata"))
        if metadata.get("deletionTimestamp"):
            return
        spec = _dict(deployment.get("spec"))
        replicas = _int(spec.get("replicas"), 1)
        template = _dict(spec.get("template"))
        digest = template_hash(template)
        name = str(metadata.get("name"))
        owned = self.owned_objects(str(metadata.get("uid")))
        current = next(
            (
                rs
                for rs in owned
                if _dict(_dict(rs.get("metadata")).get("labels")).get("pod-template-hash") == digest
            ),
            None,
        )
        if current is None:
            rs_template = _copy(template)
            template_meta = _dict(rs_template.setdefault("metadata", {}))
            template_meta["labels"] = {
                **_dict(template_meta.get("labels")),
                "pod-template-hash": digest,
            }
            selector = _copy(_dict(spec.get("selector")))
            selector["matchLabels"] = {
                **_dict(selector.get("matchLabels")),
                "pod-template-hash": digest,
            }
            body: JsonObject = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-{digest}",
                    "namespace": key[0],
                    "labels": dict(_dict(template_meta.get("labels"))),
                    "annotations": {"deployment.kubernetes.io/desired-replicas": str(replicas)},
                    "ownerReferences": [owner_reference(deployment, DEPLOYMENTS)],
                },
                "spec": {"replicas": 0, "selector": selector, "template": rs_template},
            }
            # Created with the replicas the strategy allows now (within maxSurge while old
            # ReplicaSets still have pods), as kube-controller-manager does: created with all
            # of them, its pods would all start at once beside the old ones.
            first = rollout(_dict(spec.get("strategy")), replicas, body, [*owned, body])
            _dict(body["spec"])["replicas"] = first[object_key(body)]
            current = self.api.create(REPLICASETS, key[0], body)
            owned.append(current)
        strategy = _dict(spec.get("strategy"))
        old = [rs for rs in owned if object_key(rs) != object_key(current)]
        wanted = rollout(
            strategy,
            replicas,
            current,
            owned,
            old_pods_running=strategy.get("type") == "Recreate"
            and self._old_pods_running(key[0], old),
        )
        for rs in owned:
            want = wanted.get(object_key(rs), 0)
            rs_spec = _dict(rs.get("spec"))
            if _int(rs_spec.get("replicas"), 1) != want:
                rs_key = object_key(rs)
                updated = _copy(rs)
                _dict(updated["spec"])["replicas"] = want
                self.api.update(REPLICASETS, rs_key[0], rs_key[1], updated)
        current_status = _dict(current.get("status"))
        total = sum(_int(_dict(rs.get("status")).get("replicas"), 0) for rs in owned)
        ready = sum(_int(_dict(rs.get("status")).get("readyReplicas"), 0) for rs in owned)
        available = ready
        status: JsonObject = {
            "observedGeneration": metadata.get("generation", 1),
            "replicas": total,
            "updatedReplicas": _int(current_status.get("replicas"), 0),
            "readyReplicas": ready,
            "availableReplicas": available,
        }
        if replicas - available > 0:
            status["unavailableReplicas"] = replicas - available
        old_status = _dict(deployment.get("status"))
        status["conditions"] = list(_list(old_status.get("conditions")))
        if available >= replicas:
            _set_condition(
                status,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        else:
            _set_condition(
                status,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        self.write_status(DEPLOYMENTS, deployment, status)


JOBSET_TYPE: Final = ResourceType(
    group="jobset.x-k8s.io",
    version="v1alpha2",
    plural="jobsets",
    kind="JobSet",
    namespaced=True,
    builtin=False,
)
"""The JobSet resource as the bundled CRD defines it (the controller acts once it is served)."""

JOBSET_LABELS: Final = (
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/replicatedjob-replicas",
    "jobset.sigs.k8s.io/job-index",
)


class JobSetController(_OwnedPods):
    """jobset.x-k8s.io JobSet controller, minimal: child Jobs, suspend, completion, failure.

    For each replicated job and index it creates the Job ``<jobset>-<replicatedJob>-<index>``
    from the template, with the JobSet labels and annotations (name, replicated job, replicas,
    index) on the Job and its pod template, and a controller ownerReference. ``spec.suspend``
    is propagated to the Jobs. The JobSet is Completed when every Job is Complete and Failed
    when one fails (no restarts: failurePolicy, successPolicy, startupPolicy and network
    setup are not simulated).
    """

    name = "jobset-controller"
    owner_type = JOBSET_TYPE
    owned_type = JOBS

    def reconcile(self, key: Hashable) -> None:
        """Converge one JobSet."""
        assert isinstance(key, tuple)
        jobset = self.api.store.get(JOBSET_TYPE.key, *key)
        served = self.api.resolve_kind(JOBSET_TYPE.api_version, JOBSET_TYPE.kind)
        if jobset is None or served is None:
            return
        metadata = _dict(jobset.get("metadata"))
        if metadata.get("deletionTimestamp"):
            return
        spec = _dict(jobset.get("spec"))
        suspended = spec.get("suspend") is True
        name = str(metadata.get("name"))
        jobs = {object_key(j)[1]: j for j in self.owned_objects(str(metadata.get("uid")))}
        old_status = _dict(jobset.get("status"))
        finished = any(
            _dict(c).get("status") == "True" and _dict(c).get("type") in ("Completed", "Failed")
            for c in _list(old_status.get("conditions"))
        )
        replicated: list[JsonObject] = []
        all_complete = True
        any_failed = False
        for entry in (_dict(r) for r in _list(spec.get("replicatedJobs"))):
            rj_name = str(entry.get("name"))
            replicas = _int(entry.get("replicas"), 1)
            counts = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            for index in range(replicas):
                job_name = f"{name}-{rj_name}-{index}"
                job = jobs.get(job_name)
                if job is None and not finished:
                    body = jobset_child_job(jobset, entry, index, suspended=suspended)
                    job = self.api.create(JOBS, key[0], body)
                if job is None:
                    all_complete = False
                    continue
                if not finished and _dict(job.get("spec")).get("suspend", False) != suspended:
                    updated = _copy(job)
                    _dict(updated["spec"])["suspend"] = suspended
                    self.api.update(JOBS, key[0], job_name, updated)
                job_status = _dict(job.get("status"))
                complete = _condition_true(job_status, "Complete")
                failed = _condition_true(job_status, "Failed")
                all_complete = all_complete and complete
                any_failed = any_failed or failed
                if complete:
                    counts["succeeded"] += 1
                elif failed:
                    counts["failed"] += 1
                elif suspended:
                    counts["suspended"] += 1
                else:
                    counts["active"] += 1
                    if _int(job_status.get("ready"), 0) >= _int(
                        _dict(job.get("spec")).get("parallelism"), 1
                    ):
                        counts["ready"] += 1
            replicated.append({"name": rj_name, **counts})
        status = _copy(old_status)
        status["replicatedJobsStatus"] = replicated
        if not finished and any_failed:
            _set_condition(
                status, "Failed", "True", "FailedJobs", "jobset failed due to a failed job"
            )
            for job in jobs.values():
                if not _condition_true(_dict(job.get("status")), "Complete"):
                    with contextlib.suppress(ApiError):
                        self.api.delete(
                            JOBS, key[0], object_key(job)[1], {"propagationPolicy": "Background"}
                        )
        elif not finished and all_complete and replicated:
            _set_condition(
                status, "Completed", "True", "AllJobsCompleted", "jobset completed successfully"
            )
        self.write_status(served, jobset, status)


def jobset_child_job(
    jobset: JsonObject, replicated_job: JsonObject, index: int, *, suspended: bool
) -> JsonObject:
    """The Job a JobSet controller creates for index ``index`` of ``replicated_job`` (one entry
    of ``spec.replicatedJobs``): named ``<jobset>-<replicatedJob>-<index>``, the job template
    with the JobSet labels and annotations (name, replicated job, replicas, index) on the Job
    and its pod template, a controller ownerReference to the JobSet, ``spec.suspend`` as given.

    Pure: the simulator's :class:`JobSetController` creates these, and tests on a real control
    plane (where no JobSet controller runs) create the same bodies through the API."""
    metadata = _dict(jobset.get("metadata"))
    rj_name = str(replicated_job.get("name"))
    replicas = _int(replicated_job.get("replicas"), 1)
    template = _copy(_dict(replicated_job.get("template")))
    tags = dict(
        zip(
            JOBSET_LABELS,
            (str(metadata.get("name")), rj_name, str(replicas), str(index)),
            strict=True,
        )
    )
    job_meta = _dict(template.get("metadata"))
    job_spec = _dict(template.get("spec"))
    pod_template = _dict(job_spec.get("template"))
    pod_meta = _dict(pod_template.get("metadata"))
    pod_meta["labels"] = {**_dict(pod_meta.get("labels")), **tags}
    pod_meta["annotations"] = {**_dict(pod_meta.get("annotations")), **tags}
    pod_template["metadata"] = pod_meta
    job_spec["template"] = pod_template
    job_spec["suspend"] = suspended
    labels: JsonObject = {**_dict(job_meta.get("labels")), **tags}
    annotations: JsonObject = {**_dict(job_meta.get("annotations")), **tags}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{metadata.get('name')}-{rj_name}-{index}",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(jobset, JOBSET_TYPE)],
        },
        "spec": job_spec,
    }
