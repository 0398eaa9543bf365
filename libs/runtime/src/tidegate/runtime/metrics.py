"""Prometheus metrics of a service: the ones every service has, and a registry for its own.

Names start with ``tidegate_`` and follow Kueue's where a counterpart exists, so dashboards
and alerts carry over. Each service gets its own :class:`~prometheus_client.CollectorRegistry`
(not the global one), so several services can run in one process (tests, the demo).
Services register their own metrics on :attr:`Metrics.registry`.
"""

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""Content type of the text exposition format."""


class Metrics:
    """The common metrics; also a :class:`tidegate.bus.ConsumerObserver`."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        """Register the service's own metrics here."""
        self.info = Gauge(
            "tidegate_build_info",
            "Always 1; labels say which service this is.",
            ["service"],
            registry=self.registry,
        )
        self.info.labels(service=service).set(1)
        self.ready = Gauge(
            "tidegate_ready",
            "1 when the service is ready (state replayed, setup done), else 0.",
            registry=self.registry,
        )
        self.messages = Counter(
            "tidegate_bus_messages_handled_total",
            "Messages handled by a durable consumer, by outcome (ack, retry, deadletter).",
            ["consumer", "outcome"],
            registry=self.registry,
        )
        self.handle_seconds = Histogram(
            "tidegate_bus_message_handle_duration_seconds",
            "Time from fetch to settle of one message.",
            ["consumer"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
            registry=self.registry,
        )
        self.replayed = Gauge(
            "tidegate_state_replayed",
            "1 once a state follower has replayed its stream.",
            ["follower"],
            registry=self.registry,
        )
        self.state_messages = Gauge(
            "tidegate_state_messages_handled",
            "Messages a state follower has handled since start.",
            ["follower"],
            registry=self.registry,
        )
        self.state_lag = Gauge(
            "tidegate_state_follower_lag_seconds",
            "Time from the last message a state follower handled being published to its "
            "handling (0 until it has replayed its stream): how far behind the bus it is.",
            ["follower"],
            registry=self.registry,
        )
        self.state_failures = Gauge(
            "tidegate_state_handler_failures",
            "Handler calls of a state follower that raised since start (each is retried).",
            ["follower"],
            registry=self.registry,
        )

        self.leader = Gauge(
            "tidegate_leader",
            "1 while this process holds the single-writer lease of the role, 0 on standby.",
            ["role"],
            registry=self.registry,
        )

    def message_handled(self, consumer: str, outcome: str, seconds: float) -> None:
        """Count one handled message (called by :class:`tidegate.bus.DurableConsumer`)."""
        self.messages.labels(consumer=consumer, outcome=outcome).inc()
        self.handle_seconds.labels(consumer=consumer).observe(seconds)

    def watch_follower(
        self,
        name: str,
        replayed: Callable[[], bool],
        handled: Callable[[], int],
        failures: Callable[[], int] = lambda: 0,
        lag: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """Report a follower's progress, read at scrape time."""
        self.replayed.labels(follower=name).set_function(lambda: float(replayed()))
        self.state_messages.labels(follower=name).set_function(lambda: float(handled()))
        self.state_failures.labels(follower=name).set_function(lambda: float(failures()))
        self.state_lag.labels(follower=name).set_function(lag)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
