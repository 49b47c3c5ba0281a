"""The probe's HTTP endpoints: ``/metrics``, ``/healthz`` (alive), ``/readyz`` (useful),
and ``/``, the status page (probe.status_page) for people.

``/metrics`` answers in the OpenMetrics format when the scraper's Accept header asks
for it, in the classic text format otherwise. ``/readyz`` is 200 only while the
target is reachable and its topic known: a probe that cannot reach its broker is
alive (it is measuring the outage) but not ready.

With ``metrics.web_config_file`` (probe.web_config) every path is served over TLS,
with client certificates and basic auth as that file says; ``run``, ``sink`` and
``reconcile --every`` all serve through :class:`MetricsServer` and so alike. The
status page is no exception: it names partitions, brokers and trace ids, as the
metrics do, and is as private as they are.

The kubelet has neither credentials nor a client certificate, so ``metrics.health_port``
adds a second listener (:func:`build_health_app`), plain HTTP whatever the web config
says, with ``/healthz`` and the same readiness on ``/readyz``: their statuses keep their
meaning behind TLS and basic auth (a pod that cannot reach its brokers is live, not
ready, and holds back a rollout). It answers nothing else, and ``/readyz`` there gives
no reason: a reason may name a broker, which only the secured port tells.

The page is rendered on the event loop, as ``/metrics`` is: a snapshot of bounded
size (the stalest partitions are chosen in one pass) takes milliseconds at 10,000
partitions (benchmarks/bench_status_page.py), less than a scrape.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from probe.core.errors import ConfigError
from probe.metrics import RenderedGauge
from probe.status_page import StatusSnapshot, render
from probe.web_config import (
    BasicAuthUsers,
    TlsServerConfig,
    WebConfig,
    WebConfigError,
    basic_credentials,
    read_web_config,
)

if TYPE_CHECKING:
    from probe.config import MetricsConfig

log = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, str]]
Status = Callable[[], StatusSnapshot]

# The readiness an app's /readyz answers with: the health port answers with the same.
READINESS: web.AppKey[Readiness] = web.AppKey("readiness")


class _Families:
    """Metric families already collected, as a collector for an encoder."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The /metrics body for this Accept header, and its content type.

    Families that render themselves (:class:`probe.metrics.rendered.RenderedGauge`: per-partition
    staleness, 10,000 series at 10,000 partitions) are written by their own fast path,
    after every other family; in OpenMetrics still before the closing ``# EOF``.
    """
    encoder, content_type = choose_encoder(accept)
    families = list(registry.collect())
    rendered = "".join(f.lines() for f in families if isinstance(f, RenderedGauge)).encode()
    body = encoder(_Families([f for f in families if not isinstance(f, RenderedGauge)]))
    if body.endswith(_EOF):
        return body[: -len(_EOF)] + rendered + _EOF, content_type
    return body + rendered, content_type


_EOF = b"# EOF\n"


def build_app(
    registry: CollectorRegistry, readiness: Readiness, status: Status | None = None
) -> web.Application:
    """``status``: the status page's snapshot, taken per request (probe.status_board.
    StatusView); without one, ``/`` shows the readiness alone."""

    def snapshot() -> StatusSnapshot:
        if status is not None:
            return status()
        ready, reason = readiness()
        return StatusSnapshot("probe", "", time.time_ns(), ready, reason, refresh_s=10)

    async def page(request: web.Request) -> web.Response:
        return web.Response(
            text=render(snapshot()),
            content_type="text/html",
            charset="utf-8",
            # Always the state now: no cache between the on-call and the probe.
            headers={"Cache-Control": "no-store"},
        )

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = exposition(registry, request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def readyz(request: web.Request) -> web.Response:
        ready, reason = readiness()
        return web.Response(status=200 if ready else 503, text=f"{reason}\n")

    app = web.Application()
    app[READINESS] = readiness
    app.router.add_get("/", page)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def build_health_app(readiness: Readiness) -> web.Application:
    """The health port's app: ``/healthz``, and ``/readyz`` with the status of the main
    port's but only ``ready`` or ``not ready`` for a reason (the kubelet shows none,
    and anyone who can reach the port may ask)."""

    async def readyz(request: web.Request) -> web.Response:
        ready, _ = readiness()
        if ready:
            return web.Response(text="ready\n")
        return web.Response(
            status=503, text="not ready: the reason is on /readyz of the metrics port\n"
        )

    app = web.Application()
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", readyz)
    return app


_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": "Basic"}


def basic_auth(users: BasicAuthUsers) -> Middleware:
    """A middleware admitting only requests with a user and password of ``users``, on
    every path (an unknown path is a 404 only to those admitted)."""
    # One bcrypt check at a time: each takes a core for its cost, and requests with
    # wrong passwords must not take both of the probe's.
    checking = asyncio.Semaphore(1)

    @web.middleware
    async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
        credentials = basic_credentials(request.headers.get("Authorization"))
        if credentials is None:
            return web.Response(status=401, text="Unauthorized\n", headers=_UNAUTHORIZED_HEADERS)
        if not users.remembered(*credentials):
            async with checking:
                # bcrypt is slow by design: off the loop that times the canaries.
                admitted = await asyncio.to_thread(users.check, *credentials)
            if not admitted:
                return web.Response(
                    status=401, text="Unauthorized\n", headers=_UNAUTHORIZED_HEADERS
                )
        return await handler(request)

    return admit


_FileStamp = tuple[tuple[int, int, int, int], ...]


def _stamp(tls: TlsServerConfig) -> _FileStamp | None:
    """What identifies the certificate files' contents without reading them; None while
    one is missing (mid-rotation)."""
    try:
        stats = [path.stat() for path in tls.files()]
    except OSError:
        return None
    return tuple((s.st_mtime_ns, s.st_size, s.st_ino, s.st_dev) for s in stats)


class CertificateRotation:
    """The TLS context of the certificate files as they are now.

    cert-manager (and a kubelet updating a mounted Secret) replaces the files in place;
    each new connection looks at their stamps (a few stat calls) and, when they
    changed, builds a fresh context. Until a new set loads (a key written after its
    certificate does not match it for a moment), the last good context goes on
    serving; existing connections keep the context they shook hands with.
    """

    def __init__(self, tls: TlsServerConfig) -> None:
        self._tls = tls
        self._stamp = _stamp(tls)
        self._context = tls.context()
        self._refused: _FileStamp | None = None

    def current(self) -> ssl.SSLContext:
        stamp = _stamp(self._tls)
        if stamp is None or stamp in (self._stamp, self._refused):
            return self._context
        try:
            context = self._tls.context()
        except WebConfigError as exc:
            self._refused = stamp
            log.warning("keeping the endpoints' current TLS certificate: %s", exc)
            return self._context
        self._context, self._stamp = context, stamp
        log.info("endpoints' TLS certificate reloaded from %s", self._tls.cert_file)
        return context


class _RotatingContext(ssl.SSLContext):
    """The context the listening socket holds for good: every handshake is made with
    the rotation's current one. Event loops (asyncio's, uvloop's) start each server-side
    TLS connection with ``wrap_bio``; nothing else of this context is used."""

    rotation: CertificateRotation

    def __new__(cls, rotation: CertificateRotation) -> _RotatingContext:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)
        context.rotation = rotation
        return context

    def __init__(self, rotation: CertificateRotation) -> None:
        # Built in __new__, where ssl.SSLContext takes its protocol.
        pass

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.rotation.current().wrap_bio(
            incoming, outgoing, server_side, server_hostname, session
        )


class MetricsServer:
    """Serves the app on host:port inside the running event loop. Port 0 picks one.

    ``host`` and ``port`` are the ``metrics`` settings: when they cannot be listened
    on, :meth:`start` raises a ConfigError naming ``metrics.host`` or ``metrics.port``.
    ``web_config`` (``metrics.web_config_file``) adds TLS and basic auth to every path.
    ``health_port`` (``metrics.health_port``) serves :func:`build_health_app` on
    host:health_port too, plain HTTP, with the readiness of ``app`` (:func:`build_app`'s).

    >>> server = MetricsServer.from_settings(app, config.metrics)  # doctest: +SKIP
    >>> await server.start()  # doctest: +SKIP
    """

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        web_config: WebConfig | None = None,
        health_port: int | None = None,
    ) -> None:
        self._tls: _RotatingContext | None = None
        if web_config is not None:
            if web_config.basic_auth_users:
                app.middlewares.append(basic_auth(BasicAuthUsers(web_config.basic_auth_users)))
            if web_config.tls_server_config is not None:
                try:
                    rotation = CertificateRotation(web_config.tls_server_config)
                except WebConfigError as exc:
                    raise ConfigError("metrics.web_config_file", str(exc)) from exc
                self._tls = _RotatingContext(rotation)
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.port = port
        self._health: tuple[web.AppRunner, int] | None = None
        if health_port is not None:
            runner = web.AppRunner(build_health_app(app[READINESS]), access_log=None)
            self._health = (runner, health_port)
        # The health port bound (None without one): known once started, as ``port``.
        self.health_port = health_port

    @classmethod
    def from_settings(cls, app: web.Application, settings: MetricsConfig) -> MetricsServer:
        """The server the ``metrics`` settings describe: address, TLS, basic auth, and
        the health port."""
        web_config = None
        if settings.web_config_file is not None:
            try:
                web_config = read_web_config(settings.web_config_file)
            except WebConfigError as exc:
                raise ConfigError("metrics.web_config_file", str(exc)) from exc
        return cls(app, settings.host, settings.port, web_config, settings.health_port)

    @property
    def scheme(self) -> str:
        return "http" if self._tls is None else "https"

    async def start(self) -> None:
        self.port = await _listen(self._runner, self._host, self._port, "metrics.port", self._tls)
        if self._health is None:
            return
        runner, port = self._health
        try:
            self.health_port = await _listen(runner, self._host, port, "metrics.health_port", None)
        except ConfigError:
            await self._runner.cleanup()
            raise
        log.info(
            "serving /healthz and /readyz on http://%s:%d (metrics.health_port)",
            self._host,
            self.health_port,
        )

    async def stop(self) -> None:
        await self._runner.cleanup()
        if self._health is not None:
            await self._health[0].cleanup()


async def _listen(
    runner: web.AppRunner, host: str, port: int, setting: str, tls: ssl.SSLContext | None
) -> int:
    """Serve ``runner`` on host:port; the port bound (port 0: the one the kernel picked).
    A ConfigError names the setting (``setting``, or ``metrics.host``) at fault."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise _listen_error(exc, host, port, setting) from exc
    return int(runner.addresses[0][1])


def _listen_error(exc: OSError, host: str, port: int, setting: str) -> ConfigError:
    """Which setting keeps the server from listening, and why, in one line."""
    # A name that does not resolve, or an address this machine does not have, is the
    # host's fault; anything else (in use, a privileged port) the port's.
    if isinstance(exc, socket.gaierror):
        return ConfigError("metrics.host", f"cannot listen on {host!r}: {exc.strerror}")
    # asyncio's own strerror repeats the address; the errno's text is the reason.
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError("metrics.host", f"cannot listen on {host!r}: {reason}")
    return ConfigError(setting, f"cannot listen on {host}:{port}: {reason}")
