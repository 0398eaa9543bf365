"""Test support shared by tidegate's integration tests and benchmarks.

Why: the tests under ``tests/`` (and the benchmarks under ``bench/``) each play the services
around the one they exercise, and they all wait, connect, follow streams and run services the
same way. Pytest imports test modules in importlib mode, so sibling test directories cannot
import each other; this package is the one home of what they share:

- :mod:`.waiting`: :func:`until` / :func:`until_async` poll a condition with a deadline;
  :func:`start_until` starts a task and waits for its ready event.
- :mod:`.bus`: :func:`connected` (a connection with the cluster's streams), :func:`following`
  (a stream follower for the length of a block), :func:`envelope` (what a test publishes),
  :func:`take_over` (a role's lease and fences taken from its leader, as a successor would).
- :mod:`.services`: :class:`RunningServices`, services run in the test's process.
- :mod:`.capacity`: :func:`recompute_capacity`, the capacity view a simulated cluster's own
  objects call for, :func:`published_capacity` and :func:`capacity_differences` to compare the
  bus with it.
- :mod:`.cluster`: :func:`simulated`, a simulated cluster with a kube client and a bus.
- :mod:`.harness`: :class:`~tidegate.testing.harness.ServiceHarness`, the base of every
  area's harness (publish, run services in this process, wait, create objects on the
  simulator) and :func:`~tidegate.testing.harness.subject_of`, the subject a message goes on.
- :mod:`.messages`: :class:`~tidegate.testing.messages.Messages`, builders of bus messages
  (nodes, pods, workloads, decisions) with a suite's defaults.
- :mod:`.manifests`: :class:`~tidegate.testing.manifests.Builders`, builders of Kubernetes
  objects (as the API server sends them, or as a client creates them).
- :mod:`.objects`: :func:`bound_pod`, another tenant's pod bound straight to a node.
- :mod:`.processes`: :class:`ServiceProcess` / :func:`service_process`, a service as a child
  process; :func:`run_to_exit` for one that must stop by itself.
- :mod:`.controlplane`: :class:`~tidegate.testing.controlplane.ControlPlane`, a real
  Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
  from a directory of binaries (``KUBEBUILDER_ASSETS``), with ServiceAccount kubeconfigs
  minted by TokenRequest and an audit log. Imported as a module (it needs ``cryptography``).

Everything here drives the real bus, the real services and real processes; nothing is mocked.
What a test checks, and what a harness plays, stays in the tests. Production code never imports
this package (import-linter keeps it beside the services, at the top).
"""

from tidegate.testing.bus import connected, envelope, following, take_over
from tidegate.testing.capacity import (
    CapacityFigures,
    DomainFigures,
    NodeFigures,
    capacity_differences,
    capacity_of,
    node_schedulable,
    pod_requests,
    published_capacity,
    recompute_capacity,
)
from tidegate.testing.cluster import Simulated, simulated
from tidegate.testing.objects import bound_pod
from tidegate.testing.processes import ServiceProcess, run_to_exit, service_process
from tidegate.testing.services import RunningServices
from tidegate.testing.waiting import start_until, until, until_async

__all__ = [
    "CapacityFigures",
    "DomainFigures",
    "NodeFigures",
    "RunningServices",
    "ServiceProcess",
    "Simulated",
    "bound_pod",
    "capacity_differences",
    "capacity_of",
    "connected",
    "envelope",
    "following",
    "node_schedulable",
    "pod_requests",
    "published_capacity",
    "recompute_capacity",
    "run_to_exit",
    "service_process",
    "simulated",
    "start_until",
    "take_over",
    "until",
    "until_async",
]
