"""Queue status: what ``kubectl get tq`` and ``kubectl describe tq <name>`` show, as a rule.

A Queue's ``status`` (``deploy/crds/tidegate.io_queues.yaml``) says how many of its workloads
are admitted and how many wait, what the admitted ones hold together (``usage`` per resource
in Kubernetes quantities, ``cardUsage`` per GPU card model) and one condition, ``Active``.
The counts and usage are the queue's :class:`~tidegate.model.replica.QueueTally` in the
replica of the decisions in force (a workload is **admitted** in Q while an admission of Q is
in force for it, adding what admission charged; it is **pending** in Q while it waits for a
reason admission gave in Q); this module only shows them:

- ``Active`` is ``True`` (reason ``Ready``) for a usable queue, ``False`` with reason
  ``Invalid`` and the problem for one admission refuses (its ``invalid_reason``, or a
  negative quota: :func:`tidegate.policy.admission.queue_problem`, admission's own test).
- Resources the queue's quota names are always listed (``0`` when unused), so
  ``kubectl describe`` shows usage beside ``spec.capability``; a resource that drops out of
  ``usage`` is removed from the object with ``null`` (:func:`status_patch`).

The ungater writes it (:mod:`tidegate.ungater.queue_status`).
"""

from collections.abc import Mapping, Sequence

from tidegate.model import QueueConfig, format_quantity
from tidegate.model.replica import QueueTally
from tidegate.policy.admission import queue_problem


def active_condition(
    config: QueueConfig, *, now: str, previous: Sequence[Mapping[str, object]] = ()
) -> dict[str, object]:
    """The ``Active`` condition (module docstring); ``lastTransitionTime`` is kept from
    ``previous`` while the status is the same, else ``now`` (RFC 3339)."""
    problem = queue_problem(config)
    if problem is None:
        condition: dict[str, object] = {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "can admit workloads",
        }
    else:
        condition = {"type": "Active", "status": "False", "reason": "Invalid", "message": problem}
    old = next((c for c in previous if c.get("type") == "Active"), None)
    kept = (
        old.get("lastTransitionTime") if old and old.get("status") == condition["status"] else None
    )
    condition["lastTransitionTime"] = kept if isinstance(kept, str) and kept else now
    return condition


def queue_status(
    config: QueueConfig,
    tally: QueueTally,
    *,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> dict[str, object]:
    """The whole ``status`` of a Queue: counts, usage in Kubernetes notation (every resource
    its quota names, used or not), card usage, and the ``Active`` condition."""
    resources = sorted(set(tally.usage) | set(config.quota or {}))
    models = sorted(set(tally.cards) | set(config.card_quota or {}))
    return {
        "admitted": tally.admitted,
        "pending": tally.pending_count,
        "usage": {name: format_quantity(name, tally.usage.get(name, 0)) for name in resources},
        "cardUsage": {model: tally.cards.get(model, 0) for model in models},
        "conditions": [active_condition(config, now=now, previous=previous)],
    }


def status_patch(desired: Mapping[str, object], shown: Mapping[str, object]) -> dict[str, object]:
    """The merge patch that turns ``shown`` into ``desired``: ``desired`` itself, with ``null``
    for keys of ``usage`` and ``cardUsage`` that ``shown`` has and ``desired`` has not (a merge
    patch merges maps, so a key left out would stay)."""
    patch = dict(desired)
    for name in ("usage", "cardUsage"):
        wanted, before = desired.get(name), shown.get(name)
        if isinstance(wanted, Mapping) and isinstance(before, Mapping):
            removed = {str(key): None for key in before if key not in wanted}
            if removed:
                patch[name] = {**wanted, **removed}
    return patch
