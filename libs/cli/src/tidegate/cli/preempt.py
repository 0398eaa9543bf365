"""``tidegate preempt SCENARIO``: would this workload get in, and whom would it evict?

Reads a scenario (JSON or YAML, from a file or standard input: nodes, queues, running gangs
and the incoming workload), calls :func:`tidegate.policy.victims.select_victims` — the code the
preemption service runs — and prints one JSON document: ``admitted``, ``victims``,
``placement`` (per podset, domains at the narrowest level), ``reason``, plus ``outcome``,
``modes``, ``nominated``, the cost of the eviction, why other running workloads were not
candidates, and timings. Exit status 0 when it could answer (admitted or not), 2 with one line
on standard error naming the offending field when the input is malformed. The contract is in
WHAT-IF.md; docs/preemption.md has examples. This module only reads, calls and prints.
"""

import argparse
from typing import TYPE_CHECKING, Final

from tidegate.cli.whatif import (
    add_document_argument,
    answer,
    assignments_json,
    malformed,
    podset_error_detail,
)

if TYPE_CHECKING:
    from tidegate.cli.preempt_scenario import Scenario
    from tidegate.placement import PlacementError

HELP: Final = "What-if: would a workload be admitted, and which training gangs would it preempt?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``SCENARIO`` (a file, or ``-`` / nothing for standard input)."""
    add_document_argument(
        parser, "scenario", what="scenario (topology, nodes, queues, running, incoming)"
    )


def run(args: argparse.Namespace) -> int:
    """Answer the what-if question; see the module docstring for the output and exit codes."""
    import time

    from tidegate.cli.preempt_scenario import parse_scenario
    from tidegate.cli.snapshot import SnapshotError, read_document
    from tidegate.model import format_quantity
    from tidegate.placement import PlacementError, PlacementRequest
    from tidegate.placement.request import normalize
    from tidegate.policy.victims import select_victims

    try:
        scenario = parse_scenario(read_document(args.scenario))
    except SnapshotError as exc:
        return malformed(str(exc))
    try:
        normalize(scenario.topology.levels, PlacementRequest(podsets=scenario.incoming.podsets))
    except PlacementError as exc:
        return malformed(_placement_error_path(exc, scenario))
    started = time.perf_counter()
    view = scenario.view()
    built = time.perf_counter()
    choice = select_victims(
        scenario.incoming, view=view, running=scenario.running, queues=scenario.queues
    )
    done = time.perf_counter()
    placement = choice.placement
    output: dict[str, object] = {
        "admitted": choice.admitted,
        "victims": list(choice.victims),
        "placement": assignments_json(placement.assignments if placement else {}),
        "reason": choice.reason,
        "outcome": choice.outcome,
        "service_type": scenario.incoming.service_type,
        "modes": dict(choice.modes),
        "nominated": {
            node: {resource: format_quantity(resource, amount) for resource, amount in held.items()}
            for node, held in choice.nominated.items()
        },
        "nodes": placement.node_counts if placement else {},
        "top_priority": choice.top_priority,
        "gpus_evicted": choice.gpus,
        "gpu_seconds_lost": choice.gpu_seconds,
        "exact": choice.exact,
        "not_candidates": dict(choice.ineligible),
        "timings_ms": {
            "view": round((built - started) * 1000, 3),
            "select": round((done - built) * 1000, 3),
        },
    }
    return answer(output)


def _placement_error_path(exc: "PlacementError", scenario: "Scenario") -> str:
    """A placement error on the incoming workload, as a path into the scenario."""
    if exc.podset is None or exc.field is None:
        return f"incoming: {exc.detail}"
    detail = podset_error_detail(exc)
    names = [podset.name for podset in scenario.incoming.podsets]
    if scenario.incoming_from_pods:
        # Podsets built from "pods" share the incoming workload's own topology key.
        return f"incoming.{exc.field}: {detail}"
    if exc.podset in names:
        return f"incoming.podsets[{names.index(exc.podset)}].{exc.field}: {detail}"
    return f"incoming: {exc.detail}"
