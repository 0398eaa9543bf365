"""What every what-if command (``tidegate place``, ``tidegate preempt``) does the same way.

One input document named on the command line (a file, or ``-`` / nothing for standard input),
exit status 0 with one JSON document on standard output when the command could answer, exit
status 2 with one line on standard error when the input is malformed, and the same JSON shape
for a placement. Reading and checking the document is :mod:`tidegate.cli.snapshot`'s job; what
each command asks is its own module's. This module stays free of heavy imports, so building
the parser stays cheap.
"""

import argparse
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tidegate.model import TopologyAssignment
    from tidegate.placement import PlacementError

EXIT_OK: Final = 0
"""The command answered (whatever the answer)."""
EXIT_MALFORMED: Final = 2
"""The input was malformed; standard error names the field."""


def add_document_argument(parser: argparse.ArgumentParser, name: str, *, what: str) -> None:
    """The positional input argument ``name`` (shown in capitals); ``what`` it holds, for the
    help: e.g. ``"scenario (topology, nodes, …)"``."""
    parser.add_argument(
        name,
        nargs="?",
        default="-",
        metavar=name.upper(),
        help=f"JSON or YAML {what}; '-' or absent: stdin",
    )


def malformed(message: str) -> int:
    """Print ``message`` on standard error as one line; the exit status for malformed input."""
    print(" ".join(message.split()), file=sys.stderr)
    return EXIT_MALFORMED


def answer(output: Mapping[str, object]) -> int:
    """Print ``output`` on standard output as indented JSON; the exit status for an answer."""
    json.dump(output, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return EXIT_OK


def assignments_json(assignments: Mapping[str, "TopologyAssignment"]) -> dict[str, object]:
    """Podset name → ``{"levels": [...], "domains": [{"values": [...], "count": n}, ...]}``."""
    return {
        name: {
            "levels": list(assignment.levels),
            "domains": [{"values": d.values, "count": d.count} for d in assignment.domains],
        }
        for name, assignment in assignments.items()
    }


def podset_error_detail(exc: "PlacementError") -> str:
    """The error's detail without its leading ``<podset>: <field>: `` (callers put a path
    there instead)."""
    prefix = f"{exc.podset}: {exc.field}: "
    return exc.detail[len(prefix) :] if exc.detail.startswith(prefix) else exc.detail
