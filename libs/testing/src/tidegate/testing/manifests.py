"""Builders of Kubernetes objects as the API server sends them (plain JSON dicts).

Test suites expose :class:`Builders` as the ``k8s`` fixture, so tests read like manifests:
``k8s.job("train", ...)``. Every object gets a uid, a resourceVersion from a counter and a
creationTimestamp, as the API server would have set them; ``Builders(server_fields=False)``
leaves those out and builds what a client sends to create the object on a (simulated) API
server.
"""

import itertools
from typing import Any

from tidegate.model.names import ADMISSION_GATE
from tidegate.sim.podlife import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION

Obj = dict[str, Any]


class Builders:
    """Manifest builders; resourceVersions increase across every object built."""

    def __init__(self, *, server_fields: bool = True) -> None:
        """``server_fields``: whether objects carry what the API server sets (uid,
        resourceVersion, creationTimestamp, a pod's status) and their namespace, or only
        what a client sends to create them (the namespace goes in the request)."""
        self._rv = itertools.count(100)
        self.server_fields = server_fields

    def _meta(self, name: str, namespace: str | None = "default", **extra: Any) -> Obj:
        meta: Obj = {"name": name}
        if self.server_fields:
            meta["uid"] = f"uid-{name}"
            meta["resourceVersion"] = str(next(self._rv))
            meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        if namespace is not None and self.server_fields:  # a client names it in the request
            meta["namespace"] = namespace
        meta.update({k: v for k, v in extra.items() if v is not None})
        return meta

    @staticmethod
    def container(
        cpu: str | None = "1",
        memory: str | None = "1Gi",
        *,
        limits: bool | Obj = False,
        image: str = "busybox",
        **extra: Any,
    ) -> Obj:
        """A container requesting cpu and memory (each left out when None) plus extra
        resources (``gpu=2`` names ``nvidia.com/gpu``). ``limits``: a dict of limits, or True
        for limits equal to the extra resources' requests (as Kubernetes requires of GPUs)."""
        requests: Obj = {}
        if cpu is not None:
            requests["cpu"] = cpu
        if memory is not None:
            requests["memory"] = memory
        extended: Obj = {}
        for name, value in extra.items():
            extended["nvidia.com/gpu" if name == "gpu" else name] = value
        requests.update(extended)
        resources: Obj = {"requests": requests}
        if limits is True:
            resources["limits"] = dict(extended)
        elif isinstance(limits, dict):
            resources["limits"] = dict(limits)
        return {"name": "main", "image": image, "resources": resources}

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

    @staticmethod
    def runs(seconds: float | None, *, exit_code: int = 0) -> Obj:
        """The annotations of a pod (template) that runs for ``seconds`` (forever when None)
        on the simulator's kubelets or the fake-node agent, then exits with ``exit_code``."""
        annotations: Obj = {}
        if seconds is not None:
            annotations[DURATION_ANNOTATION] = f"{seconds:g}"
        if exit_code:
            annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
        return annotations

    @staticmethod
    def owner_of(obj: Obj) -> Obj:
        """A controller ownerReference to ``obj`` as the API server returned it."""
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
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
        gates: list[str] | None = None,
        **spec: Any,
    ) -> Obj:
        """A pod, gated by tidegate unless ``gated=False``; ``gates``: exactly these
        scheduling gates instead (none if empty)."""
        meta = self._meta(
            name,
            namespace,
            labels=labels,
            annotations=annotations,
            ownerReferences=[owner] if owner else None,
        )
        body: Obj = {"containers": containers or [self.container()], **spec}
        if gates is not None:
            body["schedulingGates"] = [{"name": gate} for gate in gates]
        elif gated:
            body["schedulingGates"] = [{"name": ADMISSION_GATE}]
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}
        if self.server_fields:
            pod["status"] = {"phase": phase}
        return pod

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
        **extra: Any,
    ) -> Obj:
        """A batch/v1 Job; ``extra`` fields go in its spec (e.g. ``completionMode``)."""
        spec: Obj = {"template": template or self.template(), **extra}
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

    def jobset(
        self,
        name: str,
        replicated: list[Obj],
        *,
        annotations: Obj | None = None,
        labels: Obj | None = None,
        **extra: Any,
    ) -> Obj:
        """A JobSet with the given replicatedJobs; ``extra`` fields go in its spec."""
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": self._meta(name, annotations=annotations, labels=labels),
            "spec": {"replicatedJobs": replicated, **extra},
        }

    def replicated_job(
        self,
        name: str,
        *,
        replicas: int,
        parallelism: int,
        template: Obj | None = None,
        annotations: Obj | None = None,
        **extra: Any,
    ) -> Obj:
        """A JobSet replicatedJob; ``extra`` fields go in its Job's spec."""
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": template or self.template(),
                    **extra,
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
        selector: Obj | None = None,
        **extra: Any,
    ) -> Obj:
        """An apps/v1 Deployment (its pods chosen by the label ``selector``, if given);
        ``extra`` fields go in its spec (e.g. ``strategy``, ``paused``)."""
        spec: Obj = {"template": template or self.template()}
        if replicas is not None:
            spec["replicas"] = replicas
        if selector is not None:
            spec["selector"] = {"matchLabels": dict(selector)}
        spec.update(extra)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._meta(name, annotations=annotations),
            "spec": spec,
        }

    def disruption_budget(
        self,
        name: str,
        selector: Obj,
        *,
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
        expressions: list[Obj] | None = None,
        status: Obj | None = None,
    ) -> Obj:
        """A policy/v1 PodDisruptionBudget over the pods with the labels ``selector`` (and
        matching ``expressions``, a selector's ``matchExpressions``, if given); ``status``
        as the disruption controller would have written it, if given."""
        spec: Obj = {}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        spec["selector"] = {"matchLabels": dict(selector)} if selector or not expressions else {}
        if expressions:
            spec["selector"]["matchExpressions"] = list(expressions)
        budget: Obj = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": self._meta(name),
            "spec": spec,
        }
        if status is not None:
            budget["status"] = dict(status)
        return budget

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

    def custom(
        self,
        api_version: str,
        kind: str,
        name: str,
        spec: Obj | None = None,
        *,
        namespace: str | None = None,
        annotations: Obj | None = None,
    ) -> Obj:
        """Any custom object (a Kueue ClusterQueue, a Volcano or KAI Queue, a Cohort, …)."""
        return {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": self._meta(name, namespace, annotations=annotations),
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

    @staticmethod
    def admission_review(
        obj: Any, *, operation: str = "CREATE", uid: str = "review-1", namespace: str = "team"
    ) -> Obj:
        """An admission.k8s.io/v1 AdmissionReview about the pod ``obj`` in ``namespace``, as
        the API server sends it to a mutating webhook."""
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": operation,
                "object": obj,
            },
        }
