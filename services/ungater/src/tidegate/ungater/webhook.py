"""Serving the mutating webhook: HTTPS with a certificate from a mounted Secret, reloaded live.

``POST /mutate-pods`` answers AdmissionReviews with :func:`tidegate.kube.read.gate.review`; the
decision lives there. This module only serves it: TLS from ``tls.crt``/``tls.key`` in the
certificate directory (the Secret the Helm chart mounts), re-read when the files change so a
rotated certificate (cert-manager, or the Secret edited) is used without a restart; a request
that is too large or not a POST gets aiohttp's usual error, which the API server treats by the
webhook configuration's ``failurePolicy``. Every review is counted by verdict
(``tidegate_webhook_reviews_total``).
"""

import asyncio
import contextlib
import logging
import os
import ssl
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from tidegate.kube.read.gate import GateRules, review
from tidegate.ungater.config import CERT_FILE, KEY_FILE

log = logging.getLogger(__name__)

PATH = "/mutate-pods"
"""Where the webhook configuration sends pod reviews (the chart's clientConfig.service.path)."""

MAX_REVIEW_BYTES = 6 * 1024 * 1024
"""Largest review accepted: twice the API server's default request size limit."""

_Stamp = tuple[tuple[int, int, int], ...]


class Certificate:
    """A server TLS context loaded from ``tls.crt``/``tls.key``, reloadable in place.

    New connections use whatever was loaded last; connections already open keep theirs.
    """

    def __init__(self, directory: Path) -> None:
        """Load the pair from ``directory``; OSError or ssl.SSLError when it cannot be read."""
        self.directory = directory
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: _Stamp = ()
        self.reload()

    def _files(self) -> tuple[Path, Path]:
        return self.directory / CERT_FILE, self.directory / KEY_FILE

    def _current_stamp(self) -> _Stamp:
        out = []
        for path in self._files():
            info = os.stat(path)  # follows the ..data symlink Kubernetes swaps on update
            out.append((info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(out)

    def reload(self) -> None:
        """Load the files now."""
        cert, key = self._files()
        stamp = self._current_stamp()
        self.context.load_cert_chain(cert, key)
        self._stamp = stamp

    def reload_if_changed(self) -> bool:
        """Reload when the files changed since the last load; True if it did. A pair that is
        half written (unreadable) is logged and tried again next time."""
        try:
            if self._current_stamp() == self._stamp:
                return False
            self.reload()
        except (OSError, ssl.SSLError) as exc:
            log.warning("webhook: certificate in %s not reloaded: %s", self.directory, exc)
            return False
        log.info("webhook: certificate reloaded from %s", self.directory)
        return True


class Webhook:
    """The webhook's HTTPS server."""

    def __init__(
        self, rules: GateRules, certificate: Certificate, registry: CollectorRegistry
    ) -> None:
        """Serve ``rules`` with ``certificate``; metrics go to ``registry``."""
        self.rules = rules
        self.certificate = certificate
        self.reviews = Counter(
            "tidegate_webhook_reviews_total",
            "Pod admission reviews answered by the webhook, by verdict "
            "(gated, passed, ignored-error, refused, unreadable).",
            ["verdict"],
            registry=registry,
        )
        self.port: int | None = None
        """The port bound, once serving (useful with port 0)."""

    def application(self) -> web.Application:
        """The aiohttp application (one route)."""
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.router.add_post(PATH, self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one AdmissionReview."""
        body = await request.read()
        answer = review(body, self.rules)
        self.reviews.labels(verdict=answer.verdict).inc()
        if answer.verdict in ("unreadable", "refused", "ignored-error"):
            log.warning("webhook: %s: %s", answer.verdict, answer.reason)
        return web.Response(status=answer.status, body=answer.body, content_type="application/json")

    async def serve(
        self, port: int, *, stop: asyncio.Event, host: str = "0.0.0.0", reload_seconds: float = 10.0
    ) -> None:
        """Serve until ``stop`` is set, checking the certificate files every ``reload_seconds``."""
        runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, ssl_context=self.certificate.context)
            await site.start()
            self.port = next(
                (int(a[1]) for a in runner.addresses if isinstance(a, tuple) and len(a) >= 2), port
            )
            log.info("webhook: serving https on :%d%s", self.port, PATH)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(reload_seconds):
                        await stop.wait()
                self.certificate.reload_if_changed()
        finally:
            await runner.cleanup()
