"""``tidegate queues``: per queue, usage against quota and card quota, admitted and pending.

Reads the bus only (:mod:`tidegate.cli.busview`). Usage is what the admitted workloads of the
queue are charged (their newest decision is an admission), plus the requests of pods that
bypassed the gate of workloads not admitted, the same figures as admission's
``tidegate_queue_resource_usage`` / ``tidegate_queue_card_usage`` metrics; pending counts are
by the reason token of each waiting workload's newest decision (``Submitted``: nothing
decided yet). ``--json`` prints a list of objects. Exit status 0, 2 when the bus cannot be
read.
"""

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any, Final

from tidegate.cli.explain import (
    add_bus_arguments,
    bus_settings,
    quiet_bus,
    resources_text,
    state_of,
)
from tidegate.model import resources

if TYPE_CHECKING:
    from tidegate.cli.busview import BusView

HELP: Final = "Per queue: usage against quota and card quota, admitted and pending by reason."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bus options."""
    add_bus_arguments(parser)


def queue_table(view: "BusView") -> list[dict[str, Any]]:
    """One JSON-ready row per queue (configured ones, and names workloads use), by name."""
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
            }
        return rows[name]

    for name in view.queues:
        row(name)
    for key, workload in view.workloads.items():
        state, reason, _ = state_of(view, key)
        admitted = view.admitted(key)
        if admitted is not None:
            entry = row(admitted.queue)
            entry["admitted"] += 1
            entry["usage"] = resources.add(entry["usage"], admitted.charged)
            entry["card_usage"] = resources.add(entry["card_usage"], admitted.charged_cards)
        else:
            if state in ("Pending", "Submitted"):
                entry = row(workload.queue or "")
                token = reason or "Submitted"
                entry["pending"][token] = entry["pending"].get(token, 0) + 1
            if workload.bypassed_pods and workload.finished is None:
                # Charged by admission while not admitted (its tidegate_queue_resource_usage).
                entry = row(workload.queue or "")
                entry["bypassed_pods"] += workload.bypassed_pods
                entry["usage"] = resources.add(entry["usage"], workload.bypassed_requests)
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


def render(table: list[dict[str, Any]]) -> str:
    """The human form of :func:`queue_table`: one block per queue."""
    if not table:
        return "no queues on the bus"
    lines = []
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
    table = queue_table(view)
    print(json.dumps(table, indent=2) if args.json else render(table))
    return 0
