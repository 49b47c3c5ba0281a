"""The probe's HTTP endpoints: ``/metrics``, ``/healthz`` (alive), ``/readyz`` (useful).

``/metrics`` answers in the OpenMetrics format when the scraper's Accept header asks
for it, in the classic text format otherwise. ``/readyz`` is 200 only while the
target is reachable and its topic known: a probe that cannot reach its broker is
alive (it is measuring the outage) but not ready.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

Readiness = Callable[[], tuple[bool, str]]


def build_app(registry: CollectorRegistry, readiness: Readiness) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

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
    """Serves the app on host:port inside the running event loop. Port 0 picks one."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        # With port 0 the kernel picked the port: report the one actually bound.
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        await self._runner.cleanup()
