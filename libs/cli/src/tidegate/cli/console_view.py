"""What ``tidegate console`` shows, kept live from the bus: topology, queues, waits, decisions.

Why: an SRE needs the whole cluster on one page; ``tidegate explain`` and ``tidegate queues``
answer about one workload or one table. :class:`ConsoleView` is fed every state message and
every decision (replayed, then followed) and answers with JSON-ready dicts built from the same
pieces those commands use, so the page can never disagree with them:

* what is in force, per workload and per queue: the :class:`~tidegate.cli.busview.BusView`
  (the services' own :class:`~tidegate.model.replica.Replica`), read through
  :func:`tidegate.cli.queues.queue_table` and :func:`tidegate.cli.explain.explain`;
* what each node holds: the topology-cache's own arithmetic
  (:class:`~tidegate.placement.accounting.CapacityAccounting`: bound pods, reservations of
  admissions in force, free), split here only into how much of the bound part runs.

It does no I/O: :mod:`tidegate.cli.console` follows the bus and serves the page.
"""

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from tidegate.cli.busview import BusView
from tidegate.cli.explain import NOT_COMPETING, explain, placement_lines, queue_in, state_of
from tidegate.cli.explain import render as render_explain
from tidegate.cli.queues import queue_table
from tidegate.model import (
    Admitted,
    CohortConfig,
    Message,
    NodeState,
    Pending,
    Preempted,
    PreemptRequested,
    Released,
    ReplaceRequested,
    ReservationDropped,
    Reserved,
    Tombstone,
    TopologyConfig,
    WorkloadKey,
)
from tidegate.model.pods import holds_capacity
from tidegate.placement.accounting import CapacityAccounting
from tidegate.placement.ordering import natural_key
from tidegate.policy.cards import GPU_PRODUCT_LABEL
from tidegate.policy.queuetree import (
    NodeId,
    QueueTree,
    TreeState,
    lent,
    report,
    usage_of_tallies,
)
from tidegate.policy.reservation import describe_domain, reserved_for_you

DECISIONS_KEPT: Final = 500
"""Recent decisions kept for a page that connects (the stream goes on live after that)."""

HOSTNAME: Final = "kubernetes.io/hostname"
"""The node level of a topology: the map shows its nodes as cells, not as a level."""


def accelerators(resources: Mapping[str, int]) -> int:
    """GPUs (whole or MIG slices) among ``resources``: ``nvidia.com/gpu`` and ``nvidia.com/mig-*``."""
    return sum(
        amount
        for name, amount in resources.items()
        if name == "nvidia.com/gpu" or name.startswith("nvidia.com/mig-")
    )


def trace_id(traceparent: str) -> str | None:
    """The trace id of a W3C ``traceparent`` (None when it is not one)."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def describe(body: Message, *, stream_sequence: int, at: float) -> dict[str, Any] | None:
    """One decision as the page's stream shows it (None for a message that is none)."""
    out: dict[str, Any] = {"seq": stream_sequence, "at": _when(at)}
    match body:
        case Admitted():
            replaced = " (moved)" if body.replaces is not None else ""
            out |= {
                "kind": "admitted",
                "workload": body.workload,
                "queue": body.queue,
                "text": "; ".join(placement_lines(body)) + replaced,
            }
        case Pending():
            out |= {
                "kind": "pending",
                "workload": body.workload,
                "queue": body.queue,
                "reason": body.reason,
                "text": body.message,
            }
        case PreemptRequested():
            out |= {
                "kind": "preempt-requested",
                "workload": body.workload,
                "queue": body.queue,
                "text": body.message or "asked preemption to make room",
            }
        case Preempted():
            out |= {
                "kind": "preempted",
                "workload": body.preemptor,
                "victims": list(body.victims),
                "text": f"evicted {', '.join(body.victims)}"
                + (f": {body.message}" * bool(body.message)),
            }
        case Released():
            out |= {
                "kind": "released",
                "workload": body.workload,
                "queue": body.queue,
                "reason": body.reason,
                "text": body.message or body.reason,
            }
        case ReplaceRequested():
            out |= {
                "kind": "replace-requested",
                "workload": body.workload,
                "reason": body.cause,
                "text": body.message or f"slots lost on {', '.join(body.nodes)}",
            }
        case Reserved():
            out |= {
                "kind": "reserved",
                "workload": body.workload,
                "queue": body.queue,
                "text": body.message or reserved_for_you(body),
            }
        case ReservationDropped():
            out |= {
                "kind": "reservation-dropped",
                "workload": body.workload,
                "queue": body.queue,
                "reason": body.reason,
                "text": body.message or body.reason,
            }
        case _:
            return None
    return out


@dataclass
class ConsoleView:
    """Everything the console shows, fed from the bus (module docstring)."""

    cluster: str
    topology: str | None = None
    """The Topology whose levels draw the map (None: the first by name, if any)."""
    trace_url_template: str | None = None
    """A trace UI's URL with ``{trace_id}`` in it (Jaeger: ``…/trace/{trace_id}``)."""
    bus: BusView = field(default_factory=BusView)
    capacity: CapacityAccounting = field(default_factory=CapacityAccounting)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    topologies: dict[str, TopologyConfig] = field(default_factory=dict)
    cohorts: dict[str, CohortConfig] = field(default_factory=dict)
    decisions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=DECISIONS_KEPT))
    version: int = 0
    """Grows with every message applied: the page is sent a new snapshot when it changed."""

    # ------------------------------------------------------------------ input

    def apply_state(self, body: Message, *, stream_sequence: int, time: float) -> None:
        """Apply one message of the state stream (nodes, pods, workloads, configs)."""
        match body:
            case NodeState():
                self.nodes[body.name] = body
            case TopologyConfig():
                self.topologies[body.name] = body
            case Tombstone(object_kind="node", name=name):
                self.nodes.pop(name, None)
            case Tombstone(object_kind="topology", name=name):
                self.topologies.pop(name, None)
            case CohortConfig():
                self.cohorts[body.name] = body
            case Tombstone(object_kind="cohort", name=name):
                self.cohorts.pop(name, None)
            case _:
                pass
        self.bus.apply_state(body, stream_sequence=stream_sequence, time=time)
        self.capacity.apply(body, time=time)
        self.version += 1

    def apply_decision(
        self, body: Message, *, stream_sequence: int, time: float
    ) -> dict[str, Any] | None:
        """Apply one decision; return it as the stream shows it (None: not a decision)."""
        self.bus.apply_decision(body, stream_sequence=stream_sequence, time=time)
        self.capacity.apply(body, time=time)
        self.version += 1
        shown = describe(body, stream_sequence=stream_sequence, at=time)
        if shown is not None:
            self.decisions.append(shown)
        return shown

    # ------------------------------------------------------------------ answers

    def levels(self) -> tuple[str | None, list[str]]:
        """The Topology drawn and its levels above the node (widest first)."""
        name = self.topology
        if name is None and self.topologies:
            name = sorted(self.topologies)[0]
        config = self.topologies.get(name) if name is not None else None
        levels = list(config.levels) if config is not None else []
        return name, [level for level in levels if level != HOSTNAME]

    def running_gpus(self) -> dict[str, int]:
        """Node → GPUs its Running pods request (one pass over the pods)."""
        out: dict[str, int] = {}
        for pod in self.bus.replica.pods.values():
            if pod.node_name and pod.phase == "Running" and holds_capacity(pod):
                out[pod.node_name] = out.get(pod.node_name, 0) + accelerators(pod.requests)
        return out

    def node_use(
        self,
        node: NodeState,
        running_gpus: Mapping[str, int],
        reserved_for: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One node's cell: its GPUs by use (running, released but not running, reserved
        for admitted pods not bound yet, free), readiness and card model; ``running_gpus``
        is :meth:`running_gpus`; ``reserved_for``: node → the waiting gang a reservation
        holds it for (:meth:`reservations`)."""
        total = accelerators(node.allocatable)
        bound = accelerators(self.capacity.used(node.name))
        reserved = accelerators(self.capacity.reserved(node.name))
        running = min(running_gpus.get(node.name, 0), bound)
        return {
            "name": node.name,
            "card": node.labels.get(GPU_PRODUCT_LABEL),
            "gpus": total,
            "running": running,
            "released": bound - running,
            "reserved": reserved,
            "free": max(total - bound - reserved, 0),
            "ready": node.ready,
            "schedulable": node.ready and not node.unschedulable,
            "reserved_for": (reserved_for or {}).get(node.name),
        }

    def reservations(self) -> list[dict[str, Any]]:
        """The reservations in force (docs/reservations.md): per waiting gang, the domain
        and nodes held for it, its expected start, the gangs whose ends it waits for, and
        what ``tidegate explain`` says of it; by expected start."""
        out = []
        for key in self.bus.replica.recorded():
            held = self.bus.replica.reservation(key)
            if held is None:
                continue
            out.append(
                {
                    "workload": held.workload,
                    "queue": held.queue,
                    "topology": held.topology,
                    "level": held.level,
                    "domain": list(held.domain),
                    "where": describe_domain(held.level, held.domain),
                    "nodes": list(held.nodes),
                    "expected_start": _when(held.expected_start),
                    "waits_for": [w.workload for w in held.waits_for],
                    "overdue": [w.workload for w in held.waits_for if w.overdue],
                    "message": reserved_for_you(held),
                }
            )
        out.sort(key=lambda r: (r["expected_start"], r["workload"]))
        return out

    def topology_map(self, reservations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The map: nested domains (widest level first), nodes as the leaves. A domain a
        reservation holds carries it (``reservation``: the gang and its expected start), as
        does each node it holds (``reserved_for``); ``reservations``: :meth:`reservations`."""
        name, levels = self.levels()
        running = self.running_gpus()
        held = [
            r
            for r in (self.reservations() if reservations is None else reservations)
            if r["topology"] == name
        ]
        reserved_for = {node: r["workload"] for r in held for node in r["nodes"]}
        root: dict[str, Any] = {"level": None, "name": self.cluster, "path": [], "children": []}
        index: dict[tuple[str, ...], dict[str, Any]] = {(): root}
        for node_name in sorted(self.nodes, key=natural_key):
            node = self.nodes[node_name]
            path: tuple[str, ...] = ()
            parent = root
            for level in levels:
                path = (*path, node.labels.get(level, "(none)"))
                domain = index.get(path)
                if domain is None:
                    domain = {"level": level, "name": path[-1], "path": list(path), "children": []}
                    index[path] = domain
                    parent["children"].append(domain)
                parent = domain
            parent.setdefault("nodes", []).append(self.node_use(node, running, reserved_for))
        for domain in index.values():
            domain["children"].sort(key=lambda d: natural_key(d["name"]))
        for r in held:
            domain = index.get(tuple(r["domain"])) if r["level"] in levels else None
            if domain is not None:
                domain["reservation"] = {
                    k: r[k] for k in ("workload", "queue", "expected_start", "waits_for", "message")
                }
        return {"topology": name, "levels": levels, "root": root}

    def gangs_in(self, path: list[str]) -> list[dict[str, Any]]:
        """The workloads holding pods or reservations on nodes of the domain at ``path``."""
        _, levels = self.levels()
        nodes = {
            name
            for name, node in self.nodes.items()
            if [node.labels.get(level, "(none)") for level in levels[: len(path)]] == path
        }
        held: dict[str, dict[str, int]] = {}
        """Workload → node → pods it holds there (bound, or reserved for it)."""
        for pod in self.bus.replica.pods.values():
            if pod.workload and pod.node_name in nodes and holds_capacity(pod):
                per = held.setdefault(pod.workload, {})
                per[pod.node_name] = per.get(pod.node_name, 0) + 1
        for admitted in self.bus.replica.admissions():
            for node, pods in self.capacity.reservation(admitted).items():
                if node in nodes and pods > 0:
                    per = held.setdefault(admitted, {})
                    per[node] = per.get(node, 0) + pods
        out = []
        for key, per in sorted(held.items()):  # key: a workload's NAMESPACE/NAME
            state, reason, _ = state_of(self.bus, key)
            out.append(
                {
                    "workload": key,
                    "state": state,
                    "reason": reason,
                    "queue": queue_in(self.bus, key) or None,
                    "pods": sum(per.values()),
                    "nodes": dict(sorted(per.items(), key=lambda item: natural_key(item[0]))),
                }
            )
        return out

    def trace_url(self, trace: str | None) -> str | None:
        """The trace UI link of a trace id, when a template is configured."""
        if trace is None or not self.trace_url_template:
            return None
        return self.trace_url_template.replace("{trace_id}", trace)

    def pending(self) -> list[dict[str, Any]]:
        """Every workload waiting (pending or not decided yet), with its reason and message."""
        out = []
        for key, workload in self.bus.replica.workloads():
            state, reason, message = state_of(self.bus, key)
            if state not in ("Pending", "Submitted"):
                continue
            verdict = self.bus.replica.verdict(WorkloadKey(key))
            since = verdict.pending.time if verdict.pending is not None else workload.created_at
            trace = trace_id(workload.trace_context.get("traceparent", ""))
            out.append(
                {
                    "workload": key,
                    "queue": queue_in(self.bus, key) or None,
                    "state": state,
                    "reason": reason or ("Submitted" if state == "Submitted" else None),
                    "message": message,
                    "competing": reason not in NOT_COMPETING,
                    "since": _when(since) if since else None,
                    "pods": sum(p.count for p in workload.podsets),
                    "gpus": sum(accelerators(p.requests) * p.count for p in workload.podsets),
                    "trace_id": trace,
                    "trace_url": self.trace_url(trace),
                    "reservation": self._reserved_text(key),
                }
            )
        return out

    def _reserved_text(self, key: str) -> str | None:
        """What ``tidegate explain`` says of ``key``'s reservation in force, if it has one."""
        held = self.bus.replica.reservation(WorkloadKey(key))
        return reserved_for_you(held) if held is not None else None

    def explain(self, key: str) -> dict[str, Any] | None:
        """``tidegate explain``'s answer for ``key`` (None: not on the bus), with its trace
        link and, as ``text``, the command's own printout of it."""
        answer = explain(self.bus, key)
        if answer is not None:
            answer["text"] = render_explain(answer)
            answer["trace_url"] = self.trace_url(answer.get("trace_id"))
        return answer

    def queue_tree(self) -> list[dict[str, Any]]:
        """Queues and cohorts as the forest admission checks quota on
        (:class:`~tidegate.policy.queuetree.QueueTree`, fed the replica's queue tallies): per
        node and quota dimension its nominal quota, what its subtree uses, what it borrows above
        its quota, what it lends to the others of its cohort and could lend
        (:func:`~tidegate.policy.queuetree.lent`, ``lendable`` of
        :func:`~tidegate.policy.queuetree.report`, as ``tidegate admit`` shows them), and the
        most it could take (its ceiling); roots first, children nested. Empty while no queue
        is in a cohort."""
        if not any(q.parent for q in self.bus.queues.values()) and not self.cohorts:
            return []
        tree = QueueTree.build(self.bus.queues.values(), self.cohorts.values())
        replica = self.bus.replica
        tallies = {name: replica.tally(name) for name in replica.queues()}
        state = TreeState(tree, usage_of_tallies(tallies))
        reports = report(tree, state)
        lendable = {r.id: r.lendable for r in reports}
        lends = lent(reports)

        def node(node_id: NodeId) -> dict[str, Any]:
            built = tree.nodes[node_id]
            dims = sorted(set(built.limits) | set(state.total[node_id]))
            return {
                "kind": node_id.kind,
                "name": node_id.name,
                "invalid": built.invalid,
                "dims": [
                    {
                        "dim": str(dim),
                        "nominal": dim.show(built.limits[dim].nominal)
                        if dim in built.limits
                        else None,
                        "used": dim.show(state.total[node_id].get(dim, 0)),
                        "borrowed": dim.show(state.borrowed(node_id, dim)),
                        "borrowing": state.borrowed(node_id, dim) > 0,
                        "lent": dim.show(lends[node_id].get(dim, 0)),
                        "lending": lends[node_id].get(dim, 0) > 0,
                        "lendable": dim.show(lendable[node_id].get(dim, 0)),
                        "ceiling": dim.show(state.potential(node_id, dim)),
                    }
                    for dim in dims
                ],
                "children": [node(child) for child in built.children],
            }

        return [node(node_id) for node_id, built in tree.nodes.items() if built.parent is None]

    def snapshot(self) -> dict[str, Any]:
        """The page's whole state but the decision stream."""
        reservations = self.reservations()
        topology = self.topology_map(reservations)
        nodes = [n for domain in _domains(topology["root"]) for n in domain.get("nodes", [])]
        totals = {
            key: sum(n[key] for n in nodes if n["ready"])
            for key in ("gpus", "running", "released", "reserved", "free")
        }
        totals["not_ready"] = sum(n["gpus"] for n in nodes if not n["ready"])
        return {
            "cluster": self.cluster,
            "version": self.version,
            "map": topology,
            "totals": totals,
            "queues": queue_table(self.bus),
            "tree": self.queue_tree(),
            "pending": self.pending(),
            "reservations": reservations,
        }


def _domains(domain: dict[str, Any]) -> list[dict[str, Any]]:
    """``domain`` and every domain under it."""
    found = [domain]
    for child in domain["children"]:
        found += _domains(child)
    return found


__all__ = ["ConsoleView", "accelerators", "describe", "trace_id"]
