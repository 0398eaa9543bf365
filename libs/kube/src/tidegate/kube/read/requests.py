"""A pod's effective resource requests, counted the way kube-scheduler counts them.

Kubernetes (``k8s.io/component-helpers/resource.PodRequests``) charges a pod the larger of the
sum of its containers and the largest init container, plus the pod overhead. Sidecars (init
containers with ``restartPolicy: Always``) keep running, so they add to the steady-state sum and
to every init container started after them. A container that sets a limit but no request for a
resource requests its limit (the API server defaults pods that way; pod templates in Jobs and
Deployments are not defaulted, so it is done here for both).

A quantity that does not parse is left out and reported with its field path; it never raises.
This module does not decide anything about quotas or placement.
"""

from collections.abc import Mapping

from tidegate.kube.read.objects import Container, PodSpec, Quantity
from tidegate.model import QuantityError, parse_quantity
from tidegate.model.resources import Resources, add


def _parse_list(values: Mapping[str, Quantity], path: str, problems: list[str]) -> Resources:
    parsed: Resources = {}
    for name, value in values.items():
        try:
            parsed[name] = parse_quantity(name, value)
        except QuantityError as exc:
            problems.append(f"{path}.{name}: {exc}")
    return parsed


def container_requests(container: Container, path: str, problems: list[str]) -> Resources:
    """One container's requests, limits standing in for missing requests."""
    limits = _parse_list(container.resources.limits, f"{path}.resources.limits", problems)
    requests = _parse_list(container.resources.requests, f"{path}.resources.requests", problems)
    return {**limits, **requests}


def _max(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for name, amount in b.items():
        out[name] = max(out.get(name, 0), amount)
    return out


def pod_requests(spec: PodSpec, path: str = "spec") -> tuple[Resources, list[str]]:
    """Effective requests of a pod with ``spec``, and the problems found (field path first).

    ``path`` prefixes field paths in problems, e.g. "spec.template.spec" for a Job's template.
    """
    problems: list[str] = []
    steady: Resources = {}
    for i, container in enumerate(spec.containers):
        steady = add(steady, container_requests(container, f"{path}.containers[{i}]", problems))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for i, container in enumerate(spec.init_containers):
        own = container_requests(container, f"{path}.initContainers[{i}]", problems)
        if container.restart_policy == "Always":
            steady = add(steady, own)
            sidecars = add(sidecars, own)
            running = sidecars
        else:
            running = add(own, sidecars)
        init_peak = _max(init_peak, running)
    total = add(_max(steady, init_peak), _parse_list(spec.overhead, f"{path}.overhead", problems))
    return {name: amount for name, amount in total.items() if amount != 0}, problems
