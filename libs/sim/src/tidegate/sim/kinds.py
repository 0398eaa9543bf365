"""The resource types the simulated API server serves, and the discovery documents about them.

A :class:`ResourceType` is what the real server knows about a REST resource: group, version,
plural, kind, scope, subresources, and whether strategic merge patch applies (only to built-in
kinds). :class:`Registry` holds the built-in types and the ones custom resource definitions add
at run time, and renders ``/api``, ``/apis`` and ``/apis/<group>/<version>`` from them, so
kubernetes-asyncio and kubectl discover exactly what is served. It holds no objects.
"""

from dataclasses import dataclass, field

from tidegate.sim.errors import JsonObject

STATUS = "status"
BINDING = "binding"
EVICTION = "eviction"
SCALE = "scale"

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True, kw_only=True)
class ResourceType:
    """One REST resource (e.g. ``pods`` in core/v1, ``queues`` in tidegate.io/v1alpha1)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    builtin: bool = True
    categories: tuple[str, ...] = ()
    printer_columns: tuple[JsonObject, ...] = ()

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``<group>/<version>`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """(group, plural): objects are stored once per key whatever the version."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        """The kind of a list response (``PodList``)."""
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        """Whether writes to the main resource ignore ``status`` (a /status subresource)."""
        return STATUS in self.subresources

    def qualified(self) -> str:
        """``plural`` or ``plural.group``, as in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core(
    plural: str,
    kind: str,
    *,
    namespaced: bool,
    short: tuple[str, ...] = (),
    sub: frozenset[str] = frozenset(),
) -> ResourceType:
    return ResourceType(
        group="",
        version="v1",
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        subresources=sub,
    )


def _grouped(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool,
    short: tuple[str, ...] = (),
    sub: frozenset[str] = frozenset(),
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        subresources=sub,
    )


PODS = _core(
    "pods", "Pod", namespaced=True, short=("po",), sub=frozenset({STATUS, BINDING, EVICTION})
)
NODES = _core("nodes", "Node", namespaced=False, short=("no",), sub=frozenset({STATUS}))
NAMESPACES = _core(
    "namespaces", "Namespace", namespaced=False, short=("ns",), sub=frozenset({STATUS})
)
EVENTS = _core("events", "Event", namespaced=True, short=("ev",))
JOBS = _grouped("batch", "v1", "jobs", "Job", namespaced=True, sub=frozenset({STATUS}))
DEPLOYMENTS = _grouped(
    "apps", "v1", "deployments", "Deployment", namespaced=True, short=("deploy",),
    sub=frozenset({STATUS, SCALE}),
)  # fmt: skip
REPLICASETS = _grouped(
    "apps", "v1", "replicasets", "ReplicaSet", namespaced=True, short=("rs",),
    sub=frozenset({STATUS, SCALE}),
)  # fmt: skip
PRIORITY_CLASSES = _grouped(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, short=("pc",)
)
CRDS = _grouped(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
    namespaced=False, short=("crd", "crds"), sub=frozenset({STATUS}),
)  # fmt: skip
EVENTS_V1 = _grouped("events.k8s.io", "v1", "events", "Event", namespaced=True, short=("ev",))
LEASES = _grouped("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
PDBS = _grouped(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True,
    short=("pdb",), sub=frozenset({STATUS}),
)  # fmt: skip
SERVICEACCOUNTS = _core("serviceaccounts", "ServiceAccount", namespaced=True, short=("sa",))
RBAC_GROUP = "rbac.authorization.k8s.io"
CLUSTERROLES = _grouped(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTERROLEBINDINGS = _grouped(
    RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
ROLES = _grouped(RBAC_GROUP, "v1", "roles", "Role", namespaced=True)
ROLEBINDINGS = _grouped(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", namespaced=True)

MUTATING_WEBHOOK_CONFIGURATIONS = _grouped(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration", namespaced=False,
)  # fmt: skip

BUILTIN: tuple[ResourceType, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    JOBS,
    DEPLOYMENTS,
    REPLICASETS,
    PRIORITY_CLASSES,
    CRDS,
    EVENTS_V1,
    LEASES,
    PDBS,
    SERVICEACCOUNTS,
    CLUSTERROLES,
    CLUSTERROLEBINDINGS,
    ROLES,
    ROLEBINDINGS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
)

_PREFERRED_GROUP_ORDER = [
    "apps",
    "events.k8s.io",
    "batch",
    "coordination.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "scheduling.k8s.io",
]


@dataclass
class Registry:
    """Resource types by (group, version, plural), built-in ones plus CRD-defined ones."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    @classmethod
    def with_builtins(cls) -> "Registry":
        """A registry serving every built-in kind of the simulator."""
        registry = cls()
        for rtype in BUILTIN:
            registry.add(rtype)
        return registry

    def add(self, rtype: ResourceType) -> None:
        """Serve ``rtype`` (replacing an earlier definition of the same resource)."""
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def remove_group_resource(self, group: str, plural: str) -> None:
        """Stop serving every version of ``plural.group``."""
        for key in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[key]

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/<group>/<version>/<plural>``, if any."""
        return self._types.get((group, version, plural))

    def versions_of(self, group: str) -> list[str]:
        """Versions served for ``group``, preferred (first defined) first."""
        seen: list[str] = []
        for g, v, _ in self._types:
            if g == group and v not in seen:
                seen.append(v)
        return seen

    def groups(self) -> list[str]:
        """Named API groups (not the core group), in discovery order."""
        names = {g for g, _, _ in self._types if g}
        known = [g for g in _PREFERRED_GROUP_ORDER if g in names]
        return known + sorted(names - set(known))

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """Every type served under one group/version."""
        return [t for (g, v, _), t in self._types.items() if g == group and v == version]

    # --- discovery documents -------------------------------------------------------------

    def api_versions(self, server_address: str) -> JsonObject:
        """``GET /api``."""
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def api_group(self, group: str) -> JsonObject | None:
        """``GET /apis/<group>``, or None when the group is not served."""
        versions = self.versions_of(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def api_group_list(self) -> JsonObject:
        """``GET /apis``."""
        groups = []
        for group in self.groups():
            document = self.api_group(group)
            if document is not None:
                document.pop("kind")
                document.pop("apiVersion")
                groups.append(document)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> JsonObject | None:
        """``GET /api/v1`` or ``GET /apis/<group>/<version>``, or None when not served."""
        types = self.in_group_version(group, version)
        if not types:
            return None
        resources: list[JsonObject] = []
        for rtype in sorted(types, key=lambda t: t.plural):
            entry: JsonObject = {
                "name": rtype.plural,
                "singularName": rtype.singular or rtype.kind.lower(),
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": list(_VERBS),
            }
            if rtype.short_names:
                entry["shortNames"] = list(rtype.short_names)
            if rtype.categories:
                entry["categories"] = list(rtype.categories)
            resources.append(entry)
            resources.extend(_subresource_entry(rtype, sub) for sub in sorted(rtype.subresources))
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def _subresource_entry(rtype: ResourceType, sub: str) -> JsonObject:
    if sub == STATUS:
        kind, verbs = rtype.kind, ["get", "patch", "update"]
    elif sub == BINDING:
        kind, verbs = "Binding", ["create"]
    elif sub == EVICTION:
        kind, verbs = "Eviction", ["create"]
    else:
        kind, verbs = "Scale", ["get", "patch", "update"]
    entry: JsonObject = {
        "name": f"{rtype.plural}/{sub}",
        "singularName": "",
        "namespaced": rtype.namespaced,
        "kind": kind,
        "verbs": verbs,
    }
    if sub == EVICTION:
        entry.update({"group": "policy", "version": "v1"})
    if sub == SCALE:
        entry.update({"group": "autoscaling", "version": "v1"})
    return entry
