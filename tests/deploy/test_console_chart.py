"""The chart's optional console and Grafana dashboards, rendered by Helm's engine.

The console (``tidegate console`` as a Deployment behind a Service) is off by default, reads
the bus with the services' NATS settings, gets no Kubernetes token and refuses to render
without authentication. The dashboards ConfigMap carries the Grafana sidecar's label, and
every query of every panel names only metrics the services export: names read from the
services' and the runtime's sources, where each metric is registered.
"""

import ast
import json
import re
from pathlib import Path
from typing import Any

from .conftest import REPO, Manifest, Render

METRIC: re.Pattern[str] = re.compile(r"\btidegate_[a-z0-9_]+\b")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
CONSOLE = {"enabled": True, "auth": {"tokenSecret": {"name": "console-token"}}}


def exported_metrics() -> set[str]:
    """Every ``tidegate_*`` name registered in the services' and the runtime's sources (the
    string constants that are exactly a metric name), with a histogram's series."""
    sources = [*REPO.glob("services/*/src/tidegate/**/*.py")]
    sources += [*REPO.glob("libs/runtime/src/tidegate/runtime/*.py")]
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and METRIC.fullmatch(text):
                names.add(text)
    return names | {f"{n}{series}" for n in names for series in HISTOGRAM_SERIES}


def unexported(panels: list[dict[str, Any]], exported: set[str]) -> list[str]:
    """Problems with ``panels``: a query naming a metric not in ``exported``, or a panel
    without a tidegate metric."""
    problems = []
    for panel in panels:
        if panel.get("type") == "row":
            problems += unexported(panel.get("panels", []), exported)
            continue
        named = [m for t in panel.get("targets", []) for m in METRIC.findall(t.get("expr", ""))]
        if not named:
            problems.append(f"panel {panel.get('title')!r} queries no tidegate metric")
        problems += [
            f"panel {panel.get('title')!r}: {name} is not exported"
            for name in named
            if name not in exported
        ]
    return problems


def _dashboards(documents: list[Manifest]) -> dict[str, dict[str, Any]]:
    maps = [
        d
        for d in documents
        if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard")
    ]
    assert len(maps) == 1, [d["metadata"]["name"] for d in maps]
    return {name: json.loads(text) for name, text in maps[0]["data"].items()}


def test_neither_console_nor_dashboards_by_default(render: Render) -> None:
    documents = render({})
    names = [d["metadata"]["name"] for d in documents]
    assert not [n for n in names if n.endswith(("-console", "-dashboards"))], names


def test_the_dashboards_configmap_is_labelled_for_the_grafana_sidecar(render: Render) -> None:
    documents = render({"metrics": {"grafanaDashboards": {"enabled": True}}})
    (configmap,) = [d for d in documents if d["metadata"]["name"].endswith("-dashboards")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboards = _dashboards(documents)
    files = sorted(p.name for p in (REPO / "deploy/helm/tidegate/dashboards").glob("*.json"))
    assert sorted(dashboards) == files
    assert files


def test_every_panel_queries_metrics_the_services_export(render: Render) -> None:
    exported = exported_metrics()
    dashboards = _dashboards(render({"metrics": {"grafanaDashboards": {"enabled": True}}}))
    for name, dashboard in dashboards.items():
        assert dashboard["panels"], name
        assert unexported(dashboard["panels"], exported) == [], name
    # The panels the operations guide promises (docs/operations.md, "Grafana dashboards").
    queried = {
        m
        for d in dashboards.values()
        for p in d["panels"]
        for t in p.get("targets", [])
        for m in METRIC.findall(t["expr"])
    }
    assert {
        "tidegate_admitted_workloads_total",
        "tidegate_admission_wait_time_seconds_bucket",
        "tidegate_pending_workloads",
        "tidegate_queue_resource_usage",
        "tidegate_queue_resource_quota",
        "tidegate_preempted_workloads_total",
        "tidegate_preemption_gpu_hours_lost_total",
        "tidegate_ungater_release_latency_seconds_bucket",
        "tidegate_state_follower_lag_seconds",
        "tidegate_leader",
        "tidegate_topology_gpus",
    } <= queried


def test_the_panel_check_catches_a_metric_nobody_exports() -> None:
    panels = [
        {"type": "timeseries", "title": "ok", "targets": [{"expr": "sum(tidegate_ready)"}]},
        {"type": "timeseries", "title": "typo", "targets": [{"expr": "tidegate_redy"}]},
        {"type": "timeseries", "title": "none", "targets": [{"expr": "up"}]},
    ]
    assert unexported(panels, exported_metrics()) == [
        "panel 'typo': tidegate_redy is not exported",
        "panel 'none' queries no tidegate metric",
    ]


def _console(documents: list[Manifest], kind: str) -> Manifest:
    (found,) = [
        d for d in documents if d["kind"] == kind and d["metadata"]["name"].endswith("-console")
    ]
    return found


def test_the_console_reads_the_bus_with_a_token_and_no_kubernetes_access(render: Render) -> None:
    documents = render(
        {
            "console": {**CONSOLE, "traceUrlTemplate": "https://jaeger.example/trace/{trace_id}"},
            "nats": {"userPassword": {"secretName": "nats-auth"}, "tls": {"secretName": "ca"}},
        }
    )
    deployment = _console(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["tidegate", "console"]
    assert "--listen=0.0.0.0:8480" in container["args"]
    assert "--no-auth" not in container["args"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["TIDEGATE_CONSOLE_TOKEN"] == {
        "secretKeyRef": {"name": "console-token", "key": "token"}
    }
    assert env["TIDEGATE_CONSOLE_TRACE_URL"] == "https://jaeger.example/trace/{trace_id}"
    assert env["TIDEGATE_NATS_USER"]["secretKeyRef"]["name"] == "nats-auth"
    assert env["TIDEGATE_NATS_TLS_CA"] == "/etc/tidegate/nats-tls/ca.crt"
    assert pod["automountServiceAccountToken"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    service = _console(documents, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_console_options_match_the_command(render: Render) -> None:
    """The chart passes only options and variables ``tidegate console`` knows."""
    from tidegate.cli.main import build_parser

    documents = render({"console": {**CONSOLE, "auth": {"none": True}, "topology": "t"}})
    (container,) = _console(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(["console", *container["args"]])
    assert args.no_auth
    assert args.topology == "t"
    source = Path(REPO / "libs/cli/src/tidegate/cli/console.py").read_text()
    for variable in (e["name"] for e in container["env"]):
        if variable.startswith("TIDEGATE_CONSOLE_"):
            assert variable in source, variable
