"""``tidegate console``: a live, read-only web page of the cluster, served from the bus.

Any machine that reaches the bus can serve it (``--nats-url``, ``--cluster``): the topology
as a map of blocks, racks and nodes coloured by GPU use, the queues' usage against quota
with pending counts by reason, every waiting workload with its reason, its ``tidegate
explain`` answer and a link to its trace (``--trace-url-template``), and the stream of
decisions as they are made, filterable. What it shows comes from
:class:`~tidegate.cli.console_view.ConsoleView` (the same bus view and replica as ``explain``
and ``queues``); :mod:`tidegate.cli.console_server` serves it.

Access: open on a loopback address; elsewhere a bearer token (``--token`` or
``$TIDEGATE_CONSOLE_TOKEN``) or basic auth (``--basic-auth USER:PASSWORD`` or
``$TIDEGATE_CONSOLE_BASIC_AUTH``) is required unless ``--no-auth`` says otherwise. Exit
status 0 when interrupted, 2 when the options or the bus cannot be used.
"""

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tidegate.cli.explain import add_bus_arguments, bus_settings, quiet_bus

if TYPE_CHECKING:
    from tidegate.bus import BusSettings
    from tidegate.cli.console_server import Access

HELP: Final = "Serve a live web page of the cluster: topology, queues, waits and decisions."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bus options, where to listen, access and the trace link."""
    add_bus_arguments(parser)
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8480",
        help="HOST:PORT to serve on (default: %(default)s; port 0 picks a free one)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("TIDEGATE_CONSOLE_TOKEN") or None,
        help="require this bearer token (default: $TIDEGATE_CONSOLE_TOKEN)",
    )
    parser.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        default=os.environ.get("TIDEGATE_CONSOLE_BASIC_AUTH") or None,
        help="require HTTP basic auth (default: $TIDEGATE_CONSOLE_BASIC_AUTH)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="serve a non-loopback address without authentication (behind your own proxy)",
    )
    parser.add_argument(
        "--trace-url-template",
        default=os.environ.get("TIDEGATE_CONSOLE_TRACE_URL") or None,
        help="link each workload to its trace: a URL with {trace_id}, e.g. "
        "http://jaeger:16686/trace/{trace_id} (default: $TIDEGATE_CONSOLE_TRACE_URL)",
    )
    parser.add_argument(
        "--topology", help="the Topology whose levels draw the map (default: the first)"
    )


def nats_from_env(settings: "BusSettings") -> "BusSettings":
    """``settings`` with the NATS user, password and TLS files the services' variables name
    (``TIDEGATE_NATS_USER``, ``_PASSWORD``, ``_TLS_CA``, ``_TLS_CERT``, ``_TLS_KEY``), so the
    console runs beside them in the chart with the same Secrets."""
    env = os.environ

    def path(name: str) -> Path | None:
        value = env.get(name)
        return Path(value) if value else None

    return dataclasses.replace(
        settings,
        user=env.get("TIDEGATE_NATS_USER") or settings.user,
        password=env.get("TIDEGATE_NATS_PASSWORD") or settings.password,
        tls_ca_file=path("TIDEGATE_NATS_TLS_CA") or settings.tls_ca_file,
        tls_cert_file=path("TIDEGATE_NATS_TLS_CERT") or settings.tls_cert_file,
        tls_key_file=path("TIDEGATE_NATS_TLS_KEY") or settings.tls_key_file,
    )


async def _serve(args: argparse.Namespace, host: str, port: int, access: "Access") -> None:
    from tidegate.cli.console_server import serving
    from tidegate.cli.console_view import ConsoleView

    view = ConsoleView(
        cluster=args.cluster, topology=args.topology, trace_url_template=args.trace_url_template
    )
    settings = nats_from_env(bus_settings(args, "tidegate-console"))
    async with serving(settings, view, host=host, port=port, access=access) as (console, url):
        print(f"tidegate console: {url} (cluster {args.cluster}, bus {args.nats_url})", flush=True)
        await console.following  # runs until interrupted; raises what stopped it


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; 2 when the options or the bus cannot be used."""
    from tidegate.bus import BusError
    from tidegate.cli.console_server import ConsoleError, access_for, parse_listen

    try:
        host, port = parse_listen(args.listen)
        access = access_for(host, token=args.token, basic=args.basic_auth, no_auth=args.no_auth)
        if args.trace_url_template and "{trace_id}" not in args.trace_url_template:
            raise ConsoleError("--trace-url-template: needs {trace_id} in it")
        with quiet_bus():
            asyncio.run(_serve(args, host, port, access))
    except ConsoleError as exc:
        print(f"tidegate console: {exc}", file=sys.stderr)
        return 2
    except (BusError, OSError) as exc:
        print(f"tidegate console: cannot read the bus: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0
