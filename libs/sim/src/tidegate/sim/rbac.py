"""Kubernetes' RBAC authorizer, as pure functions over the stored RBAC objects.

Why: the simulator used to accept every request, so a grant missing from the Helm chart (a
``patch podgroups``) was only caught on a real control plane. With RBAC enforcement on, the
simulated API server asks :func:`authorize` about every request, exactly as the
kube-apiserver's RBAC authorizer would: the request's attributes (:func:`request_attributes`,
the rules of Kubernetes' ``RequestInfoFactory``) against the rules of the Roles and
ClusterRoles that RoleBindings and ClusterRoleBindings give the user or its groups.

Matching, as ``k8s.io/kubernetes/pkg/apis/rbac/v1`` does it: verbs and apiGroups match exactly
or by ``*``; resources exactly (``pods/eviction`` for a subresource), by ``*`` (every resource
and subresource) or ``*/<subresource>``; a rule with resourceNames matches only requests that
name one of them (never a list, a watch, a create or a deletecollection, which name nothing);
nonResourceURLs exactly or by a trailing ``*``. A ClusterRole bound by a RoleBinding grants in
that binding's namespace only. ``aggregationRule`` is not evaluated.

It reads no store: callers pass the objects (the HTTP layer reads them from the store).
:class:`Access` is the server's token table and :class:`AccessLog` what it was asked.
"""

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from tidegate.sim.errors import ApiError, JsonObject, forbidden, unauthorized

ADMIN_USER: Final = "tidegate-sim-admin"
"""Who the admin token (the one :meth:`SimCluster.write_kubeconfig` writes) authenticates as."""
MASTERS: Final = "system:masters"
"""The group the bootstrap ``cluster-admin`` ClusterRoleBinding grants everything to."""
AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"
ANONYMOUS: Final = "system:anonymous"

DISCOVERY_URLS: Final = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
)
"""What the bootstrap ``system:discovery`` ClusterRole lets every authenticated user read."""
PUBLIC_INFO_URLS: Final = ("/healthz", "/livez", "/readyz", "/version", "/version/")
"""What ``system:public-info-viewer`` lets everyone read, unauthenticated clients included."""

_RBAC_API: Final = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class User:
    """An authenticated (or anonymous) client: its name and groups."""

    name: str
    groups: tuple[str, ...] = ()


def service_account_user(namespace: str, name: str) -> User:
    """The user a ServiceAccount's token authenticates as, with the groups Kubernetes adds."""
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


ADMIN: Final = User(ADMIN_USER, (MASTERS, AUTHENTICATED))
ANONYMOUS_USER: Final = User(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True, kw_only=True)
class Attributes:
    """What RBAC decides on: one request's verb and what it is about."""

    verb: str
    resource_request: bool
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def qualified_resource(self) -> str:
        """``resource`` or ``resource/subresource``, as rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


_METHOD_VERBS: Final = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The request's attributes, as the kube-apiserver's RequestInfoFactory derives them.

    ``/api/v1/...`` and ``/apis/<group>/<version>/...`` with at least a resource are resource
    requests; anything else (discovery, ``/version``, ``/healthz``) is a non-resource request
    whose verb is the lower-case method. A GET of a collection is ``list`` (``watch`` with
    ``watch=true``), a DELETE of one ``deletecollection``. In ``/namespaces/<ns>`` the
    namespace is ``<ns>``, also for the namespace object itself."""
    lower = method.lower()
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:] if len(parts) > 1 else []
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        rest = []
    if not rest:
        return Attributes(verb=lower, resource_request=False, path=path)
    verb = _METHOD_VERBS.get(method.upper(), lower)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name:
        if verb == "get":
            verb = "watch" if query.get("watch", "").lower() in ("true", "1") else "list"
        elif verb == "delete":
            verb = "deletecollection"
    return Attributes(
        verb=verb,
        resource_request=True,
        path=path,
        group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


# --- rules ---------------------------------------------------------------------------------


def _strings(value: object) -> list[str]:
    """A rule's list field as strings ([] when absent or not a list)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def rule_allows(rule: Mapping[str, object], request: Attributes) -> bool:
    """Whether one PolicyRule covers the request (``RuleAllows`` of Kubernetes)."""
    verbs = _strings(rule.get("verbs"))
    if "*" not in verbs and request.verb not in verbs:
        return False
    if not request.resource_request:
        return any(
            url == "*"
            or url == request.path
            or (url.endswith("*") and request.path.startswith(url[:-1]))
            for url in _strings(rule.get("nonResourceURLs"))
        )
    groups = _strings(rule.get("apiGroups"))
    if "*" not in groups and request.group not in groups:
        return False
    if not _resource_matches(_strings(rule.get("resources")), request):
        return False
    names = _strings(rule.get("resourceNames"))
    return not names or request.name in names


def _resource_matches(resources: list[str], request: Attributes) -> bool:
    """``ResourceMatches`` of Kubernetes: exact, ``*``, or ``*/<subresource>``."""
    wanted = request.qualified_resource
    for resource in resources:
        if resource in ("*", wanted):
            return True
        if request.subresource and resource == f"*/{request.subresource}":
            return True
    return False


# --- bindings --------------------------------------------------------------------------------


def _applies_to(binding: Mapping[str, object], user: User) -> bool:
    """Whether one of a binding's subjects is ``user`` or one of its groups."""
    subjects = binding.get("subjects")
    for subject in subjects if isinstance(subjects, list) else []:
        if not isinstance(subject, dict):
            continue
        if _subject_is(subject, user):
            return True
    return False


def _subject_is(subject: JsonObject, user: User) -> bool:
    """Whether one subject of a binding is ``user`` (ServiceAccount, User) or its group."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        namespace = subject.get("namespace")
        return bool(namespace) and user.name == f"system:serviceaccount:{namespace}:{name}"
    if kind == "User":
        return name == user.name
    return kind == "Group" and name in user.groups


def _role_ref(binding: Mapping[str, object]) -> tuple[str, str]:
    """(kind, name) of the role a binding grants."""
    ref = binding.get("roleRef")
    if not isinstance(ref, dict):
        return "", ""
    return str(ref.get("kind", "")), str(ref.get("name", ""))


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The RBAC objects of a cluster, by name (what :func:`authorize` reads)."""

    cluster_roles: Mapping[str, JsonObject]
    cluster_role_bindings: Iterable[JsonObject]
    roles: Mapping[tuple[str, str], JsonObject]
    """Roles by (namespace, name)."""
    role_bindings: Mapping[str, Iterable[JsonObject]]
    """RoleBindings by namespace."""


def _rules(role: JsonObject | None) -> list[JsonObject]:
    """A role's rules ([] for a role that does not exist, as RBAC treats it)."""
    rules = role.get("rules") if role is not None else None
    return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


def authorize(policy: Policy, user: User, request: Attributes) -> bool:
    """Whether RBAC allows ``user`` the request: some rule of a role bound to the user (or a
    group of it) by a ClusterRoleBinding, or by a RoleBinding in the request's namespace,
    covers it."""
    for binding in policy.cluster_role_bindings:
        kind, name = _role_ref(binding)
        if kind != "ClusterRole" or not _applies_to(binding, user):
            continue
        if any(rule_allows(r, request) for r in _rules(policy.cluster_roles.get(name))):
            return True
    if not request.namespace:
        return False
    for binding in policy.role_bindings.get(request.namespace, ()):
        if not _applies_to(binding, user):
            continue
        kind, name = _role_ref(binding)
        role = (
            policy.cluster_roles.get(name)
            if kind == "ClusterRole"
            else policy.roles.get((request.namespace, name))
        )
        if any(rule_allows(r, request) for r in _rules(role)):
            return True
    return False


def forbidden_error(user: User, request: Attributes) -> ApiError:
    """The 403 the kube-apiserver answers, in its words."""
    if not request.resource_request:
        message = f'forbidden: User "{user.name}" cannot {request.verb} path "{request.path}"'
        return forbidden(message)
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    subject = f'{qualified} "{request.name}"' if request.name else qualified
    scope = (
        f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    )
    message = (
        f'{subject} is forbidden: User "{user.name}" cannot {request.verb} resource '
        f'"{request.qualified_resource}" in API group "{request.group}" {scope}'
    )
    details: JsonObject = {"group": request.group, "kind": request.resource}
    if request.name:
        details["name"] = request.name
    return forbidden(message, details=details)


# --- what the bootstrap policy holds -------------------------------------------------------


def bootstrap_objects() -> list[JsonObject]:
    """The default ClusterRoles and ClusterRoleBindings a fresh cluster has that matter here:
    ``cluster-admin`` for ``system:masters``, ``system:discovery`` for
    every authenticated user, ``system:public-info-viewer`` for everyone."""
    everything = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
    roles = {
        "cluster-admin": ([everything, {"nonResourceURLs": ["*"], "verbs": ["*"]}], MASTERS),
        "system:discovery": (
            [{"nonResourceURLs": list(DISCOVERY_URLS), "verbs": ["get"]}],
            AUTHENTICATED,
        ),
        "system:public-info-viewer": (
            [{"nonResourceURLs": list(PUBLIC_INFO_URLS), "verbs": ["get"]}],
            UNAUTHENTICATED,
        ),
    }
    objects: list[JsonObject] = []
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    for name, (rules, group) in roles.items():
        role: JsonObject = {
            "apiVersion": _RBAC_API,
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": dict(labels)},
            "rules": rules,
        }
        subjects: list[JsonObject] = [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
        ]
        if group == UNAUTHENTICATED:
            subjects.insert(
                0, {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": AUTHENTICATED}
            )
        binding: JsonObject = {
            "apiVersion": _RBAC_API,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(labels)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": subjects,
        }
        objects += [role, binding]
    return objects


# --- what was asked ------------------------------------------------------------------------

Permission = tuple[str, str, str]
"""(API group, resource or resource/subresource, verb), as RBAC reports name them."""


@dataclass
class AccessLog:
    """Every resource request by user, and every refusal (what an audit log would show)."""

    used: dict[str, set[Permission]] = field(default_factory=dict)
    """(group, resource[/subresource], verb) each user asked for, allowed or not."""
    denied: list[str] = field(default_factory=list)
    """``<user>: <verb> <path>`` of every request RBAC refused, in order."""

    def record(self, user: User, request: Attributes, *, allowed: bool) -> None:
        """Note one authorised (or refused) request."""
        if request.resource_request:
            permission = (request.group, request.qualified_resource, request.verb)
            self.used.setdefault(user.name, set()).add(permission)
        if not allowed:
            self.denied.append(f"{user.name}: {request.verb} {request.path}")


ADMIN_TOKEN: Final = "tidegate-sim"
"""The bearer token of the admin kubeconfig (:meth:`SimCluster.write_kubeconfig`)."""


@dataclass
class Access:
    """Who each bearer token is, whether RBAC is enforced, and what was asked."""

    enforce: bool = False
    """Off: every request is served, whatever its token (the simulator's default)."""
    tokens: dict[str, User] = field(default_factory=lambda: {ADMIN_TOKEN: ADMIN})
    log: AccessLog = field(default_factory=AccessLog)

    def mint(self, user: User) -> str:
        """A new bearer token for ``user`` (what a TokenRequest answers)."""
        token = secrets.token_urlsafe(24)
        self.tokens[token] = user
        return token

    def authenticate(self, authorization: str | None) -> User:
        """The user of an ``Authorization`` header: no header is anonymous, an unknown bearer
        token is 401."""
        if not authorization:
            return ANONYMOUS_USER
        scheme, _, token = authorization.partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise unauthorized()
        return user
