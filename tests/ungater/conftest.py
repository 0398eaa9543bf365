"""The ungater against a simulated cluster and a real nats-server, with the real watcher.

The simulated cluster runs its whole control plane (Job controller, scheduler, kubelets, node
lifecycle) and gates managed pods at creation as the webhook would. The watcher and the
ungater run in this process as services (:class:`tidegate.runtime.Service`); the test plays
admission by publishing decisions, or runs the real admission service where the contract
between the two matters (node failures). :class:`SlotMonitor` sees every write the simulated
API server commits and records the most pods ever released into each domain at once.
"""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidegate.admission.app import setup as admission_setup
from tidegate.admission.config import Settings as AdmissionSettings
from tidegate.bus import Received, layout
from tidegate.kube import EVENTS, JOBS, NAMESPACES, PODS, QUEUES
from tidegate.kube.ungate import has_gate
from tidegate.model import (
    Admitted,
    Message,
    WorkloadState,
    subjects,
)
from tidegate.model.names import ADMISSION_GATE
from tidegate.runtime import Service
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.kinds import PODS as SIM_PODS
from tidegate.sim.store import DELETED, WatchEvent
from tidegate.testing import RunningServices, following, simulated
from tidegate.testing.harness import ServiceHarness
from tidegate.testing.manifests import Builders
from tidegate.testing.messages import Messages
from tidegate.topology_cache.app import setup as cache_setup
from tidegate.topology_cache.config import Settings as CacheSettings
from tidegate.ungater.app import setup as ungater_setup
from tidegate.ungater.config import UngaterSettings
from tidegate.watcher.app import setup as watcher_setup
from tidegate.watcher.config import WatcherSettings

NAMESPACE = "team"
ROOT = Path(__file__).resolve().parents[2]
QUEUE_LABEL = "tidegate.io/queue"

k8s = Builders(server_fields=False)
"""What the tests create on the simulated API server."""

msg = Messages(namespace=NAMESPACE)
"""The decisions the tests publish as admission would."""

Domain = tuple[str, ...]
T = TypeVar("T")


class SlotMonitor:
    """Counts, after every committed pod write, the pods released into each domain that hold
    a slot (not gated, not finished, not terminating), and keeps the maximum per domain."""

    def __init__(self, sim: SimCluster) -> None:
        self.levels = sim.levels
        self._pods: dict[str, Domain | None] = {}
        self.most: dict[Domain, int] = {}
        self._unsubscribe = sim.store.subscribe(SIM_PODS.key, self._on_pod)

    def close(self) -> None:
        self._unsubscribe()

    def _on_pod(self, event: WatchEvent) -> None:
        pod = event.obj
        uid = str(pod["metadata"]["uid"])
        if event.type == DELETED:
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = self._slot(pod)
        counts: dict[Domain, int] = {}
        for domain in self._pods.values():
            if domain is not None:
                counts[domain] = counts.get(domain, 0) + 1
        for domain, count in counts.items():
            self.most[domain] = max(self.most.get(domain, 0), count)

    def _slot(self, pod: dict[str, Any]) -> Domain | None:
        spec = pod.get("spec", {})
        if has_gate(pod, ADMISSION_GATE) or pod["metadata"].get("deletionTimestamp"):
            return None
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return None
        selector = spec.get("nodeSelector") or {}
        if not all(level in selector for level in self.levels):
            return None
        return tuple(selector[level] for level in self.levels)


@dataclass
class Env(ServiceHarness):
    """Everything an ungater test touches."""

    sim: SimCluster = field(kw_only=True)
    kubeconfig: Path = field(kw_only=True)
    monitor: SlotMonitor = field(kw_only=True)
    decisions: list[Message] = field(default_factory=list)
    sequence: int = 100

    # ------------------------------------------------------------------ services

    async def start_watcher(self) -> Service[Any]:
        """The real watcher on the simulated cluster."""
        settings = WatcherSettings(
            cluster=self.cluster,
            nats_url=self.nats_url,
            http_port=0,
            kubeconfig=self.kubeconfig,
            absent_retry_seconds=0.5,
            kueue_topology_version="v1alpha1",
            log_level="WARNING",
        )
        return await self.start("watcher", settings, watcher_setup)

    def ungater_settings(self, **overrides: Any) -> UngaterSettings:
        """Ungater settings for this test (fast rounds, no webhook)."""
        values: dict[str, Any] = {
            "cluster": self.cluster,
            "nats_url": self.nats_url,
            "http_port": 0,
            "kubeconfig": self.kubeconfig,
            "batch_window_seconds": 0.05,
            "webhook": "off",
            "log_level": "WARNING",
        }
        values.update(overrides)
        return UngaterSettings(**values)

    async def start_ungater(self, **overrides: Any) -> Service[Any]:
        """The ungater service."""
        return await self.start("ungater", self.ungater_settings(**overrides), ungater_setup)

    async def stop(self, service: Service[Any] | str) -> int:
        """Stop one service (or the one started under that name) gracefully, as SIGTERM
        would; it must exit 0."""
        code = await super().stop(service)
        assert code == 0, (
            f"{service if isinstance(service, str) else service.name} exited with {code}"
        )
        return code

    # ------------------------------------------------------------------ waiting

    async def until_async(
        self,
        check: Callable[[], Awaitable[T | None]],
        *,
        within: float | None = None,
        what: str = "condition",
        interval: float | None = 0.1,
    ) -> T:
        """Like :meth:`until` with an async check; returns its first truthy result."""
        found = await super().until_async(check, within=within, what=what, interval=interval)
        assert found is not None  # until_async returns only a truthy result
        return found

    # ------------------------------------------------------------------ bus

    async def admit(
        self,
        workload: str,
        uid: str,
        assignments: dict[str, list[tuple[Domain, int]]],
        *,
        sequence: int | None = None,
        card_model: str | None = None,
        replaces: int | None = None,
    ) -> Admitted:
        """Publish an admitted decision, as admission would."""
        if sequence is None:
            self.sequence += 1
            sequence = self.sequence
        body = msg.admitted(
            workload,
            sequence=sequence,
            uid=uid,
            assignments={
                name: msg.assignment(domains, self.sim.levels)
                for name, domains in assignments.items()
            },
            card_model=card_model,
            replaces=replaces,
        )
        await self.send(body)
        return body

    def of(self, kind: type, workload: str | None = None) -> list[Any]:
        """Decisions seen of one kind (about one workload, if given)."""
        return [
            d
            for d in self.decisions
            if isinstance(d, kind)
            and (workload is None or getattr(d, "workload", None) == workload)
        ]

    # ------------------------------------------------------------------ cluster

    def host(self, rack: int, node: int, block: int = 0) -> Domain:
        """A host domain of the simulated topology."""
        return (f"block{block}", f"block{block}-rack{rack}", f"block{block}-rack{rack}-node{node}")

    async def job(
        self,
        name: str,
        pods: int,
        *,
        completions: int | None = None,
        duration: float | None = None,
        gpus: int = 1,
        annotations: dict[str, str] | None = None,
        job_annotations: dict[str, str] | None = None,
        job_labels: dict[str, str] | None = None,
        suspend: bool = False,
        backoff_limit_per_index: int | None = None,
    ) -> dict[str, Any]:
        """An Indexed Job in queue q (its pods are gated at creation); ``annotations`` go on
        its pod template, ``job_annotations`` and ``job_labels`` on the Job; ``suspend``
        creates it suspended; ``backoff_limit_per_index`` sets ``backoffLimitPerIndex`` (the
        Job controller's failure backoff is then counted per index)."""
        template_annotations = dict(annotations or {})
        if duration is not None:
            template_annotations["tidegate.io/sim-duration-seconds"] = str(duration)
        template = k8s.template(
            labels={QUEUE_LABEL: "q"},
            annotations=template_annotations,
            containers=[k8s.container("1", None, limits=True, gpu=str(gpus))],
            restartPolicy="Never",
        )
        extra: dict[str, Any] = {}
        if backoff_limit_per_index is not None:
            extra["backoffLimitPerIndex"] = backoff_limit_per_index
        body = k8s.job(
            name,
            parallelism=pods,
            completions=completions or pods,
            labels=job_labels if job_labels is not None else {QUEUE_LABEL: "q"},
            annotations=job_annotations or {},
            template=template,
            suspend=suspend,
            completionMode="Indexed",
            backoffLimit=20,
            **extra,
        )
        return await self.create(JOBS, body)

    async def pods(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Pods of the test namespace, as ``kubectl get pods`` lists them."""
        listed = await self.kube.list_objects(
            PODS, namespace=NAMESPACE, label_selector=label_selector
        )
        return [dict(p) for p in listed.items]

    async def events(self, name: str) -> dict[str, dict[str, Any]]:
        """Events about object ``name`` in the test namespace, by reason."""
        listed = await self.kube.list_objects(EVENTS, namespace=NAMESPACE)
        return {
            str(e["reason"]): dict(e)
            for e in listed.items
            if e.get("involvedObject", {}).get("name") == name
        }

    async def workload_state(self, name: str) -> WorkloadState:
        """Wait until the watcher published the workload ``team/<name>``."""
        found: dict[str, WorkloadState] = {}

        async def remember(received: Received) -> None:
            if isinstance(received.envelope.body, WorkloadState):
                found["w"] = received.envelope.body

        async with following(
            self.bus,
            stream=layout.state_stream(self.cluster),
            subjects=[subjects.workload(self.cluster, NAMESPACE, name)],
            handler=remember,
        ):
            await self.until(lambda: "w" in found, what=f"workload {name} on the bus")
        return found["w"]


def gated(pod: dict[str, Any]) -> bool:
    """Whether a pod still carries tidegate's gate."""
    return has_gate(pod, ADMISSION_GATE)


def index_of(pod: dict[str, Any]) -> int:
    """A Job pod's completion index."""
    return int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


@contextlib.asynccontextmanager
async def environment(
    tmp_path: Path, nats_url: str, cluster_id: str, settings: SimSettings
) -> AsyncIterator[Env]:
    """A running simulated cluster with the namespace ``team``, a bus, a kube client, the
    decision log, and the watcher started."""
    async with simulated(
        settings, workdir=tmp_path, nats_url=nats_url, cluster=cluster_id, name="ungater-test"
    ) as cluster:
        env = Env(
            sim=cluster.sim,
            kube=cluster.kube,
            bus=cluster.bus,
            cluster=cluster_id,
            nats_url=nats_url,
            kubeconfig=cluster.kubeconfig,
            monitor=SlotMonitor(cluster.sim),
            namespace=NAMESPACE,
            within=20.0,
            interval=0.05,
            services=RunningServices(ready_within=30, stop_within=30),
        )
        await env.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})

        async def collect(received: Received) -> None:
            env.decisions.append(received.envelope.body)

        async with following(
            cluster.bus,
            stream=layout.decisions_stream(cluster_id),
            subjects=[subjects.decision_wildcard(cluster_id)],
            handler=collect,
        ):
            try:
                await env.start_watcher()
                yield env
            finally:
                await env.services.stop_all()
                env.monitor.close()


async def start_topology_cache(env: Env) -> None:
    """The topology-cache service on ``env``."""
    settings = CacheSettings(
        cluster=env.cluster, nats_url=env.nats_url, http_port=0, log_level="WARNING"
    )
    await env.start("topology-cache", settings, cache_setup)


async def start_pipeline(env: Env, queue: dict[str, Any] | None = None, **ungater: Any) -> None:
    """The queue ``q`` (with the spec ``queue``), then the topology-cache, admission and the
    ungater (with the settings ``ungater`` overrides) on ``env``: every service but preemption."""
    await env.create(QUEUES, k8s.queue("q", queue))
    await start_topology_cache(env)
    admission = AdmissionSettings(
        cluster=env.cluster,
        nats_url=env.nats_url,
        http_port=0,
        log_level="WARNING",
        lease_ttl_seconds=2.0,
        cycle_tick_seconds=0.2,
    )
    await env.start("admission", admission, admission_setup)
    await env.start_ungater(**ungater)


@pytest.fixture
async def crd_env(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    """:func:`env` with tidegate's real CRDs (deploy/crds) installed in the simulated cluster."""
    settings = SimSettings(
        nodes="1x2x4x8gpu", crd_files=tuple(sorted((ROOT / "deploy" / "crds").glob("*.yaml")))
    )
    async with environment(tmp_path, nats_url, cluster_id, settings) as env:
        yield env


@pytest.fixture
async def env(tmp_path: Path, nats_url: str, cluster_id: str) -> AsyncIterator[Env]:
    """1 block × 2 racks × 4 nodes × 8 GPUs with the full control plane."""
    async with environment(tmp_path, nats_url, cluster_id, SimSettings(nodes="1x2x4x8gpu")) as env:
        yield env
