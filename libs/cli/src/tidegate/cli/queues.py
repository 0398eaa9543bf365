"""``tidegate queues``: per queue, usage against quota and card quota, admitted and pending.

Reads the bus only (:mod:`tidegate.cli.busview`). Usage, admitted and pending counts are the
queue's tally in the decisions in force (:class:`~tidegate.model.replica.QueueTally`: the
same figures the services use, admission's default queue included, and the requests of pods
that bypassed the gate of workloads not admitted); pending counts are by reason token, with
``Submitted`` for workloads nothing was decided about yet (in the queue they name).
The queue tree (docs/queues.md, "The queue tree") is shown too, as
:func:`tidegate.policy.queuetree.report` computes it from the Queue and Cohort definitions and
the same usage: per node its own nominal quota, its subtree quota, usage, what it borrows from
its parent, what of its unused quota its parent may lend, and its weighted share, indented by
depth; an Invalid node says why its workloads wait.

``--json`` prints a list of objects: one per queue (its tree node under ``tree``), then one per
cohort (``{"cohort": name, "tree": …}``). Exit status 0, 2 when the bus cannot be read.
"""

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any, Final

from tidegate.cli.explain import add_bus_arguments, bus_settings, quiet_bus, resources_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tidegate.cli.busview import BusView
    from tidegate.policy.queuetree import Dim, NodeReport

HELP: Final = (
    "Per queue: usage against quota and card quota, admitted and pending by reason; the queue"
    " tree's quota, borrowed, lendable and share."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bus options."""
    add_bus_arguments(parser)


def tree_reports(view: "BusView") -> list["NodeReport"]:
    """The queue tree of the view's Queues and Cohorts, on the usage in force."""
    from tidegate.policy.queuetree import QueueTree, report, usage_of_tallies

    tree = QueueTree.build(view.queues.values(), view.cohorts.values())
    replica = view.replica
    usage = usage_of_tallies({name: replica.tally(name) for name in replica.queues()})
    return report(tree, usage)


def _amounts(amounts: "Mapping[Dim, int]") -> dict[str, int]:
    return {str(dim): amount for dim, amount in amounts.items()}


def node_row(node: "NodeReport") -> dict[str, Any]:
    """One tree node, JSON-ready (amounts by resource, card models as "<model> cards")."""
    return {
        "parent": node.parent.name if node.parent is not None else None,
        "parent_kind": node.parent.kind if node.parent is not None else None,
        "depth": node.depth,
        "nominal": _amounts(node.nominal),
        "quota": _amounts(node.quota),
        "usage": _amounts(node.usage),
        "borrowed": _amounts(node.borrowed),
        "lendable": _amounts(node.lendable),
        "share": node.share,
        "dominant": str(node.dominant) if node.dominant is not None else None,
        "blocked": node.blocked,
        "warnings": list(node.warnings),
    }


def cohort_table(reports: "Sequence[NodeReport]") -> list[dict[str, Any]]:
    """One JSON-ready row per cohort of the tree (implicit ones too), in tree order."""
    return [
        {"cohort": node.id.name, "tree": node_row(node)}
        for node in reports
        if node.id.kind == "cohort"
    ]


def queue_table(
    view: "BusView", reports: "Sequence[NodeReport] | None" = None
) -> list[dict[str, Any]]:
    """One JSON-ready row per queue (configured ones, and names workloads use), by name; a
    queue of the tree carries its node under ``tree`` (None for a name no Queue defines)."""
    if reports is None:
        reports = tree_reports(view)
    nodes = {node.id.name: node for node in reports if node.id.kind == "queue"}
    rows: dict[str, dict[str, Any]] = {}

    def row(name: str) -> dict[str, Any]:
        if name not in rows:
            config = view.queues.get(name)
            rows[name] = {
                "queue": name,
                "exists": config is not None,
                "priority": config.priority if config is not None else None,
                "reclaimable": config.reclaimable if config is not None else None,
                "quota": dict(config.quota or {}) if config is not None else {},
                "card_quota": dict(config.card_quota or {}) if config is not None else {},
                "usage": {},
                "card_usage": {},
                "admitted": 0,
                "pending": {},
                "bypassed_pods": 0,
                "tree": node_row(nodes[name]) if name in nodes else None,
            }
        return rows[name]

    for name in view.queues:
        row(name)
    replica = view.replica
    for name in replica.queues():
        tally = replica.tally(name)
        entry = row(name)
        entry["admitted"] = tally.admitted
        entry["usage"] = dict(tally.usage)
        entry["card_usage"] = dict(tally.cards)
        entry["pending"] = dict(tally.pending)
        entry["bypassed_pods"] = tally.bypassed
    for key, workload in replica.workloads():
        if replica.verdict(key).state == "Submitted":
            entry = row(workload.queue or "")
            entry["pending"]["Submitted"] = entry["pending"].get("Submitted", 0) + 1
    return [rows[name] for name in sorted(rows)]


def _against(used: dict[str, int], limit: dict[str, int], *, cards: bool = False) -> str:
    names = sorted(set(used) | set(limit))
    if not names:
        return "-"

    def amount(name: str, value: int) -> str:
        return str(value) if cards else resources_text({name: value}).split("=", 1)[1]

    parts = []
    for name in names:
        text = f"{name} {amount(name, used.get(name, 0))}"
        if name in limit:
            text += f"/{amount(name, limit[name])}"
        parts.append(text)
    return ", ".join(parts)


def _dims(amounts: dict[str, int]) -> str:
    if not amounts:
        return "-"
    parts = []
    for name, amount in amounts.items():
        if name.endswith(" cards"):
            parts.append(f"{name} {amount}")
        else:
            parts.append(f"{name} {resources_text({name: amount}).split('=', 1)[1]}")
    return ", ".join(parts)


def _shows_a_tree(nodes: list[tuple[str, str, dict[str, Any]]]) -> bool:
    """Whether any node shares quota (a parent, a nominal quota or a cohort at all)."""
    return any(
        kind == "cohort" or node["parent"] is not None or node["nominal"] for kind, _, node in nodes
    )


def render_tree(nodes: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """The queue tree, one line per node (kind, name, :func:`node_row`), indented by depth."""
    lines = ["queue tree (nominal / quota / usage / borrowed / lendable / share)"]
    for kind, name, node in nodes:
        indent = "  " * (node["depth"] + 1)
        head = f"{indent}{kind} {name}"
        if node["blocked"]:
            head += f"  [Invalid: {node['blocked']}]"
        lines.append(head)
        detail = indent + "    "
        lines.append(
            f"{detail}nominal {_dims(node['nominal'])}; quota {_dims(node['quota'])}; "
            f"usage {_dims(node['usage'])}"
        )
        # Kueue's weightedShare: borrowed over what the parent can lend, in thousandths.
        share = "-" if node["share"] == 0 else str(node["share"])
        if node["dominant"] and node["share"]:
            share += f" ({node['dominant']})"
        lines.append(
            f"{detail}borrowed {_dims(node['borrowed'])}; lendable {_dims(node['lendable'])}; "
            f"share {share}"
        )
        lines.extend(f"{detail}warning: {warning}" for warning in node["warnings"])
    return lines


def render(table: list[dict[str, Any]], cohorts: list[dict[str, Any]] | None = None) -> str:
    """The human form of :func:`queue_table` (and :func:`cohort_table`): the queue tree when
    there is one, then one block per queue."""
    if not table and not cohorts:
        return "no queues on the bus"
    lines = []
    nodes = [("queue", e["queue"], e["tree"]) for e in table if e.get("tree") is not None]
    nodes += [("cohort", e["cohort"], e["tree"]) for e in cohorts or []]
    if _shows_a_tree(nodes):
        lines += render_tree(_tree_order(nodes))
    for entry in table:
        name = entry["queue"] or "(no queue)"
        if not entry["exists"]:
            name += "  [does not exist]"
        else:
            kind = "reclaimable" if entry["reclaimable"] else "not reclaimable"
            name += f"  priority {entry['priority']}, {kind}"
        pending = sum(entry["pending"].values())
        by_reason = ", ".join(f"{r} {n}" for r, n in sorted(entry["pending"].items()))
        lines += [
            name,
            f"  usage      {_against(entry['usage'], entry['quota'])}",
            f"  cards      {_against(entry['card_usage'], entry['card_quota'], cards=True)}",
            f"  admitted   {entry['admitted']}",
            f"  pending    {pending}" + (f" ({by_reason})" if by_reason else ""),
        ]
        if entry.get("bypassed_pods"):
            lines.append(
                f"  bypassed   {entry['bypassed_pods']} pods started without passing the gate"
                " (webhook down?), in usage"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Read the bus, tabulate the queues, print."""
    from tidegate.bus import BusError
    from tidegate.cli.busview import read_view

    try:
        with quiet_bus():
            view = asyncio.run(read_view(bus_settings(args, "tidegate-queues"), args.cluster))
    except (BusError, OSError) as exc:
        print(f"tidegate queues: cannot read the bus: {exc}", file=sys.stderr)
        return 2
    reports = tree_reports(view)
    table = queue_table(view, reports)
    cohorts = cohort_table(reports)
    print(json.dumps(table + cohorts, indent=2) if args.json else render(table, cohorts))
    return 0


def _tree_order(
    nodes: list[tuple[str, str, dict[str, Any]]],
) -> list[tuple[str, str, dict[str, Any]]]:
    """Roots first, each followed by its subtree, children by kind then name."""
    children: dict[tuple[str | None, str | None], list[tuple[str, str, dict[str, Any]]]] = {}
    for node in nodes:
        key = (node[2]["parent_kind"], node[2]["parent"])
        children.setdefault(key, []).append(node)
    out: list[tuple[str, str, dict[str, Any]]] = []

    def visit(key: tuple[str | None, str | None]) -> None:
        for node in sorted(children.get(key, []), key=lambda n: (n[0], n[1])):
            out.append(node)
            visit((node[0], node[1]))

    visit((None, None))
    return out
