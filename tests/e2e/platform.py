"""One scenario, two clusters: what a scenario that runs on both the simulator
(:func:`tests.e2e.system.running_system`) and the real control plane
(:func:`tests.e2e.real.real_system`) needs of either, and the waits such scenarios share.

Why: the suspend and disruption-budget scenarios are written once and run on both; each used
to carry its own copy of this.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry, queue_object, workload_object
from tidegate.kube import PODS, QUEUES, KubeClient
from tidegate.testing import until_async

from .real import RealSystem
from .system import CLUSTER, System

JsonObject = dict[str, Any]


@dataclass
class Platform:
    """The cluster a scenario runs on."""

    kube: KubeClient
    """An admin client (the test plays the users)."""
    namespace: str
    """The scenario's namespace (tidegate manages its pods)."""
    healthy: Callable[[str], None]
    """Fails (naming ``what``) when a service died, an invariant broke or (real) the API
    server refused a service's request."""
    nats_url: str
    cluster: str
    """tidegate's cluster id (the bus subjects' prefix)."""
    suffix: str = ""
    """Appended to cluster-scoped names (Queues, PriorityClasses), which a session shares."""
    decisions: list[Any] = field(default_factory=list)
    """Every decision seen on the bus so far, in stream order (the system's own list)."""

    @classmethod
    def of_sim(cls, system: System) -> "Platform":
        """The simulator's stack (its cluster-scoped names are its own)."""
        return cls(
            system.kube,
            system.namespace,
            system.assert_healthy,
            system.stack.nats_url,
            CLUSTER,
            decisions=system.decisions,
        )

    @classmethod
    def of_real(cls, system: RealSystem) -> "Platform":
        """tidegate on the session's real control plane."""
        return cls(
            system.admin,
            system.namespace,
            system.healthy,
            system.nats_url,
            system.cluster,
            suffix=f"-{system.cluster}",
            decisions=system.decisions,
        )

    async def own_queue(self) -> str:
        """A Queue for this scenario alone (64 H200 cards; its name carries :attr:`suffix`, so
        scenarios sharing one real control plane do not meet): its name."""
        name = f"q{self.suffix}"
        spec = {"cardQuota": {"NVIDIA-H200": 64}}
        await self.kube.create(QUEUES, queue_object(QueueEntry(name=name, spec=spec)))
        return name


def submitted(entry: WorkloadEntry) -> JsonObject:
    """The object the demo trace's ``entry`` submits, without a namespace (a test creates it in
    its platform's)."""
    body = workload_object(entry, "")
    del body["metadata"]["namespace"]
    return body


async def live_pods(platform: Platform, app: str) -> list[JsonObject]:
    """The pods labelled ``app`` that are not being deleted, from the API server."""
    listed = await platform.kube.list_objects(
        PODS, namespace=platform.namespace, label_selector=f"app={app}"
    )
    return [dict(p) for p in listed.items if not p["metadata"].get("deletionTimestamp")]


async def wait(
    platform: Platform, check: Callable[[], Awaitable[object]], what: str, within: float = 120.0
) -> Any:
    """Wait for ``check`` to return a truthy value, failing at once when the platform is not
    healthy (a dead service, a refused request or a broken invariant does not heal)."""
    return await until_async(
        check, within=within, what=what, interval=0.25, alive=lambda: platform.healthy(what)
    )
