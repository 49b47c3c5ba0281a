"""`sla-probe reconcile`, the command around the Spark job: once with an exit code, or
every ``reconcile.every`` as a service with /metrics, /healthz and /readyz.

One run: plan and compare on Spark (:mod:`probe.reconcile.job`), append the report
table (:mod:`probe.reconcile.report_table`), count the metrics, print the table or
JSON. Exit codes of a single run (probe.reconcile.outcome.EXIT_CODES): 0 records were
compared and every verifiable window is complete, 1 a mismatch (or no comparison
could be made: the report says why), 2 a usage or configuration error (the CLI's),
3 nothing compared: every window empty or unverifiable, the records written lately
still in windows not yet closed (the report says when they are compared). 3 is not a
pass: a deploy check that runs reconcile right after writing gets it until the
records' windows close and settle.

As a service it keeps going whatever a run finds or fails on: /readyz is 200 once a
run has completed and while the last one did, 503 with the reason otherwise (no
broker, no table yet); a mismatch is the metrics' business, not readiness'. Its
status page (``/``) shows the readiness and the last ``RUNS_SHOWN`` runs' verdicts,
a failed run with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from pyspark.sql import SparkSession

from probe.config import KafkaConfig, ProbeConfig, require_for_reconcile
from probe.core.errors import ConfigError, ReconcileFailed, TransportError
from probe.metrics import probe_version, served_registry
from probe.reconcile.job import Plan, ReconcileJob, ReconcileSettings, plan_run
from probe.reconcile.metrics import ReconcileMetrics
from probe.reconcile.outcome import Reconciliation, Verdict, WindowStatus
from probe.reconcile.render import as_json, iso_time, render_table
from probe.reconcile.report_table import RUN_ID, write_report
from probe.reconcile.windows import WindowSpec
from probe.signals import stop_on_signals
from probe.spark.checksum import RecordFormat
from probe.spark.session import sink_session, starts_own_jvm, writable_spark_output
from probe.status_board import StatusView, refresh_every
from probe.status_page import ReconcileRun
from probe.transport.kafka_settings import librdkafka_security

log = logging.getLogger(__name__)

# A single run over fewer records starts Spark for a short run, its JVM compiling
# with the JIT's first tier only (probe.spark.session.QUICK_JIT). Measured on a 2-core
# VM, the whole command with Spark's class archive: 3,000 records 13 s and 18 CPU-s
# where the full JIT took 18 s and 31; 500,000 records 18.6 s where it took 22.1 s;
# but 2,000,000 records took a third longer with the first tier alone.
SHORT_RUN_RECORDS = 500_000


def new_run_id(now_ms: int) -> str:
    """A run id from the run's start, to the second: ``20260101T120500Z``."""
    return datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise ConfigError(
            "--run-id", f"{run_id!r}: use letters, digits and . _ : - (it names a directory)"
        )
    return run_id


def settings_of(config: ProbeConfig, keyring_json: str | None) -> ReconcileSettings:
    """The job's settings from the config (ConfigError for what is missing)."""
    table, _ = require_for_reconcile(config)
    r = config.reconcile
    duration = r.window.duration_s
    return ReconcileSettings(
        bootstrap_servers=str(config.kafka.bootstrap_servers),
        topic=config.kafka.topic,
        table=table,
        window=WindowSpec(
            offsets=r.window.offsets,
            duration_ms=None if duration is None else round(duration * 1000),
        ),
        settle_s=r.settle if r.settle is not None else config.sink.freshness,
        lookback_s=r.lookback,
        record_format=RecordFormat(r.format),
        partition_column=r.partition_column,
        offset_column=r.offset_column,
        checksum_columns=r.checksum_columns,
        key_column=r.key_column,
        source_key=r.source_key,
        time_column=r.time_column,
        sample_size=r.sample_size,
        kafka_options=librdkafka_security(config.kafka),
        keyring_json=keyring_json,
        probe_id=config.probe_id,
        max_size=config.canary.max_size,
        source=config.sink.source,
    )


def reconcile_session(
    config: ProbeConfig, *, one_shot: bool = False, short_run: bool = False
) -> SparkSession:
    """A Spark session built as the sink stage's is (``sink.master``, ``sink.spark_conf``,
    Spark's own output to ``sink.spark_log``): one place to say where Spark runs.
    ``one_shot``: a single run, which may write Spark's class archive at exit;
    ``short_run``: one over few records (:data:`SHORT_RUN_RECORDS`)."""
    output = None
    if starts_own_jvm():
        sink = config.sink
        output = (
            writable_spark_output(sink.spark_log, sink.path or "")
            if sink.path is not None or sink.spark_log is not None
            else os.devnull
        )
    return sink_session(
        config.sink.master,
        app_name="synthetic-sla-reconcile",
        spark_output=output,
        spark_conf=config.sink.spark_conf,
        streaming=False,
        source=config.sink.source,
        one_shot=one_shot,
        short_run=short_run,
    )


class Reconciler:
    """One configured reconciliation: its job, its report table, its metrics."""

    def __init__(
        self,
        spark: SparkSession,
        config: ProbeConfig,
        keyring_json: str | None,
        metrics: ReconcileMetrics | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.settings = settings_of(config, keyring_json)
        self.report_path = require_for_reconcile(config)[1]
        self.job = ReconcileJob(spark, self.settings, clock_ms)
        self.metrics = metrics
        self._clock_ms = clock_ms
        self._kafka = config.kafka

    def run(self, run_id: str | None = None, planned: Plan | None = None) -> Reconciliation:
        """One run (of ``planned``, or planned now), reported and counted. Raises
        ReconcileFailed (counted as a failed run) or ConfigError (the table does not
        fit the settings)."""
        try:
            try:
                run = self.job.run(run_id or new_run_id(self._clock_ms()), planned)
            except ReconcileFailed as failed:
                raise _named(failed, self._kafka) from failed.__cause__
        except (ReconcileFailed, ConfigError):
            if self.metrics is not None:
                self.metrics.failed()
            raise
        if self.report_path is not None:
            try:
                write_report(self.report_path, run)
            except OSError as exc:
                if self.metrics is not None:
                    self.metrics.failed()
                raise ReconcileFailed(
                    f"cannot write the report table {self.report_path}: {exc}"
                ) from exc
        if self.metrics is not None:
            self.metrics.completed(run)
        _log_run(run)
        return run


def _named(failed: ReconcileFailed, kafka: KafkaConfig) -> ReconcileFailed:
    """A run that could not list the topic's offsets, with the cause named: the
    driver's librdkafka says only "broker transport failure", so a connection of the
    probe's own (probe.transport.kafka_connect_errors) names the certificate, the
    listener or the login, and the setting to change, as `once` and `run` do."""
    if not isinstance(failed.__cause__, TransportError):
        return failed
    from probe.transport.kafka_connect_errors import cause_of  # noqa: PLC0415 - aiokafka

    diagnosis = asyncio.run(cause_of(kafka, failed))
    return failed if diagnosis is None else ReconcileFailed(diagnosis.message)


def _log_run(run: Reconciliation) -> None:
    statuses = run.windows_by_status()
    log.info(
        "reconciled %s: %s, %d records judged; %d windows complete, %d mismatched, %d empty, "
        "%d unverifiable; %d records pending (run %s, %.1fs)",
        run.topic, run.verdict.value, run.judged(), statuses[WindowStatus.COMPLETE],
        statuses[WindowStatus.MISMATCH], statuses[WindowStatus.EMPTY],
        statuses[WindowStatus.UNVERIFIABLE], run.pending_records, run.run_id, run.duration_s,
    )  # fmt: skip
    for result in run.windows:
        if result.status is WindowStatus.MISMATCH:
            t = result.tally
            log.warning(
                "%s partition %s window %s (offsets %d-%d): %d missing %s, %d checksum "
                "mismatches %s, %d extra %s, %d duplicated %s",
                run.topic, "-" if result.window.partition is None else result.window.partition,
                result.window.label, result.window.start, result.window.end - 1,
                t.missing, list(t.samples.missing), t.mismatched, list(t.samples.mismatched),
                t.extra, list(t.samples.extra or t.samples.extra_keys),
                t.duplicated, list(t.samples.duplicated),
            )  # fmt: skip


def reconcile_once(
    config: ProbeConfig,
    keyring_json: str | None,
    *,
    run_id: str | None = None,
    as_json_output: bool = False,
    out: TextIO | None = None,
) -> int:
    """One run: the table (or JSON) on ``out``, the exit code returned. ConfigError
    propagates (the CLI exits 2 with its line).

    It plans before Spark starts (the plan lists offsets only), and starts Spark for
    a short run when the plan holds fewer than :data:`SHORT_RUN_RECORDS` records."""
    out = out or sys.stdout
    try:
        try:
            plan = plan_run(settings_of(config, keyring_json), time.time_ns() // 1_000_000)
        except ReconcileFailed as failed:
            raise _named(failed, config.kafka) from failed.__cause__
        spark = reconcile_session(config, one_shot=True, short_run=plan.records < SHORT_RUN_RECORDS)
        run = Reconciler(spark, config, keyring_json).run(run_id, plan)
    except ReconcileFailed as failed:
        if as_json_output:
            out.write(json.dumps({"ok": False, "error": str(failed)}) + "\n")
        else:
            out.write(f"result: FAILED: {failed}\n")
        return 1
    out.write(json.dumps(as_json(run)) + "\n" if as_json_output else render_table(run))
    return run.exit_code


def _summary(run: Reconciliation) -> str:
    """``complete``, ``found a mismatch``, or ``compared nothing: 9 records pending
    until 2026-01-01T12:10:30Z``."""
    if run.verdict is Verdict.COMPLETE:
        return "complete"
    if run.verdict is Verdict.MISMATCH:
        return "found a mismatch"
    if run.verdict_at_ms is None:
        return "compared nothing: no record to compare"
    return (
        f"compared nothing: {run.pending_records} records pending until "
        f"{iso_time(run.verdict_at_ms)}"
    )


# Runs the status page lists, newest first.
RUNS_SHOWN = 10


class Readiness:
    """/readyz of the reconcile service: ready once a run completed and while the
    last one did; the reason otherwise. ``runs``: the last runs, for the status page."""

    def __init__(self) -> None:
        self.ready = False
        self.reason = "reconcile: first run not finished"
        self.runs: deque[ReconcileRun] = deque(maxlen=RUNS_SHOWN)

    def __call__(self) -> tuple[bool, str]:
        return self.ready, self.reason

    def completed(self, run: Reconciliation) -> None:
        self.ready = True
        self.reason = f"reconcile: last run {run.run_id} {_summary(run)}"
        self.runs.append(
            ReconcileRun(run.run_id, run.finished_ms * 1_000_000, run.verdict.value, _summary(run))
        )

    def failed(self, error: Exception, now_ns: int) -> None:
        self.ready, self.reason = False, f"reconcile: last run failed: {error}"
        self.runs.append(ReconcileRun("", now_ns, "failed", str(error)))


async def serve_reconcile(
    config: ProbeConfig,
    keyring_json: str | None,
    stop: asyncio.Event | None = None,
    *,
    spark: SparkSession | None = None,
) -> None:
    """Reconcile every ``reconcile.every`` until ``stop`` (or SIGTERM/SIGINT).

    Runs start on a fixed period from the first (a run longer than the period is
    followed at once by the next, with no catching up). A stop cancels the Spark jobs
    of a run under way.
    """
    # Only this service serves endpoints: a single run does not import aiohttp.
    from probe.endpoints import MetricsServer, build_app  # noqa: PLC0415

    every = config.reconcile.every
    assert every is not None
    stop = stop_on_signals(stop)
    registry = served_registry()
    metrics = ReconcileMetrics(registry, config.target)
    readiness = Readiness()
    status = StatusView(
        "reconcile",
        config.target,
        readiness,
        reconcile_runs=lambda: tuple(readiness.runs),
        refresh_s=refresh_every(every),
        version=probe_version(),
    )
    server = MetricsServer.from_settings(build_app(registry, readiness, status), config.metrics)
    await server.start()
    try:
        if spark is None:
            spark = await asyncio.to_thread(reconcile_session, config)
        reconciler = Reconciler(spark, config, keyring_json, metrics)
        next_start = time.monotonic()
        while not stop.is_set():
            running = asyncio.create_task(asyncio.to_thread(reconciler.run))
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                # Stopped mid-run: end its Spark jobs rather than wait them out.
                spark.sparkContext.cancelAllJobs()
                with contextlib.suppress(ReconcileFailed, ConfigError):
                    await running
                break
            stopping.cancel()
            try:
                run = running.result()
            except (ReconcileFailed, ConfigError) as failed:
                readiness.failed(failed, time.time_ns())
                log.error("reconciliation failed: %s", failed)
            else:
                readiness.completed(run)
            # A run longer than the period is followed at once, never by a backlog.
            next_start = max(next_start + every, time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_start - time.monotonic()))
    finally:
        await server.stop()
