"""Nominations a new leader inherits: read from the preemption service's ledger records.

A nomination (room freed by preemption and held for its preemptor) lives in the leader's
memory. So that a successor keeps holding it, the takeover reads the preemption service's
records in the shared ledger bucket (keys ``preemption.<namespace>/<name>``) and restores every
nomination still live through :meth:`~tidegate.policy.admission.Admission.preempted`, the same
call the old leader made when the ``preempted`` decision arrived.

The preemption record's schema is :class:`tidegate.model.ledger.PreemptionRecord`, the one
both services use.

What this does not do: release victims. A ``preempted`` decision the old leader did not
acknowledge is delivered again to the new leader by the durable consumer, which releases them;
a victim still admitted here is one whose release is still to come that way (or one admitted
again after a restart), so it is left alone. No I/O happens here.
"""

from collections.abc import Iterable

import msgspec

from tidegate.model import WorkloadKey
from tidegate.model.ledger import PreemptionRecord
from tidegate.policy.admission import Admission
from tidegate.policy.elastic import holds_room_for


def restore_nominations(
    admission: Admission, records: Iterable[PreemptionRecord], *, now: float
) -> list[WorkloadKey]:
    """Restore the nominations of ``records`` still live into ``admission``; return their
    preemptors.

    A record counts if its decision was published, its nomination has not timed out
    (``nomination_timeout_seconds`` from ``evicted_at``, else ``published_at``), and its
    preemptor is known with the recorded uid and not admitted yet (or admitted and still
    growing: the room was nominated for its growth). Victims not admitted and
    still the recorded object pass through as the old leader saw them (so an aborted one is
    not admitted again); victims admitted here are left out (module docstring).
    """
    timeout = admission.settings.nomination_timeout_seconds
    restored: list[WorkloadKey] = []
    for record in records:
        decision = record.decision
        at = record.evicted_at if record.evicted_at is not None else record.published_at
        if at is None or now - at >= timeout:
            continue
        preemptor = WorkloadKey(decision.preemptor)
        workload = admission.workload(preemptor)
        if workload is None or workload.uid != decision.preemptor_uid:
            continue
        if not holds_room_for(workload, admission.admitted().get(preemptor)):
            continue  # admitted, and not for a growth still waiting
        victims = [
            victim.key
            for victim in record.victims
            if not admission.is_admitted(WorkloadKey(victim.key))
            and (current := admission.workload(WorkloadKey(victim.key))) is not None
            and current.uid == victim.uid
        ]
        mode = {key: m for key, m in decision.mode.items() if key in victims}
        lost = {key: named for key, named in decision.lost.items() if key in victims}
        # Only victims not admitted are passed, so this releases nothing (no decisions).
        admission.preempted(
            msgspec.structs.replace(decision, victims=victims, mode=mode, lost=lost), now=at
        )
        if preemptor in admission.nominations():
            restored.append(preemptor)
    return restored
