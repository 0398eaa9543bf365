"""Resource types by group, version and plural, and the URL paths the API server serves them at.

One descriptor covers core kinds (group ""), apps/batch kinds and any custom resource, so the
informer and the generic writes need no per-kind code. This module builds paths only; it sends
nothing and knows nothing about the objects' contents.
"""

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, kw_only=True)
class ResourceType:
    """A kind of object the API server serves, e.g. ``ResourceType(group="batch", ...)``."""

    group: str
    """API group; "" for the core group (pods, nodes, events, namespaces)."""
    version: str
    """API version within the group, e.g. "v1"."""
    plural: str
    """The URL name, e.g. "pods", "jobsets"."""
    kind: str
    """The object's kind, e.g. "Pod"."""
    namespaced: bool = True
    """Whether objects live in a namespace."""

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field value: "v1" for core, else "group/version"."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The URL path of the collection (no name) or of one object (and its subresource).

        ``namespace`` None on a namespaced type means all namespaces (collections only).
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            prefix += f"/namespaces/{_segment(namespace)}"
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} is namespaced: a namespace is needed to address {name}")
        elif not self.namespaced and namespace is not None:
            raise ValueError(f"{self.kind} is cluster-scoped: got namespace {namespace!r}")
        path = f"{prefix}/{self.plural}"
        if name is not None:
            path += f"/{_segment(name)}"
            if subresource:
                path += f"/{subresource}"
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return path


def _segment(value: str) -> str:
    if not value or value in (".", "..") or "/" in value:
        raise ValueError(f"not a valid object name or namespace: {value!r}")
    return quote(value, safe="")


PODS = ResourceType(group="", version="v1", plural="pods", kind="Pod")
NODES = ResourceType(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
NAMESPACES = ResourceType(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False
)
EVENTS = ResourceType(group="", version="v1", plural="events", kind="Event")
JOBS = ResourceType(group="batch", version="v1", plural="jobs", kind="Job")
DEPLOYMENTS = ResourceType(group="apps", version="v1", plural="deployments", kind="Deployment")
REPLICASETS = ResourceType(group="apps", version="v1", plural="replicasets", kind="ReplicaSet")
JOBSETS = ResourceType(group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets", kind="JobSet")
CRDS = ResourceType(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    namespaced=False,
)
PDBS = ResourceType(
    group="policy", version="v1", plural="poddisruptionbudgets", kind="PodDisruptionBudget"
)
PRIORITY_CLASSES = ResourceType(
    group="scheduling.k8s.io",
    version="v1",
    plural="priorityclasses",
    kind="PriorityClass",
    namespaced=False,
)

# tidegate's own custom resources (deploy/crds).
PODGROUPS = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="podgroups", kind="PodGroup"
)
QUEUES = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="queues", kind="Queue", namespaced=False
)
TOPOLOGIES = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="topologies", kind="Topology", namespaced=False
)
COHORTS = ResourceType(
    group="tidegate.io", version="v1alpha1", plural="cohorts", kind="Cohort", namespaced=False
)

# Other systems' kinds tidegate reads as queues and topologies (docs/queues.md), at their
# default API versions (the watcher's settings pick others with dataclasses.replace).
KUEUE_TOPOLOGIES = ResourceType(
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="topologies",
    kind="Topology",
    namespaced=False,
)
KUEUE_CLUSTER_QUEUES = ResourceType(
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="clusterqueues",
    kind="ClusterQueue",
    namespaced=False,
)
KUEUE_LOCAL_QUEUES = ResourceType(
    group="kueue.x-k8s.io", version="v1beta1", plural="localqueues", kind="LocalQueue"
)
KUEUE_COHORTS = ResourceType(
    group="kueue.x-k8s.io", version="v1beta1", plural="cohorts", kind="Cohort", namespaced=False
)
KUEUE_RESOURCE_FLAVORS = ResourceType(
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="resourceflavors",
    kind="ResourceFlavor",
    namespaced=False,
)
VOLCANO_QUEUES = ResourceType(
    group="scheduling.volcano.sh",
    version="v1beta1",
    plural="queues",
    kind="Queue",
    namespaced=False,
)
KAI_QUEUES = ResourceType(
    group="scheduling.run.ai", version="v2", plural="queues", kind="Queue", namespaced=False
)

KNOWN: dict[str, ResourceType] = {
    r.kind: r for r in (PODS, NODES, NAMESPACES, EVENTS, JOBS, DEPLOYMENTS, REPLICASETS, JOBSETS)
}
"""Built-in resource types by kind, for callers that only know a kind name."""


def resource_for_kind(kind: str) -> ResourceType:
    """The built-in :class:`ResourceType` for ``kind``; ValueError naming it when unknown."""
    try:
        return KNOWN[kind]
    except KeyError:
        known = ", ".join(sorted(KNOWN))
        raise ValueError(
            f"kind {kind!r} is not built in (known: {known}); pass a ResourceType instead"
        ) from None
