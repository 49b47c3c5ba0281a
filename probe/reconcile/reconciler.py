"""One reconciliation run of `sla-probe reconcile`: its settings from the config, its
Spark session, the job, the report table, the metrics.

A run plans and compares on Spark (:mod:`probe.reconcile.job`), appends the report
table (:mod:`probe.reconcile.report_table`) and counts the metrics; a run that could
not list the topic's offsets gets its cause named as `once` and `run` name it. The
command around it (once with an exit code, or every ``reconcile.every`` as a service
with its endpoints) is :mod:`probe.services.reconcile`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from probe.config import KafkaConfig, ProbeConfig, require_for_reconcile
from probe.core.errors import ConfigError, ReconcileFailed, TransportError
from probe.reconcile.job import Plan, ReconcileJob, ReconcileSettings, plan_run
from probe.reconcile.metrics import ReconcileMetrics
from probe.reconcile.outcome import Reconciliation, WindowStatus
from probe.reconcile.report_table import write_report
from probe.reconcile.windows import WindowSpec
from probe.spark.checksum import RecordFormat
from probe.spark.session import sink_session, starts_own_jvm, writable_spark_output
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


def one_run(
    config: ProbeConfig, keyring_json: str | None, run_id: str | None = None
) -> Reconciliation:
    """A single run on a Spark session of its own, reported (ReconcileFailed when no
    comparison could be made, ConfigError when the table does not fit the settings).

    It plans before Spark starts (the plan lists offsets only), and starts Spark for
    a short run when the plan holds fewer than :data:`SHORT_RUN_RECORDS` records."""
    try:
        plan = plan_run(settings_of(config, keyring_json), time.time_ns() // 1_000_000)
    except ReconcileFailed as failed:
        raise _named(failed, config.kafka) from failed.__cause__
    spark = reconcile_session(config, one_shot=True, short_run=plan.records < SHORT_RUN_RECORDS)
    return Reconciler(spark, config, keyring_json).run(run_id, plan)
