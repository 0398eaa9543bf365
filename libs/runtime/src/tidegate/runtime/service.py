"""Running a service: connect, create the layout, run supervised tasks, serve health, stop cleanly.

A service is its settings plus one *setup* coroutine that registers followers, consumers and
tasks on a :class:`ServiceContext`::

    async def setup(ctx: ServiceContext[MySettings]) -> None:
        view = View()
        await ctx.follow("state", stream=layout.state_stream(ctx.cluster),
                         subjects=subjects.state_wildcards(ctx.cluster), handler=view.apply)
        await ctx.consume(ConsumerSettings(...), handler=handle_decision)

    def main() -> None:
        run_service("ungater", MySettings, setup)

Lifecycle of :meth:`Service.run`: serve /healthz at once; connect to NATS (waiting for it if
needed); create or update the streams; run ``setup``; report ready once setup returned and
every follower has replayed. Every follower, consumer and spawned task runs in one TaskGroup:
if one fails, the others are cancelled and the service exits 1 (the orchestrator restarts it;
restarting is cheap because state is replayed and consumers are durable). On SIGTERM/SIGINT:
/readyz turns 503, consumers stop fetching and finish the batch in hand (up to
``shutdown_grace_seconds``), the remaining tasks are cancelled, the NATS connection is
drained, and the process exits 0. Either way, leases taken with :meth:`ServiceContext.lead`
are released once every task is done. A service process whose stop has not finished
``shutdown_margin_seconds`` after its grace ends anyway (exit 1, after logging every task):
a task that lost its cancellation must not keep a deposed leader alive.
"""

import asyncio
import cProfile
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Generic, NoReturn, TypeVar

from tidegate.bus import (
    Bus,
    BusError,
    ConsumerSettings,
    DurableConsumer,
    Handler,
    Lease,
    LeaseSettings,
    StateFollower,
    StateHandler,
    connect,
    default_holder_id,
)
from tidegate.runtime import collector, eventloop
from tidegate.runtime.http import Readiness, make_app, serve
from tidegate.runtime.metrics import Metrics
from tidegate.runtime.settings import S, SettingsError, load_settings
from tidegate.runtime.taskdump import log_tasks
from tidegate.telemetry import setup_logging, setup_tracing, shutdown_tracing

log = logging.getLogger(__name__)

T = TypeVar("T")

READY_POLL_SECONDS = 0.1
"""How often a starting service looks whether it is ready yet (to tune its collector)."""


class ServiceContext(Generic[S]):
    """What a service's setup gets: settings, the bus, metrics, and ways to start work."""

    def __init__(
        self,
        *,
        name: str,
        settings: S,
        bus: Bus,
        metrics: Metrics,
        readiness: Readiness,
        tasks: asyncio.TaskGroup,
    ) -> None:
        self.name = name
        """The service's name (``admission``, …)."""
        self.settings = settings
        self.bus = bus
        self.metrics = metrics
        """Register the service's own metrics on ``metrics.registry``."""
        self.stopping = asyncio.Event()
        """Set when the service is asked to stop: long-running loops should finish up."""
        self._readiness = readiness
        self._tasks = tasks
        self._graceful: list[asyncio.Task[None]] = []
        self._others: list[asyncio.Task[None]] = []
        self._leases: list[Lease] = []
        self.standby = False
        """True while :meth:`lead` waits for the lease."""
        self.setup_task: asyncio.Task[None] | None = None
        """The task running the service's setup."""
        self.setup_waits_for_lease = False
        """True while the setup itself is blocked in :meth:`lead`: such a standby counts as
        set up (ready), as everything the setup registered before the lease is running. A lease
        awaited by a spawned task does not make a setup that is still running count."""

    @property
    def cluster(self) -> str:
        """The cluster id from the settings."""
        return self.settings.cluster

    def spawn(
        self, name: str, work: Coroutine[None, None, None], *, graceful: bool = False
    ) -> None:
        """Run ``work`` supervised: if it raises, the service stops with exit code 1.

        A ``graceful`` task watches :attr:`stopping` and returns by itself on stop (it gets
        ``shutdown_grace_seconds``); any other task is cancelled at stop.
        """
        task = self._tasks.create_task(self._reported(name, work), name=f"{self.name}:{name}")
        (self._graceful if graceful else self._others).append(task)

    async def _reported(self, name: str, work: Coroutine[None, None, None]) -> None:
        """Run ``work``; log a failure at once, before the other tasks are stopped (the full
        traceback follows once they are)."""
        try:
            await work
        except Exception as exc:
            log.error("%s: %s failed, stopping the service: %s", self.name, name, exc)
            raise

    def require(self, name: str, check: Callable[[], bool]) -> None:
        """Report not-ready (naming ``name`` in /readyz) until ``check()`` is true."""
        self._readiness.add(name, check)

    async def follow(
        self, name: str, *, stream: str, subjects: Sequence[str], handler: StateHandler
    ) -> StateFollower:
        """Replay then follow a last-value stream; the service is not ready until replayed."""
        follower = StateFollower(
            self.bus, stream=stream, subjects=subjects, handler=handler, name=name
        )
        self.require(f"replay:{name}", follower.replayed.is_set)
        self.metrics.watch_follower(
            name,
            follower.replayed.is_set,
            lambda: follower.handled,
            lambda: follower.failures,
            lambda: follower.lag_seconds,
        )
        self.spawn(f"follow:{name}", follower.run())
        return follower

    async def consume(self, settings: ConsumerSettings, handler: Handler) -> DurableConsumer:
        """Create (or update) a durable consumer and run it until stop."""
        consumer = DurableConsumer(
            self.bus,
            cluster=self.cluster,
            settings=settings,
            handler=handler,
            observer=self.metrics,
        )
        await consumer.start()
        self.spawn(f"consume:{settings.durable}", consumer.run(self.stopping), graceful=True)
        return consumer

    async def lead(
        self, role: str, *, ttl_seconds: float = 10.0, holder: str | None = None
    ) -> Lease:
        """Wait until this process holds the single-writer lease ``role``, and keep it.

        Until then the service is a standby (it stays ready: its view is complete); a standby
        tries again every second (every quarter of the TTL when that is shorter). ``holder``
        names this process in the lease (default: :func:`~tidegate.bus.default_holder_id`).
        Put ``lease.epoch`` in everything the leader writes. Losing the lease later (NATS
        unreachable past the TTL, or taken over) stops the service with exit code 1, so it
        restarts as a standby; when the service stops, gracefully or not, it releases the
        lease so a standby takes over at once.
        """
        lease = Lease(
            self.bus,
            cluster=self.cluster,
            settings=LeaseSettings(
                name=role,
                holder=holder or default_holder_id(),
                ttl_seconds=ttl_seconds,
                acquire_poll_seconds=min(1.0, ttl_seconds / 4),
            ),
        )
        leading = self.metrics.leader.labels(role=role)
        leading.set(0)
        log.info("%s: waiting for the %s lease (standby)", self.name, role)
        self.standby = True
        self.setup_waits_for_lease = asyncio.current_task() is self.setup_task
        try:
            epoch = await lease.acquire()
        finally:
            self.standby = False
            self.setup_waits_for_lease = False
        leading.set(1)
        log.info("%s: leading %s with epoch %d", self.name, role, epoch)
        self._leases.append(lease)
        self.spawn(f"lease:{role}", lease.keep_alive())
        return lease

    async def _stop_tasks(self, grace_seconds: float) -> None:
        self.stopping.set()
        if self._graceful:
            _, late = await asyncio.wait(self._graceful, timeout=grace_seconds)
            for task in late:
                log.warning(
                    "%s did not finish within %.0fs; cancelling", task.get_name(), grace_seconds
                )
                task.cancel()
        for task in self._others:
            task.cancel()
        await asyncio.gather(*self._others, return_exceptions=True)

    async def _release_leases(self) -> None:
        """Give up every lease held (its tasks are done), so a standby need not wait the TTL."""
        for lease in self._leases:
            try:
                await lease.release()
            except BusError as exc:
                log.warning(
                    "%s: could not release the %s lease: %s", self.name, lease.settings.name, exc
                )
            self.metrics.leader.labels(role=lease.settings.name).set(0)


Setup = Callable[[ServiceContext[S]], Awaitable[None]]
"""A service's setup coroutine."""


class Service(Generic[S]):
    """One service process: see the module docstring for the lifecycle."""

    def __init__(self, name: str, settings: S, setup: Setup[S]) -> None:
        self.name = name
        self.settings = settings
        self._setup = setup
        self.metrics = Metrics(name)
        self.readiness = Readiness()
        self.http_port: int | None = None
        """The port /healthz etc. are served on, once started (useful with port 0)."""
        self.started = asyncio.Event()
        """Set once the HTTP endpoints are being served."""
        self._stop = asyncio.Event()
        self.shutting_down = asyncio.Event()
        """Set when the service begins to stop: asked to, or one of its tasks failed."""
        self._setup_done = False
        self._context: ServiceContext[S] | None = None
        # Registered here, not in run(), so the service is never "ready" before it has started.
        self.readiness.add("setup", self._set_up)

    def _set_up(self) -> bool:
        waiting_in_setup = self._context is not None and self._context.setup_waits_for_lease
        return self._setup_done or waiting_in_setup

    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> int:
        """Run until stopped; the exit code: 0 after a graceful stop, 1 after a failure."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
            loop.add_signal_handler(signal.SIGUSR1, log_tasks)
        runner, self.http_port = await serve(
            make_app(self.name, self.readiness, self.metrics), self.settings.http_port
        )
        self.started.set()
        log.info("%s starting with %r", self.name, self.settings)
        log.info("%s serving health on :%d", self.name, self.http_port)
        bus: Bus | None = None
        code = 0
        try:
            bus = await self._connect()
            if bus is None:
                return 0
            await bus.ensure_layout(self.settings.cluster)
            async with asyncio.TaskGroup() as tasks:
                self._context = context = ServiceContext(
                    name=self.name,
                    settings=self.settings,
                    bus=bus,
                    metrics=self.metrics,
                    readiness=self.readiness,
                    tasks=tasks,
                )
                try:
                    context.setup_task = asyncio.ensure_future(self._setup(context))
                    self._setup_done, _ = await self._unless_stopped(context.setup_task)
                    if self._setup_done:
                        log.info("%s set up", self.name)
                        await self._stop.wait()
                    log.info("%s stopping", self.name)
                    self.shutting_down.set()
                    self.readiness.stopping = True
                    await context._stop_tasks(self.settings.shutdown_grace_seconds)
                finally:
                    self.shutting_down.set()  # also when a task failed (this one is cancelled)
        except* Exception as failures:
            for failure in failures.exceptions:
                log.error("%s failed: %s", self.name, failure, exc_info=failure)
            code = 1
        finally:
            self.readiness.stopping = True
            if self._context is not None:
                await self._context._release_leases()
            if bus is not None:
                await bus.drain()
            await runner.cleanup()
            if handle_signals:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                    loop.remove_signal_handler(signum)
        log.info("%s stopped (exit %d)", self.name, code)
        return code

    async def _connect(self) -> Bus | None:
        """Connect, giving up only when asked to stop (then None)."""
        _, bus = await self._unless_stopped(connect(self.settings.bus_settings(self.name)))
        return bus

    async def _unless_stopped(self, work: Awaitable[T]) -> tuple[bool, T | None]:
        """``(True, result)`` if ``work`` finished first; ``(False, None)`` if a stop was
        requested first, in which case ``work`` is cancelled."""
        task = asyncio.ensure_future(work)
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                # gather: the task's own cancellation is its result, while one of ours still
                # propagates (suppressing CancelledError here would swallow it).
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            return False, None
        return True, task.result()


def run_service(name: str, settings_type: type[S], setup: Setup[S]) -> NoReturn:
    """Entry point of a service process: load settings, set up logs and traces, run, exit.

    A bad setting ends the process with exit code 2 and one line naming it.
    """
    try:
        settings = load_settings(settings_type)
    except SettingsError as exc:
        sys.stderr.write(f"tidegate-{name}: invalid setting {exc}\n")
        sys.exit(2)
    setup_logging(settings.log_level)
    setup_tracing(f"tidegate-{name}")
    service = Service(name, settings, setup)
    limit = settings.shutdown_grace_seconds + settings.shutdown_margin_seconds
    # CPU time, not wall time: on a busy machine a wall-clock profile charges the time the
    # process waited for a core to whatever call it was in (a socket send that woke a peer).
    profiler = cProfile.Profile(time.process_time) if settings.cprofile_dir is not None else None
    if profiler is not None:
        profiler.enable()
    try:
        code = eventloop.run(run_bounded(service, limit), settings.event_loop)
    except eventloop.EventLoopError as exc:
        sys.stderr.write(f"tidegate-{name}: {exc}\n")
        code = 2
    finally:
        shutdown_tracing()
        if profiler is not None and settings.cprofile_dir is not None:
            profiler.disable()
            settings.cprofile_dir.mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(settings.cprofile_dir / f"{name}-{os.getpid()}.prof")
    sys.exit(code)


async def collect_less_often_once_ready(service: Service[S]) -> None:
    """Apply the garbage collector's threshold (``gc_threshold``) once ``service`` is ready.

    Not before: while a service replays its streams nearly every object it makes stays, and
    CPython's default collects them while they are still in the CPU's caches (docs/benchmarks.md,
    "The garbage collector").
    """
    # Readiness is a set of predicates that nothing signals, so it is polled, as /readyz does.
    while not service.readiness.ready:  # noqa: ASYNC110
        await asyncio.sleep(READY_POLL_SECONDS)
    collector.apply(service.settings.gc_threshold)
    log.info("%s: garbage collector threshold %d", service.name, service.settings.gc_threshold)


async def run_bounded(service: Service[S], limit_seconds: float) -> int:
    """Run ``service``; once it begins to stop, give it ``limit_seconds`` to finish, then log
    every asyncio task and end the process (exit 1) without waiting further."""
    run = asyncio.create_task(service.run(), name=f"{service.name}:run")
    stopping = asyncio.create_task(service.shutting_down.wait())
    collecting = asyncio.create_task(collect_less_often_once_ready(service))
    await asyncio.wait({run, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    collecting.cancel()
    try:
        async with asyncio.timeout(limit_seconds):
            return await asyncio.shield(run)
    except TimeoutError:
        log_tasks(f"still running {limit_seconds:.0f}s after the stop began")
        log.error(
            "%s: stopping did not finish within %.0fs; exiting (tasks above)",
            service.name,
            limit_seconds,
        )
        logging.shutdown()
        os._exit(1)
