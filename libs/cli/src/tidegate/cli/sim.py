"""``tidegate sim``: run a simulated Kubernetes cluster in the foreground.

Starts :class:`tidegate.sim.SimCluster` with the given topology and control-plane parts,
prints its URL (and the kubeconfig path when asked to write one), and serves until
interrupted (Ctrl-C or SIGTERM). Everything about the simulator itself is in
docs/simulator.md; this module only maps command-line options to ``SimSettings``.
"""

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

HELP = "Run a simulated Kubernetes cluster (API server, scheduler, kubelets, controllers)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tidegate sim``."""
    parser.add_argument(
        "--nodes",
        default="1x2x4x8gpu",
        help='topology description like "4x8x16x8gpu" (blocks x racks x nodes x GPUs) or a '
        "YAML/CSV file listing nodes (default: %(default)s)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the cluster here")
    parser.add_argument("--no-scheduler", action="store_true", help="do not bind pods to nodes")
    parser.add_argument("--no-kubelet", action="store_true", help="do not run bound pods")
    parser.add_argument(
        "--no-controllers",
        action="store_true",
        help="no Job/Deployment/ReplicaSet/GC/namespace/node-lifecycle controllers",
    )
    parser.add_argument(
        "--no-admission-gate",
        action="store_true",
        help="do not emulate tidegate's webhook (no gate on managed pods)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per simulated second (0.01 runs 100x faster; default: %(default)s)",
    )
    parser.add_argument("--gpu-product", default="NVIDIA-H200", help="nvidia.com/gpu.product label")
    parser.add_argument(
        "--crd-file",
        type=Path,
        action="append",
        default=[],
        help="extra CRD YAML file to install at start (repeatable), e.g. deploy/crds/*.yaml",
    )
    parser.add_argument("--no-crds", action="store_true", help="do not install the bundled CRDs")
    parser.add_argument(
        "--topology-name",
        default="default",
        help="name of the Topology object created for the node levels ('' for none)",
    )
    parser.add_argument(
        "--history-window",
        type=int,
        default=10_000,
        help="watch events kept per resource; older resumes get 410 Gone",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=5.0,
        help="seconds between BOOKMARK events on idle watches",
    )


def run(args: argparse.Namespace) -> int:
    """Run the cluster until interrupted; returns the exit status."""
    from tidegate.runtime.tool import ToolSettingError, run_tool
    from tidegate.sim import SettingsError, SimCluster, SimSettings, TopologyError

    settings = SimSettings(
        nodes=args.nodes,
        host=args.host,
        port=args.port,
        scheduler=not args.no_scheduler,
        kubelet=not args.no_kubelet,
        controllers=not args.no_controllers,
        admission_gate=False if args.no_admission_gate else None,
        time_scale=args.time_scale,
        gpu_product=args.gpu_product,
        install_crds=not args.no_crds,
        crd_files=tuple(args.crd_file),
        topology_name=args.topology_name or None,
        history_window=args.history_window,
        bookmark_interval_seconds=args.bookmark_interval,
    )

    async def serve() -> None:
        async with SimCluster.running(settings) as cluster:
            print(f"tidegate sim: API server at {cluster.url}", flush=True)
            print(
                f"tidegate sim: {len(cluster.layout.nodes)} nodes, levels "
                f"{', '.join(cluster.levels) or '(none)'}",
                flush=True,
            )
            if args.kubeconfig is not None:
                path = cluster.write_kubeconfig(args.kubeconfig)
                print(f"tidegate sim: kubeconfig written to {path}", flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            await stop.wait()
            print("tidegate sim: stopping", flush=True)

    try:
        run_tool(serve())
    except (SettingsError, TopologyError, ToolSettingError) as exc:
        print(f"tidegate sim: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tidegate sim: cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0
