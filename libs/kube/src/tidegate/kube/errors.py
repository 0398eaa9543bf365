"""tidegate's own Kubernetes errors, one class per HTTP status the code reacts to.

kubernetes-asyncio raises ``ApiException`` for everything, ``ValueError`` for some successes,
and aiohttp errors for the network; none of those may leak out of :mod:`tidegate.kube`. Callers
catch these classes instead and decide by type: :class:`Conflict` means re-read and retry,
:class:`NotFound` means the object is gone, :class:`Invalid` means the request itself is wrong
(and says which field), :class:`TooManyRequests` / :class:`ServerError` /
:class:`Unreachable` are transient. This module only classifies; it does not retry.
"""

# ruff: noqa: N818 - the classes are named after the HTTP statuses, as callers read them.

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec


@dataclass(frozen=True, slots=True)
class Cause:
    """One field-level reason from a Kubernetes Status (``details.causes[]``)."""

    field: str
    """JSON path of the offending field, e.g. ``spec.nodeSelector``; may be empty."""
    reason: str
    """Machine-readable token, e.g. ``FieldValueInvalid``."""
    message: str
    """Human-readable explanation."""


class KubeError(Exception):
    """Root of every error :mod:`tidegate.kube` raises.

    ``status`` is the HTTP status (0 when there was no response), ``reason`` the Kubernetes
    Status reason token (e.g. ``AlreadyExists``), ``message`` the server's message and
    ``causes`` its field-level details.
    """

    status: int = 0

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        causes: tuple[Cause, ...] = (),
        operation: str = "",
    ) -> None:
        if status is not None:
            self.status = status
        self.message = message
        self.reason = reason
        self.causes = causes
        self.operation = operation
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.operation}: " if self.operation else ""
        code = f"HTTP {self.status}" if self.status else ""
        reason = f" {self.reason}" if self.reason and code else ""
        text = f"{head}{code}{reason}{': ' if code else ''}{self.message}"
        if self.causes:
            details = "; ".join(
                f"{c.field or '<object>'}: {c.message or c.reason}" for c in self.causes
            )
            text += f" [{details}]"
        return text

    @property
    def fields(self) -> tuple[str, ...]:
        """The field paths the server blamed (empty when it named none)."""
        return tuple(c.field for c in self.causes if c.field)


class KubeConfigError(KubeError):
    """The settings or the kubeconfig / in-cluster credentials are unusable."""


class Unreachable(KubeError):
    """No HTTP response: connection refused or reset, DNS, TLS or a timeout."""


class BadRequest(KubeError):
    """400: the request is malformed (e.g. an undecodable patch)."""

    status = 400


class Unauthorized(KubeError):
    """401: the credentials were rejected."""

    status = 401


class Forbidden(KubeError):
    """403: RBAC does not allow this verb on this resource."""

    status = 403


class NotFound(KubeError):
    """404: the object (or the resource type, e.g. a CRD not installed) does not exist."""

    status = 404


class MethodNotAllowed(KubeError):
    """405: the resource does not support this verb."""

    status = 405


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion precondition failed)."""

    status = 409


class AlreadyExists(KubeError):
    """409 with reason AlreadyExists: a create found an object of that name."""

    status = 409


class Gone(KubeError):
    """410: the resourceVersion (or list continue token) is too old; relist."""

    status = 410


class Unsupported(KubeError):
    """415: the content type is not accepted (e.g. strategic merge patch on a custom resource)."""

    status = 415


class Invalid(KubeError):
    """422: the server rejected the content; ``causes`` name the fields."""

    status = 422


class _RetryLater(KubeError):
    """A transient status after which the server may say how long to wait (Retry-After)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        causes: tuple[Cause, ...] = (),
        operation: str = "",
        retry_after_seconds: float | None = None,
    ) -> None:
        self.retry_after_seconds = retry_after_seconds
        """Seconds the server asked us to wait (header or Status details), if it said."""
        super().__init__(message, status=status, reason=reason, causes=causes, operation=operation)


class TooManyRequests(_RetryLater):
    """429: throttled by the server (or an eviction blocked by a PodDisruptionBudget)."""

    status = 429


class ServerError(_RetryLater):
    """5xx: the API server failed (or a webhook / etcd behind it did)."""

    status = 500


class HeldBack(KubeError):
    """A write of a guarded client that was not sent: its guard held it back for now (the
    writer's lease is not confirmed long enough); try again later."""


class UnexpectedResponse(KubeError):
    """A status or body this adapter does not know how to read."""


TRANSIENT: tuple[type[KubeError], ...] = (TooManyRequests, ServerError, Unreachable)
"""Errors worth retrying later without changing the request."""

_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    415: Unsupported,
    422: Invalid,
    429: TooManyRequests,
}


class _StatusCause(msgspec.Struct):
    field: str = ""
    reason: str = ""
    message: str = ""


class _StatusDetails(msgspec.Struct):
    causes: list[_StatusCause] = []
    retryAfterSeconds: int | None = None  # noqa: N815 - the API's field name


class _Status(msgspec.Struct):
    message: str = ""
    reason: str = ""
    code: int = 0
    details: _StatusDetails | None = None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header given in seconds (the API server never sends dates)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_for_status(
    status: int,
    body: bytes | str | Mapping[str, object] | None,
    *,
    retry_after: str | None = None,
    operation: str = "",
) -> KubeError:
    """The :class:`KubeError` for an HTTP error ``status`` and its Status ``body``.

    ``body`` may be raw bytes (from a response), text, or an already decoded Status object
    (a watch ERROR event). A body that is not a Status keeps its text as the message.
    """
    parsed = _parse_status(body)
    message = parsed.message if parsed is not None else _text(body)
    reason = parsed.reason if parsed is not None else ""
    causes: tuple[Cause, ...] = ()
    retry_after_seconds = parse_retry_after(retry_after)
    if parsed is not None and parsed.details is not None:
        causes = tuple(Cause(c.field, c.reason, c.message) for c in parsed.details.causes)
        if retry_after_seconds is None and parsed.details.retryAfterSeconds is not None:
            retry_after_seconds = float(parsed.details.retryAfterSeconds)
    if status == 429 or 500 <= status <= 599:
        transient = TooManyRequests if status == 429 else ServerError
        return transient(
            message,
            status=status,
            reason=reason,
            causes=causes,
            operation=operation,
            retry_after_seconds=retry_after_seconds,
        )
    cls = _BY_STATUS.get(status, UnexpectedResponse)
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    return cls(message, status=status, reason=reason, causes=causes, operation=operation)


def _parse_status(body: bytes | str | Mapping[str, object] | None) -> _Status | None:
    if body is None:
        return None
    try:
        if isinstance(body, Mapping):
            return msgspec.convert(body, _Status)
        return msgspec.json.decode(body, type=_Status)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _text(body: bytes | str | Mapping[str, object] | None) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")[:2000]
    if isinstance(body, str):
        return body[:2000]
    return str(dict(body))[:2000]
