"""Test support shared by tidegate's integration tests and benchmarks.

Why: the tests under ``tests/`` (and the benchmarks under ``bench/``) each play the services
around the one they exercise, and they all wait, connect, follow streams and run services the
same way. Pytest imports test modules in importlib mode, so sibling test directories cannot
import each other; this package is the one home of what they share:

- :mod:`.waiting`: :func:`until` / :func:`until_async` poll a condition with a deadline;
  :func:`start_until` starts a task and waits for its ready event.
- :mod:`.bus`: :func:`connected` (a connection with the cluster's streams), :func:`following`
  (a stream follower for the length of a block), :func:`envelope` (what a test publishes).
- :mod:`.services`: :class:`RunningServices`, services run in the test's process.
- :mod:`.processes`: :class:`ServiceProcess` / :func:`service_process`, a service as a child
  process; :func:`run_to_exit` for one that must stop by itself.

Everything here drives the real bus, the real services and real processes; nothing is mocked.
What a test checks, and what a harness plays, stays in the tests. Production code never imports
this package (import-linter keeps it beside the services, at the top).
"""

from tidegate.testing.bus import connected, envelope, following
from tidegate.testing.processes import ServiceProcess, run_to_exit, service_process
from tidegate.testing.services import RunningServices
from tidegate.testing.waiting import start_until, until, until_async

__all__ = [
    "RunningServices",
    "ServiceProcess",
    "connected",
    "envelope",
    "following",
    "run_to_exit",
    "service_process",
    "start_until",
    "until",
    "until_async",
]
