"""The probe's HTTP endpoints: ``/metrics``, ``/healthz`` (alive), ``/readyz`` (useful).

``/metrics`` answers in the OpenMetrics format when the scraper's Accept header asks
for it, in the classic text format otherwise. ``/readyz`` is 200 only while the
target is reachable and its topic known: a probe that cannot reach its broker is
alive (it is measuring the outage) but not ready.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from probe.errors import ConfigError
from probe.metrics import RenderedGauge

Readiness = Callable[[], tuple[bool, str]]


class _Families:
    """Metric families already collected, as a collector for an encoder."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def exposition(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The /metrics body for this Accept header, and its content type.

    Families that render themselves (:class:`probe.metrics.RenderedGauge`: per-partition
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


def build_app(registry: CollectorRegistry, readiness: Readiness) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body, content_type = exposition(registry, request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        ready, reason = readiness()
        return web.Response(status=200 if ready else 503, text=f"{reason}\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class MetricsServer:
    """Serves the app on host:port inside the running event loop. Port 0 picks one.

    ``host`` and ``port`` are the ``metrics`` settings: when they cannot be listened
    on, :meth:`start` raises a ConfigError naming ``metrics.host`` or ``metrics.port``.
    """

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise _listen_error(exc, self._host, self._port) from exc
        # With port 0 the kernel picked the port: report the one actually bound.
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        await self._runner.cleanup()


def _listen_error(exc: OSError, host: str, port: int) -> ConfigError:
    """Which setting keeps the server from listening, and why, in one line."""
    # A name that does not resolve, or an address this machine does not have, is the
    # host's fault; anything else (in use, a privileged port) the port's.
    if isinstance(exc, socket.gaierror):
        return ConfigError("metrics.host", f"cannot listen on {host!r}: {exc.strerror}")
    # asyncio's own strerror repeats the address; the errno's text is the reason.
    reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError("metrics.host", f"cannot listen on {host!r}: {reason}")
    return ConfigError("metrics.port", f"cannot listen on {host}:{port}: {reason}")
