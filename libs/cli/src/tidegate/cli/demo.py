"""``tidegate demo``: the whole system on a simulated cluster, one command, one report.

Starts the embedded default (:class:`tidegate.cli.stack.LocalStack`: a local nats-server, a
simulated cluster that speaks the Kubernetes API, and the five services as separate
processes), sets up priority classes and Queues, replays a workload trace (the built-in one or
``--trace FILE``) by creating Jobs and Deployments through the Kubernetes API exactly as users
would (and scales its Deployments like an HPA would), prints every decision as it appears on
the bus, and ends with a report of placements, waits, preemptions and GPU use by service type
(also written to ``<workdir>/report.json``, and as ``report.md`` with PNG charts).
The trace format and what to look for are in docs/demo.md.

With ``--console`` the live page of ``tidegate console`` is served beside it, for its length.
With ``--kubeconfig`` the same runs against an existing cluster (``--fake-nodes`` gives it fake
GPU nodes for the run, see docs/nodes.md); the embedded simulator stays the default.
"""

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

HELP = "Run tidegate end to end on a simulated cluster: services, a workload trace, a report."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tidegate demo``."""
    parser.add_argument(
        "--nodes",
        default="2x4x8x8gpu",
        help='cluster shape "BxRxNxGgpu" or a YAML/CSV node file (default: %(default)s)',
    )
    parser.add_argument("--trace", type=Path, help="workload trace YAML (default: built-in)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.05,
        help="wall seconds per simulated second (default: %(default)s, i.e. 20x faster)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("var/demo"),
        help="logs, traces, kubeconfig and report.json go here (default: %(default)s)",
    )
    parser.add_argument("--cluster", default="demo", help="cluster id on the bus")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="run against the existing cluster of this kubeconfig instead of a simulated one "
        "(--nodes is then not used)",
    )
    parser.add_argument(
        "--fake-nodes",
        metavar="SHAPE",
        help='with --kubeconfig: give the cluster fake GPU nodes of this shape ("4x8x16x8gpu" '
        "or a node file) for the length of the demo (tidegate nodes)",
    )
    parser.add_argument(
        "--crds",
        type=Path,
        help="with --kubeconfig: directory of the tidegate CRDs to install where missing "
        "(default: deploy/crds)",
    )
    parser.add_argument(
        "--console",
        nargs="?",
        const="127.0.0.1:8480",
        metavar="HOST:PORT",
        help="serve tidegate console beside the demo, for its length (default address: "
        "%(const)s; loopback only, see docs/operations.md)",
    )
    parser.add_argument(
        "--reservations",
        choices=("on", "off"),
        default="on",
        help="reservations and backfill for big gangs (docs/reservations.md); off sets "
        "admission's TIDEGATE_RESERVATIONS_MAX_PER_CLUSTER to 0 (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the final report")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when it ran to the end, 1 when a part of the system failed."""
    from tidegate.cli.console_server import ConsoleError, loopback, parse_listen
    from tidegate.cli.demo_charts import write_charts
    from tidegate.cli.demo_report import render_markdown, render_text, to_json
    from tidegate.cli.demo_run import run_demo
    from tidegate.cli.demo_trace import TraceError, load_trace
    from tidegate.cli.nodeagent import AgentError
    from tidegate.cli.stack import StackError
    from tidegate.kube import KubeError
    from tidegate.runtime.tool import ToolSettingError, run_tool

    if args.time_scale <= 0:
        print("tidegate demo: --time-scale must be positive", file=sys.stderr)
        return 2
    if args.kubeconfig is None and (args.fake_nodes or args.crds):
        print("tidegate demo: --fake-nodes and --crds need --kubeconfig", file=sys.stderr)
        return 2
    console: tuple[str, int] | None = None
    if args.console is not None:
        try:
            console = parse_listen(args.console)
        except ConsoleError as exc:
            print(f"tidegate demo: {exc}", file=sys.stderr)
            return 2
        if not loopback(console[0]):
            print(
                "tidegate demo: --console serves without authentication, so only on a loopback "
                "address; run tidegate console with --token beside the demo instead",
                file=sys.stderr,
            )
            return 2
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        print(f"tidegate demo: {exc}", file=sys.stderr)
        return 2
    say: Callable[[str], None] = (lambda _line: None) if args.quiet or args.json else print
    # The services log to their own files; here only errors would distract from the story.
    logging.basicConfig(level=logging.ERROR)
    workdir = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    try:
        record, failed = run_tool(
            run_demo(
                trace,
                say,
                workdir=workdir,
                cluster=args.cluster,
                nodes=args.nodes,
                time_scale=args.time_scale,
                kubeconfig=args.kubeconfig,
                fake_nodes=args.fake_nodes,
                crds=args.crds,
                console=console,
                reservations=args.reservations == "on",
            )
        )
    except (StackError, AgentError, KubeError) as exc:
        print(f"tidegate demo: {exc}", file=sys.stderr)
        return 1
    except ToolSettingError as exc:
        print(f"tidegate demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    report = to_json(record)
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    charts = write_charts(record, workdir)
    (workdir / "report.md").write_text(render_markdown(record, charts))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_text(record))
        print(
            f"\nreport: {workdir / 'report.md'} (charts beside it), {workdir / 'report.json'}"
            f"   traces: {workdir / 'traces.jsonl'}"
        )
    return 1 if failed else 0
