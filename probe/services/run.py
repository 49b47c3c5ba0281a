"""`sla-probe run`: the long-running probe service.

It serves /metrics, /healthz, /readyz and the status page (/) from the start (a
probe that cannot reach its broker is measuring an outage: alive, not ready),
connects every configured target with backoff, then produces on every wall-clock
tick while the stages judge arrivals. Targets are independent: one broker being
down never stops the others. /readyz is 200 only while every target is ready, and
lists each one's state. SIGTERM and SIGINT stop it cleanly within a few seconds.

SIGUSR1 holds the Spark sink stage's batches before they write, as a sink blocked on
its storage would be, and SIGUSR2 resumes them: a drill of the stall alerts (the
`sink-stall` game day). Without the sink stage both are logged and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from probe import logs, loop, tracing
from probe.config import ProbeConfig, StageName, TargetKind, require_for_service
from probe.core.keys import KeyRing
from probe.endpoints import MetricsServer, build_app
from probe.keyfile import KeyRingSource
from probe.metrics import ProbeMetrics, probe_version, service_metrics
from probe.services.keygen import signing_key_ring
from probe.signals import stop_on_signals
from probe.spark_kafka.jars import require_connector
from probe.stages.target import TargetProbe, target_names
from probe.stages.tiered import TieredReads
from probe.status_board import Objectives, StatusBoard, StatusView, refresh_every

if TYPE_CHECKING:
    from probe.spark.stage import SparkSinkStage

log = logging.getLogger(__name__)

# After a stop signal, tasks get TASK_GRACE to finish and the broker connections
# CLOSE_GRACE to close: the whole stop stays inside 5 s, including a broker that is
# gone and never answers.
TASK_GRACE = 1.5
CLOSE_GRACE = 2.5
# How long rounds wait for the sink stage's start (see _sink_head_start).
SINK_HEAD_START = 120.0
EXIT_STOPPED = 0


def run_probe(config: ProbeConfig) -> int:
    """The whole `run` command: probe and serve until SIGTERM or SIGINT, then 0. A
    ConfigError, of the settings or found when the endpoints start (a metrics port in
    use, a host that does not resolve), is the CLI's exit 2."""
    keyring = signing_key_ring(config, ephemeral_ok=config.allow_ephemeral_key)
    require_for_service(config)
    if StageName.SINK in config.stages:
        require_connector(config.sink.source, config.sink.spark_conf)
    tracing.install_tracer_provider(config.probe_id, target_names(config))
    logs.configure(config.log_level)
    try:
        loop.run(serve(config, keyring))
    finally:
        tracing.shutdown()
    return EXIT_STOPPED


async def serve(
    config: ProbeConfig, keyring: KeyRing | KeyRingSource, stop: asyncio.Event | None = None
) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT arrives). SIGHUP reloads the key file."""
    stop = stop_on_signals(stop)
    keyring = keyring if isinstance(keyring, KeyRingSource) else KeyRingSource(keyring)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, keyring.reload)
    registry, metrics = service_metrics(config)
    # The status page's recorder sees every finding the metrics count.
    board = StatusBoard(interval_s=config.interval, objectives=Objectives.of(config))
    targets = [
        TargetProbe(config, keyring, [metrics, board], metrics=metrics, kind=kind)
        for kind in config.targets
    ]

    sink = None
    if StageName.SINK in config.stages and TargetKind.KAFKA in config.targets:
        from probe.spark.stage import SparkSinkStage  # noqa: PLC0415 - Spark only when asked

        # The sink ships the ring to its executors when its query starts: it picks up a
        # reloaded ring only when it restarts.
        sink = SparkSinkStage(
            config, keyring.ring, [metrics, board], metrics=metrics, registry=registry
        )

    _drill_signals(sink)

    def readiness() -> tuple[bool, str]:
        states = [(target.target, *target.readiness()) for target in targets]
        if sink is not None:
            states.append((f"{config.target} sink", *sink.readiness()))
        if len(states) == 1:
            return states[0][1:]
        reasons = "; ".join(f"{name}: {reason}" for name, _, reason in states)
        return all(ready for _, ready, _ in states), reasons

    server = MetricsServer.from_settings(
        build_app(registry, readiness, _status_view(config, readiness, board, metrics, sink)),
        config.metrics,
    )
    await server.start()
    log.info("serving metrics on %s://%s:%d", server.scheme, config.metrics.host, server.port)

    async def probe_forever(target: TargetProbe) -> None:
        await target.connect()
        supervisor = None
        if sink is not None and target.kind is TargetKind.KAFKA:
            supervisor = await _start_sink(sink, target, stop)
        consumer = asyncio.create_task(target.consume(), name=f"consume {target.target}")
        try:
            await target.run_rounds(config.interval, stop)
        finally:
            consumer.cancel()
            if supervisor is not None:
                supervisor.cancel()

    tasks = [
        task
        for target in targets
        for task in (
            asyncio.create_task(probe_forever(target), name=f"rounds {target.target}"),
            asyncio.create_task(target.expire_forever(), name=f"expire {target.target}"),
        )
    ]
    tasks += [
        asyncio.create_task(keyring.watch(), name="key file"),
        *_tiered_reads(config, keyring, metrics, targets, stop),
    ]
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if stopped not in done:
        # A task ended on its own: that is a bug; surface it instead of hanging.
        for task in done:
            task.result()
    log.info("stopping")
    for task in [*tasks, stopped]:
        task.cancel()
    await asyncio.wait([*tasks, stopped], timeout=TASK_GRACE)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLOSE_GRACE):
            await asyncio.gather(*(target.close() for target in targets))
    if sink is not None:
        await sink.stop()
    await server.stop()


def _tiered_reads(
    config: ProbeConfig,
    keyring: KeyRingSource,
    metrics: ProbeMetrics,
    targets: list[TargetProbe],
    stop: asyncio.Event,
) -> list[asyncio.Task[None]]:
    """The Kafka target's tiered reads, beside its rounds, when tiered.enabled."""
    return [
        asyncio.create_task(
            TieredReads(config, keyring, metrics.tiered, target=target.target, own=target.own).run(
                stop
            ),
            name="tiered reads",
        )
        for target in targets
        if config.tiered.enabled and target.kind is TargetKind.KAFKA
    ]


def _status_view(
    config: ProbeConfig,
    readiness: Callable[[], tuple[bool, str]],
    board: StatusBoard,
    metrics: ProbeMetrics,
    sink: SparkSinkStage | None,
) -> StatusView:
    """The status page of `run`: every target's stages, and the sink's progress."""
    return StatusView(
        "run",
        config.target,
        readiness,
        board=board,
        sources=metrics.staleness.sources,
        leader_of=metrics.replica_state.leader_of,
        sink=None if sink is None or sink.health is None else sink.health.metrics.progress,
        refresh_s=refresh_every(config.interval),
        version=probe_version(),
    )


async def _start_sink(
    sink: SparkSinkStage, target: TargetProbe, stop: asyncio.Event
) -> asyncio.Task[None]:
    """The sink stage's supervisor beside ``target``, after its head start."""
    supervisor = asyncio.create_task(sink.supervise(target, stop), name="sink stage")
    supervisor.add_done_callback(_report_crash)
    await _sink_head_start(sink, supervisor)
    return supervisor


def _report_crash(task: asyncio.Task[None]) -> None:
    """A sink supervisor that died of an error it does not handle: say so, loudly (the
    probe goes on; /readyz stays false on the sink's last state)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("sink stage supervisor crashed: %r", error, exc_info=error)


async def _sink_head_start(sink: SparkSinkStage, supervisor: asyncio.Task[None]) -> None:
    """Give the sink stage up to SINK_HEAD_START to be ready before rounds begin.

    Canaries produced while Spark's Python workers still start would be judged late
    at the sink for a cold start, not for the pipeline; a sink slower than that (a
    cold cluster, a broker away) must not hold the consumer stage's probing back. It
    goes on starting beside the rounds, /readyz false until its first batch.
    """
    deadline = asyncio.get_running_loop().time() + SINK_HEAD_START
    while not sink.ready and not supervisor.done():
        if asyncio.get_running_loop().time() > deadline:
            log.warning(
                "sink stage not ready after %gs: probing goes on, the sink joins when it is",
                SINK_HEAD_START,
            )
            return
        await asyncio.sleep(0.2)
    if supervisor.done() and not supervisor.cancelled():
        supervisor.result()  # a ConfigError ends the probe


def _drill_signals(sink: SparkSinkStage | None) -> None:
    """SIGUSR1 holds the sink's batches, SIGUSR2 resumes them (an operator's drill).

    Installed with or without a sink: a signal's default action would end the probe.
    """

    def hold() -> None:
        if sink is None:
            log.warning("SIGUSR1 ignored: no sink stage to hold")
        else:
            sink.hold()

    def resume() -> None:
        if sink is None:
            log.warning("SIGUSR2 ignored: no sink stage to resume")
        else:
            sink.resume()

    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGUSR1, hold)
        loop.add_signal_handler(signal.SIGUSR2, resume)
