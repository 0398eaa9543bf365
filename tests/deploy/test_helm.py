"""The Helm chart, rendered and linted by Helm's engine with several sets of values.

Every rendered object is validated against the Kubernetes OpenAPI schema of the oldest
supported and a current Kubernetes version (tidegate's own objects against the CRDs), and the
chart's promises are checked on what it renders: least-privilege RBAC per service, the
environment and mounts the services expect, the webhook and its certificate, NATS
authentication, settings files, and clear failures for bad values.
"""

import base64
import datetime
import json
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tidegate.kube.read.keys import QUEUE_KEYS

from .conftest import (
    CHART_DIR,
    CRD_DIR,
    KUBE_VERSIONS,
    NAMESPACE,
    REPO,
    Manifest,
    Render,
    custom_resource_errors,
    kubernetes_errors,
)

SERVICES = ("watcher", "topology-cache", "admission", "preemption", "ungater")
# Kinds the chart may render that Kubernetes itself does not define; their own operators
# validate them (cert-manager, Prometheus Operator) and tidegate's CRDs define the rest.
FOREIGN_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
FOREIGN_KINDS |= {("monitoring.coreos.com/v1", "ServiceMonitor")}

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {
        "cluster": "prod-eu1",
        "image": {"repository": "registry.example/tidegate", "tag": "1.2.3"},
        "webhook": {"failurePolicy": "Fail", "certificate": {"certManager": {"enabled": True}}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "otel": {
            "endpoint": "http://otel-collector.observability:4318",
            "resourceAttributes": "deployment.environment=prod",
        },
        "topologies": [
            {
                "name": "default",
                "levels": ["tidegate.io/block", "tidegate.io/rack", "kubernetes.io/hostname"],
            }
        ],
        "queues": [
            {
                "name": "online",
                "spec": {
                    "priority": 100,
                    "reclaimable": False,
                    "capability": {"cpu": "512", "nvidia.com/gpu": 64},
                    "cardQuota": {"NVIDIA-H200/mig-1g.18gb-mixed": 7},
                    "topology": "default",
                },
            },
            {"name": "offline"},
            {
                "name": "team-a",
                "spec": {
                    "cohort": "research",
                    "nominalQuota": {"nvidia.com/gpu": "16"},
                    "lendingLimit": {"nvidia.com/gpu": 12},
                    "cardNominalQuota": {"NVIDIA-H200": 16},
                    "fairSharing": {"weight": "1.5"},
                    "preemption": {
                        "reclaimWithinCohort": "LowerPriority",
                        "borrowWithinCohort": {
                            "policy": "LowerPriority",
                            "maxPriorityThreshold": 10,
                        },
                        "withinClusterQueue": "Never",
                    },
                },
            },
        ],
        "cohorts": [
            {"name": "research", "spec": {"parent": "org", "capability": {"nvidia.com/gpu": 32}}},
            {"name": "org"},
        ],
    },
    "existing-secret": {
        "webhook": {
            "certificate": {"existingSecret": "tidegate-webhook", "caBundle": "Q0EK"},
            # Helm merges maps with the defaults, so a default key is removed by setting it null.
            "namespaceSelector": {"matchLabels": None},
            "objectSelector": {
                "matchExpressions": [{"key": "tidegate.io/queue", "operator": "Exists"}]
            },
        },
        "nats": {
            "url": "tls://nats-0.nats:4222,tls://nats-1.nats:4222",
            "creds": {"secretName": "tidegate-nats", "key": "tidegate.creds"},
            "tls": {"secretName": "nats-ca", "certKey": "", "keyKey": ""},
        },
    },
    "password-and-mtls": {
        "nats": {"userPassword": {"secretName": "nats-auth"}, "tls": {"secretName": "nats-client"}},
        "config": {"shutdown_grace_seconds": 25, "log_level": "INFO"},
        "services": {
            "admission": {
                "config": {"shutdown_grace_seconds": 10, "lease_ttl_seconds": 15},
                "replicas": 3,
            }
        },
        "defaults": {
            "priorityClassName": "system-cluster-critical",
            "podLabels": {"team": "sched"},
        },
    },
    "console-and-dashboards": {
        "metrics": {"grafanaDashboards": {"enabled": True, "annotations": {"grafana_folder": "x"}}},
        "console": {
            "enabled": True,
            "auth": {"tokenSecret": {"name": "console-token"}},
            "traceUrlTemplate": "https://jaeger.example/trace/{trace_id}",
        },
        "nats": {"creds": {"secretName": "tidegate-nats"}, "tls": {"secretName": "nats-ca"}},
    },
    "minimal": {
        "webhook": {"enabled": False},
        "rbac": {"create": False},
        "serviceAccount": {"create": False},
        "services": {
            "watcher": {"serviceAccountName": "watcher-sa"},
            "topologyCache": {"serviceAccountName": "cache-sa"},
            "admission": {
                "serviceAccountName": "admission-sa",
                "podDisruptionBudget": {"enabled": False},
            },
            "preemption": {"enabled": False},
            "ungater": {
                "serviceAccountName": "ungater-sa",
                "podDisruptionBudget": {"enabled": False},
            },
        },
    },
}


def _of(documents: list[Manifest], kind: str) -> list[Manifest]:
    return [doc for doc in documents if doc["kind"] == kind]


def _named(documents: list[Manifest], kind: str, name: str) -> Manifest:
    (found,) = [doc for doc in _of(documents, kind) if doc["metadata"]["name"] == name]
    return found


def _is_console(document: Manifest) -> bool:
    return bool(document["metadata"]["labels"].get("app.kubernetes.io/component") == "console")


def _deployment(documents: list[Manifest], service: str) -> Manifest:
    return _named(documents, "Deployment", f"tg-tidegate-{service}")


def _container(deployment: Manifest) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(deployment: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(deployment)["env"]}


def _mounts(deployment: Manifest) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in _container(deployment).get("volumeMounts", [])}


def _volume(deployment: Manifest, name: str) -> dict[str, Any]:
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == name]
    return volume


# -- Helm's own checks and the schemas ------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_passes(scenario: str) -> None:
    for kube_version in KUBE_VERSIONS:
        report = helm.lint(
            CHART_DIR,
            SCENARIOS[scenario],
            strict=True,
            namespace=NAMESPACE,
            kube_version=f"v{kube_version}",
        )
        findings = [m for m in report["messages"] if m["severity"] >= 2]
        assert (report["errors"], findings) == ([], []), report


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_object_is_valid(
    render: Render, crds: dict[str, Manifest], scenario: str
) -> None:
    documents = render(SCENARIOS[scenario])
    assert documents
    problems: list[str] = []
    for doc in documents:
        api_kind = (doc["apiVersion"], doc["kind"])
        if doc["apiVersion"].startswith("tidegate.io/"):
            problems += custom_resource_errors(crds, doc)
        elif api_kind in FOREIGN_KINDS:
            assert doc["metadata"]["name"]
        else:
            for kube_version in KUBE_VERSIONS:
                problems += kubernetes_errors(doc, kube_version)
    assert problems == []


def test_the_schema_validation_catches_a_bad_manifest() -> None:
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {}},
    }
    assert kubernetes_errors(bad, KUBE_VERSIONS[-1]) != []


def test_values_schema_is_a_valid_json_schema() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert list(jsonschema.Draft7Validator(schema).iter_errors(values)) == []


BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "cluster id that is no DNS label": ({"cluster": "Prod_EU"}, "/cluster"),
    "misspelt top-level key": ({"clustr": "x"}, "clustr"),
    "unknown failure policy": (
        {"webhook": {"failurePolicy": "Sometimes"}},
        "/webhook/failurePolicy",
    ),
    "negative replicas": (
        {"services": {"watcher": {"replicas": -1}}},
        "/services/watcher/replicas",
    ),
    "misspelt service": ({"services": {"watchr": {"enabled": True, "replicas": 1}}}, "watchr"),
    "nats url without scheme": ({"nats": {"url": "nats.example:4222"}}, "/nats/url"),
    "stream replicas above 5": ({"nats": {"streamReplicas": 7}}, "/nats/streamReplicas"),
    "bad log level": ({"logLevel": "LOUD"}, "/logLevel"),
    "too many topology levels": (
        {"topologies": [{"name": "t", "levels": [f"l{i}" for i in range(9)]}]},
        "/topologies/0/levels",
    ),
    "queue with a bad strategy": (
        {"queues": [{"name": "q", "spec": {"queueingStrategy": "LIFO"}}]},
        "/queues/0/spec/queueingStrategy",
    ),
    "queue with a bad reclaim policy": (
        {"queues": [{"name": "q", "spec": {"preemption": {"reclaimWithinCohort": "Always"}}}]},
        "/queues/0/spec/preemption/reclaimWithinCohort",
    ),
    "cohort with a misspelt field": (
        {"cohorts": [{"name": "c", "spec": {"nominalQuotas": {"cpu": 1}}}]},
        "/cohorts/0/spec",
    ),
    "existing secret without its CA": (
        {"webhook": {"certificate": {"existingSecret": "s"}}},
        "webhook.certificate.caBundle is required",
    ),
    "both certificate sources": (
        {
            "webhook": {
                "certificate": {
                    "existingSecret": "s",
                    "caBundle": "Q0EK",
                    "certManager": {"enabled": True},
                }
            }
        },
        "either existingSecret or certManager.enabled",
    ),
    "webhook without the ungater": (
        {"services": {"ungater": {"enabled": False}}},
        "webhook.enabled needs services.ungater.enabled",
    ),
    "two NATS authentications": (
        {"nats": {"creds": {"secretName": "a"}, "userPassword": {"secretName": "b"}}},
        "either creds.secretName or userPassword.secretName",
    ),
    "console without authentication": (
        {"console": {"enabled": True}},
        "set console.auth.tokenSecret.name or console.auth.basicAuthSecret.name",
    ),
    "trace link without the trace id": (
        {"console": {"traceUrlTemplate": "https://jaeger.example/trace/"}},
        "/console/traceUrlTemplate",
    ),
    "no service accounts and no names": (
        {"serviceAccount": {"create": False}},
        "serviceAccountName is required when serviceAccount.create is false",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_fail_with_a_message_naming_them(render: Render, case: str) -> None:
    values, message = BAD_VALUES[case]
    with pytest.raises(helm.HelmError) as failure:
        render(values)
    assert message in str(failure.value)


# -- services -------------------------------------------------------------------------------


def _console_scripts() -> set[str]:
    scripts: set[str] = set()
    for pyproject in [*REPO.glob("libs/*/pyproject.toml"), *REPO.glob("services/*/pyproject.toml")]:
        scripts |= set(tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {}))
    return scripts


REQUIRED_ENV = {
    "TIDEGATE_CLUSTER",
    "TIDEGATE_NATS_URL",
    "TIDEGATE_NATS_STREAM_REPLICAS",
    "TIDEGATE_HTTP_PORT",
    "TIDEGATE_CONFIG",
    "TIDEGATE_LOG_LEVEL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
}
KNOWN_ENV = REQUIRED_ENV | {
    "POD_NAME",
    "POD_NAMESPACE",
    "TIDEGATE_NATS_CREDS",
    "TIDEGATE_NATS_USER",
    "TIDEGATE_NATS_PASSWORD",
    "TIDEGATE_NATS_TLS_CA",
    "TIDEGATE_NATS_TLS_CERT",
    "TIDEGATE_NATS_TLS_KEY",
    "TIDEGATE_WEBHOOK",
    "TIDEGATE_WEBHOOK_PORT",
    "TIDEGATE_WEBHOOK_FAILURE_POLICY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_service_runs_as_the_services_expect(render: Render, scenario: str) -> None:
    values = SCENARIOS[scenario]
    documents = render(values)
    scripts = _console_scripts()
    # The console (tests/deploy/test_console_chart.py) is no service.
    deployments = [d for d in _of(documents, "Deployment") if not _is_console(d)]
    enabled = [s for s in SERVICES if not (scenario == "minimal" and s == "preemption")]
    assert sorted(
        d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments
    ) == sorted(enabled)
    for service in enabled:
        deployment = _deployment(documents, service)
        container = _container(deployment)
        pod = deployment["spec"]["template"]["spec"]
        env = _env(deployment)
        assert container["command"] == [f"tidegate-{service}"]
        assert container["command"][0] in scripts
        assert REQUIRED_ENV <= env.keys() <= KNOWN_ENV
        assert env["TIDEGATE_CLUSTER"] == values.get("cluster", "default")
        assert env["OTEL_SERVICE_NAME"] == f"tidegate-{service}"
        assert "k8s.pod.name=$(POD_NAME)" in env["OTEL_RESOURCE_ATTRIBUTES"]
        (http,) = [p for p in container["ports"] if p["name"] == "http"]
        assert env["TIDEGATE_HTTP_PORT"] == str(http["containerPort"])
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        config_mount = _mounts(deployment)[env["TIDEGATE_CONFIG"]]
        assert config_mount["subPath"] == "config.yaml"
        config_map = _volume(deployment, config_mount["name"])["configMap"]["name"]
        assert "config.yaml" in _named(documents, "ConfigMap", config_map)["data"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert "/tmp" in _mounts(deployment)
        talks_to_kubernetes = service in ("watcher", "preemption", "ungater")
        assert pod["automountServiceAccountToken"] is talks_to_kubernetes
        image = values.get("image", {})
        assert (
            container["image"]
            == f"{image.get('repository', 'tidegate')}:{image.get('tag', '0.1.0')}"
        )


def test_single_writers_run_with_a_standby(render: Render) -> None:
    documents = render({})
    leaders = ("admission", "preemption", "ungater")
    for service in leaders:
        assert _deployment(documents, service)["spec"]["replicas"] == 2
    assert all(
        _deployment(documents, s)["spec"]["replicas"] == 1 for s in SERVICES if s not in leaders
    )
    admission = _deployment(documents, "admission")
    budgets = {
        b["metadata"]["labels"]["app.kubernetes.io/component"]: b
        for b in _of(documents, "PodDisruptionBudget")
    }
    assert sorted(budgets) == ["admission", "ungater"]  # the decider, and the webhook's server
    for service, budget in budgets.items():
        assert budget["spec"]["minAvailable"] == 1
        selector = _deployment(documents, service)["spec"]["selector"]["matchLabels"]
        assert budget["spec"]["selector"]["matchLabels"] == selector
    anti = admission["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"
    ] == ("kubernetes.io/hostname")
    assert _of(render(SCENARIOS["minimal"]), "PodDisruptionBudget") == []


def test_each_service_selects_only_its_own_pods(render: Render) -> None:
    documents = render({})
    pods = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["metadata"][
            "labels"
        ]
        for d in _of(documents, "Deployment")
    }
    for service in _of(documents, "Service"):
        selector = service["spec"]["selector"]
        matched = [name for name, labels in pods.items() if selector.items() <= labels.items()]
        assert len(matched) == 1, (service["metadata"]["name"], matched)
        for port in service["spec"]["ports"]:
            ports = {p["name"] for p in _container(_deployment(documents, matched[0]))["ports"]}
            assert port["targetPort"] in ports


def test_settings_files_merge_service_config_over_shared_config(render: Render) -> None:
    documents = render(SCENARIOS["password-and-mtls"])
    admission = yaml.safe_load(
        _named(documents, "ConfigMap", "tg-tidegate-admission")["data"]["config.yaml"]
    )
    watcher = yaml.safe_load(
        _named(documents, "ConfigMap", "tg-tidegate-watcher")["data"]["config.yaml"]
    )
    assert admission == {"shutdown_grace_seconds": 10, "log_level": "INFO", "lease_ttl_seconds": 15}
    assert watcher == {"shutdown_grace_seconds": 25, "log_level": "INFO"}
    assert _deployment(documents, "admission")["spec"]["replicas"] == 3
    default = yaml.safe_load(
        _named(render({}), "ConfigMap", "tg-tidegate-watcher")["data"]["config.yaml"]
    )
    assert default == {}

    def checksum(docs: list[Manifest], service: str) -> str:
        annotations = _deployment(docs, service)["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/config"]
        return value

    assert checksum(documents, "admission") != checksum(documents, "watcher")
    assert checksum(documents, "watcher") != checksum(render({}), "watcher")
    pod = _deployment(documents, "watcher")["spec"]["template"]
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["metadata"]["labels"]["team"] == "sched"


# -- RBAC -----------------------------------------------------------------------------------

# What each service needs is not written down here: the end-to-end scenarios on the real
# control plane run every service as the ServiceAccount this chart binds and fail on any 403 or
# any request no grant covers, and report the grants no request used
# (tests/e2e/test_real_system.py, tests/e2e/test_real_rbac.py). This file checks the shape.
SERVICES_WITH_ROLES = {"watcher", "ungater", "preemption"}
"""topology-cache and admission talk only to the bus."""
READ_ONLY = {"get", "list", "watch"}


def _permissions(role: Manifest) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_is_one_bound_role_per_service_without_wildcards(render: Render) -> None:
    documents = render({})
    roles = {
        r["metadata"]["labels"]["app.kubernetes.io/component"]: r
        for r in _of(documents, "ClusterRole")
    }
    assert set(roles) == SERVICES_WITH_ROLES
    for service, role in roles.items():
        granted = _permissions(role)
        assert "*" not in {part for permission in granted for part in permission}, service
        (binding,) = [
            b
            for b in _of(documents, "ClusterRoleBinding")
            if b["roleRef"]["name"] == role["metadata"]["name"]
        ]
        deployment = _deployment(documents, service)
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": deployment["spec"]["template"]["spec"]["serviceAccountName"],
                "namespace": NAMESPACE,
            }
        ]
    # Only the watcher watches; the writers at most read once (the ungater lists pods once
    # when it takes over).
    for service in ("ungater", "preemption"):
        assert "watch" not in {v for _, _, v in _permissions(roles[service])}, service
    assert {v for _, _, v in _permissions(roles["watcher"])} <= READ_ONLY
    accounts = {a["metadata"]["name"]: a for a in _of(documents, "ServiceAccount")}
    assert sorted(accounts) == sorted(f"tg-tidegate-{s}" for s in SERVICES)
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    assert _of(documents, "Role") == []
    assert _of(documents, "RoleBinding") == []


def test_rbac_and_accounts_can_be_left_to_the_cluster_admin(render: Render) -> None:
    documents = render(SCENARIOS["minimal"])
    for kind in (
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
    ):
        assert _of(documents, kind) == [], kind
    accounts = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"][
            "serviceAccountName"
        ]
        for d in _of(documents, "Deployment")
    }
    assert accounts == {
        "watcher": "watcher-sa",
        "topology-cache": "cache-sa",
        "admission": "admission-sa",
        "ungater": "ungater-sa",
    }


# -- the webhook ----------------------------------------------------------------------------


def _webhooks(documents: list[Manifest]) -> list[dict[str, Any]]:
    (configuration,) = _of(documents, "MutatingWebhookConfiguration")
    result: list[dict[str, Any]] = configuration["webhooks"]
    return result


def _webhook(documents: list[Manifest]) -> dict[str, Any]:
    """The managed namespaces' entry."""
    (webhook,) = [w for w in _webhooks(documents) if w["name"] == "gate.pods.tidegate.io"]
    return webhook


@pytest.mark.parametrize("scenario", ["defaults", "cert-manager", "existing-secret"])
def test_the_webhook_reaches_the_ungater_over_tls(render: Render, scenario: str) -> None:
    documents = render(SCENARIOS[scenario])
    webhook = _webhook(documents)
    reference = webhook["clientConfig"]["service"]
    assert reference["path"] == "/mutate-pods"
    assert reference["namespace"] == NAMESPACE
    service = _named(documents, "Service", reference["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == reference["port"]]
    ungater = _deployment(documents, "ungater")
    container = _container(ungater)
    (webhook_port,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert _env(ungater)["TIDEGATE_WEBHOOK_PORT"] == str(webhook_port["containerPort"])
    # The ungater serves it (a missing certificate then stops it loudly) and answers pods it
    # cannot read by the same failure policy as the API server applies.
    assert _env(ungater)["TIDEGATE_WEBHOOK"] == "on"
    assert _env(ungater)["TIDEGATE_WEBHOOK_FAILURE_POLICY"] == webhook["failurePolicy"]
    assert (
        service["spec"]["selector"].items()
        <= ungater["spec"]["template"]["metadata"]["labels"].items()
    )
    mount = _mounts(ungater)["/etc/tidegate/webhook-tls"]
    secret = _volume(ungater, mount["name"])["secret"]
    assert {item["path"] for item in secret["items"]} == {"tls.crt", "tls.key"}
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["sideEffects"] == "None"
    assert webhook["failurePolicy"] == SCENARIOS[scenario].get("webhook", {}).get(
        "failurePolicy", "Fail"
    )
    for entry in _webhooks(documents):
        assert {
            k: v
            for k, v in entry.items()
            if k not in ("name", "namespaceSelector", "objectSelector")
        } == {
            k: v
            for k, v in webhook.items()
            if k not in ("name", "namespaceSelector", "objectSelector")
        }
    excluded = webhook["namespaceSelector"]["matchExpressions"][-1]
    assert excluded["key"] == "kubernetes.io/metadata.name"
    assert excluded["operator"] == "NotIn"
    assert {"kube-system", NAMESPACE} <= set(excluded["values"])
    if scenario == "cert-manager":
        (certificate,) = _of(documents, "Certificate")
        assert certificate["spec"]["secretName"] == secret["secretName"]
        annotations = _of(documents, "MutatingWebhookConfiguration")[0]["metadata"]["annotations"]
        assert (
            annotations["cert-manager.io/inject-ca-from"]
            == f"{NAMESPACE}/{certificate['metadata']['name']}"
        )
        assert f"{reference['name']}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
        assert "caBundle" not in webhook["clientConfig"]
        assert _of(documents, "Secret") == []
    if scenario == "existing-secret":
        assert secret["secretName"] == "tidegate-webhook"
        assert webhook["clientConfig"]["caBundle"] == "Q0EK"
        assert webhook["objectSelector"] == SCENARIOS[scenario]["webhook"]["objectSelector"]
        assert webhook["namespaceSelector"] == {"matchExpressions": [excluded]}
        assert _of(documents, "Secret") == []
        assert _of(documents, "Certificate") == []
    if scenario == "defaults":
        assert webhook["namespaceSelector"]["matchLabels"] == {"tidegate.io/managed": "true"}
        assert "objectSelector" not in webhook


def _selected(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector selects ``labels`` (as the API server matches them)."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if not {
            "Exists": present,
            "DoesNotExist": not present,
            "In": present and labels.get(key) in (values or []),
            "NotIn": not present or labels.get(key) not in (values or []),
        }[operator]:
            return False
    return True


def _called(documents: list[Manifest], namespace: dict[str, str], pod: dict[str, str]) -> list[str]:
    return [
        w["name"]
        for w in _webhooks(documents)
        if _selected(w["namespaceSelector"], namespace) and _selected(w.get("objectSelector"), pod)
    ]


def test_fail_by_default_and_only_for_pods_tidegate_manages(render: Render) -> None:
    """The webhook refuses pods while down (Fail), so no managed pod bypasses the
    gate, and it is called — once — exactly for the pods the ungater gates: every pod of a
    managed namespace, and pods naming a queue by a label anywhere but the excluded
    namespaces. Other pods never depend on the ungater being up."""
    documents = render({})
    assert {w["failurePolicy"] for w in _webhooks(documents)} == {"Fail"}
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert tuple(values["webhook"]["queueLabels"]) == QUEUE_KEYS  # the webhook's one rule

    def ns(name: str, **labels: str) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": name, **labels}

    managed = ns("research", **{"tidegate.io/managed": "true"})
    assert _called(documents, managed, {}) == ["gate.pods.tidegate.io"]
    assert _called(documents, managed, {"kueue.x-k8s.io/queue-name": "q"}) == [
        "gate.pods.tidegate.io"
    ]
    assert _called(documents, ns("web"), {"app": "nginx"}) == []
    for key in QUEUE_KEYS:
        (name,) = _called(documents, ns("web"), {key: "q", "app": "x"})
        assert name.endswith(".queue.pods.tidegate.io")
    assert len(_called(documents, ns("web"), dict.fromkeys(QUEUE_KEYS, "q"))) == 1
    for system in ("kube-system", NAMESPACE):
        assert (
            _called(
                documents, ns(system, **{"tidegate.io/managed": "true"}), {"tidegate.io/queue": "q"}
            )
            == []
        )
    # A narrowed managed entry: a queue label still reaches the webhook there.
    narrowed = render({"webhook": {"objectSelector": {"matchLabels": {"batch": "yes"}}}})
    assert _called(narrowed, managed, {"tidegate.io/queue": "q"}) == [
        "tidegate-io-queue.queue.pods.tidegate.io"
    ]
    assert [w["name"] for w in _webhooks(render({"webhook": {"queueLabels": []}}))] == [
        "gate.pods.tidegate.io"
    ]


def test_every_ungater_replica_serves_the_webhook_and_one_stays_through_disruptions(
    render: Render,
) -> None:
    """With Fail, pod creation waits on the ungater: the webhook Service selects every replica
    (not the releaser), each replica serves it, and a PodDisruptionBudget keeps one through
    drains and upgrades (a standby serves before it is ready for the lease:
    libs/runtime/tests/test_service.py::test_a_lease_awaited_by_a_spawned_task_does_not_make_a_running_setup_ready)."""
    documents = render({})
    ungater = _deployment(documents, "ungater")
    assert ungater["spec"]["replicas"] >= 2
    reference = _webhook(documents)["clientConfig"]["service"]
    service = _named(documents, "Service", reference["name"])
    assert service["spec"]["selector"] == ungater["spec"]["selector"]["matchLabels"]
    assert _env(ungater)["TIDEGATE_WEBHOOK"] == "on"
    (budget,) = [
        b
        for b in _of(documents, "PodDisruptionBudget")
        if b["spec"]["selector"]["matchLabels"] == ungater["spec"]["selector"]["matchLabels"]
    ]
    assert budget["spec"]["minAvailable"] == 1
    assert _container(ungater)["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_generated_certificate_is_trusted_through_the_ca_bundle(render: Render) -> None:
    documents = render({})
    webhook = _webhook(documents)
    ungater = _deployment(documents, "ungater")
    secret_name = _volume(ungater, "webhook-tls")["secret"]["secretName"]
    secret = _named(documents, "Secret", secret_name)
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(webhook["clientConfig"]["caBundle"]))
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    key = serialization.load_pem_private_key(
        base64.b64decode(secret["data"]["tls.key"]), password=None
    )
    serving.verify_directly_issued_by(ca)
    assert key.public_key().public_numbers() == serving.public_key().public_numbers()  # type: ignore[union-attr]
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service = webhook["clientConfig"]["service"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    assert serving.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=365
    )


def test_without_the_webhook_the_ungater_serves_none(render: Render) -> None:
    documents = render(SCENARIOS["minimal"])
    ungater = _deployment(documents, "ungater")
    assert "TIDEGATE_WEBHOOK_PORT" not in _env(ungater)
    assert "TIDEGATE_WEBHOOK" not in _env(ungater)
    assert [p["name"] for p in _container(ungater)["ports"]] == ["http"]
    assert "/etc/tidegate/webhook-tls" not in _mounts(ungater)
    assert _of(documents, "Secret") == []


# -- NATS -----------------------------------------------------------------------------------


def test_by_default_every_service_uses_the_three_server_nats_cluster(render: Render) -> None:
    documents = render({})
    for deployment in _of(documents, "Deployment"):
        env = _env(deployment)
        servers = env["TIDEGATE_NATS_URL"].split(",")
        assert [s.split("//")[1].split(".")[0] for s in servers] == ["nats-0", "nats-1", "nats-2"]
        assert env["TIDEGATE_NATS_STREAM_REPLICAS"] == "3"
    single = render({"nats": {"url": "nats://nats:4222", "streamReplicas": 1}})
    for deployment in _of(single, "Deployment"):
        assert _env(deployment)["TIDEGATE_NATS_STREAM_REPLICAS"] == "1"


def test_nats_creds_file_and_server_only_tls(render: Render) -> None:
    documents = render(SCENARIOS["existing-secret"])
    for deployment in _of(documents, "Deployment"):
        env = _env(deployment)
        assert env["TIDEGATE_NATS_URL"] == "tls://nats-0.nats:4222,tls://nats-1.nats:4222"
        creds = Path(env["TIDEGATE_NATS_CREDS"])
        mount = _mounts(deployment)[str(creds.parent)]
        volume = _volume(deployment, mount["name"])["secret"]
        assert volume["secretName"] == "tidegate-nats"
        assert volume["items"] == [{"key": "tidegate.creds", "path": creds.name}]
        ca = Path(env["TIDEGATE_NATS_TLS_CA"])
        assert ca.name == "ca.crt"
        assert (
            _volume(deployment, _mounts(deployment)[str(ca.parent)]["name"])["secret"]["secretName"]
            == "nats-ca"
        )
        assert "TIDEGATE_NATS_TLS_CERT" not in env
        assert "TIDEGATE_NATS_USER" not in env


def test_nats_user_password_and_mutual_tls(render: Render) -> None:
    documents = render(SCENARIOS["password-and-mtls"])
    for deployment in _of(documents, "Deployment"):
        env = _env(deployment)
        assert env["TIDEGATE_NATS_USER"] == {
            "secretKeyRef": {"name": "nats-auth", "key": "username"}
        }
        assert env["TIDEGATE_NATS_PASSWORD"] == {
            "secretKeyRef": {"name": "nats-auth", "key": "password"}
        }
        for variable, file in (("CA", "ca.crt"), ("CERT", "tls.crt"), ("KEY", "tls.key")):
            assert env[f"TIDEGATE_NATS_TLS_{variable}"] == f"/etc/tidegate/nats-tls/{file}"
        assert "TIDEGATE_NATS_CREDS" not in env


def test_otel_endpoint_is_passed_when_set(render: Render) -> None:
    env = _env(_deployment(render(SCENARIOS["cert-manager"]), "watcher"))
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["OTEL_RESOURCE_ATTRIBUTES"].endswith(",deployment.environment=prod")
    assert "tidegate.cluster=prod-eu1" in env["OTEL_RESOURCE_ATTRIBUTES"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in _env(_deployment(render({}), "watcher"))


# -- custom resources and packaging ---------------------------------------------------------


def test_topologies_and_queues_from_values(render: Render) -> None:
    documents = render(SCENARIOS["cert-manager"])
    (topology,) = _of(documents, "Topology")
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "tidegate.io/block",
        "tidegate.io/rack",
        "kubernetes.io/hostname",
    ]
    queues = {q["metadata"]["name"]: q for q in _of(documents, "Queue")}
    assert queues["online"]["spec"]["cardQuota"] == {"NVIDIA-H200/mig-1g.18gb-mixed": 7}
    assert queues["offline"]["spec"] == {}
    assert _of(render({}), "Queue") == []


def test_cohorts_and_the_queue_tree_fields_from_values(render: Render) -> None:
    documents = render(SCENARIOS["cert-manager"])
    cohorts = {c["metadata"]["name"]: c for c in _of(documents, "Cohort")}
    assert cohorts["research"]["spec"] == {"parent": "org", "capability": {"nvidia.com/gpu": 32}}
    assert cohorts["org"]["spec"] == {}
    (team,) = [q for q in _of(documents, "Queue") if q["metadata"]["name"] == "team-a"]
    assert team["spec"]["cohort"] == "research"
    assert team["spec"]["preemption"]["borrowWithinCohort"]["maxPriorityThreshold"] == 10
    assert _of(render({}), "Cohort") == []


@pytest.mark.parametrize(("values_key", "crd"), [("queues", "queues"), ("cohorts", "cohorts")])
def test_the_values_schema_offers_every_field_of_the_crd_spec(values_key: str, crd: str) -> None:
    """A Queue or Cohort field the CRD defines can be set from the values, and no other."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    offered = schema["properties"][values_key]["items"]["properties"]["spec"]["properties"]
    definition = yaml.safe_load((CRD_DIR / f"tidegate.io_{crd}.yaml").read_text())
    (version,) = definition["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert sorted(offered) == sorted(spec)


def test_the_packaged_chart_carries_the_crds(tmp_path: Path) -> None:
    archive = Path(helm.package(CHART_DIR, destination=tmp_path))
    with tarfile.open(archive) as tar:
        packed = {
            Path(member.name).name: tar.extractfile(member).read().decode()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if "/crds/" in member.name
        }
    assert packed == {path.name: path.read_text() for path in CRD_DIR.glob("*.yaml")}
    with helm.Chart.load_archive(archive.read_bytes()) as chart:
        assert sorted(crd["name"] for crd in chart.crds) == sorted(
            f"crds/{name}" for name in packed
        )


# -- docs -----------------------------------------------------------------------------------


FREE_FORM = {"config", "affinity", "annotations", "labels", "issuerRef", "namespaceSelector"}
FREE_FORM |= {"objectSelector"}


def _value_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """The value paths docs/deploy.md must describe: leaves and free-form maps."""
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if path == "services":
            shared = set.intersection(*(set(service) for service in value.values()))
            paths += [f"services.<name>.{k}" for k in sorted(shared)]
            paths += [
                f"services.{name}.{k}"
                for name, service in value.items()
                for k in service
                if k not in shared
            ]
        elif path == "defaults":
            paths += [f"defaults.{k}" for k in value]
        elif isinstance(value, dict) and value and key not in FREE_FORM:
            paths += _value_paths(value, f"{path}.")
        else:
            paths.append(path)
    return paths


def test_docs_describe_every_value() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    text = (REPO / "docs" / "deploy.md").read_text()
    missing = [path for path in _value_paths(values) if f"`{path}`" not in text]
    missing += [f"services.{key}" for key in values["services"] if f"`{key}`" not in text]
    assert missing == [], f"docs/deploy.md does not describe {missing}"


def test_the_chart_version_follows_the_project() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert chart["kubeVersion"] == ">=1.27.0-0"
    assert f"v{KUBE_VERSIONS[0]}".startswith("v1.27")
