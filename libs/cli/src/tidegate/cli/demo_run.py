"""The running part of ``tidegate demo`` (see :mod:`tidegate.cli.demo` for what it does).

:func:`run_demo` starts the local stack, and :class:`DemoRunner` sets the simulated cluster up
(priority classes, Cohorts, Queues), submits the trace's workloads on time through the Kubernetes API,
prints every decision from the bus as it arrives, samples GPU use and Job completion, and stops
when every Job has finished or cannot be admitted (or at the trace's ``end_after``).
"""

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tidegate.bus import (
    BusSettings,
    ConsumerSettings,
    DurableConsumer,
    Received,
    StateFollower,
    layout,
)
from tidegate.bus import connect as bus_connect
from tidegate.cli.busview import BusView
from tidegate.cli.console_server import serving
from tidegate.cli.console_view import ConsoleView
from tidegate.cli.demo_report import (
    DemoRecord,
    Scaling,
    UsageSample,
    WorkloadRecord,
    team_sample,
)
from tidegate.cli.demo_trace import (
    Trace,
    WorkloadEntry,
    cohort_object,
    desired_replicas,
    load_at,
    priority_class_object,
    queue_object,
    required_level,
    service_type,
    workload_object,
)
from tidegate.cli.nodeagent import AgentSettings, NodeAgent
from tidegate.cli.nodeagent import fake_nodes as agent_nodes
from tidegate.cli.queues import tree_reports
from tidegate.cli.stack import LocalStack, StackError, StackSettings
from tidegate.kube import (
    COHORTS,
    CRDS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    TOPOLOGIES,
    AlreadyExists,
    KubeClient,
    KubeSettings,
    NotFound,
)
from tidegate.kube import connect as kube_connect
from tidegate.kube.read.objects import ObjectError, Pod, decode
from tidegate.model import QuantityError, parse_quantity, subjects


async def run_demo(
    trace: Trace,
    say: Callable[[str], None],
    *,
    workdir: Path,
    cluster: str,
    nodes: str,
    time_scale: float,
    kubeconfig: Path | None = None,
    fake_nodes: str | None = None,
    crds: Path | None = None,
    console: tuple[str, int] | None = None,
    reservations: bool = True,
) -> tuple[DemoRecord, bool]:
    """Run the whole demo in ``workdir`` (an empty directory); returns what it saw, and whether
    a service died on the way.

    With ``kubeconfig`` it runs against that cluster instead of a simulated one: the tidegate
    CRDs from ``crds`` are created where missing, ``fake_nodes`` (a topology description) are
    registered for the length of the run by the node agent, and the pod templates carry the
    scheduling gate themselves (see docs/demo.md, "On a real cluster"). With ``console`` (host,
    port) the page of ``tidegate console`` is served there while the demo runs. Without
    ``reservations`` admission reserves nothing for big gangs (docs/reservations.md)."""
    settings = StackSettings(
        workdir=workdir,
        cluster=cluster,
        nodes=nodes,
        time_scale=time_scale,
        extra_env={**compressed_timeouts(time_scale), **reservation_env(reservations)},
        kubeconfig=kubeconfig,
    )
    record = DemoRecord(day_length=trace.day_length, reservations=reservations)
    async with contextlib.AsyncExitStack() as context:
        if kubeconfig is None:
            say(
                f"tidegate demo: starting nats-server, a simulated cluster ({nodes}) and 5 services"
            )
        else:
            await prepare_cluster(kubeconfig, trace, crds, say)
            if fake_nodes is not None:
                agent = await context.enter_async_context(
                    fake_nodes_for(kubeconfig, fake_nodes, time_scale, say)
                )
                await agent.wait_ready(timeout_seconds=300)
            say(f"tidegate demo: starting nats-server and 5 services against {kubeconfig}")
        say(f"  logs, traces and the report go to {workdir}")
        stack = await context.enter_async_context(LocalStack.running(settings))
        for name, process in stack.processes.items():
            pid = process.process.pid if process.process else "?"
            say(f"  {name:<15} ready (pid {pid}, health http://127.0.0.1:{process.http_port})")
        if console is not None:
            host, port = console
            bus = BusSettings(
                servers=(stack.nats_url,), name="tidegate-console", wait_for_server_seconds=10
            )
            view = ConsoleView(cluster=cluster)
            _, url = await context.enter_async_context(serving(bus, view, host=host, port=port))
            say(f"  console         {url}")
        runner = DemoRunner(
            stack, trace, record, say, time_scale=time_scale, gate=kubeconfig is not None
        )
        failed = await runner.run()
        if kubeconfig is not None and fake_nodes is not None:
            # Its workloads could run nowhere once the fake nodes are gone: remove them while
            # the node agent can still finish their pods' graceful deletions.
            await remove_namespace(kubeconfig, trace.namespace, say)
    return record, failed


async def remove_namespace(
    kubeconfig: Path, namespace: str, say: Callable[[str], None], *, within: float = 120.0
) -> None:
    """Delete the trace's namespace and wait until it is gone.

    Its Jobs go first, in the foreground: a Job with ``backoffLimitPerIndex`` keeps the
    tracking finalizer of an index's failed pod until it has created the replacement, which it
    never can in a terminating namespace, and the namespace controller (v1.36) deletes the
    Jobs only once every pod is gone: deleting the namespace alone left it terminating for
    good. A Job being deleted lets its controller drop every finalizer."""
    say(f"  deleting namespace {namespace} (its workloads ran on the fake nodes)")
    async with await kube_connect(KubeSettings(source="kubeconfig", kubeconfig=kubeconfig)) as kube:
        jobs = await kube.list_objects(JOBS, namespace=namespace)
        for job in jobs.items:
            with contextlib.suppress(NotFound):
                await kube.delete(
                    JOBS, str(_meta(job).get("name")), namespace=namespace, propagation="Foreground"
                )
        with contextlib.suppress(NotFound):
            await kube.delete(NAMESPACES, namespace)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                await kube.get(NAMESPACES, namespace)
            except NotFound:
                return
            await asyncio.sleep(0.5)
        say(f"  namespace {namespace} is still terminating after {within:.0f}s")


def fake_nodes_for(
    kubeconfig: Path, shape: str, time_scale: float, say: Callable[[str], None]
) -> contextlib.AbstractAsyncContextManager[NodeAgent]:
    """The node agent the demo runs on a real cluster: ``shape`` nodes, pod durations scaled
    like the trace, a ``default`` Topology, nodes deleted when the demo ends."""
    settings = AgentSettings(
        nodes=shape,
        time_scale=time_scale,
        topology_name="default",
        delete_nodes_on_exit=True,
    )
    return agent_nodes(kubeconfig, settings, say=lambda line: say(f"  {line}"))


async def prepare_cluster(
    kubeconfig: Path, trace: Trace, crds: Path | None, say: Callable[[str], None]
) -> None:
    """Make an existing cluster ready for the demo: the tidegate CRDs (created where missing,
    from ``crds``), and no leftover of an earlier run in the trace's namespace."""
    async with await kube_connect(KubeSettings(source="kubeconfig", kubeconfig=kubeconfig)) as kube:
        missing = []
        for crd in load_crds(crds):
            name = str(_meta(crd).get("name"))
            try:
                await kube.get(CRDS, name)
            except NotFound:
                missing.append(name)
                await kube.create(CRDS, crd)
        if missing:
            say(f"  installed CRDs: {', '.join(missing)}")
            await wait_established(kube, missing)
        try:
            await kube.get(NAMESPACES, trace.namespace)
        except NotFound:
            return
        raise StackError(
            f"namespace {trace.namespace} exists already on this cluster (an earlier demo run?): "
            f"delete it (kubectl delete namespace {trace.namespace}) or use a trace with "
            "another namespace"
        )


def load_crds(directory: Path | None) -> list[dict[str, object]]:
    """The CustomResourceDefinitions in the YAML files of ``directory`` (the repository's
    deploy/crds by default); StackError when there are none."""
    folder = directory if directory is not None else Path("deploy/crds")
    documents: list[dict[str, object]] = []
    try:
        for path in sorted(folder.glob("*.yaml")):
            documents.extend(
                d
                for d in yaml.safe_load_all(path.read_text())
                if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
            )
    except (OSError, yaml.YAMLError) as exc:
        raise StackError(f"cannot read the CRDs in {folder}: {exc}") from exc
    if not documents:
        raise StackError(
            f"no CustomResourceDefinition in {folder}/*.yaml: pass --crds DIR (the "
            "repository's deploy/crds)"
        )
    return documents


async def wait_established(kube: KubeClient, names: list[str], within: float = 60.0) -> None:
    """Wait until the API server serves every CRD of ``names``."""
    deadline = time.monotonic() + within
    for name in names:
        while True:
            crd = await kube.get(CRDS, name)
            conditions = _status(crd).get("conditions")
            if any(
                isinstance(c, dict) and c.get("type") == "Established" and c.get("status") == "True"
                for c in (conditions if isinstance(conditions, list) else [])
            ):
                break
            if time.monotonic() > deadline:
                raise StackError(f"CRD {name} was not established within {within:.0f}s")
            await asyncio.sleep(0.2)


def compressed_timeouts(time_scale: float) -> dict[str, str]:
    """Service timeouts measured in simulated time, so that a demo running 20x faster than real
    time also waits 20x less before, e.g., admission asks preemption again (never under 1 s)."""
    return {
        "TIDEGATE_PREEMPTION_TIMEOUT_SECONDS": f"{max(1.0, 30.0 * time_scale):g}",
        # An overdue gang is expected to end 5 simulated minutes from now, not 5 wall minutes.
        "TIDEGATE_RESERVATION_OVERRUN_SECONDS": f"{300.0 * time_scale:g}",
    }


def reservation_env(reservations: bool) -> dict[str, str]:
    """Admission's setting for ``--reservations off`` (none in the cluster); nothing for on."""
    return {} if reservations else {"TIDEGATE_RESERVATIONS_MAX_PER_CLUSTER": "0"}


class DemoRunner:
    """Sets the cluster up, submits the trace on time, listens to decisions, samples usage."""

    def __init__(
        self,
        stack: LocalStack,
        trace: Trace,
        record: DemoRecord,
        say: Callable[[str], None],
        *,
        time_scale: float,
        gate: bool = False,
    ) -> None:
        self.gate = gate
        """Put the scheduling gate into the pod templates (no gate webhook on the cluster)."""
        self.stack = stack
        self.trace = trace
        self.record = record
        self.say = say
        self.time_scale = time_scale
        self.started = time.monotonic()
        self.view = BusView()
        """The bus's queues, cohorts and decisions in force: the teams' use of their cohort."""

    def now(self) -> float:
        """Simulated seconds since the trace started."""
        return (time.monotonic() - self.started) / self.time_scale

    def line(self, text: str) -> None:
        """Print a line stamped with simulated time."""
        self.say(f"[{self.now():6.0f}s] {text}")

    async def run(self) -> bool:
        """Run the trace to its end; returns True when a service died on the way."""

        cluster = self.stack.settings.cluster
        async with (
            await kube_connect(
                KubeSettings(source="kubeconfig", kubeconfig=self.stack.kubeconfig)
            ) as kube,
            await bus_connect(
                BusSettings(
                    servers=(self.stack.nats_url,), name="tidegate-demo", wait_for_server_seconds=10
                )
            ) as bus,
        ):
            await self._set_up(kube)

            async def on_decision(received: Received) -> None:
                await self.view.on_decision(received)
                text = self.record.decision(self.now(), received.envelope.body)
                if text is not None:
                    self.line(text)

            consumer = DurableConsumer(
                bus,
                cluster=cluster,
                settings=ConsumerSettings(
                    durable="demo-report",
                    stream=layout.decisions_stream(cluster),
                    subjects=(subjects.decision_wildcard(cluster),),
                    fetch_timeout_seconds=0.2,
                ),
                handler=on_decision,
            )
            stop = asyncio.Event()
            self.started = time.monotonic()
            # The queue tree's definitions and workloads, for the teams' use of their cohort.
            tree = StateFollower(
                bus,
                stream=layout.state_stream(cluster),
                subjects=[
                    f"tg.{cluster}.workload.>",
                    f"tg.{cluster}.config.queue.>",
                    f"tg.{cluster}.config.cohort.>",
                ],
                handler=self.view.on_state,
                name="demo-queue-tree",
            )
            async with asyncio.TaskGroup() as tasks:
                following = tasks.create_task(tree.run())
                tasks.create_task(_cancel_when(stop, following))
                tasks.create_task(consumer.run(stop))
                tasks.create_task(self._submit_all(kube))
                for entry in self.trace.workloads:
                    if entry.autoscale is not None:
                        tasks.create_task(self._autoscale(kube, entry, stop))
                return await self._watch(kube, stop)

    async def _set_up(self, kube: KubeClient) -> None:

        nodes = await kube.list_objects(NODES)
        self.record.total_gpus = sum(
            _int(_status(node).get("allocatable", {}), "nvidia.com/gpu") for node in nodes.items
        )
        await self._record_topology(kube, nodes.items)
        self.say(f"  cluster: {len(nodes.items)} nodes, {self.record.total_gpus} GPUs")
        with contextlib.suppress(AlreadyExists):
            await kube.create(
                NAMESPACES,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": self.trace.namespace,
                        "labels": {"tidegate.io/managed": "true"},
                    },
                },
            )
        for name, value in self.trace.priority_classes.items():
            with contextlib.suppress(AlreadyExists):
                await kube.create(PRIORITY_CLASSES, priority_class_object(name, value))
        for cohort in self.trace.cohorts:
            try:
                await kube.create(COHORTS, cohort_object(cohort))
            except AlreadyExists:
                await kube.patch(COHORTS, cohort.name, {"spec": dict(cohort.spec)})
            self.say(f"  cohort {cohort.name}: {json.dumps(cohort.spec)}")
        for entry in self.trace.queues:
            try:
                await kube.create(QUEUES, queue_object(entry))
            except AlreadyExists:
                # An existing cluster may keep the Queues of an earlier run: set their spec.
                await kube.patch(QUEUES, entry.name, {"spec": dict(entry.spec)})
            self.say(f"  queue {entry.name}: {json.dumps(entry.spec)}")

    async def _record_topology(self, kube: KubeClient, nodes: list[dict[str, object]]) -> None:
        """Each node's GPUs and topology path (the levels of the ``default`` Topology), for the
        fragmentation figure (:mod:`tidegate.cli.schedule_figures`)."""
        levels: list[str] = []
        with contextlib.suppress(NotFound):
            topology = await kube.get(TOPOLOGIES, "default")
            found = _spec(topology).get("levels")
            levels = [
                str(level["nodeLabel"])
                for level in (found if isinstance(found, list) else [])
                if isinstance(level, dict) and "nodeLabel" in level
            ]
        self.record.levels = levels
        for node in nodes:
            name = str(_meta(node).get("name"))
            labels = _meta(node).get("labels")
            labels = labels if isinstance(labels, dict) else {}
            self.record.node_gpus[name] = _int(
                _status(node).get("allocatable", {}), "nvidia.com/gpu"
            )
            self.record.node_paths[name] = {
                level: str(labels[level]) for level in levels if level in labels
            }

    async def _submit_all(self, kube: KubeClient) -> None:

        for entry in sorted(self.trace.workloads, key=lambda w: w.at):
            delay = entry.at * self.time_scale - (time.monotonic() - self.started)
            if delay > 0:
                await asyncio.sleep(delay)
            key = f"{self.trace.namespace}/{entry.name}"
            gpus = entry.requests.get("nvidia.com/gpu", 0)
            self.record.workloads[key] = WorkloadRecord(
                key=key,
                kind=entry.kind,
                queue=entry.queue,
                pods=entry.pods,
                gpus_per_pod=parse_quantity("nvidia.com/gpu", gpus),
                submitted_at=self.now(),
                service_type=service_type(entry),
                required_level=required_level(entry),
            )
            resource = JOBS if entry.kind == "Job" else DEPLOYMENTS
            await kube.create(
                resource,
                workload_object(
                    entry,
                    self.trace.namespace,
                    gate=self.gate,
                    per_index_backoff=True,
                    time_scale=self.time_scale,
                ),
                namespace=self.trace.namespace,
            )
            note = f" - {entry.note}" if entry.note else ""
            self.line(f"submit    {key:<28} {entry.kind} x{entry.pods}{note}")

    async def _autoscale(self, kube: KubeClient, entry: WorkloadEntry, stop: asyncio.Event) -> None:
        """The HPA-like driver of one Deployment: every ``autoscale.every`` simulated seconds,
        the replicas its load curve wants, set through the ``scale`` subresource."""
        scale = entry.autoscale
        assert scale is not None
        key = f"{self.trace.namespace}/{entry.name}"
        next_look = entry.at + scale.every
        while not stop.is_set():
            delay = next_look * self.time_scale - (time.monotonic() - self.started)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
                if stop.is_set():
                    return
            next_look += scale.every
            try:
                current_scale = await kube.get(
                    DEPLOYMENTS, entry.name, namespace=self.trace.namespace, subresource="scale"
                )
            except NotFound:
                continue
            current = _spec(current_scale).get("replicas")
            if not isinstance(current, int):
                continue
            load = load_at(scale.load, self.now())
            wanted = desired_replicas(scale, load, current)
            if wanted == current:
                continue
            await kube.patch(
                DEPLOYMENTS,
                entry.name,
                {"spec": {"replicas": wanted}},
                namespace=self.trace.namespace,
                subresource="scale",
            )
            self.record.scalings.append(
                Scaling(at=self.now(), workload=key, before=current, after=wanted, load=load)
            )
            self.line(f"scale     {key:<28} {current} -> {wanted} replicas (load {load:.0f})")

    def _usage(self, pods: list[dict[str, object]]) -> UsageSample:
        """GPUs of the trace's pods by service type: running, and still held by the gate."""
        types = {entry.name: service_type(entry) for entry in self.trace.workloads}
        running: dict[str, int] = {}
        gated: dict[str, int] = {}
        for obj in pods:
            try:
                pod = decode(obj, Pod)
            except ObjectError:
                continue
            kind = types.get(pod.metadata.labels.get("app", ""))
            if kind is None:
                continue
            if pod.spec.node_name and pod.status.phase == "Running":
                running[kind] = running.get(kind, 0) + _pod_gpus(pod)
            elif pod.gated():
                gated[kind] = gated.get(kind, 0) + _pod_gpus(pod)
        return UsageSample(at=self.now(), running=running, gated=gated)

    def _sample_teams(self) -> None:
        """Record the queues of cohorts as the queue tree shows them now (nothing without a
        cohort), as ``tidegate queues`` computes it."""
        if not self.view.cohorts and not any(q.parent for q in self.view.queues.values()):
            return
        self.record.teams.append(team_sample(self.now(), tree_reports(self.view)))

    async def _watch(self, kube: KubeClient, stop: asyncio.Event) -> bool:
        """Sample GPU use and Job completion until the trace is done; True if a service died."""

        interval = max(0.25, 5 * self.time_scale)
        end_after = self.trace.end_after
        last_submission = max((w.at for w in self.trace.workloads), default=0.0)
        failed = False
        try:
            while True:
                await asyncio.sleep(interval)
                dead = self.stack.dead_services()
                if dead:
                    for process in dead:
                        self.say(
                            f"!! {process.name} exited with {process.returncode}; "
                            f"log tail:\n{process.log_tail()}"
                        )
                    failed = True
                    break
                pods = await kube.list_objects(PODS, namespace=self.trace.namespace)
                self.record.sample_usage(self._usage(pods.items))
                self._sample_teams()
                self.record.sample_free(self.now(), _allocated(pods.items))
                jobs = await kube.list_objects(JOBS, namespace=self.trace.namespace)
                for job in jobs.items:
                    key = f"{self.trace.namespace}/{_meta(job).get('name')}"
                    workload = self.record.workloads.get(key)
                    if workload is not None and workload.finished_at is None and _job_done(job):
                        workload.finished_at = self.now()
                        self.line(f"completed {key}")
                if self.now() > last_submission and self.record.done():
                    self.line("every Job finished or cannot be admitted: the trace is done")
                    break
                if end_after is not None and self.now() > end_after:
                    self.line(f"end of the trace window ({end_after:.0f}s)")
                    break
        finally:
            # Give the decision consumer a moment to print what is in flight.
            await asyncio.sleep(0.5)
            stop.set()
        return failed


async def _cancel_when(stop: asyncio.Event, task: "asyncio.Task[None]") -> None:
    """Cancel ``task`` once ``stop`` is set."""
    await stop.wait()
    task.cancel()


def _meta(obj: dict[str, object]) -> dict[str, object]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def _spec(obj: dict[str, object]) -> dict[str, object]:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def _status(obj: dict[str, object]) -> dict[str, object]:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def _int(mapping: object, key: str) -> int:

    if not isinstance(mapping, dict) or key not in mapping:
        return 0
    try:
        return parse_quantity(key, mapping[key])
    except QuantityError:
        return 0


def _pod_gpus(pod: Pod) -> int:
    return sum(_int(c.resources.requests, "nvidia.com/gpu") for c in pod.spec.containers)


def _allocated(pods: list[dict[str, object]]) -> dict[str, int]:
    """GPUs per node held by pods bound there and not finished."""
    held: dict[str, int] = {}
    for obj in pods:
        try:
            pod = decode(obj, Pod)
        except ObjectError:
            continue
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            held[pod.spec.node_name] = held.get(pod.spec.node_name, 0) + _pod_gpus(pod)
    return held


def _job_done(job: dict[str, object]) -> bool:
    status = _status(job)
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, dict)
            and condition.get("type") == "Complete"
            and condition.get("status") == "True"
        ):
            return True
    completions = _spec(job).get("completions")
    succeeded = status.get("succeeded")
    return isinstance(completions, int) and isinstance(succeeded, int) and succeeded >= completions
