"""RBAC in the simulator: the authorizer on hand-made rules, then the API server enforcing it."""

from pathlib import Path

import aiohttp
import pytest
import yaml

from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.rbac import (
    ADMIN,
    Attributes,
    Policy,
    User,
    authorize,
    forbidden_error,
    request_attributes,
    rule_allows,
    service_account_user,
)

SA = service_account_user("sys", "svc")


def get(path: str, **query: str) -> Attributes:
    """The attributes of a GET of ``path``."""
    return request_attributes("GET", path, query)


def test_requests_map_to_verbs_as_kubernetes_does() -> None:
    pods = "/api/v1/namespaces/ns/pods"
    assert get(pods).verb == "list"
    assert get(pods, watch="true").verb == "watch"
    assert get(f"{pods}/p").verb == "get"
    assert request_attributes("POST", pods, {}).verb == "create"
    assert request_attributes("PUT", f"{pods}/p", {}).verb == "update"
    assert request_attributes("PATCH", f"{pods}/p/status", {}).verb == "patch"
    assert request_attributes("DELETE", f"{pods}/p", {}).verb == "delete"
    assert request_attributes("DELETE", pods, {}).verb == "deletecollection"
    eviction = request_attributes("POST", f"{pods}/p/eviction", {})
    assert (eviction.verb, eviction.qualified_resource, eviction.namespace, eviction.name) == (
        "create",
        "pods/eviction",
        "ns",
        "p",
    )
    group = request_attributes("PATCH", "/apis/tidegate.io/v1alpha1/namespaces/ns/podgroups/g", {})
    assert (group.group, group.resource, group.name) == ("tidegate.io", "podgroups", "g")
    nodes = get("/api/v1/nodes")
    assert (nodes.resource, nodes.namespace, nodes.verb) == ("nodes", "", "list")
    namespace = get("/api/v1/namespaces/ns")
    assert (namespace.resource, namespace.namespace, namespace.name) == ("namespaces", "ns", "ns")
    assert not get("/apis/tidegate.io/v1alpha1").resource_request
    assert get("/version").verb == "get"


@pytest.mark.parametrize(
    ("rule", "request_", "allowed"),
    [
        # verbs: exact or *
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, "GET pods/p", True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, "PATCH pods/p", False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "PATCH pods/p", True),
        # apiGroups: exact or *
        ({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]}, "GET pods/p", False),
        ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}, "GET pods/p", True),
        # resources: a subresource is not its resource; * and */sub cover it
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}, "POST pods/p/eviction", False),
        ({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}, "POST pods/p/eviction", True),
        ({"apiGroups": [""], "resources": ["*/eviction"], "verbs": ["create"]}, "POST pods/p/eviction", True),
        ({"apiGroups": [""], "resources": ["*"], "verbs": ["create"]}, "POST pods/p/eviction", True),
        ({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["get"]}, "GET pods/p", False),
        # resourceNames: only requests that name one of them
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["p"]}, "GET pods/p", True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["q"]}, "GET pods/p", False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"], "resourceNames": ["p"]}, "GET pods", False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"], "resourceNames": ["p"]}, "POST pods", False),
        # nonResourceURLs: exact or a trailing *
        ({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}, "GET /apis/tidegate.io", True),
        ({"nonResourceURLs": ["/apis"], "verbs": ["get"]}, "GET /apis/tidegate.io", False),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, "GET /version", False),
    ],
)  # fmt: skip
def test_one_rule(rule: dict[str, object], request_: str, allowed: bool) -> None:
    method, _, target = request_.partition(" ")
    path = target if target.startswith("/") else f"/api/v1/namespaces/ns/{target}"
    assert rule_allows(rule, request_attributes(method, path, {})) is allowed


def role(
    kind: str, name: str, rules: list[dict[str, object]], namespace: str = ""
) -> dict[str, object]:
    """A Role or ClusterRole with ``rules``."""
    metadata: dict[str, object] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "metadata": metadata, "rules": rules}


def binding(role_kind: str, role_name: str, subject: dict[str, object]) -> dict[str, object]:
    """A binding of one subject to a role."""
    return {"roleRef": {"kind": role_kind, "name": role_name}, "subjects": [subject]}


PATCH_GROUPS: list[dict[str, object]] = [
    {"apiGroups": ["tidegate.io"], "resources": ["podgroups"], "verbs": ["patch"]}
]
SA_SUBJECT: dict[str, object] = {"kind": "ServiceAccount", "name": "svc", "namespace": "sys"}


def patch_group(namespace: str) -> Attributes:
    """The attributes of a patch of PodGroup ``g`` in ``namespace``."""
    path = f"/apis/tidegate.io/v1alpha1/namespaces/{namespace}/podgroups/g"
    return request_attributes("PATCH", path, {})


def test_bindings_decide_who_and_where() -> None:
    granted = role("ClusterRole", "patcher", PATCH_GROUPS)
    cluster_wide = Policy(
        cluster_roles={"patcher": granted},
        cluster_role_bindings=[binding("ClusterRole", "patcher", SA_SUBJECT)],
        roles={},
        role_bindings={},
    )
    assert authorize(cluster_wide, SA, patch_group("a"))
    other = service_account_user("other", "svc")  # same name, another namespace
    assert not authorize(cluster_wide, other, patch_group("a"))
    # A ClusterRole bound by a RoleBinding grants in that namespace only.
    in_a = Policy(
        cluster_roles={"patcher": granted},
        cluster_role_bindings=[],
        roles={},
        role_bindings={"a": [binding("ClusterRole", "patcher", SA_SUBJECT)]},
    )
    assert authorize(in_a, SA, patch_group("a"))
    assert not authorize(in_a, SA, patch_group("b"))
    # A Role of the binding's namespace; groups as subjects.
    by_group = Policy(
        cluster_roles={},
        cluster_role_bindings=[],
        roles={("a", "patcher"): role("Role", "patcher", PATCH_GROUPS, "a")},
        role_bindings={"a": [binding("Role", "patcher", {"kind": "Group", "name": "system:serviceaccounts:sys"})]},
    )  # fmt: skip
    assert authorize(by_group, SA, patch_group("a"))
    assert not authorize(by_group, User("someone", ("system:authenticated",)), patch_group("a"))
    # Without a binding, nothing.
    unbound = Policy(
        cluster_roles={"patcher": granted}, cluster_role_bindings=[], roles={}, role_bindings={}
    )
    assert not authorize(unbound, SA, patch_group("a"))


def test_a_refusal_in_the_api_servers_words() -> None:
    error = forbidden_error(SA, patch_group("a"))
    assert error.code == 403
    assert error.message == (
        'podgroups.tidegate.io "g" is forbidden: User "system:serviceaccount:sys:svc" cannot '
        'patch resource "podgroups" in API group "tidegate.io" in the namespace "a"'
    )
    nodes = forbidden_error(SA, request_attributes("GET", "/api/v1/nodes", {}))
    assert nodes.message.endswith(
        'cannot list resource "nodes" in API group "" at the cluster scope'
    )


# --- the API server enforcing it ----------------------------------------------------------


async def test_the_api_server_authorises_each_token_as_its_user(tmp_path: Path) -> None:
    settings = SimSettings(
        nodes="1x1x1x8gpu", scheduler=False, kubelet=False, controllers=False, rbac=True
    )
    async with SimCluster.running(settings) as sim:
        sim.load(
            [
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "svc", "namespace": "sys"}},
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": "reader"},
                    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "reader"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
                    "subjects": [SA_SUBJECT],
                },
            ]
        )  # fmt: skip
        kubeconfig = yaml.safe_load(
            sim.service_account_kubeconfig("sys", "svc", tmp_path / "kc").read_text()
        )
        token = kubeconfig["users"][0]["user"]["token"]
        admin = yaml.safe_load(sim.write_kubeconfig(tmp_path / "admin").read_text())
        admin_token = admin["users"][0]["user"]["token"]

        async def status(method: str, path: str, token: str | None) -> int:
            """The HTTP status of a request with ``token`` (None: no Authorization header)."""
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            async with (
                aiohttp.ClientSession(sim.url) as http,
                http.request(method, path, headers=headers) as response,
            ):
                return response.status

        assert await status("GET", "/api/v1/nodes", token) == 200
        assert await status("GET", "/apis", token) == 200  # discovery: system:discovery
        assert await status("GET", "/api/v1/namespaces/default/pods", token) == 403
        assert await status("GET", "/api/v1/nodes", "not-a-token") == 401
        assert await status("GET", "/api/v1/nodes", None) == 403  # anonymous
        assert await status("GET", "/healthz", None) == 200  # system:public-info-viewer
        assert await status("GET", "/api/v1/namespaces/default/pods", admin_token) == 200
        user = "system:serviceaccount:sys:svc"
        assert sim.access.log.denied == [
            f"{user}: list /api/v1/namespaces/default/pods",
            "system:anonymous: list /api/v1/nodes",
        ]
        assert sim.access.log.used[user] == {("", "nodes", "list"), ("", "pods", "list")}
        assert ADMIN.name in sim.access.log.used


async def test_without_rbac_any_token_may_do_anything(bare: SimCluster) -> None:
    async with aiohttp.ClientSession(bare.url) as http:
        headers = {"Authorization": "Bearer whatever"}
        async with http.get("/api/v1/namespaces/default/pods", headers=headers) as response:
            assert response.status == 200
    assert bare.access.log.denied == []
