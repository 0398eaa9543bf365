"""API errors as the kube-apiserver reports them: an HTTP status plus a ``Status`` object.

Every failure the simulator serves is an :class:`ApiError`; the HTTP layer turns it into the
same JSON body a real API server sends (``kind: Status``, ``status: Failure``, ``reason``,
``message``, ``details``, ``code``), because clients (kubernetes-asyncio, kubectl, tidegate's
adapter) branch on ``code`` and ``reason``. This module only builds errors; it does not decide
when to raise them.
"""

from typing import Final

JsonObject = dict[str, object]
"""A decoded JSON object (a Kubernetes object or part of one)."""


class ApiError(Exception):
    """An error answer of the API: HTTP status ``code``, machine ``reason``, human ``message``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JsonObject | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after_seconds = retry_after_seconds

    def status(self) -> JsonObject:
        """The ``Status`` object a real API server sends for this error."""
        body: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(resource: str, name: str, group: str) -> JsonObject:
    details: JsonObject = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, *, group: str = "") -> ApiError:
    """404 for a named object that does not exist (``pods "x" not found``)."""
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        details=_details(resource, name, group),
    )


def already_exists(resource: str, name: str, *, group: str = "") -> ApiError:
    """409 AlreadyExists on create of a name that is taken."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        details=_details(resource, name, group),
    )


def conflict(resource: str, name: str, why: str, *, group: str = "") -> ApiError:
    """409 Conflict: a stale resourceVersion or a state that forbids the operation."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        details=_details(resource, name, group),
    )


STALE: Final = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
"""The real server's wording for an update carrying an outdated resourceVersion."""


def invalid(kind: str, name: str, causes: list[tuple[str, str]], *, group: str = "") -> ApiError:
    """422 Invalid with one cause per (field path, message), worded like the real server."""
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    details = _details(kind, name, group)
    details["causes"] = [
        {"reason": _cause_reason(message), "message": message, "field": field}
        for field, message in causes
    ]
    return ApiError(
        422,
        "Invalid",
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {text}',
        details=details,
    )


_CAUSE_REASONS: Final = (
    ("Required value", "FieldValueRequired"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Forbidden", "FieldValueForbidden"),
    ("Unsupported value", "FieldValueNotSupported"),
)


def _cause_reason(message: str) -> str:
    """The cause's reason token, as the real server derives it from the error's type (the
    message starts with the type's words)."""
    for words, reason in _CAUSE_REASONS:
        if message.startswith(words):
            return reason
    return "FieldValueInvalid"


def bad_request(message: str) -> ApiError:
    """400 BadRequest (malformed body, bad selector, mismatched name or namespace)."""
    return ApiError(400, "BadRequest", message)


def forbidden(message: str, *, details: JsonObject | None = None) -> ApiError:
    """403 Forbidden (admission refused, e.g. an unknown PriorityClass; RBAC refused)."""
    return ApiError(403, "Forbidden", message, details=details)


def unauthorized() -> ApiError:
    """401 Unauthorized: a bearer token the server does not know."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def namespace_terminating(resource: str, name: str, namespace: str, *, group: str = "") -> ApiError:
    """403 Forbidden for a create in a namespace being deleted, as the NamespaceLifecycle
    admission plugin answers: the resource and name in the message, a ``NamespaceTerminating``
    cause (what controllers test for to stop retrying)."""
    what = _qualified(resource, group)
    subject = f'{what} "{name}"' if name else what
    details = _details(resource, name, group)
    details["causes"] = [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {namespace} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    return ApiError(
        403,
        "Forbidden",
        f"{subject} is forbidden: unable to create new content in namespace {namespace} "
        "because it is being terminated",
        details=details,
    )


def method_not_allowed(message: str) -> ApiError:
    """405 MethodNotAllowed for a verb the resource does not support."""
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    """415 UnsupportedMediaType (e.g. strategic merge patch on a custom resource)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)} (got {content_type!r})",
    )


def gone(message: str) -> ApiError:
    """410 Gone with reason Expired: a resourceVersion older than the retained history."""
    return ApiError(410, "Expired", message)


def resource_not_found() -> ApiError:
    """404 for a path that names no resource the server serves."""
    return ApiError(404, "NotFound", "the server could not find the requested resource")
