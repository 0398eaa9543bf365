"""PodDisruptionBudgets (policy/v1): the budget arithmetic, the Eviction verdict, and the
disruption controller that keeps each budget's status.

Why: on a real cluster the Eviction subresource answers **429 TooManyRequests** when evicting a
pod would take a budget below what it promises, and kube-controller-manager's disruption
controller publishes ``status.disruptionsAllowed``. Code that evicts (tidegate's preemption, its
ungater) must be tested against that, so the simulator does the same:

- a budget selects pods of its namespace by ``spec.selector``; its **expected** pods are the
  selected pods that have not finished and are not being deleted (the real controller takes
  the count from the pods' controller's scale for percentages and ``maxUnavailable``; for the
  Jobs, Deployments and ReplicaSets simulated here the two agree once the controller caught up);
- **healthy** pods are those of them whose ``Ready`` condition is true;
- **desired healthy** is ``minAvailable`` (a percentage of expected, rounded up), else
  expected minus ``maxUnavailable`` (a percentage rounded up), else 0;
- **disruptions allowed** = max(0, healthy - desired healthy).

The Eviction verdict (:func:`eviction_refusal`) follows the real API server: a pod that is
Pending, finished or already being deleted may always be evicted; a pod selected by more than
one budget cannot be evicted (500); a pod that is not Ready may be evicted while its budget is
met (``unhealthyPodEvictionPolicy: IfHealthyBudget``, the default); otherwise the eviction needs
at least one disruption allowed, computed from the pods as they are at that moment (the real
server decrements the budget's status in the same transaction: two evictions racing for the
last allowed disruption cannot both pass either way). Pure functions plus a small controller.
"""

import math
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Final

from tidegate.sim.errors import ApiError
from tidegate.sim.kinds import PDBS, PODS, STATUS
from tidegate.sim.loop import Reconciler
from tidegate.sim.selectors import match_label_selector_object
from tidegate.sim.store import DELETED, WatchEvent

if TYPE_CHECKING:
    from tidegate.sim.apiserver import ApiServer

JsonObject = dict[str, object]

FINISHED: Final = ("Succeeded", "Failed")


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _labels(obj: JsonObject) -> dict[str, object]:
    return _dict(_dict(obj.get("metadata")).get("labels"))


def _phase(pod: JsonObject) -> str:
    return str(_dict(pod.get("status")).get("phase") or "Pending")


def _deleting(pod: JsonObject) -> bool:
    return bool(_dict(pod.get("metadata")).get("deletionTimestamp"))


def _ready(pod: JsonObject) -> bool:
    conditions = _dict(pod.get("status")).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if _dict(condition).get("type") == "Ready":
            return _dict(condition).get("status") == "True"
    return False


def selects(pdb: JsonObject, pod: JsonObject) -> bool:
    """Whether the budget's selector selects the pod (same namespace assumed). A budget with
    an empty selector selects every pod of its namespace (policy/v1)."""
    selector = _dict(pdb.get("spec")).get("selector")
    if not isinstance(selector, dict):
        return False
    return match_label_selector_object(selector, _labels(pod))


def _scaled(value: object, total: int) -> int:
    """An int-or-percentage field, percentages of ``total`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(int(value[:-1]) * total / 100)
        except ValueError:
            return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def budget_status(pdb: JsonObject, pods: Iterable[JsonObject]) -> JsonObject:
    """The status the disruption controller gives ``pdb`` over the namespace's ``pods``."""
    selected = [
        p for p in pods if selects(pdb, p) and _phase(p) not in FINISHED and not _deleting(p)
    ]
    expected = len(selected)
    healthy = sum(1 for p in selected if _ready(p))
    spec = _dict(pdb.get("spec"))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec.get("minAvailable"), expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec.get("maxUnavailable"), expected))
    else:
        desired = 0
    generation = _dict(pdb.get("metadata")).get("generation", 1)
    return {
        "observedGeneration": generation,
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": max(0, healthy - desired),
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if healthy > desired else "False",
                "reason": "SufficientPods" if healthy > desired else "InsufficientPods",
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": "1970-01-01T00:00:00Z",
            }
        ],
    }


def eviction_refusal(
    pod: JsonObject, pdbs: Iterable[JsonObject], pods: Iterable[JsonObject]
) -> ApiError | None:
    """Why evicting ``pod`` is refused now (the error to answer), or None when it is allowed;
    ``pdbs`` and ``pods`` are its namespace's (module docstring)."""
    if _phase(pod) in (*FINISHED, "Pending") or _deleting(pod):
        return None
    matching = [pdb for pdb in pdbs if selects(pdb, pod)]
    if not matching:
        return None
    if len(matching) > 1:
        return ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    pdb = matching[0]
    status = budget_status(pdb, pods)
    healthy, desired = int(str(status["currentHealthy"])), int(str(status["desiredHealthy"]))
    if not _ready(pod) and healthy >= desired:
        return None
    if int(str(status["disruptionsAllowed"])) >= 1:
        return None
    name = _dict(pdb.get("metadata")).get("name")
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {name} needs {desired} healthy pods "
                    f"and has {healthy} currently",
                }
            ]
        },
    )


class DisruptionController(Reconciler):
    """Keeps every budget's status current, like kube-controller-manager's (per namespace)."""

    name = "disruption"

    def __init__(self, api: "ApiServer") -> None:
        """Follow and write through ``api``."""
        super().__init__(debounce_seconds=0.05)
        self.api = api
        self._unsubscribe: list[Callable[[], None]] = []

    def start(self) -> None:
        """Follow pods and budgets; reconcile every namespace with a budget."""
        store = self.api.store
        self._unsubscribe.append(store.subscribe(PODS.key, self._on_event))
        self._unsubscribe.append(store.subscribe(PDBS.key, self._on_event))
        for pdb in store.objects(PDBS.key):
            self.mark(str(_dict(pdb.get("metadata")).get("namespace")))

    def stop(self) -> None:
        """Stop following the store."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()

    def _on_event(self, event: WatchEvent) -> None:
        if event.type == DELETED and event.obj.get("kind") == "PodDisruptionBudget":
            return
        self.mark(str(_dict(event.obj.get("metadata")).get("namespace")))

    def reconcile(self, key: Hashable) -> None:
        """Write the status of every budget of namespace ``key``."""
        namespace = str(key)
        store = self.api.store
        pdbs = list(store.objects(PDBS.key, namespace))
        if not pdbs:
            return
        pods = list(store.objects(PODS.key, namespace))
        for pdb in pdbs:
            status = budget_status(pdb, pods)
            if pdb.get("status") != status:
                name = str(_dict(pdb.get("metadata")).get("name"))
                self.api.update(
                    PDBS, namespace, name, {**pdb, "status": status}, subresource=STATUS
                )
