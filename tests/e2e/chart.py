"""The Helm chart's identities and RBAC, for the end-to-end tests on either cluster.

Why: on the real control plane (:mod:`tests.e2e.real`) and on the simulator with RBAC enforced
(:func:`tests.e2e.system.running_system`) the five services run as the ServiceAccounts the
chart renders, bound to exactly the Roles and ClusterRoles it renders; both read them from
here. Helm's own engine renders the chart (once per release namespace and cluster id per
process). :data:`USAGE` sums what the chart grants and what the services asked for over every
scenario of the run, on both backends; tests/e2e/conftest.py reports the grants no request
used at the end.
"""

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tidegate.cli.stack import ServiceAccess
from tidegate.testing.rbac import Permission, RbacUsage

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "deploy" / "helm" / "tidegate"
RBAC_KINDS = frozenset(
    {"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
)
"""What the chart renders that decides who may do what."""
COMPONENT = "app.kubernetes.io/component"

USAGE = RbacUsage()
"""Grants and requests of every scenario of this process that ran the chart's RBAC."""

Documents = list[dict[str, Any]]


@functools.cache
def _rendered(release_namespace: str, cluster: str) -> tuple[dict[str, Any], ...]:
    chart = helm.Chart.load(CHART_DIR)
    try:
        rendered = chart.render(
            {"cluster": cluster}, name="tg", namespace=release_namespace, is_install=True
        )
    finally:
        chart.close()
    documents: Documents = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".yaml"):
            documents += [doc for doc in yaml.safe_load_all(text) if doc]
    return tuple(documents)


def render_chart(release_namespace: str, cluster: str) -> Documents:
    """The chart's manifests, as ``helm template`` renders them with default values (a copy:
    change it at will)."""
    return copy.deepcopy(list(_rendered(release_namespace, cluster)))


def permissions(role: dict[str, Any]) -> set[Permission]:
    """Every (group, resource, verb) a Role or ClusterRole grants."""
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def accounts(documents: Documents) -> dict[str, str]:
    """The ServiceAccount name of each service (its Deployment's)."""
    return {
        doc["metadata"]["labels"][COMPONENT]: doc["spec"]["template"]["spec"]["serviceAccountName"]
        for doc in documents
        if doc["kind"] == "Deployment"
    }


def granted(documents: Documents) -> dict[str, set[Permission]]:
    """What the chart's Roles and ClusterRoles grant each service."""
    grants: dict[str, set[Permission]] = {}
    for doc in documents:
        if doc["kind"] in ("Role", "ClusterRole"):
            grants.setdefault(doc["metadata"]["labels"][COMPONENT], set()).update(permissions(doc))
    return grants


def without_grant(
    service: str, group: str, resource: str, verb: str
) -> Callable[[Documents], Documents]:
    """An edit of rendered documents that takes ``verb`` on ``group``/``resource`` out of
    ``service``'s roles (as if the chart lacked that grant)."""

    def edit(documents: Documents) -> Documents:
        for doc in documents:
            if (
                doc["kind"] not in ("Role", "ClusterRole")
                or doc["metadata"]["labels"].get(COMPONENT) != service
            ):
                continue
            for rule in doc["rules"]:
                if group in rule["apiGroups"] and resource in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        return documents

    return edit


def service_access(release_namespace: str, documents: Documents) -> ServiceAccess:
    """What a :class:`~tidegate.cli.stack.LocalStack` on the simulator needs to run each service
    as its ServiceAccount under the chart's RBAC (``documents``, as rendered or edited)."""
    return ServiceAccess(
        documents=tuple(doc for doc in documents if doc["kind"] in RBAC_KINDS),
        accounts={
            service: (release_namespace, account)
            for service, account in accounts(documents).items()
        },
    )
