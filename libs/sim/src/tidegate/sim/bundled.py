"""CRDs the simulated cluster can install at start: tidegate's own and the foreign ones it reads.

These are minimal definitions (names, scope, versions, status subresource, and a schema that
preserves unknown fields) because the simulator does not validate custom resources against
OpenAPI schemas. The authoritative tidegate CRDs, with full schemas, live in deploy/crds/ and
can be loaded instead through ``SimSettings.crd_files``.
"""

from tidegate.sim.errors import JsonObject

_OPEN_SCHEMA: JsonObject = {
    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
}


def _crd(
    group: str,
    kind: str,
    plural: str,
    *,
    scope: str,
    versions: tuple[str, ...],
    short_names: tuple[str, ...] = (),
    status: bool = True,
) -> JsonObject:
    names: JsonObject = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": i == 0,
                    "schema": _OPEN_SCHEMA,
                    **({"subresources": {"status": {}}} if status else {}),
                }
                for i, version in enumerate(versions)
            ],
        },
    }


def bundled_crds() -> list[JsonObject]:
    """tidegate.io Topology/Queue/Cohort/PodGroup, kueue.x-k8s.io Topology/ClusterQueue/
    LocalQueue/Cohort/ResourceFlavor, scheduling.volcano.sh Queue, scheduling.run.ai Queue (KAI-Scheduler),
    jobset.x-k8s.io JobSet."""
    return [
        _crd("tidegate.io", "Topology", "topologies", scope="Cluster", versions=("v1alpha1",)),
        _crd(
            "tidegate.io",
            "Queue",
            "queues",
            scope="Cluster",
            versions=("v1alpha1",),
            short_names=("tq",),
        ),
        _crd("tidegate.io", "PodGroup", "podgroups", scope="Namespaced", versions=("v1alpha1",)),
        _crd(
            "kueue.x-k8s.io",
            "Topology",
            "topologies",
            scope="Cluster",
            versions=("v1alpha1", "v1beta1"),
        ),
        _crd("jobset.x-k8s.io", "JobSet", "jobsets", scope="Namespaced", versions=("v1alpha2",)),
        _crd("tidegate.io", "Cohort", "cohorts", scope="Cluster", versions=("v1alpha1",)),
        _crd(
            "kueue.x-k8s.io",
            "ClusterQueue",
            "clusterqueues",
            scope="Cluster",
            versions=("v1beta1", "v1beta2"),
            short_names=("cq",),
        ),
        _crd(
            "kueue.x-k8s.io",
            "LocalQueue",
            "localqueues",
            scope="Namespaced",
            versions=("v1beta1", "v1beta2"),
            short_names=("lq",),
        ),
        _crd(
            "kueue.x-k8s.io", "Cohort", "cohorts", scope="Cluster", versions=("v1alpha1", "v1beta1")
        ),
        _crd(
            "kueue.x-k8s.io",
            "ResourceFlavor",
            "resourceflavors",
            scope="Cluster",
            versions=("v1beta1", "v1beta2"),
            short_names=("flavor", "flavors", "rf"),
        ),
        _crd(
            "scheduling.volcano.sh",
            "Queue",
            "queues",
            scope="Cluster",
            versions=("v1beta1",),
            short_names=("q",),
        ),
        _crd("scheduling.run.ai", "Queue", "queues", scope="Cluster", versions=("v2",)),
    ]
