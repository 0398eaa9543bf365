"""The Kubernetes writes of a leader, bounded by its lease.

A single-writer service (the ungater's releaser, preemption) sends its Kubernetes writes
through :meth:`tidegate.kube.KubeClient.guarded` with :func:`lease_write_guard`: each attempt,
retries included, is sent only while the lease is held with a margin, and may take no longer
than the lease is confirmed for. Only those services import this module (it loads the
Kubernetes client).
"""

from collections.abc import Callable

from tidegate.bus import LeaseUnconfirmed
from tidegate.kube import HeldBack, WriteGuard


def lease_write_guard(guard: Callable[[], float]) -> WriteGuard:
    """A client's write guard from a lease guard (which returns the seconds the lease is held
    beyond its margin): a lease not confirmed long enough (``LeaseUnconfirmed``) holds the
    write back as :class:`~tidegate.kube.HeldBack`, a Kubernetes failure the writers already
    retry; a lost lease (``LeaseLost``) goes through and stops the writer."""

    def checked() -> float:
        try:
            return guard()
        except LeaseUnconfirmed as exc:
            raise HeldBack(str(exc)) from exc

    return checked
