"""The whole of tidegate running and observed: what the end-to-end tests share.

Why: the crash/restart and malformed-input tests both need the embedded stack
(:class:`~tidegate.cli.stack.LocalStack`: a nats-server, the simulated cluster in this process
and the five services as real child processes), a way to submit workloads as users do (through
the Kubernetes API, built with the demo's trace machinery), control over the service processes
(SIGKILL one, start it again) and an observer that follows the bus — the state, capacity and
decision streams — while listing the cluster's nodes and pods through the Kubernetes API (over
HTTP with :mod:`tidegate.kube`, as against any API server) several times a second for the
:class:`~tests.e2e.invariants.Invariants`, so that an invariant broken for a moment in the
middle of a run is caught, not only the state at the end.

It does not decide what to run or when to crash what (the tests do), nor what an invariant is
(:mod:`tests.e2e.invariants`).
"""

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, TypeVar, cast

from tidegate.bus import Bus, ConsumerSettings, DurableConsumer, Received, StateFollower, layout
from tidegate.cli.demo_run import compressed_timeouts
from tidegate.cli.demo_trace import (
    CohortEntry,
    QueueEntry,
    WorkloadEntry,
    cohort_object,
    priority_class_object,
    queue_object,
    service_type,
    workload_object,
)
from tidegate.cli.stack import LocalStack, ServiceAccess, StackSettings
from tidegate.kube import (
    COHORTS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    KubeClient,
    KubeSettings,
)
from tidegate.kube import connect as kube_connect
from tidegate.model import (
    Admitted,
    Message,
    Pending,
    PodState,
    Preempted,
    PreemptRequested,
    Released,
    parse_resources,
    subjects,
)
from tidegate.sim import SimCluster
from tidegate.sim.rbac import service_account_user
from tidegate.testing import connected, until_async
from tidegate.testing.rbac import Permission
from tidegate.testing.traces import admission_trace_problems, spans_from_json_lines

from .chart import USAGE, Documents, granted, render_chart, service_access
from .invariants import (
    Invariants,
    JsonObject,
    capacity_differences,
    decision_problems,
    gated,
    job_complete,
    labels_of,
    lender_problems,
    mirror_differences,
    pod_phase,
    quota_problems,
    terminating,
)

CLUSTER: Final = "e2e"
RELEASE_NAMESPACE: Final = "tidegate-system"
"""Where the chart's ServiceAccounts live on the simulator."""

T = TypeVar("T")


def fast_env(time_scale: float) -> dict[str, str]:
    """Service settings that let a crashed service's successor take over within seconds.

    A SIGKILLed leader's lease runs out after ``lease_ttl_seconds`` (10 s by default); admission
    asks preemption again after ``preemption_timeout_seconds``; the rest shortens batching and
    reconcile loops so a run of a few simulated minutes takes seconds. Settings a service does
    not have are ignored by it.
    """
    return {
        **compressed_timeouts(time_scale),
        "TIDEGATE_LEASE_TTL_SECONDS": "2",
        "TIDEGATE_CYCLE_TICK_SECONDS": "0.2",
        "TIDEGATE_RECONCILE_INTERVAL_SECONDS": "0.5",
        "TIDEGATE_BATCH_WINDOW_SECONDS": "0.05",
        "TIDEGATE_ABSENT_RETRY_SECONDS": "0.5",
        "TIDEGATE_ACK_WAIT_SECONDS": "5",
        "TIDEGATE_SHUTDOWN_GRACE_SECONDS": "2",
        "TIDEGATE_WEBHOOK": "off",
    }


class System:
    """A running stack, a Kubernetes client and a bus connection, and what was observed."""

    def __init__(
        self,
        stack: LocalStack,
        kube: KubeClient,
        bus: Bus,
        *,
        namespace: str,
        grace_seconds: float,
    ) -> None:
        self.stack = stack
        self.sim: SimCluster = stack.sim
        self.kube = kube
        self.bus = bus
        self.namespace = namespace
        self.state: dict[str, Message] = {}
        """Last message per state subject."""
        self.capacity: dict[str, Message] = {}
        """Last message per capacity subject."""
        self.decisions: list[Message] = []
        """Every decision, in stream order."""
        self.stored: list[tuple[int, str, Message]] = []
        """(stream sequence, subject, decision) of every decision, in stream order."""
        self.crashes: list[tuple[str, int, int]] = []
        """(service, pid killed, pid of its successor), in order."""
        self.timeline: list[str] = []
        """What happened when (decisions, crashes, violations), for failure messages."""
        self._started = time.monotonic()
        self._killed: dict[str, int] = {}
        self._background: list[asyncio.Task[None]] = []
        self._decision_sequences: set[int] = set()
        self.supervised = False
        """Whether a supervisor restarts services that exit by themselves (as Kubernetes
        would; the chaos harness does): their exit is then not a failure of :meth:`dead`."""
        self.levels: list[str] = stack.sim.levels
        """The Topology's level labels, widest first (for the capacity view's check)."""
        self.nodes: list[JsonObject] = []
        """The cluster's Node objects as last listed through the API."""
        self.pods: list[JsonObject] = []
        """The cluster's Pod objects as last listed through the API."""
        self.checks = Invariants(
            managed_namespaces=[namespace], grace_seconds=grace_seconds, note=self.note
        )
        """The sampled invariants (sampled while :meth:`observing`)."""
        self.queue_objects: list[JsonObject] = []
        self.cohort_objects: list[JsonObject] = []
        """The Queue and Cohort objects as last listed through the API (the queue tree the
        quota invariants check against)."""
        self.requests: dict[str, dict[str, int]] = {}
        """Workload key → what its gang requests, as submitted (:meth:`submit`)."""
        self.training: set[str] = set()
        """Workloads submitted as training (the only possible victims of a reclaim)."""

    @property
    def violations(self) -> list[str]:
        """Invariants found broken while sampling."""
        return self.checks.violations

    # ------------------------------------------------------------------ set-up and input

    async def set_up(
        self,
        *,
        priority_classes: Mapping[str, int],
        queues: Iterable[QueueEntry],
        cohorts: Iterable[CohortEntry] = (),
    ) -> None:
        """Create the managed namespace, priority classes, Cohorts and Queues."""
        await self.kube.create(
            NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {"tidegate.io/managed": "true"}},
            },
        )
        for name, value in priority_classes.items():
            await self.kube.create(PRIORITY_CLASSES, priority_class_object(name, value))
        for cohort in cohorts:
            await self.kube.create(COHORTS, cohort_object(cohort))
        for entry in queues:
            await self.kube.create(QUEUES, queue_object(entry))
        await self.list_queue_tree()

    async def submit(self, *entries: WorkloadEntry) -> None:
        """Create the Jobs / Deployments of trace entries, as a user would."""
        for entry in entries:
            resource = JOBS if entry.kind == "Job" else DEPLOYMENTS
            key = f"{self.namespace}/{entry.name}"
            self.requests[key] = {
                name: amount * entry.pods
                for name, amount in parse_resources(dict(entry.requests)).items()
            }
            if service_type(entry) == "training":
                self.training.add(key)
            await self.kube.create(
                resource, workload_object(entry, self.namespace), namespace=self.namespace
            )

    async def publish_raw(self, subject: str, payload: bytes) -> None:
        """Put bytes on a subject as a broken or hostile client would (no envelope, no codec)."""
        await self.bus.jetstream.publish(subject, payload)

    # ------------------------------------------------------------------ processes

    def pids(self) -> dict[str, int]:
        """Service name → pid of its running process."""
        return {
            name: process.process.pid
            for name, process in self.stack.processes.items()
            if process.process is not None and process.running
        }

    async def kill(self, name: str) -> None:
        """SIGKILL one service (a crash: no drain, no goodbye); :meth:`start` brings it back."""
        killed = self.pids()[name]
        held = sum(1 for p in self.cluster_pods(self.namespace) if gated(p))
        self.note(f"SIGKILL {name} (pid {killed}; {held} pods gated)")
        self.checks.restarting.add(name)
        self._killed[name] = killed
        await self.stack.stop_service(name, kill=True)

    async def start(self, name: str) -> None:
        """Start a killed service again; returns once it reports ready."""
        try:
            await self.stack.start_service(name)
        finally:
            self.checks.restarting.discard(name)
            self.checks.settled_at = time.monotonic()
        pid = self.pids()[name]
        self.crashes.append((name, self._killed.pop(name), pid))
        self.note(f"{name} ready again (pid {pid})")

    async def crash(self, name: str) -> None:
        """SIGKILL one service and start it again; returns once its successor is ready."""
        await self.kill(name)
        await self.start(name)

    def dead(self) -> list[str]:
        """Services that exited although no test stopped them, with their log tail; raises
        at once if the observer itself failed (a broken check must not go unnoticed)."""
        for task in self._background:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError("the observer failed") from task.exception()
        return [
            f"{p.name} exited with {p.returncode}:\n{p.log_tail(30)}"
            for p in self.stack.dead_services()
            if p.name not in self.checks.restarting and not self.supervised
        ]

    def note(self, text: str) -> None:
        """Add a line to the timeline, stamped with seconds since the system started."""
        self.timeline.append(f"[{time.monotonic() - self._started:6.1f}s] {text}")

    def report(self) -> str:
        """The timeline, to print with a failed assertion."""
        return "\n".join(["timeline:", *self.timeline])

    # ------------------------------------------------------------------ waiting

    async def until(self, check: Callable[[], T | None], *, within: float, what: str) -> T:
        """Wait until ``check()`` is truthy and return it; fail at once if a service died or
        an invariant broke meanwhile (that is the reason, not the wait that follows)."""

        async def checked() -> T | None:
            return check()

        return await self.until_async(checked, within=within, what=what, interval=0.1)

    async def until_async(
        self,
        check: Callable[[], Awaitable[T | None]],
        *,
        within: float,
        what: str,
        interval: float = 0.3,
    ) -> T:
        """Like :meth:`until` for a coroutine function (e.g. one reading the API server)."""
        found = await until_async(
            check,
            within=within,
            what=what,
            interval=interval,
            alive=lambda: self.assert_healthy(f"while waiting for {what}"),
            describe=lambda: f" (for {within:.0f}s)\n{self.report()}",
        )
        assert found is not None  # until_async returns only a truthy result
        return found

    def refused(self) -> list[str]:
        """The requests the simulated API server refused for want of RBAC (403): each
        distinct one once, in order, with how often it was refused."""
        counts = Counter(self.sim.access.log.denied)
        return [f"{line} ({count}x)" for line, count in counts.items()]

    def rbac_used(self) -> dict[str, set[Permission]]:
        """What each service asked the API server for, as its ServiceAccount (when the stack
        enforces RBAC)."""
        access = self.stack.settings.access
        if access is None:
            return {}
        used = self.sim.access.log.used
        return {
            service: set(used.get(service_account_user(namespace, name).name, set()))
            for service, (namespace, name) in access.accounts.items()
        }

    def account_for_rbac(self, documents: Documents) -> None:
        """At the end of a scenario: fail if a request was refused; add what the chart grants
        (``documents``) and what each service asked to the end-of-run RBAC report."""
        refused = self.refused()
        assert not refused, f"the API server refused {refused}"
        USAGE.add(granted(documents), self.rbac_used())

    def assert_healthy(self, context: str) -> None:
        """Fail if a service died by itself, the API server refused a request (RBAC) or an
        invariant was found broken."""
        dead = self.dead()
        assert not dead, f"{context}: " + "\n".join(dead)
        refused = self.refused()
        assert not refused, f"{context}: the API server refused {refused}\n{self.report()}"
        doubled = decision_problems(self.decisions) + self.queue_tree_problems()
        assert not doubled, f"{context}: " + "\n".join(doubled) + "\n" + self.report()
        assert not self.violations, (
            f"{context}: invariants broken:\n" + "\n".join(self.violations) + "\n" + self.report()
        )

    # ------------------------------------------------------------------ observations

    def of(self, kind: type[T], workload: str | None = None) -> list[T]:
        """Decisions of one kind (about ``<namespace>/<workload>`` when given), in order."""
        key = None if workload is None else f"{self.namespace}/{workload}"
        found: list[T] = [d for d in self.decisions if isinstance(d, kind)]
        if key is None:
            return found
        return [
            d
            for d in found
            if getattr(d, "workload", None) == key or getattr(d, "preemptor", None) == key
        ]

    def bus_pods(self) -> dict[str, PodState]:
        """Pods on the state stream (tombstoned ones left out), by ``namespace/name``."""
        return {
            f"{m.namespace}/{m.name}": m for m in self.state.values() if isinstance(m, PodState)
        }

    def cluster_pods(self, namespace: str | None = None) -> list[JsonObject]:
        """The cluster's pods as last listed through the API (the source of truth; the
        observer lists them several times a second)."""
        return [
            p for p in self.pods if namespace is None or p["metadata"].get("namespace") == namespace
        ]

    def pods_of(self, workload: str) -> list[JsonObject]:
        """Live pods (not being deleted) of a trace workload, as last listed."""
        return [
            p
            for p in self.cluster_pods(self.namespace)
            if labels_of(p).get("app") == workload and not terminating(p)
        ]

    def running(self, workload: str, count: int) -> bool:
        """Exactly ``count`` live pods of ``workload``, all bound and Running."""
        pods = self.pods_of(workload)
        return len(pods) == count and all(
            p.get("spec", {}).get("nodeName") and pod_phase(p) == "Running" for p in pods
        )

    async def completed_jobs(self) -> set[str]:
        """Names of the namespace's Jobs that completed (read through the API)."""
        listed = await self.kube.list_objects(JOBS, namespace=self.namespace)
        items = cast(list[JsonObject], listed.items)
        return {j["metadata"]["name"] for j in items if job_complete(j)}

    async def events(self, owner: str) -> list[JsonObject]:
        """Events about the object named ``owner`` in the namespace, read through the API."""
        listed = await self.kube.list_objects(EVENTS, namespace=self.namespace)
        items = cast(list[JsonObject], listed.items)
        return [e for e in items if e.get("involvedObject", {}).get("name") == owner]

    # ------------------------------------------------------------------ background observers

    @contextlib.asynccontextmanager
    async def observing(self) -> AsyncIterator["System"]:
        """Follow the state, capacity and decision streams and sample the cluster meanwhile."""
        stop = asyncio.Event()
        state = StateFollower(
            self.bus,
            stream=layout.state_stream(CLUSTER),
            subjects=subjects.state_wildcards(CLUSTER),
            handler=self._on_state,
            name="e2e-state",
        )
        capacity = StateFollower(
            self.bus,
            stream=layout.capacity_stream(CLUSTER),
            subjects=[subjects.capacity_wildcard(CLUSTER)],
            handler=self._on_capacity,
            name="e2e-capacity",
        )
        decisions = DurableConsumer(
            self.bus,
            cluster=CLUSTER,
            settings=ConsumerSettings(
                durable="e2e-observer",
                stream=layout.decisions_stream(CLUSTER),
                subjects=(subjects.decision_wildcard(CLUSTER),),
                fetch_timeout_seconds=0.25,
            ),
            handler=self._on_decision,
        )
        self._background = tasks = [
            asyncio.create_task(state.run()),
            asyncio.create_task(capacity.run()),
            asyncio.create_task(decisions.run(stop)),
            asyncio.create_task(self._sampler(stop)),
        ]
        try:
            await self.until(
                lambda: (
                    state.replayed.is_set()
                    and capacity.replayed.is_set()
                    and self.checks.samples > 0
                ),
                within=20,
                what="the observer to replay the bus and list the cluster",
            )
            yield self
        finally:
            stop.set()
            for task in tasks[:2]:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):
                    raise result

    async def _on_state(self, received: Received) -> None:
        self.state[received.subject] = received.envelope.body

    async def _on_capacity(self, received: Received) -> None:
        self.capacity[received.subject] = received.envelope.body

    async def _on_decision(self, received: Received) -> None:
        # A redelivery to the observer (its ack lost, as when a NATS server dies) is the
        # observer's own repeat, not a repeated decision: the stream sequence tells them apart.
        if received.stream_sequence in self._decision_sequences:
            return
        self._decision_sequences.add(received.stream_sequence)
        body = received.envelope.body
        self.decisions.append(body)
        self.stored.append((received.stream_sequence, received.subject, body))
        self.note(describe(body))
        self.checks.decided(body)

    async def list_cluster(self) -> tuple[list[JsonObject], list[JsonObject]]:
        """The cluster's Node and Pod objects, listed through the Kubernetes API now."""
        nodes = await self.kube.list_objects(NODES)
        pods = await self.kube.list_objects(PODS)
        return cast(list[JsonObject], nodes.items), cast(list[JsonObject], pods.items)

    async def _sampler(self, stop: asyncio.Event) -> None:
        listed_tree = 0.0
        while not stop.is_set():
            self.nodes, self.pods = await self.list_cluster()
            self.checks.sample(self.nodes, self.pods, time.monotonic())
            if time.monotonic() - listed_tree > 1.0:
                await self.list_queue_tree()
                listed_tree = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    # ------------------------------------------------------------------ checks at the end

    def admission_problems(self) -> list[str]:
        """Every decision-log check, victims never released included
        (:func:`~tests.e2e.invariants.decision_problems`), and the queue tree's, a lender
        still owed a reclaim included (:meth:`queue_tree_problems`)."""
        return decision_problems(self.decisions, settled=True) + self.queue_tree_problems(
            settled=True
        )

    def queue_tree_problems(self, *, settled: bool = False) -> list[str]:
        """No queue above its ceiling or what its path allows at any point of the log
        (:func:`~tests.e2e.invariants.quota_problems`), and every lender given back what it
        lent within a round (:func:`~tests.e2e.invariants.lender_problems`), against the
        Queue and Cohort objects last listed."""
        return quota_problems(
            self.queue_objects, self.cohort_objects, self.decisions
        ) + lender_problems(
            self.queue_objects,
            self.cohort_objects,
            self.decisions,
            self.requests,
            self.training,
            settled=settled,
        )

    async def list_queue_tree(self) -> None:
        """List the Queue and Cohort objects through the API now."""
        queues = await self.kube.list_objects(QUEUES)
        cohorts = await self.kube.list_objects(COHORTS)
        self.queue_objects = cast(list[JsonObject], queues.items)
        self.cohort_objects = cast(list[JsonObject], cohorts.items)

    async def until_bus_agrees(self, *, within: float) -> None:
        """Wait until the capacity view and the pod mirror on the bus equal the simulator's
        state; the timeout names the differences."""
        try:
            await self.until(
                lambda: not self.capacity_differences() and not self.mirror_differences(),
                within=within,
                what="the bus to agree with the simulator",
            )
        except AssertionError as exc:
            differences = self.capacity_differences() + self.mirror_differences()
            raise AssertionError(
                f"{len(differences)} differences, first: {differences[:8]}\n{exc}"
            ) from None

    @property
    def sigkilled(self) -> list[str]:
        """Services SIGKILLed during the run (restarted or not)."""
        return [name for name, _, _ in self.crashes] + list(self._killed)

    def trace_problems(self, trace_file: Path) -> list[str]:
        """What is wrong with the traces in ``trace_file`` (read once the services stopped and
        flushed) of every workload this run admitted or preempted
        (:func:`~tidegate.testing.traces.admission_trace_problems`, each admitted workload's
        trace holding a span of every service that ran). After a SIGKILL only what survives
        lost spans is checked (``complete=False``): one exported root per workload, none of
        its spans in another trace, the victim searches naming and linking the victims."""
        spans = spans_from_json_lines(trace_file)
        admitted = sorted({d.workload for d in self.of(Admitted)})
        services = [f"tidegate-{name}" for name in self.stack.processes]
        complete = not self.sigkilled
        problems = admission_trace_problems(
            spans, admitted=admitted, services=services, complete=complete
        )
        # One call per preemption: a preemptor may preempt more than once.
        for preempted in self.of(Preempted):
            problems += admission_trace_problems(
                spans,
                admitted=(),
                preemptions={preempted.preemptor: preempted.victims},
                complete=complete,
            )
        return list(dict.fromkeys(problems))

    def capacity_differences(self) -> list[str]:
        """Where the capacity view on the bus differs from the API objects last listed."""
        return capacity_differences(
            self.nodes, self.pods, self.levels, self.capacity.values(), self.decisions
        )

    def mirror_differences(self) -> list[str]:
        """Where the pods on the bus differ from the API server's (last listed)."""
        return mirror_differences(self.pods, self.state.values())


def chart_rbac(
    edit: Callable[[Documents], Documents] | None = None,
) -> tuple[Documents, ServiceAccess]:
    """The Helm chart rendered for the simulator's stack (then changed by ``edit``), and the
    access it gives each service there (its ServiceAccount, bound to the chart's roles)."""
    documents = render_chart(RELEASE_NAMESPACE, CLUSTER)
    if edit is not None:
        documents = edit(documents)
    return documents, service_access(RELEASE_NAMESPACE, documents)


@contextlib.asynccontextmanager
async def running_system(
    workdir: Path,
    *,
    nodes: str,
    time_scale: float,
    namespace: str,
    grace_seconds: float = 10.0,
    nats_servers: int = 1,
    env: Mapping[str, str] | None = None,
    chart_edit: Callable[[Documents], Documents] | None = None,
) -> AsyncIterator[System]:
    """Start the whole stack in ``workdir``, connect, observe; stop everything at the end.

    The simulator enforces RBAC: each service runs as the ServiceAccount the Helm chart
    renders for it, bound to the chart's roles (``chart_edit`` may change the rendered
    documents first, e.g. :func:`tests.e2e.chart.without_grant`). A request RBAC refuses fails
    the run (:meth:`System.assert_healthy`, and at the end); what each service asked is added
    to the end-of-run RBAC report (:data:`tests.e2e.chart.USAGE`).

    With ``nats_servers`` > 1, NATS runs as a JetStream cluster of that many servers with the
    streams replicated on each (:class:`~tidegate.bus.server.NatsCluster`). ``env`` overrides
    service settings of :func:`fast_env`. When the block ends without an error and every
    service has stopped (flushing its spans), the traces the services wrote to the stack's
    trace file must have the admission shape (:meth:`System.trace_problems`); only part of it
    when a service was SIGKILLed, since a killed process loses the spans it had not exported
    yet (docs/operations.md, "A killed service loses what it had not exported")."""
    documents, access = chart_rbac(chart_edit)
    settings = StackSettings(
        workdir=workdir,
        cluster=CLUSTER,
        nodes=nodes,
        time_scale=time_scale,
        ready_timeout_seconds=60,
        extra_env={**fast_env(time_scale), **(env or {})},
        nats_servers=nats_servers,
        access=access,
    )
    async with (
        LocalStack.running(settings) as stack,
        observed(
            stack,
            namespace=namespace,
            grace_seconds=grace_seconds,
            name="tidegate-e2e",
            stream_replicas=nats_servers,
        ) as system,
    ):
        yield system
    system.account_for_rbac(documents)
    problems = system.trace_problems(stack.trace_file)
    assert not problems, (
        f"{len(problems)} trace problems, first: {problems[:20]}\n{system.report()}"
    )


@contextlib.asynccontextmanager
async def observed(
    stack: LocalStack,
    *,
    namespace: str,
    grace_seconds: float,
    name: str,
    stream_replicas: int = 1,
) -> AsyncIterator[System]:
    """A :class:`System` over a running ``stack``: its own Kubernetes client and bus connection
    (named ``name``) straight to the stack's servers, observing until the block ends."""
    async with (
        await kube_connect(KubeSettings(source="kubeconfig", kubeconfig=stack.kubeconfig)) as kube,
        connected(
            stack.nats_url,
            CLUSTER,
            name=name,
            wait_for_server_seconds=10,
            stream_replicas=stream_replicas,
        ) as bus,
    ):
        system = System(stack, kube, bus, namespace=namespace, grace_seconds=grace_seconds)
        async with system.observing():
            yield system


def describe(decision: Message) -> str:
    """One line about a decision, for the timeline."""
    match decision:
        case Admitted():
            extra = f" replacing {decision.replaces}" if decision.replaces is not None else ""
            return (
                f"admitted {decision.workload} seq {decision.sequence} epoch {decision.epoch}"
                f"{extra}: {sum(d.count for a in decision.assignments.values() for d in a.domains)}"
                " pods"
            )
        case Pending():
            return f"pending {decision.workload} {decision.reason}: {decision.message}"
        case PreemptRequested():
            return f"preempt-requested {decision.workload}"
        case Preempted():
            return f"preempted for {decision.preemptor}: {decision.victims}"
        case Released():
            return f"released {decision.workload} {decision.reason}"
        case _:
            return f"{type(decision).__name__}"
