"""What the preemption service reads off the replica of the decisions in force.

The replica (:class:`tidegate.model.replica.Replica`) answers which admission is in force and
which pods are a workload's; these pure functions turn that into what a preemption needs,
so the service keeps no rule of its own:

- **Running gangs** (:func:`running_gangs`): the workloads with an admission in force and pods
  bound to a node and not terminating, as victim candidates. Their running time (for the
  GPU-time lost) counts from the admission decision, else from their oldest bound pod.
- **The pods an eviction removes** (:func:`evictable_pods`, :func:`victim_record`) and those
  of them still there (:func:`still_live`), by name and uid.
- **Preemptions in flight** change the capacity view a search runs on
  (:func:`in_flight_view`): their victims' pods are counted as gone (they are being evicted)
  and the room nominated for other preemptors still waiting as taken.

Pure: no I/O.
"""

from collections.abc import Iterable, Sequence

from tidegate.model import Admitted, DisruptionBudgetState, PodState, Resources, WorkloadKey
from tidegate.model import resources as res
from tidegate.model.events import OnPreemption
from tidegate.model.ledger import PodRef, PreemptionRecord, VictimRecord
from tidegate.model.replica import Replica
from tidegate.placement import CapacityView
from tidegate.policy.common import evictable, holds_capacity, runs
from tidegate.policy.victims import RunningGang, running_gang


def in_force_of(replica: Replica, key: WorkloadKey, uid: str) -> Admitted | None:
    """The admission in force of the workload ``key`` with ``uid``, if any."""
    known = replica.in_force(key)
    return known if known is not None and known.uid == uid else None


def running_gangs(
    replica: Replica,
    *,
    now: float,
    budgets: Iterable[DisruptionBudgetState] = (),
    exclude: Iterable[str] = (),
) -> list[RunningGang]:
    """The admitted workloads that hold capacity, as victim candidates (``exclude``: keys
    that may not be candidates, e.g. victims of preemptions in flight)."""
    excluded = set(exclude)
    budgets = list(budgets)
    out = []
    for key in replica.admitted_keys():
        verdict = replica.verdict(key)
        known, workload = verdict.in_force, verdict.workload
        if key in excluded or known is None or workload is None:
            continue
        bound = [p for p in replica.members(key) if runs(p)]
        if not bound:
            continue
        started = known.time or min(p.created_at for p in bound)
        gang = running_gang(
            workload,
            bound,
            running_seconds=max(int(now - started), 0),
            admission=known.body.sequence,
            origin=known.body.chain_start(),
            queue=known.body.queue,
            budgets=budgets,
        )
        out.append(gang)
    return out


def evictable_pods(
    replica: Replica, key: WorkloadKey, *, created_before: float | None = None
) -> list[PodRef]:
    """Pods of ``key`` an eviction must remove (:func:`~tidegate.policy.common.evictable`).
    With ``created_before``, pods created later (the controller's replacements) are left."""
    out = []
    for pod in replica.members(key):
        if not evictable(pod):
            continue
        if created_before is not None and pod.created_at > created_before:
            continue
        out.append(PodRef(namespace=pod.namespace, name=pod.name, uid=pod.uid, node=pod.node_name))
    return out


def still_live(replica: Replica, pods: Iterable[PodRef]) -> list[PodRef]:
    """Those of ``pods`` the replica shows with the same uid and not finished or being
    deleted (:func:`~tidegate.policy.common.evictable`)."""
    out = []
    for ref in pods:
        pod = replica.pods.get((ref.namespace, ref.name))
        if pod is not None and pod.uid == ref.uid and evictable(pod):
            out.append(ref)
    return out


def victim_record(replica: Replica, key: WorkloadKey, *, mode: OnPreemption) -> VictimRecord | None:
    """What to record for victim ``key`` (its owner and the pods to evict), or None when
    the workload is no longer known."""
    workload = replica.workload(key)
    if workload is None:
        return None
    return VictimRecord(
        key=key,
        uid=workload.uid,
        mode=mode,
        owner_kind=workload.owner_kind,
        owner_api_version=workload.owner_api_version,
        pods=evictable_pods(replica, key),
    )


def in_flight_view(
    base: CapacityView,
    in_flight: Sequence[PreemptionRecord],
    replica: Replica,
    *,
    preemptor: str,
) -> CapacityView:
    """A copy of ``base`` with the pods of victims in flight gone and the room nominated
    for preemptors other than ``preemptor`` (still waiting for admission) taken."""
    change: dict[str, Resources] = {}
    for record in in_flight:
        for victim in record.victims:
            for pod in _live_pods(replica, victim):
                # Terminating pods count too: their room is not free until they are gone.
                if pod.node_name and holds_capacity(pod):
                    freed = {**pod.requests, "pods": 1}
                    change[pod.node_name] = res.subtract(change.get(pod.node_name, {}), freed)
        admitted = in_force_of(replica, WorkloadKey(record.preemptor), record.preemptor_uid)
        if record.preemptor != preemptor and admitted is None:
            for node, amount in record.decision.nominated.items():
                change[node] = res.add(change.get(node, {}), amount)
    view = base.copy()
    for node, delta in change.items():
        if node not in view:
            continue
        used = res.add(view.used(node), delta)
        view.set_used(node, {name: max(amount, 0) for name, amount in used.items()})
    return view


def _live_pods(replica: Replica, victim: VictimRecord) -> list[PodState]:
    """The recorded pods of ``victim`` that still exist (same UID)."""
    out = []
    for ref in victim.pods:
        pod = replica.pods.get((ref.namespace, ref.name))
        if pod is not None and pod.uid == ref.uid:
            out.append(pod)
    return out
