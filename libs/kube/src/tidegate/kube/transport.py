"""One way to send a request to the API server: rate-limited, retried, errors classified.

Every call of :mod:`tidegate.kube` goes through :class:`Transport`, which drives
kubernetes-asyncio's ``ApiClient.call_api`` with ``_preload_content=False``: the client still
does what it is good at (kubeconfig credentials, TLS, bearer-token refresh, the aiohttp
session), but no response is deserialized into generated models. That is faster, works the same
for core kinds and custom resources, and side-steps two facts seen with kubernetes-asyncio 36.1
against kube-apiserver 1.36: ``create_namespaced_pod_binding`` raises ValueError on success when
it deserializes, and the generated custom-object patch methods default to JSON-patch. With raw
responses 4xx/5xx do not raise, so this module checks every status itself.

What it does not do: decide what to send (that is :mod:`tidegate.kube.client`), or keep watch
state (that is :mod:`tidegate.kube.informer`).
"""

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, cast

import aiohttp
import msgspec
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import OpenApiException

from tidegate.kube.backoff import Backoff
from tidegate.kube.errors import (
    KubeError,
    ServerError,
    TooManyRequests,
    UnexpectedResponse,
    Unreachable,
    error_for_status,
)
from tidegate.kube.ratelimit import TokenBucket
from tidegate.kube.settings import KubeSettings

log = logging.getLogger(__name__)

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"

JsonObject = dict[str, object]
"""A decoded JSON object, exactly as the API server sent it."""

Query = Sequence[tuple[str, str]]
"""Query parameters in order; values already rendered as the API expects ("true", "30")."""

WriteGuard = Callable[[], float]
"""Called right before every attempt of a write (after the rate limiter's wait, and again
before each retry): raises to stop the write (its writer lost the lease it writes under), or
returns the seconds the attempt may still take (the lease's confirmed time left)."""


class Transport:
    """Sends requests through one kubernetes-asyncio ApiClient with limits and retries.

    A request is retried (after a backoff that honours Retry-After) when it got 429, when the
    connection could not be opened at all, and, if the caller marked it ``idempotent``, on
    5xx and on a connection lost mid-request. Everything else raises at once.
    """

    def __init__(self, api: ApiClient, settings: KubeSettings) -> None:
        self._api = api
        self._guard: WriteGuard | None = None
        self._settings = settings
        self._bucket = TokenBucket(qps=settings.qps, burst=settings.burst)
        self._backoff = Backoff(
            initial_seconds=settings.backoff_initial_seconds,
            max_seconds=settings.backoff_max_seconds,
        )
        self._timeout = aiohttp.ClientTimeout(
            total=settings.request_timeout_seconds,
            connect=settings.connect_timeout_seconds,
        )

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return cast(str, self._api.configuration.host)

    def guarded(self, guard: WriteGuard) -> "Transport":
        """This transport (same session, rate limit and backoff) with every write (any method
        but GET) attempted only while ``guard`` allows, each attempt bounded by the time it
        grants."""
        view = copy.copy(self)
        view._guard = guard
        return view

    @property
    def backoff(self) -> Backoff:
        """The retry delay schedule, shared with the informer's reconnect loop."""
        return self._backoff

    async def close(self) -> None:
        """Close the underlying HTTP session."""
        await self._api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        query: Query = (),
        body: object = None,
        content_type: str = JSON,
        idempotent: bool,
    ) -> bytes:
        """Send one request and return the body of its 2xx response.

        Raises the :class:`~tidegate.kube.errors.KubeError` subclass for the final status, or
        what the guard of a :meth:`guarded` transport raised before an attempt of a write.
        """
        attempt = 0
        guard = self._guard if method != "GET" else None
        while True:
            await self._bucket.acquire()
            timeout = self._timeout
            if guard is not None:
                granted = guard()
                if timeout.total is None or granted < timeout.total:
                    timeout = aiohttp.ClientTimeout(
                        total=max(granted, 0.001), connect=timeout.connect
                    )
            outcome = await self._attempt(
                method,
                path,
                operation=operation,
                query=query,
                body=body,
                content_type=content_type,
                limit=timeout,
            )
            if isinstance(outcome, bytes):
                return outcome
            error = outcome.error
            if not self._retryable(error, idempotent=idempotent, sent=outcome.sent) or (
                attempt + 1 >= self._settings.max_attempts
            ):
                raise error from outcome.cause
            delay = self._backoff.delay(attempt, retry_after_seconds=_retry_after(error))
            log.info(
                "retrying %s in %.2fs (attempt %d of %d): %s",
                operation,
                delay,
                attempt + 2,
                self._settings.max_attempts,
                error,
            )
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        query: Query,
        body: object,
        content_type: str,
        limit: aiohttp.ClientTimeout,
    ) -> "bytes | _Failure":
        """One try: the 2xx body, or what went wrong."""
        try:
            response = await self._call(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                client_timeout=limit,
            )
        except aiohttp.ClientConnectorError as exc:
            return _Failure(Unreachable(_describe(exc), operation=operation), exc, sent=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _Failure(Unreachable(_describe(exc), operation=operation), exc, sent=True)
        try:
            data = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _Failure(Unreachable(_describe(exc), operation=operation), exc, sent=True)
        finally:
            response.release()
        if 200 <= response.status <= 299:
            return data
        error = error_for_status(
            response.status,
            data,
            retry_after=response.headers.get("Retry-After"),
            operation=operation,
        )
        return _Failure(error, None, sent=True)

    def _retryable(self, error: KubeError, *, idempotent: bool, sent: bool) -> bool:
        if isinstance(error, TooManyRequests) or not sent:
            return True
        return idempotent and isinstance(error, ServerError | Unreachable)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Query,
        body: object,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            response = await self._api.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout or self._timeout,
            )
        except OpenApiException as exc:
            raise UnexpectedResponse(f"client refused the request: {exc}") from exc
        return cast(aiohttp.ClientResponse, response)

    @asynccontextmanager
    async def stream(
        self, path: str, *, operation: str, query: Query, read_timeout_seconds: float
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """Open a long-running GET (a watch) and yield its body as a line-readable stream.

        Not retried here: the informer owns reconnecting. Errors before the stream opens raise
        the matching :class:`~tidegate.kube.errors.KubeError`; a broken stream raises
        :class:`~tidegate.kube.errors.Unreachable` from the reader.
        """
        await self._bucket.acquire()
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self._settings.connect_timeout_seconds,
            sock_read=read_timeout_seconds,
        )
        try:
            response = await self._call(
                "GET", path, query=query, body=None, content_type=JSON, client_timeout=timeout
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unreachable(_describe(exc), operation=operation) from exc
        try:
            if not 200 <= response.status <= 299:
                data = await response.read()
                raise error_for_status(
                    response.status,
                    data,
                    retry_after=response.headers.get("Retry-After"),
                    operation=operation,
                )
            yield response.content
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unreachable(_describe(exc), operation=operation) from exc
        finally:
            response.close()


@dataclass(frozen=True, slots=True)
class _Failure:
    error: KubeError
    cause: BaseException | None
    sent: bool
    """False when the request never reached the server, so retrying cannot apply it twice."""


def decode_object(data: bytes, *, operation: str) -> JsonObject:
    """Decode a response body that must be one JSON object."""
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise UnexpectedResponse(f"response is not JSON: {exc}", operation=operation) from exc
    if not isinstance(value, dict):
        raise UnexpectedResponse(
            f"expected a JSON object, got {type(value).__name__}", operation=operation
        )
    return cast(JsonObject, value)


def render_query(params: Mapping[str, str | int | bool | None]) -> list[tuple[str, str]]:
    """Query tuples with booleans as "true"/"false" and None left out."""
    rendered: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            rendered.append((key, "true" if value else "false"))
        else:
            rendered.append((key, str(value)))
    return rendered


def _retry_after(error: KubeError) -> float | None:
    if isinstance(error, TooManyRequests | ServerError):
        return error.retry_after_seconds
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
