"""The ``tidegate`` command: one entry point, one module per subcommand.

Each subcommand lives in its own module of this package exposing ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status). A module keeps its heavy
imports inside ``run`` so that building the parser stays cheap.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Final

COMMANDS: Final[dict[str, str]] = {
    # command name -> module under tidegate.cli
    "admit": "admit",
    "console": "console",
    "demo": "demo",
    "explain": "explain",
    "nodes": "nodes",
    "place": "place",
    "preempt": "preempt",
    "queues": "queues",
    "sim": "sim",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="tidegate",
        description="Gang admission, topology-aware placement and tidal preemption for Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"tidegate.cli.{module_name}")
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tidegate command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args._module.run(args)
    except BrokenPipeError:
        # The reader went away (`tidegate preempt x.yaml | head`): no traceback for that.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
