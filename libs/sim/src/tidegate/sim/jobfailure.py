"""How the Job controller judges a failed pod: pod failure policy, backoff, per-index limits.

Why a module of its own: these are the rules that decide how soon an evicted gang's pods come
back and whether its Job fails for good, and tidegate's re-queue design rests on them. They
follow kube-controller-manager's Job controller (``pkg/controller/job``):

- **Pod failure policy** (:func:`failure_action`): the first rule of
  ``spec.podFailurePolicy.rules`` whose ``onExitCodes`` (a container's non-zero exit code
  ``In``/``NotIn`` the values, optionally for one ``containerName``) or ``onPodConditions`` (a
  condition of that type with that status, ``True`` by default: e.g. ``DisruptionTarget``,
  which the Eviction API, the taint manager and pod GC set) matches decides: ``FailJob``,
  ``FailIndex``, ``Ignore`` (not counted against the limits) or ``Count``; none matching:
  ``Count``.
- **Pod failure backoff** (:func:`backoff_seconds`, :class:`BackoffRecord`, from
  ``backoff_utils.go``): before creating replacements the controller waits
  ``DefaultJobPodFailureBackOff`` (10 s) doubled for every failure since the last success, at
  most ``MaxJobPodFailureBackOff`` (10 minutes), counted from the last failure; ignored
  failures count too (kubernetes/kubernetes#130881). Per Job, or per index with
  ``backoffLimitPerIndex`` (the index's failure count, ignored ones included). Wall-clock
  seconds, as in the real controller: the simulator's ``time_scale`` does not shorten them.
- Pods the controller deletes itself (a suspended Job's, a failed Job's) lose their tracking
  finalizer first and are never counted: that is what lets a queueing system (Kueue, tidegate)
  take a Job's pods away by suspending it without spending its ``backoffLimit``.

Pure code: the controller in :mod:`tidegate.sim.workloads` keeps the state and does the I/O.
"""

from dataclasses import dataclass
from typing import Final, Literal

from tidegate.sim.errors import JsonObject

DEFAULT_BACKOFF_SECONDS: Final = 10.0
"""Kubernetes' ``DefaultJobPodFailureBackOff``."""
MAX_BACKOFF_SECONDS: Final = 600.0
"""Kubernetes' ``MaxJobPodFailureBackOff``."""
FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-failure-count"
"""On a pod of a Job with ``backoffLimitPerIndex``: failures of its index before it."""
IGNORED_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-ignored-failure-count"
"""On such a pod: failures of its index a pod failure policy ignored before it."""

Action = Literal["FailJob", "FailIndex", "Ignore", "Count"]


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def backoff_seconds(
    failures: int, *, base: float = DEFAULT_BACKOFF_SECONDS, cap: float = MAX_BACKOFF_SECONDS
) -> float:
    """The wait after ``failures`` failures since the last success: 0, then ``base`` doubled
    per further failure, at most ``cap``."""
    if failures <= 0:
        return 0.0
    wait = base
    for _ in range(1, failures):
        wait *= 2
        if wait >= cap:
            return cap
    return min(wait, cap)


@dataclass(slots=True)
class BackoffRecord:
    """Failures since the last success and when the last one was seen (wall-clock seconds)."""

    failures: int = 0
    last_failure: float = 0.0

    def note(self, *, failed: list[float], succeeded: list[float]) -> None:
        """Count newly finished pods (their finish times), as ``newBackoffRecord`` does: a
        success resets the count to the failures after it."""
        if succeeded:
            last_success = max(succeeded)
            after = [t for t in failed if t > last_success]
            self.failures = len(after)
            self.last_failure = max(after, default=0.0)
        elif failed:
            self.failures += len(failed)
            self.last_failure = max(self.last_failure, *failed)

    def remaining(self, now: float) -> float:
        """Seconds still to wait before creating a pod (0: none)."""
        wait = backoff_seconds(self.failures)
        return max(wait - (now - self.last_failure), 0.0) if wait else 0.0


def _exit_codes(pod: JsonObject, container: str | None) -> list[int]:
    codes = []
    status = _dict(pod.get("status"))
    for entry in [
        *_list(status.get("initContainerStatuses")),
        *_list(status.get("containerStatuses")),
    ]:
        state = _dict(_dict(_dict(entry).get("state")).get("terminated"))
        code = state.get("exitCode")
        if container is not None and _dict(entry).get("name") != container:
            continue
        if isinstance(code, int) and code != 0:
            codes.append(code)
    return codes


def _matches(rule: JsonObject, pod: JsonObject) -> bool:
    on_codes = _dict(rule.get("onExitCodes"))
    if on_codes:
        values = {v for v in _list(on_codes.get("values")) if isinstance(v, int)}
        name = on_codes.get("containerName")
        codes = _exit_codes(pod, str(name) if isinstance(name, str) else None)
        if on_codes.get("operator") == "NotIn":
            return any(code not in values for code in codes)
        return any(code in values for code in codes)
    conditions = [_dict(c) for c in _list(_dict(pod.get("status")).get("conditions"))]
    for wanted in (_dict(w) for w in _list(rule.get("onPodConditions"))):
        status = wanted.get("status") or "True"
        if any(
            c.get("type") == wanted.get("type") and c.get("status") == status for c in conditions
        ):
            return True
    return False


def failure_action(spec: JsonObject, pod: JsonObject) -> tuple[Action, int | None]:
    """What a failed ``pod`` means to a Job with ``spec``: the action and the index of the
    pod failure policy rule that decided it (None: no rule matched, ``Count``)."""
    rules = _list(_dict(spec.get("podFailurePolicy")).get("rules"))
    for index, rule in enumerate(_dict(r) for r in rules):
        if _matches(rule, pod):
            action = rule.get("action")
            if action == "FailJob" or action == "FailIndex":
                return action, index
            if action == "Ignore" or action == "Count":
                return action, index
    return "Count", None


def fail_job_message(pod: JsonObject, rule: int) -> str:
    """The Failed condition's message for a pod a ``FailJob`` rule matched."""
    meta = _dict(pod.get("metadata"))
    return (
        f"Pod {meta.get('namespace')}/{meta.get('name')} failed, matching FailJob rule at "
        f"index {rule}"
    )
