"""`sla-probe sink`: the sink stage on its own, for a Spark cluster.

The probe that produces canaries runs elsewhere (`sla-probe run`); this process only
runs the sink query and serves its metrics (`/metrics`, `/healthz`, `/readyz`).
Submit it to a cluster with ``spark-submit`` (see README, "Spark sink stage") and
``sink.master: null`` so the cluster's master is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from probe.config import ProbeConfig
from probe.endpoints import MetricsServer, build_app
from probe.keys import KeyRing
from probe.metrics import service_metrics
from probe.signals import stop_on_signals
from probe.spark.stage import SparkSinkStage

log = logging.getLogger(__name__)

# How often the query and Spark's JVM are checked: a dead sink exits within this.
WATCH_INTERVAL = 2.0


async def serve_sink(
    config: ProbeConfig, keyring: KeyRing, stop: asyncio.Event | None = None
) -> str | None:
    """Serve until ``stop`` (or SIGTERM/SIGINT): None. If the sink ends by itself
    first (its query failed or stopped, or Spark's JVM is gone): why."""
    stop = stop_on_signals(stop)
    registry, metrics = service_metrics(config, sink=True)
    metrics.declare_target(config.target)
    sink = SparkSinkStage(config, keyring, [metrics], metrics=metrics, registry=registry)
    state = {"ready": False, "reason": "starting Spark"}

    def readiness() -> tuple[bool, str]:
        problem = sink.problem()
        if problem is not None:
            return False, problem
        return bool(state["ready"]), str(state["reason"])

    server = MetricsServer(build_app(registry, readiness), config.metrics.host, config.metrics.port)
    await server.start()
    try:
        await sink.start()
        state.update(ready=True, reason="sink query running")
        metrics.target_ready(config.target, True)
        problem = await _watch(sink, stop)
        if problem is not None:
            log.error("sink stage ended: %s", problem)
        return problem
    finally:
        log.info("stopping the sink")
        await sink.stop()
        await server.stop()


async def _watch(sink: SparkSinkStage, stop: asyncio.Event) -> str | None:
    """Wait for ``stop``; return why the sink cannot go on if that comes first.

    A sink whose query died, or whose JVM went away (spark-submit passes a signal to
    the JVM only, and the JVM does not take its Python driver with it), must not live
    on serving stale metrics and a green /healthz: it exits, so whatever runs it can
    restart it from its checkpoint.
    """
    while not stop.is_set():
        problem = await asyncio.to_thread(sink.problem)
        if problem is not None:
            return problem
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_INTERVAL)
    return None
