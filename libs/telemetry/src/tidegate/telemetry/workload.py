"""One trace per workload: its root span and the spans that explain each decision about it.

Why: an SRE asking "why did this workload wait, where did it go, who evicted it" should open
one trace and read the answer off span attributes. The watcher derives the workload's
``traceparent`` from its UID (:func:`workload_trace_context`), so every service that continues
it lands in the same trace, whoever restarts. That ``traceparent`` names a root span that no
process had started; :func:`export_workload_root` exports it (with exactly those ids), once,
when the watcher first publishes the workload. Below it:

* ``tg.<c>.workload.<ns>.<name> publish`` / ``process``: the watcher's publications of the
  workload and every service taking them in (topology-cache, admission, preemption, ungater);
* ``admission decision`` (:func:`decision_span`): every decision admission publishes about it
  (admitted, pending with its reason and numbers, preempt-requested, released), with the queue's
  quota used and left;
* ``select victims`` (:func:`victim_choice_span`): the preemption service's victim search
  (candidates, the victims chosen, why the others were not), with a link to each victim's own
  trace;
* ``release pods`` (:func:`release_span`): the ungater's releases, with one ``pod released``
  event per pod (domain, rank) in release order;
* ``bind pods`` (:func:`pods_bound_span`): pods the watcher saw bound to their nodes, one span
  per batch of its publications; the last one is the last pod bound.

Attribute names are in the ``tidegate.*`` namespace (listed in docs/operations.md). Every
helper is a no-op apart from passing the trace context on when no tracer provider is installed;
each takes an optional tracer so tests can use a provider of their own.
"""

import hashlib
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Tracer

from tidegate.model import (
    Admitted,
    Pending,
    PodState,
    PreemptRequested,
    Released,
    ReservationDropped,
    Reserved,
    Resources,
    WorkloadKey,
    WorkloadState,
)
from tidegate.model.quantity import format_quantity
from tidegate.telemetry.messaging import extract, tidegate_tracer, tracing_off
from tidegate.telemetry.tracing import forced_ids

if TYPE_CHECKING:  # imported for types only: the policy pulls in numpy, every process pays
    from tidegate.policy.admission import Admission
    from tidegate.policy.victims import VictimChoice


ROOT_SPAN: Final = "workload"
"""Name of the root span of a workload's trace."""
DECISION_SPAN: Final = "admission decision"
"""Name of the span of one decision admission publishes."""
VICTIMS_SPAN: Final = "select victims"
"""Name of the span of one victim search."""
RELEASE_SPAN: Final = "release pods"
"""Name of the span of one round of pod releases by the ungater."""
BIND_SPAN: Final = "bind pods"
"""Name of the span of pods the watcher saw bound to nodes (one batch of its publications)."""
POD_RELEASED_EVENT: Final = "pod released"
_HOSTNAME: Final = "kubernetes.io/hostname"
"""Name of the span event of one pod released."""

AttributeValue = str | int | float | bool | Sequence[str] | Sequence[int]


def workload_trace_context(uid: str) -> dict[str, str]:
    """The W3C ``traceparent`` derived from a workload's UID: stable across republishing and
    restarts, so every service continuing it lands in the same trace."""
    digest = hashlib.sha256(f"tidegate-workload:{uid}".encode()).hexdigest()
    return {"traceparent": f"00-{digest[:32]}-{digest[32:48]}-01"}


def trace_id_of(trace_context: Mapping[str, str]) -> str | None:
    """The trace id (32 hex digits) a ``traceparent`` carrier names, or None."""
    parts = trace_context.get("traceparent", "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def workload_trace(message: object) -> Mapping[str, str] | None:
    """The trace context of a workload state message; None for any other message (whose
    publication then starts or continues nothing of a workload's trace)."""
    return message.trace_context if isinstance(message, WorkloadState) else None


@contextmanager
def continuing(trace_context: Mapping[str, str] | None) -> Iterator[None]:
    """Make ``trace_context`` current inside the block (spans and publishes continue it)."""
    token = otel_context.attach(extract(trace_context))
    try:
        yield
    finally:
        otel_context.detach(token)


def _resources(resources: Mapping[str, int]) -> str:
    """``cpu=8,memory=64Gi,nvidia.com/gpu=8``: Kubernetes notation, names sorted."""
    return ",".join(
        f"{name}={format_quantity(name, value)}" for name, value in sorted(resources.items())
    )


def workload_attributes(workload: WorkloadState) -> dict[str, AttributeValue]:
    """The inputs of every decision about ``workload``: who it is and what it asks for."""
    attributes: dict[str, AttributeValue] = {
        "tidegate.workload.key": f"{workload.namespace}/{workload.name}",
        "tidegate.workload.namespace": workload.namespace,
        "tidegate.workload.name": workload.name,
        "tidegate.workload.uid": workload.uid,
        "tidegate.workload.kind": workload.owner_kind,
        "tidegate.workload.priority": workload.priority,
        "tidegate.workload.service_type": workload.service_type,
        "tidegate.workload.preemptable": workload.preemptable,
        "tidegate.workload.pods": sum(p.count for p in workload.podsets),
        "tidegate.workload.requests": [
            f"{p.name}: {p.count} x {_resources(p.requests)}" for p in workload.podsets
        ],
        "tidegate.workload.topology_request": [
            f"{p.name}: {_topology(p.topology)}" for p in workload.podsets
        ],
    }
    if workload.queue:
        attributes["tidegate.queue.name"] = workload.queue
    if workload.priority_class:
        attributes["tidegate.workload.priority_class"] = workload.priority_class
    if workload.card_request is not None:
        attributes["tidegate.workload.card_request"] = _resources(workload.card_request)
    if workload.invalid_reason:
        attributes["tidegate.workload.invalid_reason"] = workload.invalid_reason
    return attributes


def _topology(request: object) -> str:
    parts = []
    for name in ("required", "preferred", "slice_required", "slice_size"):
        value = getattr(request, name, None)
        if value is not None:
            parts.append(f"{name}={value}")
    if getattr(request, "unconstrained", False):
        parts.append("unconstrained")
    return " ".join(parts) or "none"


def export_workload_root(
    workload: WorkloadState, *, now: float | None = None, tracer: Tracer | None = None
) -> bool:
    """Export the root span of ``workload``'s trace, from its creation to ``now``.

    Only when its trace context is the one derived from its UID: a ``traceparent`` the user
    set (an annotation) names a span of the user's own, which their system exports. Call once
    per workload UID (the watcher does, on its first publication). True when a span was made.
    """
    if tracing_off(tracer) or workload.trace_context != workload_trace_context(workload.uid):
        return False
    parts = workload.trace_context["traceparent"].split("-")
    end = time.time() if now is None else now
    start = workload.created_at if 0 < workload.created_at <= end else end
    with forced_ids(int(parts[1], 16), int(parts[2], 16)):
        span = tidegate_tracer(tracer).start_span(
            ROOT_SPAN,
            context=otel_context.Context(),
            kind=SpanKind.INTERNAL,
            attributes=workload_attributes(workload),
            start_time=int(start * 1e9),
        )
    span.end(end_time=int(end * 1e9))
    return True


# ---------------------------------------------------------------------------- admission

_NEEDS: Final = re.compile(r"needs (?:at least )?(\d+) (?:pods|slices)")
_BEST: Final = re.compile(r"the best (\S+) fits (\d+)")
_CLUSTER_FITS: Final = re.compile(r"the cluster fits (\d+)")
_LIMITED: Final = re.compile(r"\(limited by (.+)\)\s*$")


def reason_numbers(message: str) -> dict[str, AttributeValue]:
    """The numbers a placement reason states ("needs 16 pods in one rack; the best rack fits
    12 (limited by nvidia.com/gpu)"), as attributes; empty when it states none."""
    out: dict[str, AttributeValue] = {}
    if (needs := _NEEDS.search(message)) is not None:
        out["tidegate.reason.needed"] = int(needs.group(1))
    if (best := _BEST.search(message)) is not None:
        out["tidegate.reason.best_domain"] = best.group(1)
        out["tidegate.reason.best_domain_fits"] = int(best.group(2))
    elif (whole := _CLUSTER_FITS.search(message)) is not None:
        out["tidegate.reason.best_domain"] = "cluster"
        out["tidegate.reason.best_domain_fits"] = int(whole.group(1))
    if (limited := _LIMITED.search(message)) is not None:
        out["tidegate.reason.limited_by"] = limited.group(1)
    return out


def placement_attributes(admitted: Admitted) -> dict[str, AttributeValue]:
    """Where an admission put the workload: per podset, its domains and pod counts."""
    domains = [
        f"{podset}: {d.count} in {a.levels[-1] if a.levels else 'node'}={'/'.join(d.values)}"
        for podset, a in sorted(admitted.assignments.items())
        for d in a.domains
        if d.count > 0
    ]
    wide: dict[str, int] = {}
    for podset, assignment in sorted(admitted.assignments.items()):
        above = max(len(assignment.levels) - 1, 1)
        label = assignment.levels[above - 1] if assignment.levels else "node"
        for d in assignment.domains:
            if d.count > 0:
                name = f"{podset}: {label}={'/'.join(d.values[:above])}"
                wide[name] = wide.get(name, 0) + d.count
    attributes: dict[str, AttributeValue] = {
        "tidegate.placement.summary": [f"{name} x{count}" for name, count in wide.items()],
        "tidegate.placement.domains": domains,
        "tidegate.placement.domain_count": len(domains),
        "tidegate.charged": _resources(admitted.charged),
    }
    if admitted.charged_cards:
        attributes["tidegate.charged_cards"] = _resources(admitted.charged_cards)
    if admitted.card_model:
        attributes["tidegate.card_model"] = admitted.card_model
    if admitted.nominated_by:
        attributes["tidegate.placement.nominated_by"] = admitted.nominated_by
    if admitted.replaces is not None:
        attributes["tidegate.placement.replaces"] = admitted.replaces
    return attributes


def quota_attributes(admission: "Admission", queue: str) -> dict[str, AttributeValue]:
    """The queue's quota, what its admitted workloads use, and what is left (after this
    decision took effect in the policy)."""
    config = admission.queues().get(queue)
    usage = admission.quota.usage(queue)
    attributes: dict[str, AttributeValue] = {
        "tidegate.quota.used": _resources(usage.resources),
        "tidegate.quota.cards_used": _resources(usage.cards),
    }
    if config is not None and config.quota is not None:
        left: Resources = {
            name: limit - usage.resources.get(name, 0) for name, limit in config.quota.items()
        }
        attributes["tidegate.quota.limit"] = _resources(config.quota)
        attributes["tidegate.quota.left"] = _resources(left)
    if config is not None and config.card_quota is not None:
        cards_left = {m: n - usage.cards.get(m, 0) for m, n in config.card_quota.items()}
        attributes["tidegate.quota.cards_limit"] = _resources(config.card_quota)
        attributes["tidegate.quota.cards_left"] = _resources(cards_left)
    if config is not None:
        attributes["tidegate.queue.priority"] = config.priority
        attributes["tidegate.queue.reclaimable"] = config.reclaimable
    return attributes


DecisionBody = Admitted | Pending | PreemptRequested | Released | Reserved | ReservationDropped


def decision_attributes(
    body: DecisionBody, workload: WorkloadState | None, admission: "Admission | None"
) -> dict[str, AttributeValue]:
    """Every attribute of an ``admission decision`` span: inputs (the workload) and outputs
    (kind, reason and its numbers, placement, quota)."""
    attributes: dict[str, AttributeValue] = {}
    if workload is not None:
        attributes.update(workload_attributes(workload))
    attributes["tidegate.workload.key"] = body.workload
    attributes["tidegate.workload.uid"] = body.uid
    attributes["tidegate.decision.kind"] = _KIND[type(body)]
    attributes["tidegate.decision.sequence"] = body.sequence
    if body.queue:
        attributes["tidegate.queue.name"] = body.queue
    if isinstance(body, Admitted):
        attributes["tidegate.reason"] = "Admitted"
        attributes["tidegate.decision.epoch"] = body.epoch
        attributes.update(placement_attributes(body))
    elif isinstance(body, Pending | Released):
        attributes["tidegate.reason"] = body.reason
        attributes["tidegate.reason.message"] = body.message
        attributes.update(reason_numbers(body.message))
    elif isinstance(body, Reserved):
        attributes["tidegate.reason"] = "Reserved"
        attributes["tidegate.reason.message"] = body.message
        attributes["tidegate.reservation.nodes"] = list(body.nodes)
        attributes["tidegate.reservation.expected_start"] = body.expected_start
        attributes["tidegate.reservation.waits_for"] = [w.workload for w in body.waits_for]
    elif isinstance(body, ReservationDropped):
        attributes["tidegate.reason"] = body.reason
        attributes["tidegate.reason.message"] = body.message
        attributes["tidegate.reservation.sequence"] = body.reserved_sequence
    else:
        attributes["tidegate.reason"] = "PreemptRequested"
        attributes["tidegate.reason.message"] = body.message
        attributes.update(reason_numbers(body.message))
    if admission is not None and body.queue:
        attributes.update(quota_attributes(admission, body.queue))
    return attributes


_KIND: Final[dict[type, str]] = {
    Admitted: "admitted",
    Pending: "pending",
    PreemptRequested: "preempt-requested",
    Released: "released",
    Reserved: "reserved",
    ReservationDropped: "reservation-dropped",
}


@contextmanager
def decision_span(
    body: object,
    workload: WorkloadState | None,
    admission: "Admission | None" = None,
    *,
    tries: int = 0,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """An ``admission decision`` span in the workload's trace; publish the decision inside.

    ``body`` is the decision (any other message gets no span, only the workload's context);
    ``tries``, the placement attempts since the previous decision (recorded when above 0).

    Without a tracer provider the workload's trace context is still made current, so the
    publication carries it.
    """
    trace_context = workload.trace_context if workload is not None else None
    if not trace_context and isinstance(body, DecisionBody):
        trace_context = workload_trace_context(body.uid)
    with continuing(trace_context):
        if tracing_off(tracer) or not isinstance(body, DecisionBody):
            yield trace.INVALID_SPAN
            return
        attributes = decision_attributes(body, workload, admission)
        if tries:
            attributes["tidegate.admission.tries"] = tries
        with tidegate_tracer(tracer).start_as_current_span(
            DECISION_SPAN, attributes=attributes
        ) as span:
            yield span


# ---------------------------------------------------------------------------- preemption


def victim_attributes(
    choice: "VictimChoice", room: Mapping[str, Mapping[str, int]] | None = None
) -> dict[str, AttributeValue]:
    """What a victim search considered and chose, and why the others were not chosen."""
    attributes: dict[str, AttributeValue] = {
        "tidegate.preemption.outcome": choice.outcome,
        "tidegate.preemption.victims": list(choice.victims),
        "tidegate.preemption.victim_count": len(choice.victims),
        "tidegate.preemption.candidates_ineligible": len(choice.ineligible),
        "tidegate.preemption.not_chosen": [
            f"{key}: {why}" for key, why in sorted(choice.ineligible.items())
        ],
        "tidegate.preemption.freed_gpus": choice.gpus,
        "tidegate.preemption.freed_gpu_seconds": choice.gpu_seconds,
        "tidegate.preemption.exact": choice.exact,
        "tidegate.preemption.modes": [f"{k}: {m}" for k, m in sorted(choice.modes.items())],
        "tidegate.preemption.nominated_nodes": len(choice.nominated),
        "tidegate.preemption.nominated": _resources(_sum(choice.nominated.values())),
    }
    if choice.reason:
        attributes["tidegate.reason.message"] = choice.reason
    if choice.top_priority is not None:
        attributes["tidegate.preemption.top_victim_priority"] = choice.top_priority
    if room:
        attributes["tidegate.preemption.victim_room"] = [
            f"{key}: {_resources(amount)}" for key, amount in sorted(room.items())
        ]
    return attributes


def _sum(amounts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for amount in amounts:
        for name, value in amount.items():
            total[name] = total.get(name, 0) + value
    return total


def victim_choice_span(
    preemptor: WorkloadState,
    choice: "VictimChoice",
    victims: Mapping[WorkloadKey, WorkloadState | None],
    *,
    start: float,
    room: Mapping[str, Mapping[str, int]] | None = None,
    tracer: Tracer | None = None,
) -> None:
    """Record a ``select victims`` span (a child of the current span, from ``start`` to now)
    with a link to the trace of every victim in ``victims`` (key → its workload state).
    ``room``: what each victim's eviction frees (default: what its podsets request)."""
    if tracing_off(tracer):
        return
    links = []
    for key, victim in sorted(victims.items()):
        context = victim.trace_context if victim is not None and victim.trace_context else None
        span_context = trace.get_current_span(extract(context)).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context, {"tidegate.workload.key": key}))
    if room is None:  # what each victim holds: the room its eviction frees
        room = {
            key: _sum({n: v * p.count for n, v in p.requests.items()} for p in victim.podsets)
            for key, victim in victims.items()
            if victim is not None
        }
    attributes = {**workload_attributes(preemptor), **victim_attributes(choice, room)}
    span = tidegate_tracer(tracer).start_span(
        VICTIMS_SPAN, links=links, attributes=attributes, start_time=int(start * 1e9)
    )
    span.end()


# ---------------------------------------------------------------------------- ungater


@dataclass
class _Releases:
    by_domain: dict[str, list[str]] = field(default_factory=dict)


_releases: ContextVar[_Releases | None] = ContextVar("tidegate_releases", default=None)


@contextmanager
def release_span(
    key: str, workload: WorkloadState | None, *, tracer: Tracer | None = None
) -> Iterator[None]:
    """A ``release pods`` span in the workload's trace around one round of the ungater's
    writes; pods noted with :func:`note_pod_released` inside are summed up per domain."""
    trace_context = workload.trace_context if workload is not None else None
    with continuing(trace_context):
        if tracing_off(tracer):
            yield
            return
        attributes = workload_attributes(workload) if workload is not None else {}
        attributes["tidegate.workload.key"] = key
        releases = _Releases()
        token = _releases.set(releases)
        try:
            with tidegate_tracer(tracer).start_as_current_span(
                RELEASE_SPAN, attributes=attributes
            ) as span:
                yield
                span.set_attribute(
                    "tidegate.release.pods", sum(len(p) for p in releases.by_domain.values())
                )
                span.set_attribute(
                    "tidegate.release.domains",
                    [
                        f"{d}: {len(pods)} pods in order {', '.join(pods)}"
                        for d, pods in sorted(releases.by_domain.items())
                    ],
                )
        finally:
            _releases.reset(token)


def note_pod_released(pod: PodState, selector: Mapping[str, str]) -> None:
    """Record that ``pod`` was released into the domain ``selector`` names (an event on the
    current span, and a line of the enclosing :func:`release_span`'s summary)."""
    domain = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "any node"
    # The summary groups by topology domain (the node is in each pod's event).
    wider = {k: v for k, v in selector.items() if k != _HOSTNAME} or selector
    group = ",".join(f"{k}={v}" for k, v in sorted(wider.items())) or "any node"
    label = pod.name if pod.rank is None else f"rank {pod.rank}"
    releases = _releases.get()
    if releases is not None:
        releases.by_domain.setdefault(group, []).append(label)
    span = trace.get_current_span()
    if span.is_recording():
        attributes: dict[str, AttributeValue] = {
            "tidegate.pod.name": pod.name,
            "tidegate.domain": domain,
        }
        if pod.rank is not None:
            attributes["tidegate.pod.rank"] = pod.rank
        if pod.podset is not None:
            attributes["tidegate.pod.podset"] = pod.podset
        span.add_event(POD_RELEASED_EVENT, attributes)


# ---------------------------------------------------------------------------- watcher


def newly_bound(message: object, last: object) -> bool:
    """Whether ``message`` (a pod state about to be published) shows a pod of a workload bound
    to a node that ``last`` (the previous message on its subject) did not show bound there."""
    if not isinstance(message, PodState) or not message.workload or not message.node_name:
        return False
    return not (
        isinstance(last, PodState)
        and last.uid == message.uid
        and last.node_name == message.node_name
    )


def pods_bound_span(
    key: str,
    workload: WorkloadState | None,
    pods: Sequence[PodState],
    *,
    tracer: Tracer | None = None,
) -> None:
    """Record a ``bind pods`` span in ``workload``'s trace: ``pods`` were seen bound."""
    if tracing_off(tracer) or not pods:
        return
    trace_context = workload.trace_context if workload is not None else None
    attributes: dict[str, AttributeValue] = {
        "tidegate.workload.key": key,
        "tidegate.bind.pods": len(pods),
        "tidegate.bind.nodes": [f"{p.name}: {p.node_name}" for p in pods],
    }
    if workload is not None:
        attributes["tidegate.workload.pods"] = sum(p.count for p in workload.podsets)
    with continuing(trace_context):
        tidegate_tracer(tracer).start_span(BIND_SPAN, attributes=attributes).end()
