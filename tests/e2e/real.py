"""tidegate installed on the session's real control plane, as a platform team would install it.

Why: the simulator has no authorization, emulates the gate webhook in-process and binds pods
with its own scheduler. Here the five services run as processes against the real API server,
each with its own ServiceAccount token (TokenRequest) bound to exactly the RBAC the Helm chart
renders; the CRDs are the chart's (plus JobSet's, whose controller the test plays: see
:meth:`RealSystem.create_jobset`); the API server itself calls the ungater's gate webhook
(MutatingWebhookConfiguration as the chart renders it, with a URL and caBundle instead of a
Service, over TLS); fake GPU nodes come from ``tidegate nodes``; the real kube-scheduler binds.
Tests take it through the ``real_tidegate`` fixture (tests/e2e/conftest.py).

The API server's audit log says what every service asked and whether RBAC allowed it:
:meth:`RealSystem.forbidden` (must be empty) and :meth:`RealSystem.rbac_report` (grants no
request used, and requests no grant covers).
"""

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tidegate.bus import ConsumerSettings, DurableConsumer, Received, layout
from tidegate.bus.server import free_port
from tidegate.kube import (
    CRDS,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    AlreadyExists,
    KubeClient,
    KubeSettings,
    NotFound,
    ResourceType,
    connect,
)
from tidegate.kube.transport import JsonObject
from tidegate.model import Message, subjects
from tidegate.sim.bundled import bundled_crds
from tidegate.sim.rbac import service_account_user
from tidegate.sim.topology import layout_for
from tidegate.sim.workloads import jobset_child_job
from tidegate.testing import ServiceProcess, connected, until_async
from tidegate.testing.controlplane import ControlPlane, serving_certificate
from tidegate.testing.rbac import Permission, RbacUsage

from .chart import REPO, permissions, render_chart
from .invariants import Invariants, decision_problems, gated_forever, unreleased_victims
from .system import fast_env

CRD_DIR = REPO / "deploy" / "crds"
STARTUP_RESTARTS: list[str] = []
"""Services that exited while starting and were started again (printed at the end of the run)."""

MODULES = {
    "watcher": "watcher",
    "topology-cache": "topology_cache",
    "admission": "admission",
    "preemption": "preemption",
    "ungater": "ungater",
}

SERVICEACCOUNTS = ResourceType(
    group="", version="v1", plural="serviceaccounts", kind="ServiceAccount"
)
CLUSTERROLES = ResourceType(
    group="rbac.authorization.k8s.io", version="v1", plural="clusterroles", kind="ClusterRole"
)
CLUSTERROLEBINDINGS = ResourceType(
    group="rbac.authorization.k8s.io",
    version="v1",
    plural="clusterrolebindings",
    kind="ClusterRoleBinding",
)
WEBHOOKS = ResourceType(
    group="admissionregistration.k8s.io",
    version="v1",
    plural="mutatingwebhookconfigurations",
    kind="MutatingWebhookConfiguration",
)

TIME_SCALE = 0.05
"""Wall seconds per simulated second, for the fake kubelets (grace periods: a deleted pod's
default 30 s become 1.5 s) and the services' timeouts in simulated time (``fast_env``), as the
simulator's end-to-end tests compress them."""

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""The label a JobSet controller puts on its child Jobs and their pods."""
JOBSET_CRD = next(c for c in bundled_crds() if c["metadata"]["name"] == "jobsets.jobset.x-k8s.io")  # type: ignore[index]
"""The JobSet CRD as the simulator serves it (open schema). No JobSet controller runs on the
real control plane: :meth:`RealSystem.create_jobset` creates the child Jobs as it would."""


@dataclass
class RealSystem:
    """tidegate on the real control plane; see the module docstring."""

    plane: ControlPlane
    admin: KubeClient
    namespace: str
    """Where the test's workloads live (labelled ``tidegate.io/managed``)."""
    release_namespace: str
    """Where the chart's ServiceAccounts live."""
    cluster: str
    workdir: Path
    nats_url: str
    time_scale: float = TIME_SCALE
    accounts: dict[str, str] = field(default_factory=dict)
    """ServiceAccount name per service."""
    roles: dict[str, set[Permission]] = field(default_factory=dict)
    """What the chart grants each service."""
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    node_agent: asyncio.subprocess.Process | None = None
    node_prefix: str = ""
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each service's environment (to start it again after a crash)."""
    decisions: list[Message] = field(default_factory=list)
    """Every decision on the bus, in stream order (while :meth:`observing`)."""
    seen_pods: list[JsonObject] = field(default_factory=list)
    """This test's pods as last listed from the API server (while :meth:`observing`)."""
    seen_nodes: list[JsonObject] = field(default_factory=list)
    """This test's fake nodes as last listed from the API server."""
    checks: Invariants | None = None
    settled: bool = False
    """Whether an :meth:`observing` block ended (cleanly) and :meth:`settle` ran: from then on
    :meth:`problems` includes the end checks."""
    end_problems: list[str] = field(default_factory=list)
    """What :meth:`settle` found still wrong at the end (pods gated forever)."""

    @classmethod
    def fresh(
        cls,
        plane: ControlPlane,
        admin: KubeClient,
        workdir: Path,
        nats_url: str = "",
        *,
        prefix: str = "tg-e2e",
        time_scale: float = TIME_SCALE,
    ) -> "RealSystem":
        """A system with names of its own (namespaces, cluster id), not installed yet."""
        run = uuid.uuid4().hex[:6]
        return cls(
            plane=plane,
            admin=admin,
            namespace=f"{prefix}-{run}",
            release_namespace=f"{prefix}-sys-{run}",
            cluster=f"r{run}",
            workdir=workdir,
            nats_url=nats_url,
            time_scale=time_scale,
        )

    def user(self, service: str) -> str:
        """The Kubernetes user name of a service's ServiceAccount."""
        return service_account_user(self.release_namespace, self.accounts[service]).name

    async def install(self) -> None:
        """Namespaces, the chart's CRDs (and JobSet's), the chart's ServiceAccounts and RBAC."""
        for name, labels in (
            (self.release_namespace, {}),
            (self.namespace, {"tidegate.io/managed": "true"}),
        ):
            await self.admin.create(
                NAMESPACES,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels},
                },
            )
        crds = [
            crd
            for path in sorted(CRD_DIR.glob("*.yaml"))
            for crd in yaml.safe_load_all(path.read_text())
            if isinstance(crd, dict) and crd.get("kind") == "CustomResourceDefinition"
        ]
        for crd in [*crds, JOBSET_CRD]:
            with contextlib.suppress(AlreadyExists):
                await self.admin.create(CRDS, crd)
        documents = render_chart(self.release_namespace, self.cluster)
        for doc in documents:
            kind = doc["kind"]
            if kind == "Deployment":
                service = doc["metadata"]["labels"]["app.kubernetes.io/component"]
                self.accounts[service] = doc["spec"]["template"]["spec"]["serviceAccountName"]
            elif kind == "ServiceAccount":
                await self.admin.create(SERVICEACCOUNTS, doc, namespace=self.release_namespace)
            elif kind == "ClusterRole":
                service = doc["metadata"]["labels"]["app.kubernetes.io/component"]
                self.roles[service] = permissions(doc)
                await self.admin.create(CLUSTERROLES, doc)
            elif kind == "ClusterRoleBinding":
                await self.admin.create(CLUSTERROLEBINDINGS, doc)
        self._webhook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")

    async def start_nodes(self, nodes: str) -> None:
        """``tidegate nodes`` with admin rights (it plays the kubelets, not tidegate)."""
        self.node_prefix = f"{self.cluster}-"
        log = (self.workdir / "nodes.log").open("ab")
        self.node_agent = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tidegate.cli",
            "nodes",
            "--kubeconfig",
            str(self.plane.kubeconfig),
            "--nodes",
            nodes,
            "--prefix",
            self.node_prefix,
            "--delete-nodes",
            "--time-scale",
            f"{self.time_scale:g}",
            stdout=log,
            stderr=log,
        )
        log.close()

    async def ready_nodes(self) -> list[JsonObject]:
        """This test's nodes that are Ready and carry no taint."""
        listed = await self.admin.list_objects(NODES)
        ready = []
        for node in listed.items:
            name = str(node["metadata"]["name"])  # type: ignore[index]
            if not name.startswith(self.node_prefix):
                continue
            conditions = node.get("status", {}).get("conditions") or []  # type: ignore[union-attr]
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            if is_ready and not (node.get("spec", {}).get("taints")):  # type: ignore[union-attr]
                ready.append(node)
        return ready

    async def start_services(self, overrides: dict[str, str] | None = None) -> None:
        """The five services as processes, each with its own ServiceAccount token;
        ``overrides`` adds to (or replaces) every service's environment."""
        cert_dir = self.workdir / "webhook-tls"
        serving_certificate(
            self.plane.ca_file.read_bytes(),
            self.plane.ca_key_file.read_bytes(),
            ("127.0.0.1",),
            cert_dir,
        )
        webhook_port = free_port()
        for service, module in MODULES.items():
            kubeconfig = await self.plane.service_account_kubeconfig(
                self.admin,
                self.release_namespace,
                self.accounts[service],
                self.workdir / f"{service}.kubeconfig",
            )
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")},
                **fast_env(self.time_scale),
                "TIDEGATE_CLUSTER": self.cluster,
                "TIDEGATE_NATS_URL": self.nats_url,
                "TIDEGATE_KUBECONFIG": str(kubeconfig),
                "TIDEGATE_KUEUE_TOPOLOGY_VERSION": "v1alpha1",
                "PYTHONUNBUFFERED": "1",
                **(overrides or {}),
            }
            if service == "ungater":
                env.update(
                    {
                        "TIDEGATE_WEBHOOK": "on",
                        "TIDEGATE_WEBHOOK_PORT": str(webhook_port),
                        "TIDEGATE_WEBHOOK_CERT_DIR": str(cert_dir),
                    }
                )
            self.envs[service] = env
            process = await ServiceProcess.start(module, env, logs=self.workdir)
            self.services[service] = process
        import aiohttp

        async with aiohttp.ClientSession() as http:
            for service, process in list(self.services.items()):
                try:
                    await process.ready(http, within=60.0)
                except AssertionError:
                    if process.process.returncode is None:
                        raise  # still running: not ready in time
                    # It exited while starting: start it once more, as Kubernetes restarts a
                    # container, and say why at the end of the run. (An ungater exited 1 while
                    # starting once in a CI run, its log cut off; the likely cause, its webhook
                    # port taken by an outgoing connection first, free_port no longer allows.)
                    STARTUP_RESTARTS.append(
                        f"{service} exited with {process.process.returncode} while starting "
                        f"and was started again; the end of its log:\n{process.log_tail()}"
                    )
                    await process.close(within=10)
                    again = await ServiceProcess.start(
                        MODULES[service], self.envs[service], logs=self.workdir
                    )
                    self.services[service] = again
                    await again.ready(http, within=60.0)
        webhook = dict(self._webhook)
        hooks = []
        for hook in webhook["webhooks"]:
            client_config = {
                "url": f"https://127.0.0.1:{webhook_port}/mutate-pods",
                "caBundle": _b64(self.plane.ca_file.read_bytes()),
            }
            hooks.append({**hook, "clientConfig": client_config})
        webhook["webhooks"] = hooks
        await self.admin.create(WEBHOOKS, webhook)

    async def crash(self, service: str) -> None:
        """SIGKILL a service, then start it again with the same identity and settings."""
        await self.kill(service)
        await self.restart(service)

    async def kill(self, service: str) -> None:
        """SIGKILL a service (:meth:`restart` starts it again)."""
        process = self.services[service]
        process.signal(signal.SIGKILL)
        await process.wait()
        await process.close()

    async def restart(self, service: str) -> None:
        """Start a killed service again with the same identity and settings; returns once it
        is ready."""
        again = await ServiceProcess.start(MODULES[service], self.envs[service], logs=self.workdir)
        self.services[service] = again
        import aiohttp

        async with aiohttp.ClientSession() as http:
            await again.ready(http, within=60.0)

    async def refresh(self) -> None:
        """Read this test's pods and nodes from the API server."""
        pods = await self.admin.list_objects(PODS, namespace=self.namespace)
        nodes = await self.admin.list_objects(NODES)
        self.seen_pods = list(pods.items)
        self.seen_nodes = [
            n
            for n in nodes.items
            if str(n["metadata"]["name"]).startswith(self.node_prefix)  # type: ignore[index]
        ]

    @contextlib.asynccontextmanager
    async def observing(self, *, grace_seconds: float = 20.0) -> AsyncIterator[Invariants]:
        """Follow the decisions on the bus and sample the invariants of tests/e2e/invariants.py
        from the API server's objects about five times a second; when the block ends without
        an error, :meth:`settle`."""
        await self.refresh()
        checks = self.checks = Invariants(
            managed_namespaces=[self.namespace], grace_seconds=grace_seconds
        )
        stop = asyncio.Event()

        async def on_decision(received: Received) -> None:
            self.decisions.append(received.envelope.body)
            checks.decided(received.envelope.body)

        async def sampler() -> None:
            while not stop.is_set():
                await self.refresh()
                checks.sample(self.seen_nodes, self.seen_pods)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)

        async with connected(self.nats_url, self.cluster, name="e2e-real-observer") as bus:
            consumer = DurableConsumer(
                bus,
                cluster=self.cluster,
                settings=ConsumerSettings(
                    durable="e2e-real-observer",
                    stream=layout.decisions_stream(self.cluster),
                    subjects=(subjects.decision_wildcard(self.cluster),),
                    fetch_timeout_seconds=0.25,
                ),
                handler=on_decision,
            )
            tasks = [asyncio.create_task(consumer.run(stop)), asyncio.create_task(sampler())]
            try:
                yield checks
                await self.settle()
            finally:
                stop.set()
                for result in await asyncio.gather(*tasks, return_exceptions=True):
                    if isinstance(result, Exception):
                        raise result

    def healthy(self, what: str) -> None:
        """Fail, naming ``what``, when a service died, the API server refused one a request
        (403) or (while or after :meth:`observing`) an invariant broke."""
        for process in self.services.values():
            process.check()
        refused = self.forbidden()
        assert refused == [], f"{what}: the API server refused {refused}"
        problems = self.problems()
        assert problems == [], f"{what}: invariants broken: {problems}"

    def assert_rbac(self, usage: "RbacUsage | None" = None) -> None:
        """No request refused, none outside the chart's grants; add to ``usage``."""
        assert self.forbidden() == []
        missing, _ = self.rbac_report()
        assert {s: m for s, m in missing.items() if m} == {}
        if usage is not None:
            usage.add(self.roles, self.used())

    async def create_jobset(self, body: JsonObject) -> JsonObject:
        """Create a JobSet and then its child Jobs as the JobSet controller would
        (:func:`tidegate.sim.workloads.jobset_child_job`, the simulator's controller's own
        bodies); none runs here. Everything after (pods by the Job controller, the gate
        webhook, tidegate, kube-scheduler, garbage collection by the ownerReference) is real."""

        async def created() -> JsonObject | None:
            try:
                return await self.admin.create(JOBSETS, body, namespace=self.namespace)
            except NotFound:  # the CRD is not established yet
                return None

        jobset = await until_async(created, within=30.0, what="the JobSet CRD served")
        suspended = jobset["spec"].get("suspend") is True  # type: ignore[union-attr]
        for entry in jobset["spec"]["replicatedJobs"]:  # type: ignore[index, union-attr]
            for index in range(int(entry.get("replicas", 1))):  # type: ignore[union-attr]
                job = jobset_child_job(jobset, entry, index, suspended=suspended)  # type: ignore[arg-type]
                await self.admin.create(JOBS, job, namespace=self.namespace)
        return jobset

    async def sync_jobset_suspend(self, name: str) -> None:
        """Give the JobSet ``name``'s child Jobs its ``spec.suspend``, as the JobSet controller
        would once the JobSet is suspended or resumed (none runs here)."""
        jobset = await self.admin.get(JOBSETS, name, namespace=self.namespace)
        suspended = jobset["spec"].get("suspend") is True  # type: ignore[union-attr]
        children = await self.admin.list_objects(
            JOBS, namespace=self.namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}"
        )
        for job in children.items:
            if job["spec"].get("suspend", False) != suspended:  # type: ignore[union-attr]
                await self.admin.patch(
                    JOBS,
                    str(job["metadata"]["name"]),  # type: ignore[index]
                    {"spec": {"suspend": suspended}},
                    namespace=self.namespace,
                )

    def problems(self) -> list[str]:
        """Sampled violations and the decision log's problems (tests/e2e/invariants.py) so far;
        once :meth:`settle` ran, also victims never released and pods gated forever."""
        sampled = self.checks.violations if self.checks is not None else []
        logged = decision_problems(self.decisions, settled=self.settled)
        return sampled + logged + self.end_problems

    async def settle(self, *, within: float = 30.0) -> None:
        """The end of a scenario (the observer still following): wait up to ``within`` seconds
        until every victim was released and no live pod of a workload whose admission is in
        force still carries the gate, read from the API server; what is still wrong then stays
        in :meth:`problems`."""
        deadline = asyncio.get_running_loop().time() + within
        while True:
            await self.refresh()
            jobs = await self.admin.list_objects(JOBS, namespace=self.namespace)
            replicasets = await self.admin.list_objects(REPLICASETS, namespace=self.namespace)
            owners = {
                str(o["metadata"]["uid"]): o  # type: ignore[index]
                for o in [*jobs.items, *replicasets.items]
            }
            self.end_problems = gated_forever(self.decisions, self.seen_pods, owners)
            quiet = not self.end_problems and not unreleased_victims(self.decisions)
            if quiet or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.5)
        self.settled = True

    def forbidden(self) -> list[str]:
        """Every request of a tidegate service that RBAC refused (403, authorization denied)."""
        users = {self.user(s): s for s in self.accounts}
        found = []
        for event in self.plane.audit_events():
            user = event.get("user", {}).get("username")  # type: ignore[union-attr]
            code = event.get("responseStatus", {}).get("code")  # type: ignore[union-attr]
            annotations = event.get("annotations") or {}
            # RBAC's refusals only: a create in a namespace being deleted is a 403 too, but
            # authorized (a previous test's namespace, torn down while its services finished).
            refused = annotations.get("authorization.k8s.io/decision") != "allow"  # type: ignore[union-attr]
            if user in users and code == 403 and refused:
                found.append(f"{users[user]}: {event.get('verb')} {event.get('requestURI')}")
        return found

    def used(self) -> dict[str, set[Permission]]:
        """What each service asked for, per the audit log (group, resource, verb)."""
        users = {self.user(s): s for s in self.accounts}
        asked: dict[str, set[Permission]] = {s: set() for s in self.accounts}
        for event in self.plane.audit_events():
            user = event.get("user", {}).get("username")  # type: ignore[union-attr]
            ref = event.get("objectRef")
            if user not in users or not isinstance(ref, dict) or "resource" not in ref:
                continue
            resource = ref["resource"] + (
                f"/{ref['subresource']}" if ref.get("subresource") else ""
            )
            asked[users[user]].add((ref.get("apiGroup", ""), resource, str(event["verb"])))
        return asked

    def rbac_report(self) -> tuple[dict[str, set[Permission]], dict[str, set[Permission]]]:
        """(requests no grant covers, grants no request used), per service."""
        used = self.used()
        missing = {s: used[s] - self.roles.get(s, set()) for s in used}
        unused = {s: self.roles.get(s, set()) - used[s] for s in used}
        return missing, unused

    async def close(self) -> None:
        """Stop the services and the node agent; remove the webhook first (else the API
        server keeps calling a dead ungater)."""
        with contextlib.suppress(Exception):
            await self.admin.delete(WEBHOOKS, str(self._webhook["metadata"]["name"]))
        await asyncio.gather(*(p.close() for p in self.services.values()), return_exceptions=True)
        if self.node_agent is not None and self.node_agent.returncode is None:
            self.node_agent.terminate()
            try:
                await asyncio.wait_for(self.node_agent.wait(), 30)
            except TimeoutError:
                self.node_agent.kill()
                await self.node_agent.wait()
        with contextlib.suppress(Exception):
            await self.admin.delete(NAMESPACES, self.namespace)

    async def pods(self) -> list[JsonObject]:
        """The test namespace's pods, from the API server."""
        return (await self.admin.list_objects(PODS, namespace=self.namespace)).items


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


@contextlib.asynccontextmanager
async def real_system(
    plane: ControlPlane,
    nats_url: str,
    workdir: Path,
    *,
    nodes: str,
    usage: RbacUsage | None = None,
    time_scale: float = TIME_SCALE,
    env: dict[str, str] | None = None,
) -> AsyncIterator[RealSystem]:
    """Install tidegate on ``plane`` and start it, with fake nodes ``nodes``, all of them Ready
    and untainted when it yields (``env`` adds to the services' environment); tear it down. On a clean exit it checks that every service
    is alive, that the API server refused none of their requests, that nothing observed broke
    an invariant (:meth:`RealSystem.problems`, end checks included) and that none asked beyond
    the chart's RBAC (adding what they asked to ``usage``)."""
    settings = KubeSettings(source="kubeconfig", kubeconfig=plane.kubeconfig, qps=0.0)
    expected = len(layout_for(nodes).nodes)
    async with await connect(settings) as admin:
        system = RealSystem.fresh(plane, admin, workdir, nats_url, time_scale=time_scale)
        try:
            await system.install()
            await system.start_nodes(nodes)
            await system.start_services(env)

            async def nodes_ready() -> bool:
                return len(await system.ready_nodes()) == expected

            await until_async(
                nodes_ready, within=90.0, what=f"{expected} fake nodes Ready and untainted"
            )
            yield system
            system.healthy("the end")
            system.assert_rbac(usage)
        finally:
            await system.close()


RealTidegate = Callable[..., contextlib.AbstractAsyncContextManager[RealSystem]]
"""The ``real_tidegate`` fixture: ``real_tidegate(nodes="1x2x2x8gpu")`` is :func:`real_system`
on the session's control plane and nats-server, in the test's temporary directory, its RBAC
use summed up for the end-of-run report."""
