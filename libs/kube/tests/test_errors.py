"""Mapping HTTP statuses and Status bodies to tidegate's error classes."""

import json

import pytest

from tidegate.kube import errors
from tidegate.kube.errors import error_for_status


def _status(code: int, reason: str, message: str, **details: object) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    body |= {"reason": reason, "message": message, "details": details}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "Conflict", errors.Conflict),
        (409, "AlreadyExists", errors.AlreadyExists),
        (410, "Expired", errors.Gone),
        (415, "UnsupportedMediaType", errors.Unsupported),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (418, "", errors.UnexpectedResponse),
    ],
)
def test_status_maps_to_class(status: int, reason: str, cls: type[errors.KubeError]) -> None:
    error = error_for_status(status, _status(status, reason, "nope"), operation="get pods x")
    assert type(error) is cls
    assert error.status == status
    assert error.reason == reason
    assert "get pods x" in str(error)
    assert "nope" in str(error)


def test_conflict_and_already_exists_are_distinct() -> None:
    # Code that re-reads on Conflict must not mistake a name clash for a stale read.
    assert not issubclass(errors.AlreadyExists, errors.Conflict)
    assert not issubclass(errors.Conflict, errors.AlreadyExists)


def test_invalid_names_the_fields() -> None:
    body = _status(
        422,
        "Invalid",
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields',
        causes=[{"reason": "FieldValueForbidden", "message": "may not change", "field": "spec"}],
    )
    error = error_for_status(422, body)
    assert isinstance(error, errors.Invalid)
    assert error.fields == ("spec",)
    assert error.causes[0].reason == "FieldValueForbidden"
    assert "spec: may not change" in str(error)


def test_retry_after_from_header_wins_over_details() -> None:
    body = _status(429, "TooManyRequests", "slow down", retryAfterSeconds=7)
    from_header = error_for_status(429, body, retry_after="2")
    from_body = error_for_status(429, body)
    assert isinstance(from_header, errors.TooManyRequests)
    assert isinstance(from_body, errors.TooManyRequests)
    assert from_header.retry_after_seconds == 2.0
    assert from_body.retry_after_seconds == 7.0


def test_body_that_is_not_a_status_keeps_its_text() -> None:
    error = error_for_status(502, b"<html>bad gateway</html>")
    assert isinstance(error, errors.ServerError)
    assert error.message == "<html>bad gateway</html>"


def test_decoded_watch_error_object() -> None:
    obj: dict[str, object] = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 5 (90)",
    }
    error = error_for_status(410, obj)
    assert isinstance(error, errors.Gone)
    assert error.message.startswith("too old")


@pytest.mark.parametrize(
    ("header", "seconds"), [("3", 3.0), (" 0 ", 0.0), ("soon", None), ("-1", None)]
)
def test_parse_retry_after(header: str, seconds: float | None) -> None:
    assert errors.parse_retry_after(header) == seconds
