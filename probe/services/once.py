"""`sla-probe once`: a few quick rounds, every canary's fate, a report and an exit code.

It probes the configured targets (``targets``, by default those whose broker is
given) at the same time and reports on each. It writes and reads canaries and changes
nothing else on the cluster: it creates the topic or moves its leaders only when asked
(``once.create_topic``, ``once.move_leaders``). With ``once.embedded`` (``--embedded``),
and only then, the Kafka target runs on the embedded broker, started on a free
loopback port with the topic created and stopped afterwards, so one command shows the
whole probe working on a machine with nothing else running. Without it a Kafka target
needs its bootstrap servers (probe.config.require_for_once): a smoke test must never
pass on a broker nobody asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from probe import logs, loop, tracing
from probe.config import ProbeConfig, StageName, TargetKind, require_for_once
from probe.core.errors import ConfigError, ProbeError, RejectReason, TransportError
from probe.core.judge import Finding, Outcome
from probe.core.keys import KeyRing
from probe.embedded import EmbeddedBroker
from probe.services.junit_report import junit_xml
from probe.services.keygen import signing_key_ring
from probe.services.report import Report, StageTally, Tally
from probe.services.smoke_push import push_report
from probe.signals import Interrupted, interruptible, raising_on_signals
from probe.spark_kafka.jars import require_connector
from probe.stages.target import TargetProbe, target_name, target_names

if TYPE_CHECKING:
    from probe.spark.stage import SparkSinkStage

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_SLO_FAILED = 1
EXIT_USAGE = 2
# Stopped by a signal before it could report: 128 + the signal's number, as a shell
# reports a process a signal ended (130 for SIGINT, 143 for SIGTERM), so a deploy
# pipeline tells "interrupted" from "the SLO failed".
EXIT_SIGNAL_BASE = 128


@contextlib.contextmanager
def broker_for(config: ProbeConfig) -> Iterator[ProbeConfig]:
    """The config to probe with: the topic managed only as once.create_topic and
    once.move_leaders ask (kafka.create_topic and kafka.move_leaders are `run`'s), on
    the brokers given, or, with once.embedded, on a fresh embedded broker whose topic
    it creates (nobody else will)."""
    once = config.once
    managed = {"create_topic": once.create_topic, "move_leaders": once.move_leaders}
    if not once.embedded or TargetKind.KAFKA not in config.targets:
        yield config.model_copy(update={"kafka": config.kafka.model_copy(update=managed)})
        return
    with EmbeddedBroker() as broker:
        kafka = config.kafka.model_copy(
            update={**managed, "bootstrap_servers": broker.bootstrap_servers, "create_topic": True}
        )
        yield config.model_copy(update={"kafka": kafka})


async def probe_once(config: ProbeConfig, keyring: KeyRing) -> Report:
    """Probe every target at once; the report, when every canary has its fate."""
    tallies = [Tally(target_name(config, kind)) for kind in config.targets]
    await asyncio.gather(
        *(
            _probe_target(config, keyring, kind, tally)
            for kind, tally in zip(config.targets, tallies, strict=True)
        )
    )
    return Report(tallies)


async def _probe_target(
    config: ProbeConfig, keyring: KeyRing, kind: TargetKind, tally: Tally
) -> None:
    """Fill one target's tally; a target that cannot be probed says why in its error."""
    try:
        await _probe_target_rounds(config, keyring, kind, tally)
    except ConfigError:
        raise  # a setting found bad only now (the Spark log file): exit 2, not 1
    except (ProbeError, TimeoutError) as exc:
        log.error("cannot probe %s: %s", tally.target, exc)
        tally.stages.clear()
        tally.error = str(exc) or type(exc).__name__


async def _probe_target_rounds(
    config: ProbeConfig, keyring: KeyRing, kind: TargetKind, tally: Tally
) -> None:
    once = config.once
    target = TargetProbe(config, keyring, [tally], kind=kind, loss_timeout=once.loss_timeout)
    for stage in target.stages:
        tally.declare_stage(stage.name)
    # Give the broker as long as one canary may take before calling the run failed.
    await target.connect(give_up_after=once.loss_timeout)
    async with contextlib.AsyncExitStack() as cleanup:
        # Stopped in reverse order, whatever fails on the way: the sink, the stage's
        # reading, then the clients.
        cleanup.push_async_callback(target.close)
        if not target.partitions:
            raise TransportError(target.readiness()[1])
        sink = None
        if kind is TargetKind.KAFKA and StageName.SINK in config.stages:
            sink = await _start_sink(config, keyring, tally, target, cleanup)
        consumer = asyncio.create_task(target.consume())
        cleanup.push_async_callback(_cancelled, consumer)
        start = time.monotonic()
        for round_no in range(once.rounds):
            delay = start + round_no * once.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await target.produce_round()
        # Every canary now has a deadline: one loss timeout after the last round, all
        # are decided (the extra second is a backstop for the expiry's own pace).
        await target.settle(once.loss_timeout + 1.0)
        # Canaries that never came back because they could not be read (a fetch
        # refused: no Read ACL, say) are judged lost; the report says why.
        ready, reason = target.readiness()
        if not ready and tally.error is None:
            tally.error = reason
        # Canaries the ACLs refused to write: the report says which ACL is missing.
        if tally.error is None and target.producer is not None and target.producer.refusal:
            tally.error = target.producer.refusal
        if sink is not None:
            await _await_sink(config, tally)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _start_sink(
    config: ProbeConfig,
    keyring: KeyRing,
    tally: Tally,
    target: TargetProbe,
    cleanup: contextlib.AsyncExitStack,
) -> SparkSinkStage:
    """Start the Spark sink, position its source and warm it up, before producing.

    The first batch that carries data also starts Spark's Python workers for the
    decoder and the judge (~15 s here): canaries produced before that would be judged
    late for a cold start, not for the pipeline. So warm-up canaries, under a probe
    id of their own, go through first; the report counts only this run's. The sink is
    stopped by ``cleanup``, also when it fails to start.
    """
    from probe.spark.stage import (  # noqa: PLC0415 - Spark only when asked
        ONCE_FIRST_BATCH_TIMEOUT,
        SinkProgress,
        SparkSinkStage,
    )

    tally.declare_stage(StageName.SINK)
    sink = SparkSinkStage(config, keyring, [OwnCanaries(tally, config.probe_id)], short_run=True)
    cleanup.push_async_callback(sink.stop)
    progress = SinkProgress()  # on a terminal only: Spark's start is ~25 s of silence
    try:
        await sink.attach(target, config.sink.first_batch_timeout or ONCE_FIRST_BATCH_TIMEOUT)
    except (TimeoutError, ProbeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise TransportError(f"sink stage did not start: {exc}") from exc
    progress.ready()
    return sink


@dataclass
class OwnCanaries:
    """A recorder passing on only this probe's findings: the sink judges every probe
    writing to the topic, the report is about this run."""

    tally: Tally
    probe_id: str

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        own = [f for f in findings if f.key.probe_id == self.probe_id]
        if own:
            self.tally.count(target, stage, own)

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        self.tally.count_invalid(target, stage, reason)


async def _await_sink(config: ProbeConfig, tally: Tally) -> None:
    """Wait until the sink has judged every canary the broker acknowledged.

    The sink never hears of acks, so it cannot declare the last canaries of a
    partition lost by itself: what has not reached the sink table within the loss
    timeout (plus a few triggers) is counted lost here.
    """
    consumer, sink = tally.stages[StageName.CONSUMER], tally.stages[StageName.SINK]
    acked = sum(consumer.outcomes[o.value] for o in (Outcome.DELIVERED, Outcome.LATE, Outcome.LOST))
    deadline = (
        time.monotonic()
        + max(config.once.loss_timeout, config.sink.freshness)
        + 3 * config.sink.trigger
    )
    # Fates arrive on Spark's batch thread: polling is simpler than a cross-thread event.
    while _fates(sink) < acked and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    missing = acked - _fates(sink)
    if missing > 0:
        log.error("sink: %d acknowledged canaries never reached the sink table", missing)
        sink.outcomes[Outcome.LOST.value] += missing


def _fates(stage: StageTally) -> int:
    return sum(stage.outcomes[o.value] for o in Outcome)


def run_once(config: ProbeConfig, *, as_json: bool, junit: Path | None = None) -> int:
    """The whole `once` command; returns the exit code. ``junit``: where to write the
    report as JUnit XML too. A ConfigError, of the settings or found only once running
    (the Spark log file), is the CLI's exit 2."""
    require_for_once(config)
    if StageName.SINK in config.stages:
        require_connector(config.sink.source, config.sink.spark_conf)
    keyring = signing_key_ring(config, ephemeral_ok=True)
    tracing.install_tracer_provider(config.probe_id, target_names(config))
    if junit is not None:
        _check_writable(junit, "--junit")
    # The report is the output: the log says only what went wrong.
    logs.configure(config.log_level if config.log_level != "info" else "warning")
    try:
        return _probe_and_report(config, keyring.ring, as_json=as_json, junit=junit)
    finally:
        tracing.shutdown()


def _check_writable(path: Path, flag: str) -> None:
    """A report file the run could not write at its end: said now, before the run."""
    directory = path.parent if str(path.parent) else Path()
    if not directory.is_dir():
        raise ConfigError(flag, f"{path}: no directory {directory}")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(flag, f"{path}: not writable")


def _probe_and_report(
    config: ProbeConfig, keyring: KeyRing, *, as_json: bool, junit: Path | None
) -> int:
    started = time.monotonic()
    try:
        with interruptible(), broker_for(config) as probed:
            report = loop.run(raising_on_signals(probe_once(probed, keyring)))
    except Interrupted as stop:
        log.error("interrupted by %s: no report", stop)
        return EXIT_SIGNAL_BASE + stop.signum
    except TransportError as exc:  # the embedded broker did not start
        log.error("cannot probe %s: %s", config.target, exc)
        report = Report(
            [Tally(target_name(config, kind), error=str(exc)) for kind in config.targets]
        )
    if config.once.push_gateway is not None:
        # A failed push is reported, and leaves the smoke test's verdict as it is.
        ended = time.time()
        duration_s = time.monotonic() - started
        for failure in push_report(config, report, ended_at=ended, duration_s=duration_s):
            log.error("%s", failure)
    if junit is not None:
        junit_xml(report, time.monotonic() - started).write(str(junit), pretty=True)
    print(report.to_json() if as_json else report.to_table())
    return EXIT_OK if report.ok else EXIT_SLO_FAILED
