"""Builders of Kubernetes objects as the API server sends them (plain JSON dicts).

Test suites expose :class:`Builders` as the ``k8s`` fixture, so tests read like manifests:
``k8s.job("train", ...)``. Every object gets a uid, a resourceVersion from a counter and a
creationTimestamp.
"""

import itertools
from typing import Any

from tidegate.model.names import ADMISSION_GATE

Obj = dict[str, Any]


class Builders:
    """Manifest builders; resourceVersions increase across every object built."""

    def __init__(self) -> None:
        self._rv = itertools.count(100)

    def _meta(self, name: str, namespace: str | None = "default", **extra: Any) -> Obj:
        meta: Obj = {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(self._rv)),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        }
        if namespace is not None:
            meta["namespace"] = namespace
        meta.update({k: v for k, v in extra.items() if v is not None})
        return meta

    @staticmethod
    def container(cpu: str = "1", memory: str = "1Gi", **extra: Any) -> Obj:
        """A container requesting cpu and memory (plus extra resources, e.g. gpu=2)."""
        requests: Obj = {"cpu": cpu, "memory": memory}
        for name, value in extra.items():
            requests["nvidia.com/gpu" if name == "gpu" else name] = value
        return {"name": "main", "image": "busybox", "resources": {"requests": requests}}

    def template(
        self,
        *,
        labels: Obj | None = None,
        annotations: Obj | None = None,
        containers: list[Obj] | None = None,
        **spec: Any,
    ) -> Obj:
        """A pod template."""
        return {
            "metadata": {"labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": containers or [self.container()], **spec},
        }

    def owner_ref(self, kind: str, name: str, api_version: str = "batch/v1") -> Obj:
        """A controller ownerReference to the object built with ``name``."""
        return {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": f"uid-{name}",
            "controller": True,
        }

    def pod(
        self,
        name: str,
        *,
        owner: Obj | None = None,
        gated: bool = True,
        labels: Obj | None = None,
        annotations: Obj | None = None,
        containers: list[Obj] | None = None,
        namespace: str = "default",
        phase: str = "Pending",
        **spec: Any,
    ) -> Obj:
        """A pod, gated by tidegate unless ``gated=False``."""
        meta = self._meta(
            name,
            namespace,
            labels=labels,
            annotations=annotations,
            ownerReferences=[owner] if owner else None,
        )
        body: Obj = {"containers": containers or [self.container()], **spec}
        if gated:
            body["schedulingGates"] = [{"name": ADMISSION_GATE}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": body,
            "status": {"phase": phase},
        }

    def job(
        self,
        name: str,
        *,
        parallelism: int | None = 1,
        completions: int | None = None,
        labels: Obj | None = None,
        annotations: Obj | None = None,
        template: Obj | None = None,
        owner: Obj | None = None,
    ) -> Obj:
        """A batch/v1 Job."""
        spec: Obj = {"template": template or self.template()}
        if parallelism is not None:
            spec["parallelism"] = parallelism
        if completions is not None:
            spec["completions"] = completions
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self._meta(
                name,
                labels=labels,
                annotations=annotations,
                ownerReferences=[owner] if owner else None,
            ),
            "spec": spec,
        }

    def jobset(self, name: str, replicated: list[Obj], *, annotations: Obj | None = None) -> Obj:
        """A JobSet with the given replicatedJobs."""
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": self._meta(name, annotations=annotations),
            "spec": {"replicatedJobs": replicated},
        }

    def replicated_job(
        self,
        name: str,
        *,
        replicas: int,
        parallelism: int,
        template: Obj | None = None,
        annotations: Obj | None = None,
    ) -> Obj:
        """A JobSet replicatedJob."""
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": template or self.template(),
                },
            },
        }

    def deployment(
        self,
        name: str,
        *,
        replicas: int | None = 1,
        annotations: Obj | None = None,
        template: Obj | None = None,
    ) -> Obj:
        """An apps/v1 Deployment."""
        spec: Obj = {"template": template or self.template()}
        if replicas is not None:
            spec["replicas"] = replicas
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._meta(name, annotations=annotations),
            "spec": spec,
        }

    def replicaset(
        self, name: str, *, deployment: str | None, replicas: int = 1, template: Obj | None = None
    ) -> Obj:
        """An apps/v1 ReplicaSet, owned by ``deployment`` if given."""
        owner = self.owner_ref("Deployment", deployment, "apps/v1") if deployment else None
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": self._meta(name, ownerReferences=[owner] if owner else None),
            "spec": {"replicas": replicas, "template": template or self.template()},
        }

    def podgroup(
        self,
        name: str,
        *,
        min_member: int | None = 2,
        queue: str | None = None,
        priority_class: str | None = None,
        annotations: Obj | None = None,
    ) -> Obj:
        """A tidegate.io/v1alpha1 PodGroup."""
        spec: Obj = {}
        if min_member is not None:
            spec["minMember"] = min_member
        if queue is not None:
            spec["queue"] = queue
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        return {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": self._meta(name, annotations=annotations),
            "spec": spec,
        }

    def node(
        self,
        name: str,
        *,
        labels: Obj | None = None,
        allocatable: Obj | None = None,
        ready: str | None = "True",
        unschedulable: bool = False,
        taints: list[Obj] | None = None,
    ) -> Obj:
        """A node."""
        status: Obj = {"allocatable": allocatable or {"cpu": "8", "memory": "32Gi"}}
        if ready is not None:
            status["conditions"] = [{"type": "Ready", "status": ready}]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": self._meta(name, None, labels=labels),
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": status,
        }

    def topology(self, name: str, levels: list[str], *, kueue: bool = False) -> Obj:
        """A Topology (tidegate.io, or kueue.x-k8s.io when ``kueue``)."""
        group = "kueue.x-k8s.io/v1beta1" if kueue else "tidegate.io/v1alpha1"
        return {
            "apiVersion": group,
            "kind": "Topology",
            "metadata": self._meta(name, None),
            "spec": {"levels": [{"nodeLabel": level} for level in levels]},
        }

    def queue(self, name: str, spec: Obj | None = None, annotations: Obj | None = None) -> Obj:
        """A tidegate.io/v1alpha1 Queue."""
        return {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "Queue",
            "metadata": self._meta(name, None, annotations=annotations),
            "spec": spec or {},
        }

    def priority_class(self, name: str, value: int, *, global_default: bool = False) -> Obj:
        """A scheduling.k8s.io/v1 PriorityClass."""
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": self._meta(name, None),
            "value": value,
            "globalDefault": global_default,
        }
