"""A loop's defence against a cancellation swallowed below it (internal)."""

import asyncio


def unless_cancelled() -> None:
    """Raise ``CancelledError`` if this task was asked to stop and something below swallowed
    the request (loops check after each wait and each handled message): nats-py waits with
    ``asyncio.wait_for``, which in Python 3.11 returns the result when a cancellation arrives
    as the wait completes, and a handler may swallow one too. The loop would run on inside a
    cancelled TaskGroup, and the service never exit (seen in the chaos run: a deposed ungater
    kept handling decisions with its Kubernetes client already closed; and in CI: an ungater
    whose followers waited for their next message for ever while it stopped)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
