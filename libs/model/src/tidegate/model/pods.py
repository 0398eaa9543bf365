"""Which pods hold capacity, which run and which are still active: written once for every
package (re-exported by :mod:`tidegate.policy.common` for the services).

It lives in the model, not in :mod:`tidegate.policy`, because the topology-cache's accounting
(:mod:`tidegate.placement.accounting`, a layer below policy) counts capacity by it too.

- A pod **holds capacity** (:func:`holds_capacity`) while it is bound and not finished; a
  terminating pod still does (its room is not free until it is gone).
- A pod **runs** (:func:`runs`) as a member of its gang while it holds capacity and is not
  terminating.
- A pod is **active** (:func:`active`) while it is neither finished nor terminating, bound or
  not (Kubernetes' Job controller counts the same pods active). Only active pods are evicted,
  hold an ungater slot, or count as a PodGroup's active members.
- A pod is **gated** (:func:`admission_gated`, :func:`gated`) while its scheduling gates
  include tidegate's admission gate: it was not released yet. Kubernetes objects read through
  :mod:`tidegate.kube.read` (``Pod.gated``) apply the same function.
- A pod of a managed workload **bypassed the gate** (:func:`bypassed_gate`) when it runs
  without tidegate's gate and without the selector of a release: it was created ungated (the
  webhook down under ``failurePolicy: Ignore``, or not called) and kube-scheduler bound it.

Pure: no I/O.
"""

from collections.abc import Collection, Iterable
from typing import Final

from tidegate.model.events import PodState
from tidegate.model.names import ADMISSION_GATE

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""Pod phases in which a pod holds nothing any more (it finished)."""


def holds_capacity(pod: PodState) -> bool:
    """Whether ``pod`` holds room on a node: bound and not finished. A terminating pod still
    does (its room is not free until it is gone)."""
    return bool(pod.node_name) and pod.phase not in TERMINAL_PHASES


def runs(pod: PodState) -> bool:
    """Whether ``pod`` counts as a member of its running gang: it holds capacity and is not
    terminating (a terminating pod is on its way out)."""
    return holds_capacity(pod) and not pod.terminating


def active(pod: PodState) -> bool:
    """Whether ``pod`` is neither finished nor terminating (bound or not)."""
    return pod.phase not in TERMINAL_PHASES and not pod.terminating


def admission_gated(gate_names: Iterable[str]) -> bool:
    """Whether a pod whose scheduling gates are named ``gate_names`` still carries tidegate's
    admission gate (it was not released): the one rule, whatever the pod was read from."""
    return any(name == ADMISSION_GATE for name in gate_names)


def gated(pod: PodState) -> bool:
    """Whether ``pod`` still carries tidegate's admission gate (it was not released)."""
    return admission_gated(pod.scheduling_gates)


def bypassed_gate(pod: PodState, levels: Collection[str]) -> bool:
    """Whether a managed workload's ``pod`` runs without having passed tidegate's gate: it runs,
    carries no gate, and its nodeSelector names none of the Topology ``levels`` (a release by
    the ungater always sets the levels down to the slot's domain). With no levels known, no pod
    can be told apart from a released one: False."""
    return (
        bool(levels)
        and runs(pod)
        and not gated(pod)
        and not any(level in pod.node_selector for level in levels)
    )
