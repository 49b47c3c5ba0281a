"""`sla-probe sink`: the sink stage on its own, for a Spark cluster.

The probe that produces canaries runs elsewhere (`sla-probe run`); this process only
runs the sink query and serves its metrics (`/metrics`, `/healthz`, `/readyz`) and
its status page (`/`: the sink's verdicts, budget, stalest partitions, batch progress).
Submit it to a cluster with ``spark-submit`` (see docs/spark-sink.md, "On a Spark cluster") and
``sink.master: null`` so the cluster's master is kept.

Spark (pyspark, the JVM) is imported only once the settings hold, so a bad one is
said in a line without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING

from probe import logs, loop, tracing
from probe.config import ProbeConfig, require_for_service
from probe.core.errors import TransportError
from probe.core.keys import KeyRing
from probe.endpoints import MetricsServer, build_app
from probe.metrics import probe_version, service_metrics
from probe.services.keygen import signing_key_ring
from probe.signals import stop_on_signals
from probe.spark_kafka.jars import require_connector
from probe.stages.target import target_names
from probe.status_board import Objectives, StatusBoard, StatusView, refresh_every

if TYPE_CHECKING:
    from probe.spark.stage import Ended

log = logging.getLogger(__name__)

EXIT_STOPPED = 0
# Its query ended by itself (failed, stopped, no first batch within
# sink.first_batch_timeout, Spark's JVM gone); the reason is its last line on stderr.
EXIT_SINK_ENDED = 1

NO_KEY_FILE = (
    "required: the sink verifies canaries signed by a `sla-probe run` elsewhere, so give "
    "it the same key file (--signing-key-file)"
)


def run_sink(config: ProbeConfig) -> int:
    """The whole `sink` command: serve until SIGTERM or SIGINT (0), or until the sink
    ends by itself (1, why on stderr). A ConfigError is the CLI's exit 2."""
    keyring = signing_key_ring(config, ephemeral_ok=False, missing=NO_KEY_FILE)
    require_for_service(config, sink_only=True)
    require_connector(config.sink.source, config.sink.spark_conf)
    # The sink's commit spans join the traces of the probe producing elsewhere.
    tracing.install_tracer_provider(config.probe_id, target_names(config))
    logs.configure(config.log_level)
    last_words = LastWords()
    try:
        ended = loop.run(serve_sink(config, keyring.ring))
    finally:
        tracing.shutdown()
    if ended is None:
        return EXIT_STOPPED
    last_words.say(f"sla-probe: sink stage ended: {ended.detail}", jvm_gone=ended.reason == "jvm")
    return EXIT_SINK_ENDED


async def serve_sink(
    config: ProbeConfig, keyring: KeyRing, stop: asyncio.Event | None = None
) -> Ended | None:
    """Serve until ``stop`` (or SIGTERM/SIGINT): None. If the sink ends by itself
    first (its query failed or stopped, made no first batch within
    ``sink.first_batch_timeout``, or Spark's JVM is gone): why.

    It does not restart its query (`run` does): a sink that cannot go on must not
    live on serving stale metrics and a green /healthz. It exits, so whatever runs it
    (spark-submit under a supervisor, a Deployment) restarts it from its checkpoint.
    """
    from probe.spark.stage import Ended, SparkSinkStage  # noqa: PLC0415 - Spark only here

    stop = stop_on_signals(stop)
    registry, metrics = service_metrics(config, sink=True)
    metrics.declare_target(config.target)
    board = StatusBoard(interval_s=config.interval, objectives=Objectives.of(config))
    sink = SparkSinkStage(config, keyring, [metrics, board], metrics=metrics, registry=registry)
    status = StatusView(
        "sink",
        config.target,
        sink.readiness,
        board=board,
        sources=metrics.staleness.sources,
        sink=None if sink.health is None else sink.health.metrics.progress,
        refresh_s=refresh_every(config.interval),
        version=probe_version(),
    )
    server = MetricsServer.from_settings(
        build_app(registry, sink.readiness, status), config.metrics
    )
    await server.start()
    try:
        try:
            await sink.start()
        except TransportError as exc:  # the driver could not list the topic's brokers
            ended: Ended | None = Ended("source", f"sink query cannot start: {exc}")
        else:
            ended = await sink.first_batch(config.sink.first_batch_timeout, stop)
            if ended is None and not stop.is_set():
                sink.ready = True
                metrics.target_ready(config.target, True)
                log.info("sink query running: first batch committed")
                ended = await sink.running(stop)
        if ended is not None:
            ended = await sink.named(ended)
            log.error("sink stage ended: %s", ended.detail)
        return ended
    finally:
        log.info("stopping the sink")
        await sink.stop()
        await server.stop()


class LastWords:
    """Says why the sink ended where its supervisor reads it.

    Under spark-submit this process's stderr is a pipe into the JVM, which copies it
    to its own stderr; when the JVM went first (spark-submit was signalled) that pipe
    leads nowhere. So the JVM's own stderr is opened at start, while it lives, and
    the line goes there when the JVM is gone.
    """

    def __init__(self) -> None:
        from probe.spark.session import starts_own_jvm  # noqa: PLC0415 - Spark only here

        self._parent: int | None = None
        if not starts_own_jvm():
            with contextlib.suppress(OSError):
                self._parent = os.open(f"/proc/{os.getppid()}/fd/2", os.O_WRONLY | os.O_APPEND)

    def say(self, line: str, *, jvm_gone: bool) -> None:
        data = (line.rstrip("\n") + "\n").encode()
        with contextlib.suppress(OSError):
            os.write(sys.stderr.fileno(), data)
        if jvm_gone and self._parent is not None:
            with contextlib.suppress(OSError):
                os.write(self._parent, data)
