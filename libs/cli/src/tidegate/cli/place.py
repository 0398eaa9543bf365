"""``tidegate place SNAPSHOT``: where would this workload go on this cluster?

Reads a cluster snapshot and a workload (JSON or YAML, from a file or standard input), calls
the same :func:`tidegate.placement.place` the admission service calls, and prints one JSON
document: ``fits``, ``assignments`` (per podset, domains at the narrowest level in rank order),
``reason``, plus ``levels_chosen``, ``nodes`` (pods per node), ``profile`` and ``timings_ms``.
Exit status 0 when it could answer (fits or not), 2 with one line on standard error naming the
offending field when the input is malformed. The contract is in WHAT-IF.md; docs/placement.md
has examples. This module only reads, calls and prints.
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
    from tidegate.cli.snapshot import PlaceSnapshot
    from tidegate.placement import PlacementError

HELP: Final = "What-if: place a workload on a cluster snapshot and print the assignment as JSON."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``SNAPSHOT`` (a file, or ``-`` / nothing for standard input)."""
    add_document_argument(parser, "snapshot", what="snapshot file (topology, nodes, workload)")


def run(args: argparse.Namespace) -> int:
    """Answer the what-if question; see the module docstring for the output and exit codes."""
    from tidegate.cli.snapshot import SnapshotError, parse_place_snapshot, read_document
    from tidegate.placement import (
        CapacityView,
        PlacementError,
        PlacementRequest,
        place,
        resolve_profile,
    )

    try:
        snapshot = parse_place_snapshot(read_document(args.snapshot))
    except SnapshotError as exc:
        return malformed(str(exc))
    workload = snapshot.workload
    profile = snapshot.profile if snapshot.profile is not None else workload.profile
    request = PlacementRequest(
        podsets=workload.podsets,
        profile=profile,
        node_selector=workload.node_selector or {},
    )
    try:
        view = CapacityView(snapshot.topology.levels, snapshot.nodes)
        result = place(view, request)
    except PlacementError as exc:
        return malformed(placement_error_path(exc, snapshot))

    output: dict[str, object] = {
        "fits": result.fits,
        "assignments": assignments_json(result.assignments),
        "reason": result.reason,
        "levels_chosen": result.levels_chosen,
        "nodes": result.node_counts,
        "profile": resolve_profile(profile),
        "topology": snapshot.topology.name,
        "timings_ms": {key: round(value, 3) for key, value in result.timings_ms.items()},
    }
    return answer(output)


def placement_error_path(exc: "PlacementError", snapshot: "PlaceSnapshot") -> str:
    """A placement error as a message that starts with the path of the field in the input."""
    if exc.field is None:
        return exc.detail
    if exc.podset is None:
        if exc.field == "profile" and snapshot.profile is None:
            return f"workload.{exc.detail}"
        return exc.detail
    for index, podset in enumerate(snapshot.workload.podsets):
        if podset.name == exc.podset:
            return f"workload.podsets[{index}].{exc.field}: {podset_error_detail(exc)}"
    return exc.detail
