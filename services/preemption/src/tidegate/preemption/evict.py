"""Evicting a victim gang whole: its pods through the Eviction API, its Job suspended on abort.

Why a module of its own: this is the only place the preemption service writes to Kubernetes,
and the rules for doing it safely live together:

- every pod goes through the Eviction subresource (so PodDisruptionBudgets apply), with its UID
  as precondition, so a newer pod of the same name (a replacement) is never evicted;
- a pod that is already gone (NotFound) or was replaced (Conflict on the UID) counts as
  evicted: eviction is idempotent, which is what lets a restarted service finish a preemption;
- a pod whose eviction the API server accepted is not asked for again by the same process
  (a preemption retried while a budget holds its other pods would otherwise evict the
  still-terminating pods again at every retry, each time counted as a new eviction);
- a PodDisruptionBudget that refuses the eviction (429 TooManyRequests, after the Kubernetes
  client's own attempts) is not retried here: the other pods are still evicted and :class:`EvictionRefused` (an :class:`EvictionFailed`)
  names the refused pods and the budget's words; the caller reports it and finishes the
  preemption later, when the budget allows (the preemption record keeps the job);
- other transient failures (5xx, an unreachable server) are retried for up to
  ``retry_seconds``; after that :class:`EvictionFailed` is raised and the caller retries later;
- evictions are rate-limited by a token bucket of their own and run a few at a time;
- the API server cannot check a fencing token, so every write (each eviction, the suspension
  and mark of an abort) is sent only after ``guard()`` passed: the service's guard raises
  :class:`tidegate.bus.LeaseLost` unless its lease is held, unexpired, for a safety margin
  more (:meth:`tidegate.bus.Lease.ensure_held`); a deposed leader evicts nothing;
- abort mode suspends the victim's Job or JobSet first (so its controller does not recreate
  the pods) and, in the same patch, annotates it ``tidegate.io/preempted-by`` and
  ``tidegate.io/resume: manual``: the suspension is then never taken for one made for tidegate
  to undo (docs/workloads.md, "Suspended Jobs and JobSets"), so the victim stays out across
  any restart of any service, by its own object. The patch (and the mark of other kinds)
  carries the victim's uid: an abort retried after the victim was deleted and submitted
  again under its name leaves the new object alone (Conflict counts as gone);
- a restarted victim whose top owner is a Job or JobSet is not evicted pod by pod but
  **re-queued** (:meth:`Evictor.requeue`): the pods are first checked with dry-run evictions
  (so a PodDisruptionBudget refusing any of them holds the victim exactly as a refused
  eviction would), then the owner is suspended, in one merge patch guarded by its uid, with
  ``tidegate.io/requeued`` set and ``tidegate.io/resume`` removed. Its controller then deletes
  the pods itself, which the Job controller never counts as failures, so the gang comes back
  on its next admission (the ungater unsuspends it) without the pod failure backoff and
  without spending ``backoffLimit``. Evicted pods would have been failures: 8 of them kept a
  Job's replacements away for 10 minutes, and a plain Job (backoffLimit 6) failed for good
  after one eviction of 7 pods. The caller passes only pods still live (not yet terminating),
  so a retried preemption whose suspension already took effect suspends nothing again;
- an abort that fails (403, a webhook that refuses the patch, the API server down) never
  stops the evictions: the victim's quota was released when the decision went out, so its
  pods must go whatever becomes of its owner. :class:`AbortFailed` is raised after the pods
  were evicted, and the caller tries the abort again later (its controller may meanwhile
  recreate the pods, gated: they wait for an admission like a restarted victim's).

It decides nothing: which pods of which victims is the record's business (:mod:`.record`).
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from cachetools import LRUCache

from tidegate.bus import LeaseLost, LeaseUnconfirmed, Retryable
from tidegate.kube import (
    JOBS,
    JOBSETS,
    TRANSIENT,
    Conflict,
    KubeClient,
    KubeError,
    NotFound,
    ResourceType,
    TooManyRequests,
    resource_for_kind,
)
from tidegate.kube.ratelimit import TokenBucket
from tidegate.model.events import EvictionOutcome
from tidegate.model.ledger import PodRef, VictimRecord
from tidegate.model.names import (
    PREEMPTED_BY_ANNOTATION,
    REQUEUE_KINDS,
    RESUME_ANNOTATION,
    RESUME_MANUAL,
)

log = logging.getLogger(__name__)


EvictionResult = Literal["evicted", "gone"]
"""What became of one pod: evicted now, or already gone, replaced or evicted before."""

REMEMBERED_EVICTIONS = 20_000
"""How many evicted pods (by UID) an :class:`Evictor` remembers so as not to evict them again;
the oldest are forgotten first (a forgotten one is asked again: harmless, and counted)."""


class EvictionFailed(Retryable):
    """A pod could not be evicted within the retry time: try the preemption again later."""


class EvictionRefused(EvictionFailed):
    """A PodDisruptionBudget refused evicting some pods now (429): finish later."""

    def __init__(self, message: str, *, pods: Sequence[str], why: str) -> None:
        """``pods``: the refused pods' names; ``why``: the API server's message."""
        super().__init__(message)
        self.pods = list(pods)
        self.why = why


class AbortFailed(EvictionFailed):
    """The victim's owner could not be suspended or marked (its pods were evicted all the
    same): try the abort again later."""

    def __init__(self, message: str, *, victim: str, why: str) -> None:
        """``victim``: the victim's key; ``why``: the API server's answer."""
        super().__init__(message)
        self.victim = victim
        self.why = why
        self.evictions: EvictionFailed | None = None
        """The victim's pods that could not be evicted either, if any."""


class _RefusedError(Exception):
    """One pod's eviction refused by its budget (internal)."""

    def __init__(self, pod: PodRef, why: str) -> None:
        super().__init__(why)
        self.pod = pod
        self.why = why


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionSettings:
    """How fast and how persistently victims are evicted."""

    rate_per_second: float = 20.0
    """Evictions per second, sustained (0: unlimited)."""
    burst: int = 50
    """Evictions allowed at once above the sustained rate."""
    concurrency: int = 8
    """Eviction requests in flight at once."""
    grace_seconds: int | None = None
    """Termination grace period to ask for; None: each pod's own."""
    retry_seconds: float = 30.0
    """How long one pod's transient failures are retried before the preemption is retried."""
    retry_delay_seconds: float = 1.0
    """Pause between those retries."""


class Evictor:
    """Evicts victim gangs through a :class:`~tidegate.kube.KubeClient`."""

    def __init__(
        self,
        kube: KubeClient,
        settings: EvictionSettings,
        *,
        observe: Callable[[EvictionOutcome], None] | None = None,
        guard: Callable[[], object] | None = None,
    ) -> None:
        """``observe`` is called with the outcome of every pod's eviction; ``guard``
        before every write to Kubernetes (it raises to stop the write, e.g. LeaseLost)."""
        self._kube = kube
        self._guard = guard or (lambda: None)
        self._settings = settings
        self._bucket = TokenBucket(qps=settings.rate_per_second, burst=settings.burst)
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._observe = observe or (lambda _outcome: None)
        self._evicted: LRUCache[str, None] = LRUCache(maxsize=REMEMBERED_EVICTIONS)
        """UIDs of the pods whose eviction the API server accepted, oldest first."""

    async def preempt(
        self, victim: VictimRecord, pods: Sequence[PodRef], *, preemptor: str
    ) -> dict[str, EvictionResult]:
        """Evict ``victim`` whole: on abort, suspend and mark its owner first; then evict
        ``pods``, even when the abort failed. Returns each pod's result by name; raises
        :class:`AbortFailed` if the abort failed (with the pods' failure, if any, as its
        ``evictions``), else :class:`EvictionFailed` if any pod could not be evicted (the
        others are evicted regardless)."""
        if victim.mode == "restart" and victim.owner_kind in REQUEUE_KINDS:
            return await self.requeue(victim, pods, preemptor=preemptor)
        abort_failed: AbortFailed | None = None
        if victim.mode == "abort":
            try:
                await self.abort(victim, preemptor=preemptor)
            except AbortFailed as exc:
                log.warning("%s; evicting its pods all the same", exc)
                abort_failed = exc
        try:
            results = await self._evict_all(victim, pods)
        except EvictionFailed as exc:
            if abort_failed is None:
                raise
            abort_failed.evictions = exc
            raise abort_failed from exc
        if abort_failed is not None:
            raise abort_failed
        return results

    async def _evict_all(
        self, victim: VictimRecord, pods: Sequence[PodRef]
    ) -> dict[str, EvictionResult]:
        """Evict every pod of ``pods`` (see :meth:`preempt`)."""
        tasks = [asyncio.ensure_future(self.evict(pod)) for pod in pods]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures:
            if not isinstance(failure, Exception) or isinstance(failure, LeaseLost):
                raise failure
        refused = [f for f in failures if isinstance(f, _RefusedError)]
        if refused and len(refused) == len(failures):
            names = [r.pod.name for r in refused]
            raise EvictionRefused(
                f"{len(refused)} of {len(pods)} pods of {victim.key} refused by their "
                f"PodDisruptionBudget ({', '.join(names)}): {refused[0].why}",
                pods=names,
                why=refused[0].why,
            )
        if failures:
            raise EvictionFailed(
                f"{len(failures)} of {len(pods)} pods of {victim.key} not evicted: {failures[0]}"
            )
        return {
            pod.name: result
            for pod, result in zip(pods, results, strict=True)
            if isinstance(result, str)
        }

    async def refusals(self, pods: Sequence[PodRef]) -> dict[str, str]:
        """Ask the API server, without evicting (``dryRun``), whether each pod may be evicted
        now: the pods a PodDisruptionBudget refuses, by name, with the budget's words. Other
        answers (gone, a transient failure) count as not refused: the eviction proper deals
        with them."""
        refused: dict[str, str] = {}
        for pod in pods:
            await self._bucket.acquire()
            try:
                await self._kube.evict_pod(
                    pod.namespace, pod.name, uid=pod.uid or None, dry_run=True
                )
            except TooManyRequests as exc:
                refused[pod.name] = _budget_words(exc)
            except KubeError as exc:
                log.info("dry-run eviction of %s/%s: %s", pod.namespace, pod.name, exc)
        return refused

    async def requeue(
        self, victim: VictimRecord, pods: Sequence[PodRef], *, preemptor: str
    ) -> dict[str, EvictionResult]:
        """Send a restarted Job or JobSet victim back to its queue by suspending it (module
        docstring); ``pods``: its pods still live. Raises :class:`EvictionRefused` when a
        PodDisruptionBudget refuses any of them now (nothing is suspended), and
        :class:`EvictionFailed` when the patch fails."""
        if not pods:
            return {}
        refused = await self.refusals(pods)
        if refused:
            names = sorted(refused)
            why = refused[names[0]]
            for _ in names:
                self._observe("refused")
            raise EvictionRefused(
                f"{len(names)} of {len(pods)} pods of {victim.key} refused by their "
                f"PodDisruptionBudget ({', '.join(names)}): {why}",
                pods=names,
                why=why,
            )
        namespace, _, name = victim.key.partition("/")
        resource = owner_resource(victim.owner_kind, victim.owner_api_version)
        assert resource is not None  # Job and JobSet always have one
        self._checked()
        try:
            await self._kube.requeue_owner(
                resource, namespace, name, uid=victim.uid, why=f"preempted by {preemptor}"
            )
        except (NotFound, Conflict):
            log.info("re-queue %s: its %s is gone or was re-created", victim.key, victim.owner_kind)
            for _ in pods:
                self._observe("gone")
            return dict.fromkeys((pod.name for pod in pods), "gone")
        except KubeError as exc:
            for _ in pods:
                self._observe("failed")
            raise EvictionFailed(
                f"cannot suspend the {victim.owner_kind} of {victim.key} to re-queue it: {exc}"
            ) from exc
        for _ in pods:
            self._observe("requeued")
        return dict.fromkeys((pod.name for pod in pods), "evicted")

    async def abort(self, victim: VictimRecord, *, preemptor: str) -> None:
        """Suspend the victim's Job or JobSet and annotate its owner with the preemptor.
        An owner that is gone is fine; other kinds are only annotated (their pods are evicted
        all the same). Raises :class:`AbortFailed` when the API server refuses or fails."""
        namespace, _, name = victim.key.partition("/")
        resource = owner_resource(victim.owner_kind, victim.owner_api_version)
        self._checked()
        try:
            if resource is None:
                log.warning(
                    "abort %s: owner kind %s is not known; only its pods are evicted",
                    victim.key,
                    victim.owner_kind,
                )
                return
            annotations = {PREEMPTED_BY_ANNOTATION: preemptor}
            # By uid: an abort retried after its user deleted the victim and submitted it
            # again must not suspend or mark the new object.
            uid = victim.uid or None
            if victim.owner_kind in ("Job", "JobSet"):
                # One patch: no moment where it is suspended without saying by whom.
                annotations[RESUME_ANNOTATION] = RESUME_MANUAL
                patch = {"metadata": {"annotations": annotations}, "spec": {"suspend": True}}
                await self._kube.patch(resource, name, patch, namespace=namespace, uid=uid)
                self._checked()
            else:
                await self._kube.annotate(resource, namespace, name, annotations, uid=uid)
        except (NotFound, Conflict):
            log.info("abort %s: its %s is gone or was re-created", victim.key, victim.owner_kind)
        except KubeError as exc:
            raise AbortFailed(
                f"cannot suspend or mark the {victim.owner_kind} of {victim.key}: {exc}",
                victim=victim.key,
                why=str(exc),
            ) from exc

    def _checked(self) -> None:
        """The guard; a lease not confirmed long enough defers the preemption (retried by the
        reconcile loop), a lost one stops the service."""
        try:
            self._guard()
        except LeaseUnconfirmed as exc:
            raise EvictionFailed(str(exc)) from exc

    async def evict(self, pod: PodRef) -> EvictionResult:
        """Evict one pod, retrying transient failures (see the module docstring); "gone"
        without a request for a pod this evictor evicted before."""
        if pod.uid and pod.uid in self._evicted:
            return "gone"
        deadline = time.monotonic() + self._settings.retry_seconds
        async with self._slots:
            while True:
                await self._bucket.acquire()
                self._checked()
                try:
                    await self._kube.evict_pod(
                        pod.namespace,
                        pod.name,
                        grace_seconds=self._settings.grace_seconds,
                        uid=pod.uid or None,
                    )
                except (NotFound, Conflict):
                    self._observe("gone")
                    return "gone"
                except TooManyRequests as exc:
                    self._observe("refused")
                    raise _RefusedError(pod, _budget_words(exc)) from exc
                except TRANSIENT as exc:
                    if time.monotonic() >= deadline:
                        self._observe("failed")
                        raise EvictionFailed(
                            f"evicting pod {pod.namespace}/{pod.name}: {exc}"
                        ) from exc
                    log.warning("evicting pod %s/%s: %s; retrying", pod.namespace, pod.name, exc)
                    await asyncio.sleep(self._settings.retry_delay_seconds)
                    continue
                except KubeError as exc:
                    self._observe("failed")
                    raise EvictionFailed(f"evicting pod {pod.namespace}/{pod.name}: {exc}") from exc
                self._remember(pod.uid)
                self._observe("evicted")
                return "evicted"

    def _remember(self, uid: str) -> None:
        if not uid:
            return
        self._evicted[uid] = None


def _budget_words(exc: KubeError) -> str:
    """What the API server said about the budget (its cause, else its message)."""
    for cause in exc.causes:
        if cause.message:
            return cause.message
    return exc.message or str(exc)


def owner_resource(kind: str, api_version: str) -> ResourceType | None:
    """The resource type of a victim's top owner: built-in kinds by name, JobSet and custom
    kinds (e.g. PodGroup) from their apiVersion; None when it cannot be told."""
    if kind == "Job":
        return JOBS
    if kind == "JobSet":
        group, _, version = api_version.partition("/")
        if group and version:
            return ResourceType(
                group=group, version=version, plural=JOBSETS.plural, kind=JOBSETS.kind
            )
        return JOBSETS
    try:
        return resource_for_kind(kind)
    except ValueError:
        pass
    group, _, version = api_version.partition("/")
    if not (group and version and kind):
        return None
    return ResourceType(group=group, version=version, plural=kind.lower() + "s", kind=kind)
