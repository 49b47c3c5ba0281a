"""The Spark sink stage's job: canaries judged where they land, after a stream processor.

The query, and the module each step lives in::

    sla_kafka source (kafka_source) ─▶ decode + classify (rows.decode_batches, on the
    executors, mapInArrow; the stages' own classify: foreign, invalid, misrouted)
        │ one branch: records that are not judged are grouped per Kafka partition
        ▼
    watermark(produced_at) ─▶ judge per (probe, target, partition), in groups of streams
        (judge_operator.JudgeProcessor: transformWithStateInPandas, one group per bucket
         of partitions, each stream's state in Spark's state store, processing-time
         timers expire losses of silent partitions)
        ▼
    foreachBatch (SinkJob.commit_batch, here):
        delivered or late by produce-to-commit latency (rows.at_commit)
        canaries ▶ <path>/canaries   (tables.write_batch: Parquet, with sink commit time)
        rejected ▶ <path>/quarantine (with reason and claimed probe id)
        verdicts ▶ <path>/verdicts   (one fate per canary, and the anomalies)
        findings ▶ recorders         (rows.finding_of: metrics, the `once` report)
        fates    ▶ spans             (tracing.record_fate: `commit <topic>`, child of
                                      the canary's produce span, ending at the commit)

With ``sink.source: kafka`` the first step is Spark's own connector instead
(``format("kafka")``, options from probe.spark.kafka_connector): its partition, offset
and value columns go into the same decode, judge and tables. Beside the topic the query
reads its heartbeat (probe.spark.heartbeat), a source without records: batches run
when records come, and once a heartbeat while none do, so the timers still fire.

The judge is the same pure :class:`probe.core.judge.Judge` the consumer stage uses, fed the
batch's processing time, so a batch replayed after a failure is judged identically.
Each batch writes its own ``batch_id=N`` directory with overwrite, so a replayed batch
replaces its output instead of adding to it: with the offsets and the judge state in
the checkpoint, a restarted query judges no canary twice and skips none.

Nothing here uses the driver's local disk or process beyond Spark's own APIs: the
tables and the checkpoint may be on any Hadoop-compatible file system, and the codec
and key ring travel to the executors inside the decode function's closure.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from probe import tracing
from probe.config import StageName
from probe.core.errors import RejectReason, StoppedMidBatch
from probe.core.judge import Fate, Finding, StreamKey
from probe.core.keys import KeyRing
from probe.core.partition_summary import offsets_summary
from probe.spark.health import HealthListener, SparkHealth
from probe.spark.heartbeat import HEARTBEAT_NAME, HEARTBEAT_S, NO_DATA_BATCHES, HeartbeatSource
from probe.spark.judge_operator import JudgeProcessor, bucket_of
from probe.spark.kafka_connector import CONNECTOR_NAME, stream_options
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamReader, KafkaStreamSource
from probe.spark.lag import START_FILE, checkpoint_sources
from probe.spark.rows import (
    DECODED,
    JUDGED,
    QUARANTINE_KEY,
    at_commit,
    decode_batches,
    finding_of,
)
from probe.spark.tables import read_text, write_batch, write_text
from probe.stages.stage import Recorder

log = logging.getLogger(__name__)

# The canary's integer fields in DECODED (see SinkJob.build).
_CANARY_INTEGERS = ("partition", "incarnation", "seq", "produced_ns")

# How long a stop lets a batch under way finish before it interrupts it (SinkJob.stop):
# with Spark's own stop after it, within the 10 s a container runtime gives by default.
STOP_BATCH_GRACE = 5.0
STOP_POLL = 0.02
# How long a finished batch holds the query's thread for a stop (SinkJob._rest).
STOP_REST_LIMIT = STOP_BATCH_GRACE + 5.0


# Causes of a JVM error named in its headline (jvm_headline).
_CAUSES_SHOWN = 8


def jvm_headline(error: Py4JJavaError) -> str:
    """A JVM error as py4j words it, and each of its causes in a line, without the
    stack traces::

        py4j.protocol.Py4JJavaError: An error occurred while calling o375.getResult.
        : org.apache.spark.SparkException: Exception thrown in awaitResult:
        Caused by: java.lang.InterruptedException

    It is what Spark reads to tell a batch its stop interrupted (and so a clean stop)
    from a failed one, in the text of the error a ``foreachBatch`` function raised
    (StreamExecution.isInterruptionException); over whole stack traces, its regular
    expression can overflow the thread's stack instead (SPARK-48717).
    """
    causes: list[str] = []
    try:
        cause = error.java_exception
        while cause is not None and len(causes) < _CAUSES_SHOWN:
            causes.append(str(cause.toString()))
            cause = cause.getCause()
    except Exception:  # a JVM that went meanwhile
        causes.append("(the rest went with the JVM)")
    first = f"{type(error).__module__}.{type(error).__qualname__}: {error.errmsg}: {causes[0]}"
    return "\n".join([first, *(f"Caused by: {cause}" for cause in causes[1:])])


def pending_interrupt(spark: SparkSession) -> Py4JJavaError | None:
    """The interrupt pending on the JVM thread this Python thread's calls run on (as
    pyspark pins them: in ``foreachBatch``, the query's own thread), raised there and
    cleared; None if there is none. ``Thread.sleep(0)`` throws the pending interrupt
    before anything else."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # the context is gone
        return None
    try:
        jvm.java.lang.Thread.sleep(0)
    except Py4JJavaError as interrupt:
        return interrupt
    return None


class _StopInterruptions(logging.Filter):
    """Drops py4j's report of a batch the stop itself interrupted, and nothing else.

    py4j logs, with its traceback, any exception a Python callback raises (here the
    ``foreachBatch`` function); Spark takes that failure, under a stop, for the stop it
    is. Every other callback failure is a real one and stays in the log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StoppedMidBatch))


# pyspark's gateway calls back into Python through py4j's client-server mode
# (clientserver), or through its callback server when thread pinning is off (java_gateway).
for _py4j_logger in ("py4j.clientserver", "py4j.java_gateway"):
    logging.getLogger(_py4j_logger).addFilter(_StopInterruptions())


@dataclass
class SinkFreshness:
    """Per stream, the produce time of the freshest canary committed to the sink table.

    Its staleness (now minus that time) is what the sink stage exports per partition:
    it rises while a partition is silent *or* while the sink is held up, which the
    consumer stage cannot see. Updated from Spark's batch thread, read at scrape time.
    """

    started_ns: int
    _freshest: dict[StreamKey, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, key: StreamKey, now_ns: int) -> None:
        with self._lock:
            self._freshest.setdefault(key, now_ns)

    def committed(self, key: StreamKey, produced_ns: int) -> None:
        with self._lock:
            self._freshest[key] = max(produced_ns, self._freshest.get(key, produced_ns))

    def forget(self, key: StreamKey) -> None:
        with self._lock:
            self._freshest.pop(key, None)

    def staleness_ns(self, now_ns: int) -> dict[StreamKey, int]:
        with self._lock:
            return {key: max(0, now_ns - ns) for key, ns in self._freshest.items()}


@dataclass(frozen=True)
class SinkSettings:
    bootstrap_servers: str
    topic: str
    path: str  # tables live under it: canaries/, quarantine/, verdicts/, _checkpoint/
    target: str
    freshness_s: float
    # The probe judging: an unknown key claiming another probe id is foreign.
    probe_id: str
    loss_timeout_s: float
    allowed_lateness_s: float = 60.0
    trigger_s: float = 2.0
    # A batch at least this often while no records come; None: one every trigger
    # (probe.spark.heartbeat).
    heartbeat_s: float | None = HEARTBEAT_S
    max_records_per_batch: int | None = 10_000
    starting_offsets: str = "latest"
    max_size: int = 1_048_576
    checkpoint: str | None = None
    # TLS and SASL in librdkafka's names (probe.transport.kafka_settings), text: the
    # sla_kafka source's kafka.* options; Spark's connector gets them translated.
    kafka_options: dict[str, str] = field(default_factory=dict)
    # What the query reads with (sink.source): sla_kafka, or kafka (Spark's connector).
    source: str = SOURCE_NAME

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint or f"{self.path.rstrip('/')}/_checkpoint"

    def table(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


def exact_frame(batch: DataFrame) -> pd.DataFrame:
    """A batch on the driver with its integers exact: nullable integer columns, where
    ``toPandas`` would make float64 of any holding a null (see rows.typed_frame)."""
    return batch.toArrow().to_pandas(
        types_mapper={pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}.get
    )


class SinkJob:
    """Builds and runs the sink query; turns each committed batch into findings.

    :meth:`hold` pauses batch commits until :meth:`resume`: a batch then waits before
    writing, exactly like a sink blocked on its storage (used to drill the stall alerts).
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: SinkSettings,
        keyring: KeyRing,
        *,
        recorders: Sequence[Recorder],
        freshness: SinkFreshness | None = None,
        health: SparkHealth | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self._keyring = keyring
        self._recorders = recorders
        self._clock_ns = clock_ns
        self.freshness = freshness or SinkFreshness(clock_ns())
        self.health = health
        self.query: StreamingQuery | None = None
        self._listener: HealthListener | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        self.batches_committed = 0
        self._committed = threading.Condition()
        # Set from stop() until the next start: a batch failing meanwhile is its doing.
        self._stopping = False
        # The stop's handshake with the query's thread (see stop() and _rest()).
        self._at_rest = threading.Event()
        self._stop_issued = threading.Event()

    @property
    def tasks_per_batch(self) -> int:
        """The source's tasks per batch: one wave. A canary topic has many partitions
        with a record or two each per batch, and a task costs far more than reading them."""
        return max(1, self.spark.sparkContext.defaultParallelism)

    def source_options(self) -> dict[str, str]:
        s = self.settings
        options = {
            "bootstrap.servers": s.bootstrap_servers,
            "topic": s.topic,
            "startingOffsets": s.starting_offsets,
            "maxInputPartitions": str(self.tasks_per_batch),
            **{f"kafka.{name}": value for name, value in s.kafka_options.items()},
        }
        if s.max_records_per_batch:
            options["maxRecordsPerBatch"] = str(s.max_records_per_batch)
        return options

    def pin_start(self) -> str:
        """The source's starting offsets as a JSON map, resolved from
        ``starting_offsets`` when the query first starts and kept in its checkpoint.

        Spark asks a source for its initial offsets again when a query restarts before
        its first commit; resolving ``latest`` a second time would land past the first
        batch's planned end, which reads like a truncated log and re-reads the topic
        from offset 0. Spark's own Kafka source keeps its initial offsets in the
        checkpoint for the same reason. Raises what listing the offsets raises (no
        broker): the query cannot start without them.
        """
        uri = f"{self.settings.checkpoint_location.rstrip('/')}/{START_FILE}"
        pinned = read_text(uri)
        if pinned is None:
            reader = KafkaStreamReader(self.source_options())
            try:
                offsets = reader.log_start(self.settings.starting_offsets)
            finally:
                reader.stop()
            pinned = json.dumps(offsets, sort_keys=True)
            write_text(uri, pinned)
            log.info("sink query starts at %s offsets: %s (kept in %s)",
                     self.settings.starting_offsets, offsets_summary(offsets), uri)  # fmt: skip
        return pinned

    def connector_options(self, starting_offsets: str | None = None) -> dict[str, str]:
        """The query's options with Spark's own connector (``sink.source: kafka``),
        from ``starting_offsets`` when given (:meth:`pin_start`'s map)."""
        s = self.settings
        return stream_options(
            s.bootstrap_servers,
            s.topic,
            starting_offsets or s.starting_offsets,
            s.max_records_per_batch,
            s.kafka_options,
        )

    def _records(self, starting_offsets: str | None) -> DataFrame:
        """The topic's records as a stream: partition, offset, value."""
        if self.settings.source == CONNECTOR_NAME:
            name, options = CONNECTOR_NAME, self.connector_options(starting_offsets)
        else:
            self.spark.dataSource.register(KafkaStreamSource)
            name, options = SOURCE_NAME, self.source_options()
            if starting_offsets is not None:
                options["startingOffsets"] = starting_offsets
        reader = self.spark.readStream.format(name)
        for option, value in options.items():
            reader = reader.option(option, value)
        raw = reader.load().select("partition", "offset", "value")
        if name == CONNECTOR_NAME:
            # The connector plans one task per partition with new records: on a canary
            # topic, a task per record or two. Read them in one wave of tasks instead,
            # as the sla_kafka source does (maxInputPartitions); narrow, no shuffle.
            raw = raw.coalesce(self.tasks_per_batch)
        return raw

    def heartbeat(self) -> float | None:
        """The heartbeat's period for the query's next run, or None for a batch every
        trigger: the setting, unless the checkpoint was started the other way (Spark
        resumes a checkpoint only with the sources it was written with)."""
        wanted = self.settings.heartbeat_s
        sources = checkpoint_sources(self.settings.checkpoint_location)
        if sources == 1 and wanted is not None:
            log.info("sink checkpoint written without a heartbeat (an older probe, or "
                     "sink.heartbeat: null): a batch every trigger, records or not")  # fmt: skip
            return None
        if sources == 2 and wanted is None:
            log.info("sink checkpoint written with a heartbeat: kept, every %gs", HEARTBEAT_S)
            return HEARTBEAT_S
        return wanted

    def build(
        self, starting_offsets: str | None = None, heartbeat_s: float | None = None
    ) -> DataFrame:
        """The query's plan; ``heartbeat_s`` reads the heartbeat beside the topic
        (probe.spark.heartbeat), which the query then needs batches without data off
        for."""
        s = self.settings
        raw = self._records(starting_offsets)
        if heartbeat_s is not None:
            self.spark.dataSource.register(HeartbeatSource)
            beats = (
                self.spark.readStream.format(HEARTBEAT_NAME).option("every", str(heartbeat_s))
            ).load()
            # The topic first: progress lists the query's sources in this order, and the
            # source lag reads the first (probe.spark.health).
            raw = raw.unionByName(beats)
        decoded = raw.mapInArrow(
            decode_batches(self._keyring.to_json(), s.max_size, s.probe_id), DECODED
        )
        valid = F.col("reason").isNull()
        # One branch only (a union of a valid and a rejected branch would read the
        # source twice per batch): rejected records are grouped per Kafka partition
        # under a probe id no canary of a configured probe has, and pass through.
        keyed = decoded.select(
            F.when(valid, F.col("probe_id")).otherwise(F.lit(QUARANTINE_KEY)).alias("stream_probe"),
            F.when(valid, F.col("target")).otherwise(F.lit("")).alias("stream_target"),
            F.when(valid, F.col("partition"))
            .otherwise(F.col("kafka_partition"))
            .alias("stream_partition"),
            *[
                # A rejected record has no canary fields. Were they null, pandas would
                # hand the judge float64 columns wherever its rows share an Arrow batch
                # with canaries, and produce times and incarnations (above 2**53) would
                # reach the judge rounded: 0 keeps them integers. No output reads a
                # rejected record's canary fields.
                F.coalesce(F.col(name), F.lit(0)).alias(name) if name in _CANARY_INTEGERS else name
                for name in DECODED.fieldNames()
            ],
        ).withWatermark("produced_at", f"{int(s.allowed_lateness_s * 1000)} milliseconds")
        # A group of the judge holds the streams of a bucket of partitions (see
        # judge_operator: one Python call per stream cost 50 ms a stream).
        bucketed = keyed.withColumn("stream_bucket", bucket_of(F.col("stream_partition")))
        return bucketed.groupBy(
            "stream_probe", "stream_target", "stream_bucket"
        ).transformWithStateInPandas(
            statefulProcessor=JudgeProcessor(int(s.freshness_s * 1e9), int(s.loss_timeout_s * 1e9)),
            outputStructType=JUDGED,
            outputMode="Append",
            timeMode="ProcessingTime",
        )

    def start(self, query_name: str = "synthetic_sla_sink") -> StreamingQuery:
        self._stopping = False
        self._at_rest.clear()
        self._stop_issued.clear()
        if self.health is not None and self._listener is None:
            self._listener = HealthListener(self.health, query_name)
            self.spark.streams.addListener(self._listener)
        heartbeat = self.heartbeat()
        # Read when the query starts (its own copy of the session's settings).
        self.spark.conf.set(NO_DATA_BATCHES, "false" if heartbeat is not None else "true")
        self.query = (
            self.build(self.pin_start(), heartbeat)
            .writeStream.queryName(query_name)
            .option("checkpointLocation", self.settings.checkpoint_location)
            .trigger(processingTime=f"{int(self.settings.trigger_s * 1000)} milliseconds")
            .foreachBatch(self.commit_batch)
            .start()
        )
        return self.query

    def commit_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write the batch's tables, then count its findings. Idempotent per batch id.

        The batch's Spark job (the source's read, the judge) runs here, in
        ``exact_frame``.
        """
        try:
            self._flowing.wait()
            rows = exact_frame(batch)
            if not rows.empty:
                commit_ns = self._clock_ns()
                rows = at_commit(rows, commit_ns, int(self.settings.freshness_s * 1e9))
                write_batch(self.settings.path, rows, batch_id, commit_ns)
                self._count(rows, commit_ns)
        except Py4JJavaError as exc:
            if not self._stopping:
                raise
            # Spark's stop cancels the batch's job, then interrupts the query's thread;
            # the job's error may tell only of the cancelling, and Spark reads the error
            # for the interrupt to take it for the stop. The thread's pending interrupt
            # says it. Short, without stack traces (from None): see jvm_headline.
            interrupt = pending_interrupt(self.spark) or exc
            raise StoppedMidBatch(
                f"batch {batch_id} stopped with the query: {jvm_headline(interrupt)}"
            ) from None
        with self._committed:
            self.batches_committed += 1
            self._committed.notify_all()
        if self._stopping:
            self._rest()

    def _rest(self) -> None:
        """Hold the query's thread at the end of a finished batch until stop() has
        stopped the query, then let Spark commit the batch and end.

        Here, in a Python call inside ``foreachBatch``, the stop's interrupt touches no
        work: a moment later, with batches running back to back, it would land in the
        next batch's planning, where Spark logs it as an error (a broadcast it could not
        store, say) before it takes it for the stop.
        """
        self._at_rest.set()
        if not self._stop_issued.wait(STOP_REST_LIMIT):
            return
        # Spark's stop marks the query terminated before it cancels and interrupts: from
        # then on the thread commits this batch (or, interrupted, leaves it to a replay)
        # and ends, never planning another.
        deadline = time.monotonic() + STOP_REST_LIMIT
        while self.query is not None and self.query.isActive and time.monotonic() < deadline:
            time.sleep(STOP_POLL)

    def stop(self, batch_grace: float = STOP_BATCH_GRACE) -> None:
        """Stop the query between batches; returns once it has ended.

        Spark's stop cancels the query's jobs and interrupts its thread, wherever it
        is. So the stop waits, up to ``batch_grace`` seconds, for a moment when that
        touches nothing: the query idle between triggers, or a batch done with its
        work and resting at the end of :meth:`commit_batch` (a held batch is released
        first). Past the grace, Spark interrupts the batch under way: it fails with
        :class:`StoppedMidBatch`, which Spark takes for the stop, and is replayed from
        the checkpoint at the next start. Spark's stop waits for the query's thread to
        end, so nothing of the query runs on when this returns, and the session may be
        stopped next.
        """
        self._stopping = True
        self.resume()
        if self.query is not None:
            deadline = time.monotonic() + batch_grace
            while (
                not self._at_rest.is_set()
                and self.query.status["isTriggerActive"]
                and time.monotonic() < deadline
            ):
                time.sleep(STOP_POLL)
            self._stop_issued.set()
            self.query.stop()
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    def hold(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def wait_for_batches(self, count: int, timeout: float) -> bool:
        """Block until `count` batches were committed since start (e.g. the first one)."""
        with self._committed:
            return self._committed.wait_for(lambda: self.batches_committed >= count, timeout)

    def _count(self, rows: pd.DataFrame, commit_ns: int) -> None:
        target = self.settings.target
        findings: list[Finding] = []
        for row in rows.itertuples(index=False):
            if row.kind == "invalid":
                for recorder in self._recorders:
                    recorder.count_invalid(target, StageName.SINK, RejectReason(row.outcome))
                continue
            finding = finding_of(row, target)
            if finding is None:
                continue
            if isinstance(finding, Fate):
                self._fate_span(finding, row, commit_ns)
                if finding.latency_ns is not None:
                    self.freshness.committed(finding.key, int(row.produced_ns))
            findings.append(finding)
        if findings:
            for recorder in self._recorders:
                recorder.count(target, StageName.SINK, findings)

    def _fate_span(self, fate: Fate, row: Any, commit_ns: int) -> None:
        """The span of a canary's fate at the sink, ended at the batch's commit time
        (the ``sink_commit_ns`` of its table row, which its latency is measured to).

        An arrival's span starts when the judge took the batch (all the sink knows of
        when it read the record). A loss the sink declares has no context to hang a
        span on, as the canary never reached it and the sink hears of no acks: it has
        no span here (the consumer stage's trace shows the loss).
        """
        arrived = not pd.isna(row.kafka_offset)
        tracing.record_fate(
            fate.trace_context,
            tracing.Hop(
                stage=StageName.SINK,
                target=self.settings.target,
                system="kafka",
                destination=self.settings.topic,
                partition=int(row.kafka_partition) if arrived else None,
                offset=int(row.kafka_offset) if arrived else None,
                operation="commit",
                operation_type="process",
            ),
            seq=fate.seq,
            canary_partition=fate.key.partition,
            outcome=fate.outcome.value,
            latency_s=None if fate.latency_ns is None else fate.latency_ns / 1e9,
            arrived_ns=int(row.judged_ns) if fate.latency_ns is not None else None,
            ended_ns=commit_ns,
        )
