"""``tidegate nodes``: fake GPU nodes for any cluster, kept Ready, running the pods bound to them.

What Kueue and KAI users get from kwok: tidegate on a real control plane with no GPUs. The
nodes are shaped as ``tidegate sim --nodes`` makes them; the agent itself is
:class:`tidegate.cli.nodeagent.NodeAgent` (this module only maps options to its settings, prints
progress and stops cleanly on Ctrl-C or SIGTERM). See docs/nodes.md.
"""

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

HELP = "Give a cluster fake GPU nodes (kwok-style): registered, kept Ready, running bound pods."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tidegate nodes``."""
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--nodes",
        default="1x2x4x8gpu",
        help='topology description like "4x8x16x8gpu" (blocks x racks x nodes x GPUs) or a '
        "YAML/CSV file listing nodes, as for tidegate sim (default: %(default)s)",
    )
    parser.add_argument("--gpu-product", default="NVIDIA-H200", help="nvidia.com/gpu.product label")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per simulated second of pod durations and grace periods "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--topology-name",
        default="default",
        help="name of the Topology objects created for the node levels when their CRDs are "
        "installed ('' for none; default: %(default)s)",
    )
    parser.add_argument(
        "--prefix",
        default="",
        help="put before every node name and rack/block/zone label value, so that several "
        "agents share a cluster without sharing nodes",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more label on every node (repeatable)",
    )
    parser.add_argument(
        "--delete-nodes",
        action="store_true",
        help="delete the nodes (and their leases) on exit",
    )
    parser.add_argument(
        "--lease-interval",
        type=float,
        default=10.0,
        help="seconds between renewals of each node's Lease (default: %(default)s)",
    )
    parser.add_argument(
        "--status-interval",
        type=float,
        default=60.0,
        help="seconds between posts of each node's Ready condition (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="API requests in flight at once (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the agent until interrupted; returns the exit status."""
    from tidegate.cli.nodeagent import AgentError, AgentSettings, fake_nodes
    from tidegate.kube import KubeConfigError, KubeError
    from tidegate.runtime.tool import ToolSettingError, run_tool
    from tidegate.sim import TopologyError

    labels: dict[str, str] = {}
    for item in args.label:
        key, equals, value = item.partition("=")
        if not equals or not key:
            print(f"tidegate nodes: --label {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        labels[key] = value
    settings = AgentSettings(
        nodes=args.nodes,
        prefix=args.prefix,
        labels=labels,
        gpu_product=args.gpu_product,
        time_scale=args.time_scale,
        topology_name=args.topology_name or None,
        renew_interval_seconds=args.lease_interval,
        status_interval_seconds=args.status_interval,
        concurrency=args.concurrency,
        delete_nodes_on_exit=args.delete_nodes,
    )

    def say(line: str) -> None:
        print(line, flush=True)

    async def serve() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        async with fake_nodes(args.kubeconfig, settings, say=say, context=args.context) as agent:
            say(f"tidegate nodes: keeping {len(agent.node_names)} nodes; Ctrl-C to stop")
            reported = None
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10.0):
                        await stop.wait()
                agent.check()
                s = agent.stats
                figures = (agent.ready_count(), s.started, s.finished, s.removed)
                if figures != reported:
                    reported = figures
                    say(
                        f"tidegate nodes: {figures[0]}/{len(agent.node_names)} Ready; pods "
                        f"started {s.started}, finished {s.finished}, restarted {s.restarted}, "
                        f"deletions finished {s.removed}; lease renewals {s.lease_renewals}"
                    )
            say("tidegate nodes: stopping")
        return 0

    try:
        settings.validate()
        return run_tool(serve())
    except (AgentError, TopologyError, KubeConfigError, ToolSettingError) as exc:
        print(f"tidegate nodes: {exc}", file=sys.stderr)
        return 2 if not isinstance(exc, AgentError) or "must" in str(exc) else 1
    except KubeError as exc:
        print(f"tidegate nodes: the cluster refused: {exc}", file=sys.stderr)
        return 1
