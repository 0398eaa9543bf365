"""Kubernetes objects tests create as the cluster's other tenants would."""

from collections.abc import Mapping


def bound_pod(name: str, node: str, requests: Mapping[str, str]) -> dict[str, object]:
    """A pod bound straight to ``node`` (``spec.nodeName``: no scheduler, no queue), its
    ``requests`` also its limits; in a namespace tidegate does not manage, a pod tidegate
    only counts."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": dict(requests), "limits": dict(requests)},
                }
            ],
        },
    }
