"""compose.yaml: valid under the Compose Specification, and wired the way the services expect.

No Docker engine (nor the compose plugin) runs here, so the file is checked statically: against
the Compose Specification's JSON schema as vendored by check-jsonschema, then for what a schema
cannot see (dependencies that exist, files that exist, one image for every tidegate service,
healthchecks, the environment of the service conventions, a kubeconfig that reaches the
simulated cluster's port).
"""

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidegate.cli.main import build_parser

from .conftest import REPO, tool_findings

COMPOSE = REPO / "compose.yaml"
SERVICES = ("watcher", "topology-cache", "admission", "preemption", "ungater")
ONE_SHOT = {"crds", "setup"}
# Images tidegate does not build; no healthcheck is required of those without one of their own.
NO_HEALTHCHECK = {"jaeger"}
KUBERNETES_CLIENTS = {"watcher", "preemption", "ungater"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def _compose_spec_errors(path: Path) -> str:
    return tool_findings("check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(path))


def test_compose_follows_the_compose_specification() -> None:
    assert _compose_spec_errors(COMPOSE) == ""


def test_the_specification_check_rejects_a_broken_file(
    tmp_path: Path, compose: dict[str, Any]
) -> None:
    broken = dict(compose)
    broken["services"] = {
        **compose["services"],
        "nats": {**compose["services"]["nats"], "imagee": "x"},
    }
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    assert "imagee" in _compose_spec_errors(path)


def test_every_tidegate_service_runs_from_the_one_image(compose: dict[str, Any]) -> None:
    services = compose["services"]
    scripts: set[str] = set()
    for pyproject in REPO.glob("*/*/pyproject.toml"):
        scripts |= set(tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {}))
    images = set()
    for name in (*SERVICES, "cluster"):
        service = services[name]
        images.add((service["image"], service["build"]["context"], service["build"]["dockerfile"]))
        assert service["command"][0] in scripts, name
    for name in SERVICES:
        assert services[name]["command"] == [f"tidegate-{name}"]
    ((_, context, dockerfile),) = images
    assert (REPO / context / dockerfile).is_file()


def test_dependencies_exist_and_wait_for_readiness(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            condition = rule["condition"]
            if dependency in ONE_SHOT:
                assert condition == "service_completed_successfully", (name, dependency)
            elif "healthcheck" in services[dependency]:
                assert condition == "service_healthy", (name, dependency)
    for name in SERVICES:
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy"
    for name in KUBERNETES_CLIENTS:
        assert {"cluster", "crds"} & set(services[name]["depends_on"]), name


def test_long_running_containers_have_healthchecks(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if name in ONE_SHOT | NO_HEALTHCHECK:
            continue
        check = service["healthcheck"]
        assert check["test"][0] == "CMD", name
    for name in SERVICES:
        test = " ".join(compose["services"][name]["healthcheck"]["test"])
        assert "http://127.0.0.1:8080/readyz" in test
    nats = compose["services"]["nats"]
    assert "--jetstream" in nats["command"]
    assert "8222" in " ".join(nats["healthcheck"]["test"])


def test_services_get_the_conventional_environment(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        env = compose["services"][name]["environment"]
        assert env["TIDEGATE_CLUSTER"] == "laptop"
        assert env["TIDEGATE_NATS_URL"] == "nats://nats:4222"
        assert env["TIDEGATE_HTTP_PORT"] == "8080"
        assert env["OTEL_SERVICE_NAME"] == f"tidegate-{name}"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
        assert ("TIDEGATE_KUBECONFIG" in env) is (name in KUBERNETES_CLIENTS)


def test_mounted_files_exist(compose: dict[str, Any]) -> None:
    named = set(compose.get("volumes", {}))
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), (name, source)
            else:
                assert source in named, (name, source)


def test_the_kubeconfigs_reach_the_simulated_cluster(compose: dict[str, Any]) -> None:
    cluster = compose["services"]["cluster"]
    command = cluster["command"]
    port = command[command.index("--port") + 1]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert f"{port}:{port}" in cluster["ports"]
    inside = yaml.safe_load((REPO / "deploy/compose/kubeconfig.yaml").read_text())
    outside = yaml.safe_load((REPO / "deploy/compose/kubeconfig.host.yaml").read_text())
    assert inside["clusters"][0]["cluster"]["server"] == f"http://cluster:{port}"
    assert outside["clusters"][0]["cluster"]["server"] == f"http://127.0.0.1:{port}"
    inside["clusters"][0]["cluster"].pop("server")
    outside["clusters"][0]["cluster"].pop("server")
    assert inside == outside
    for name in KUBERNETES_CLIENTS:
        service = compose["services"][name]
        path = service["environment"]["TIDEGATE_KUBECONFIG"]
        assert f"./deploy/compose/kubeconfig.yaml:{path}:ro" in service["volumes"]


def test_setup_applies_the_crds_then_the_examples(compose: dict[str, Any]) -> None:
    crds = compose["services"]["crds"]
    setup = compose["services"]["setup"]
    assert crds["command"][0] == "apply"
    assert "./deploy/crds:/deploy/crds:ro" in crds["volumes"]
    applied = [setup["command"][i + 1] for i, arg in enumerate(setup["command"]) if arg == "-f"]
    for path in applied:
        assert (REPO / "deploy/examples" / Path(path).name).is_file()
    assert setup["depends_on"]["crds"]["condition"] == "service_completed_successfully"


def test_published_ports_do_not_collide(compose: dict[str, Any]) -> None:
    published = [
        port.split(":")[0]
        for service in compose["services"].values()
        for port in service.get("ports", [])
    ]
    assert len(published) == len(set(published))


def test_the_cluster_command_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    command = compose["services"]["cluster"]["command"]
    assert command[:2] == ["tidegate", "sim"]
    args = build_parser().parse_args(command[1:])
    assert (args.host, args.port, args.nodes) == ("0.0.0.0", 8001, "2x4x8x8gpu")


def test_the_console_command_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    console = compose["services"]["console"]
    command = console["command"]
    assert command[:2] == ["tidegate", "console"]
    args = build_parser().parse_args(command[1:])
    assert args.listen == "0.0.0.0:8480"
    assert args.no_auth  # so only published on the laptop's loopback
    assert console["ports"] == ["127.0.0.1:8480:8480"]
    assert "{trace_id}" in args.trace_url_template
    assert console["environment"]["TIDEGATE_CLUSTER"] == "laptop"
