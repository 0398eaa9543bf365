"""Mutating admission webhooks called on pod create, as kube-apiserver calls them.

When MutatingWebhookConfiguration objects (admissionregistration.k8s.io/v1) are stored, every
pod create — a client's over HTTP and a simulated controller's alike — first goes through
:meth:`Webhooks.admit`: the configurations in name order, each webhook whose ``rules`` match a
pod ``CREATE`` and whose ``namespaceSelector`` (against the namespace's labels, which include
``kubernetes.io/metadata.name``) and ``objectSelector`` (against the pod's labels) select the
pod, is sent an ``admission.k8s.io/v1`` AdmissionReview over HTTPS, trusting its
``clientConfig.caBundle`` (the system's CAs when empty) and waiting at most its
``timeoutSeconds`` (10 by default). A returned JSONPatch is applied before the next webhook is
called. A webhook that cannot be called or answers badly is handled by its ``failurePolicy``:
``Fail`` (the default of v1) refuses the create with the API server's 500 ``Internal error
occurred: failed calling webhook "<name>": …``; ``Ignore`` goes on with the pod unmutated. A
webhook that answers ``allowed: false`` refuses the create, whatever its policy.

The simulator has no Services and no DNS: a ``clientConfig.service`` is called at the URL a test
gave for it (``SimSettings.webhook_services`` or ``POST /sim/v1/webhook-services``), and a
service without one fails like an unreachable service. Without any configuration,
:meth:`Webhooks.configured` is False and the API server's built-in emulation of tidegate's
webhook (``SimSettings.admission_gate``) applies instead.

Not simulated: ``matchPolicy``, ``matchConditions``, ``reinvocationPolicy: IfNeeded``,
``sideEffects``/dry-run checks, validating webhooks, operations other than pod ``CREATE``.
"""

import base64
import binascii
import logging
import ssl
import uuid
from collections.abc import Mapping
from typing import Final

import aiohttp
import msgspec

from tidegate.sim.errors import ApiError, JsonObject
from tidegate.sim.kinds import MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, ResourceType
from tidegate.sim.patching import json_patch
from tidegate.sim.selectors import match_label_selector_object
from tidegate.sim.store import Store

_LOG: Final = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS: Final = 10
_REVIEW_VERSION: Final = "admission.k8s.io/v1"


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def internal_error(message: str) -> ApiError:
    """500 InternalError, as the API server reports a webhook it could not call."""
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def rule_matches(rule: Mapping[str, object], operation: str, rtype: ResourceType) -> bool:
    """Whether one ``rules`` entry selects ``operation`` on ``rtype`` (main resource only)."""

    def among(values: object, value: str) -> bool:
        found = [str(v) for v in _list(values)]
        return "*" in found or value in found

    scope = str(rule.get("scope") or "*")
    wanted_scope = "Namespaced" if rtype.namespaced else "Cluster"
    return (
        among(rule.get("operations"), operation)
        and among(rule.get("apiGroups"), rtype.group)
        and among(rule.get("apiVersions"), rtype.version)
        and among(rule.get("resources"), rtype.plural)
        and scope in ("*", wanted_scope)
    )


def selects(
    webhook: Mapping[str, object],
    *,
    operation: str,
    rtype: ResourceType,
    namespace_labels: Mapping[str, object],
    object_labels: Mapping[str, object],
) -> bool:
    """Whether ``webhook`` (one entry of a configuration) is called for this request.

    An absent selector selects everything, as in Kubernetes.
    """
    if not any(rule_matches(_dict(r), operation, rtype) for r in _list(webhook.get("rules"))):
        return False
    for field, labels in (
        ("namespaceSelector", namespace_labels),
        ("objectSelector", object_labels),
    ):
        selector = webhook.get(field)
        if selector is not None and not match_label_selector_object(selector, labels):
            return False
    return True


class Webhooks:
    """The stored mutating webhooks and the calls to them (see the module docstring)."""

    def __init__(self, store: Store, services: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.services: dict[str, str] = dict(services or {})
        """Base URL (``https://host:port``) of each ``<namespace>/<name>`` Service."""

    def configured(self) -> bool:
        """Whether any MutatingWebhookConfiguration is stored."""
        return next(self.store.objects(MUTATING_WEBHOOK_CONFIGURATIONS.key), None) is not None

    def matching(self, rtype: ResourceType, namespace: str, obj: JsonObject) -> list[JsonObject]:
        """The webhooks called for creating ``obj``, in the API server's order."""
        configurations = sorted(
            self.store.objects(MUTATING_WEBHOOK_CONFIGURATIONS.key),
            key=lambda c: str(_dict(c.get("metadata")).get("name")),
        )
        if not configurations:
            return []
        ns = self.store.get(NAMESPACES.key, "", namespace)
        if ns is None:
            return []  # the create fails on the namespace, before any webhook (as in Kubernetes)
        ns_labels = _dict(_dict(_dict(ns).get("metadata")).get("labels"))
        labels = _dict(_dict(obj.get("metadata")).get("labels"))
        return [
            _dict(webhook)
            for configuration in configurations
            for webhook in _list(configuration.get("webhooks"))
            if selects(
                _dict(webhook),
                operation="CREATE",
                rtype=rtype,
                namespace_labels=ns_labels,
                object_labels=labels,
            )
        ]

    async def admit(self, rtype: ResourceType, namespace: str, obj: JsonObject) -> JsonObject:
        """``obj`` after every matching webhook's patch; raises the API server's errors.

        As in kube-apiserver, the object sent already carries the request's namespace."""
        hooks = self.matching(rtype, namespace, obj)
        if hooks and rtype.namespaced:
            metadata = obj.get("metadata")
            obj = {**obj, "metadata": {**(metadata if isinstance(metadata, dict) else {})}}
            _dict(obj["metadata"]).setdefault("namespace", namespace)
        for webhook in hooks:
            obj = await self._call(webhook, rtype, namespace, obj)
        return obj

    async def _call(
        self, webhook: JsonObject, rtype: ResourceType, namespace: str, obj: JsonObject
    ) -> JsonObject:
        name = str(webhook.get("name"))
        try:
            response = await self._review(webhook, rtype, namespace, obj)
        except _CallFailedError as exc:
            if webhook.get("failurePolicy") == "Ignore":
                _LOG.warning(
                    "failed calling webhook %r, ignored (failurePolicy Ignore): %s", name, exc
                )
                return obj
            raise internal_error(f'failed calling webhook "{name}": {exc}') from exc
        if response.get("allowed") is not True:
            result = _dict(response.get("status"))
            code = result.get("code")
            message = str(result.get("message") or "without explanation")
            raise ApiError(
                code if isinstance(code, int) and code >= 400 else 400,
                str(result.get("reason") or "BadRequest"),
                f'admission webhook "{name}" denied the request: {message}',
            )
        patch = response.get("patch")
        if patch is None:
            return obj
        if response.get("patchType") != "JSONPatch":
            raise internal_error(
                f'failed calling webhook "{name}": unsupported patchType '
                f"{response.get('patchType')!r}"
            )
        try:
            operations = msgspec.json.decode(base64.b64decode(str(patch), validate=True))
        except (binascii.Error, msgspec.DecodeError) as exc:
            raise internal_error(f'failed calling webhook "{name}": bad patch: {exc}') from exc
        try:
            return json_patch(obj, operations)
        except ApiError as exc:
            raise internal_error(
                f'admission webhook "{name}" returned a patch that does not apply: {exc.message}'
            ) from exc

    async def _review(
        self, webhook: JsonObject, rtype: ResourceType, namespace: str, obj: JsonObject
    ) -> JsonObject:
        client = _dict(webhook.get("clientConfig"))
        timeout = webhook.get("timeoutSeconds")
        seconds = timeout if isinstance(timeout, int) else DEFAULT_TIMEOUT_SECONDS
        url = self._url(client)
        request_uid = str(uuid.uuid4())
        resource = {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}
        kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        review = {
            "apiVersion": _REVIEW_VERSION,
            "kind": "AdmissionReview",
            "request": {
                "uid": request_uid,
                "kind": kind,
                "resource": resource,
                "requestKind": kind,
                "requestResource": resource,
                "name": str(_dict(obj.get("metadata")).get("name") or ""),
                "namespace": namespace,
                "operation": "CREATE",
                "userInfo": {},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        target = f"{url}?timeout={seconds}s"
        try:
            context = _trusting(client.get("caBundle"))
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as session,
                session.post(
                    target,
                    data=msgspec.json.encode(review),
                    ssl=context,
                    headers={"Content-Type": "application/json"},
                ) as answer,
            ):
                body = await answer.read()
                status = answer.status
        except TimeoutError as exc:
            raise _CallFailedError(
                f'failed to call webhook: Post "{target}": context deadline exceeded'
            ) from exc
        except (aiohttp.ClientError, ssl.SSLError, OSError, ValueError) as exc:
            raise _CallFailedError(f'failed to call webhook: Post "{target}": {exc}') from exc
        if status != 200:
            raise _CallFailedError(
                f"received invalid webhook response: the server responded with status {status}"
            )
        try:
            document = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise _CallFailedError(f"received invalid webhook response: {exc}") from exc
        response = _dict(_dict(document).get("response"))
        if response.get("uid") != request_uid:
            raise _CallFailedError(
                f"expected response.uid={request_uid!r}, got {response.get('uid')!r}"
            )
        return response

    def _url(self, client: JsonObject) -> str:
        if isinstance(client.get("url"), str):
            return str(client["url"])
        service = _dict(client.get("service"))
        key = f"{service.get('namespace')}/{service.get('name')}"
        base = self.services.get(key)
        if base is None:
            raise _CallFailedError(
                f"service {key} has no address in the simulator (give one with "
                "SimSettings.webhook_services or POST /sim/v1/webhook-services)"
            )
        path = str(service.get("path") or "")
        return base.rstrip("/") + path


class _CallFailedError(Exception):
    """The webhook could not be called or answered badly (its failurePolicy applies)."""


def _trusting(ca_bundle: object) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_bundle:
        try:
            pem = base64.b64decode(str(ca_bundle), validate=True).decode()
            context = ssl.create_default_context(cadata=pem)
        except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as exc:
            raise _CallFailedError(f"bad caBundle: {exc}") from exc
    return context
