"""`sla-probe sink`: the sink stage on its own, for a Spark cluster.

The probe that produces canaries runs elsewhere (`sla-probe run`); this process only
runs the sink query and serves its metrics (`/metrics`, `/healthz`, `/readyz`).
Submit it to a cluster with ``spark-submit`` (see README, "Spark sink stage") and
``sink.master: null`` so the cluster's master is kept.
"""

from __future__ import annotations

import asyncio
import logging

from probe.config import ProbeConfig
from probe.http import MetricsServer, build_app
from probe.keys import KeyRing
from probe.service import service_metrics, stop_on_signals
from probe.spark.stage import SparkSinkStage

log = logging.getLogger(__name__)


async def serve_sink(
    config: ProbeConfig, keyring: KeyRing, stop: asyncio.Event | None = None
) -> None:
    stop = stop_on_signals(stop)
    registry, metrics = service_metrics(config, sink=True)
    metrics.declare_target(config.target)
    sink = SparkSinkStage(config, keyring, [metrics], metrics=metrics, registry=registry)
    state = {"ready": False, "reason": "starting Spark"}

    def readiness() -> tuple[bool, str]:
        failure = sink.failure()
        if failure is not None:
            return False, f"sink query failed: {failure}"
        return bool(state["ready"]), str(state["reason"])

    server = MetricsServer(build_app(registry, readiness), config.metrics.host, config.metrics.port)
    await server.start()
    try:
        await sink.start()
        state.update(ready=True, reason="sink query running")
        metrics.ready.labels(config.target).set(1)
        await stop.wait()
    finally:
        log.info("stopping the sink")
        await sink.stop()
        await server.stop()
