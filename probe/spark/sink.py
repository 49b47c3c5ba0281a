"""The Spark sink stage: canaries judged where they land, after a stream processor.

The query::

    sla_kafka source ─▶ decode + verify (executors, mapInPandas)
        ├─ valid ─▶ watermark(produced_at) ─▶ judge per (probe, target, partition)
        │           (transformWithStateInPandas, state in Spark's state store,
        │            processing-time timers expire losses of silent partitions)
        └─ invalid ─────────────────────────────────┐
                                                    ▼
                     foreachBatch: canaries ▶ <path>/canaries (Parquet, with sink commit time)
                                   rejected ▶ <path>/quarantine (Parquet, with reason)
                                   verdicts ▶ <path>/verdicts   (Parquet: one fate per canary)
                                   findings ▶ recorders (metrics, the `once` report)

The judge is the same pure :class:`probe.judge.Judge` the consumer stage uses, fed the
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from probe.canary import Canary
from probe.config import StageName
from probe.errors import RejectReason
from probe.judge import (
    Anomaly,
    AnomalyKind,
    Fate,
    Finding,
    Judge,
    JudgePolicy,
    Outcome,
    StreamKey,
)
from probe.keys import KeyRing
from probe.spark.health import HealthListener, SparkHealth
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource
from probe.stage import Recorder

log = logging.getLogger(__name__)

DECODED = StructType(
    [
        StructField("probe_id", StringType()),
        StructField("target", StringType()),
        StructField("partition", IntegerType()),
        StructField("incarnation", LongType()),
        StructField("seq", LongType()),
        StructField("produced_ns", LongType()),
        StructField("produced_at", TimestampType()),
        StructField("trace_context", StringType()),
        StructField("reason", StringType()),  # null for a valid canary
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("value", BinaryType()),  # kept for rejected records only
    ]
)

# Verdicts of records that are not judged, beside the RejectReason values.
FOREIGN = AnomalyKind.FOREIGN.value
MISROUTED = AnomalyKind.MISROUTED.value

# The grouping key of rejected records (with their Kafka partition). Were a canary to
# claim it as its probe id, rows would still be told apart by their `reason`.
QUARANTINE_KEY = "\x00rejected"

# What the judge emits; `kind` says which columns mean something:
#   canary   a valid arrival (every one, duplicates included) for the canaries table
#   fate     outcome = delivered | late | lost | produce_failed
#   anomaly  outcome = duplicate | out_of_order | resurrected
#   invalid  outcome = the rejection reason; value = the raw record
JUDGED = StructType(
    [
        StructField("kind", StringType()),
        StructField("probe_id", StringType()),
        StructField("target", StringType()),
        StructField("partition", IntegerType()),
        StructField("incarnation", LongType()),
        StructField("seq", LongType()),
        StructField("produced_ns", LongType()),
        StructField("outcome", StringType()),
        StructField("judged_ns", LongType()),
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("trace_context", StringType()),
        StructField("value", BinaryType()),
    ]
)


# The sink tables. Columns are typed here, not inferred from a batch: a column that
# is null in one batch must not change type in the next.
TABLE_SCHEMAS = {
    "canaries": pa.schema(
        [
            ("probe_id", pa.string()),
            ("target", pa.string()),
            ("partition", pa.int32()),
            ("incarnation", pa.int64()),
            ("seq", pa.int64()),
            ("produced_ns", pa.int64()),
            ("judged_ns", pa.int64()),
            ("sink_commit_ns", pa.int64()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
            ("trace_context", pa.string()),
        ]
    ),
    "verdicts": pa.schema(
        [
            ("kind", pa.string()),
            ("probe_id", pa.string()),
            ("target", pa.string()),
            ("partition", pa.int32()),
            ("incarnation", pa.int64()),
            ("seq", pa.int64()),
            ("produced_ns", pa.int64()),
            ("outcome", pa.string()),
            ("judged_ns", pa.int64()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
        ]
    ),
    "quarantine": pa.schema(
        [
            ("claimed_probe_id", pa.string()),
            ("reason", pa.string()),
            ("kafka_partition", pa.int32()),
            ("kafka_offset", pa.int64()),
            ("value", pa.binary()),
            ("quarantined_ns", pa.int64()),
        ]
    ),
}


def decode_batches(
    keyring_json: str, max_size: int, probe_id: str
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The executor-side decoder for mapInPandas. Never raises for hostile bytes.

    Records are classified exactly as the other stages classify them (foreign, invalid
    with a reason, or a verified canary); ``reason`` carries the verdict of a record
    that is not judged: a :class:`RejectReason`, ``foreign``, or ``misrouted`` for a
    verified canary read from another Kafka partition than the one it names.
    """

    def decode_frames(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from probe.canary import Canary  # noqa: PLC0415 - runs on the executors
        from probe.stage import classify  # noqa: PLC0415

        keyring = KeyRing.from_json(keyring_json)
        for frame in frames:
            rows = []
            for kafka_partition, offset, value in zip(
                frame["partition"], frame["offset"], frame["value"], strict=True
            ):
                payload = bytes(value) if value is not None else b""
                verdict = classify(payload, keyring, probe_id, max_size=max_size)
                if verdict is None:
                    rows.append(_unjudged_row(FOREIGN, None, int(kafka_partition), int(offset)))
                    continue
                if not isinstance(verdict, Canary):
                    rows.append(
                        _unjudged_row(
                            verdict.reason.value,
                            verdict.claimed_probe_id,
                            int(kafka_partition),
                            int(offset),
                            # A record too large to be a canary is not worth keeping whole.
                            payload[:65536],
                        )
                    )
                    continue
                rows.append(
                    {
                        "probe_id": verdict.probe_id,
                        "target": verdict.target,
                        "partition": verdict.partition,
                        "incarnation": verdict.incarnation,
                        "seq": verdict.seq,
                        "produced_ns": verdict.produced_ns,
                        "produced_at": _event_time(verdict.produced_ns),
                        "trace_context": verdict.trace_context,
                        # A verified canary naming another partition than the one it
                        # was read from was forged or replayed there: not judged.
                        "reason": None if verdict.partition == kafka_partition else MISROUTED,
                        "kafka_partition": int(kafka_partition),
                        "kafka_offset": int(offset),
                        "value": None,
                    }
                )
            yield pd.DataFrame(rows, columns=DECODED.fieldNames())

    return decode_frames


# Spark timestamps are microseconds; pandas' range ends in 2262.
_MAX_EVENT_US = 9_000_000_000_000_000


def _event_time(produced_ns: int) -> pd.Timestamp:
    return pd.Timestamp(min(produced_ns // 1000, _MAX_EVENT_US), unit="us", tz="UTC")


def _unjudged_row(
    reason: str,
    claimed_probe_id: str | None,
    kafka_partition: int,
    offset: int,
    payload: bytes | None = None,
) -> dict[str, object]:
    return {
        "probe_id": claimed_probe_id,
        "target": None,
        "partition": None,
        "incarnation": None,
        "seq": None,
        "produced_ns": None,
        "produced_at": None,
        "trace_context": None,
        "reason": reason,
        "kafka_partition": kafka_partition,
        "kafka_offset": offset,
        "value": payload,
    }


class JudgeProcessor(StatefulProcessor):
    """The judge as a Spark stateful operator, one instance per (probe, target, partition).

    State: the stream's :class:`probe.judge.StreamState` as JSON in a value state.
    A processing-time timer is kept at the earliest loss deadline, so canaries implied
    by a sequence gap are declared lost even if the partition falls silent.
    """

    def __init__(self, freshness_ns: int, loss_timeout_ns: int) -> None:
        self.policy = JudgePolicy(freshness_ns=freshness_ns, loss_timeout_ns=loss_timeout_ns)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("judge", StructType([StructField("json", StringType())]))

    def _judge(self, key: StreamKey) -> Judge:
        judge = Judge(self.policy)
        if self.state.exists():
            stored = self.state.get()
            assert stored is not None
            judge.import_state(key, json.loads(stored[0]))
        return judge

    def _save(self, judge: Judge, key: StreamKey) -> None:
        exported = judge.export_state(key)
        if exported is not None:
            self.state.update((json.dumps(exported),))
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        deadline = judge.next_deadline_ns()
        if deadline is not None:
            self.handle.registerTimer(deadline // 1_000_000 + 1)

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        stream = StreamKey(str(key[0]), str(key[1]), int(key[2]))
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        batch = pd.concat(list(rows)).sort_values(["kafka_partition", "kafka_offset"])
        rejected = batch["reason"].notna()
        # Rejected records share this operator so the query reads its source once;
        # they pass straight through and never touch a stream's state.
        out: list[dict[str, object]] = [
            _rejected_out(row) for row in batch[rejected].itertuples(index=False)
        ]
        arrivals = batch[~rejected]
        if arrivals.empty and not self.state.exists():
            yield pd.DataFrame(out, columns=JUDGED.fieldNames())
            return
        judge = self._judge(stream)
        for row in arrivals.itertuples(index=False):
            canary = Canary(
                probe_id=stream.probe_id,
                incarnation=int(row.incarnation),
                target=stream.target,
                partition=stream.partition,
                seq=int(row.seq),
                produced_ns=int(row.produced_ns),
                trace_context=row.trace_context,
            )
            out.append(_judged_row("canary", canary, None, now_ns, row))
            out.extend(
                _finding_row(f, canary.incarnation, now_ns, row, canary.produced_ns)
                for f in judge.on_arrived(canary, now_ns)
            )
        out.extend(_finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns))
        self._save(judge, stream)
        yield pd.DataFrame(out, columns=JUDGED.fieldNames())

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        stream = StreamKey(str(key[0]), str(key[1]), int(key[2]))
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        judge = self._judge(stream)
        out = [_finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns)]
        self._save(judge, stream)
        yield pd.DataFrame(out, columns=JUDGED.fieldNames())

    def close(self) -> None:
        pass


def _rejected_out(row: Any) -> dict[str, object]:
    # A foreign record is only counted; a misrouted canary is an anomaly in the
    # verdicts table; anything else is invalid and goes to quarantine.
    kind = {FOREIGN: "foreign", MISROUTED: "anomaly"}.get(row.reason, "invalid")
    return {
        "kind": kind,
        "probe_id": row.probe_id,  # as claimed, unauthenticated for an invalid record
        "target": row.target,
        "partition": row.kafka_partition if row.partition is None else row.partition,
        "incarnation": row.incarnation,
        "seq": row.seq,
        "produced_ns": None,
        "outcome": row.reason,
        "judged_ns": None,
        "kafka_partition": row.kafka_partition,
        "kafka_offset": row.kafka_offset,
        "trace_context": None,
        "value": row.value,
    }


def _judged_row(
    kind: str, canary: Canary, outcome: str | None, now_ns: int, row: Any
) -> dict[str, object]:
    return {
        "kind": kind,
        "probe_id": canary.probe_id,
        "target": canary.target,
        "partition": canary.partition,
        "incarnation": canary.incarnation,
        "seq": canary.seq,
        "produced_ns": canary.produced_ns,
        "outcome": outcome,
        "judged_ns": now_ns,
        "kafka_partition": row.kafka_partition,
        "kafka_offset": row.kafka_offset,
        "trace_context": canary.trace_context,
        "value": None,
    }


def _finding_row(
    finding: Finding,
    incarnation: int | None,
    now_ns: int,
    row: Any,
    produced_ns: int | None,
) -> dict[str, object]:
    is_fate = isinstance(finding, Fate)
    return {
        "kind": "fate" if is_fate else "anomaly",
        "probe_id": finding.key.probe_id,
        "target": finding.key.target,
        "partition": finding.key.partition,
        "incarnation": incarnation,
        "seq": finding.seq,
        "produced_ns": produced_ns,
        "outcome": finding.outcome.value if isinstance(finding, Fate) else finding.kind.value,
        "judged_ns": now_ns,
        "kafka_partition": None if row is None else row.kafka_partition,
        "kafka_offset": None if row is None else row.kafka_offset,
        "trace_context": None,
        "value": None,
    }


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
    max_records_per_batch: int | None = 10_000
    starting_offsets: str = "latest"
    max_size: int = 1_048_576
    checkpoint: str | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint or f"{self.path.rstrip('/')}/_checkpoint"

    def table(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


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

    @property
    def tasks_per_batch(self) -> int:
        """The source's tasks per batch: one wave. A canary topic has many partitions
        with a record or two each per batch, and a task costs far more than reading them."""
        return max(1, self.spark.sparkContext.defaultParallelism)

    def build(self) -> DataFrame:
        s = self.settings
        self.spark.dataSource.register(KafkaStreamSource)
        reader = (
            self.spark.readStream.format(SOURCE_NAME)
            .option("bootstrap.servers", s.bootstrap_servers)
            .option("topic", s.topic)
            .option("startingOffsets", s.starting_offsets)
            .option("maxInputPartitions", str(self.tasks_per_batch))
        )
        if s.max_records_per_batch:
            reader = reader.option("maxRecordsPerBatch", str(s.max_records_per_batch))
        for name, value in s.kafka_options.items():
            reader = reader.option(f"kafka.{name}", value)
        raw = reader.load().select("partition", "offset", "value")
        decoded = raw.mapInPandas(
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
            *DECODED.fieldNames(),
        ).withWatermark("produced_at", f"{int(s.allowed_lateness_s * 1000)} milliseconds")
        return keyed.groupBy(
            "stream_probe", "stream_target", "stream_partition"
        ).transformWithStateInPandas(
            statefulProcessor=JudgeProcessor(int(s.freshness_s * 1e9), int(s.loss_timeout_s * 1e9)),
            outputStructType=JUDGED,
            outputMode="Append",
            timeMode="ProcessingTime",
        )

    def start(self, query_name: str = "synthetic_sla_sink") -> StreamingQuery:
        if self.health is not None and self._listener is None:
            self._listener = HealthListener(self.health, query_name)
            self.spark.streams.addListener(self._listener)
        self.query = (
            self.build()
            .writeStream.queryName(query_name)
            .option("checkpointLocation", self.settings.checkpoint_location)
            .trigger(processingTime=f"{int(self.settings.trigger_s * 1000)} milliseconds")
            .foreachBatch(self.commit_batch)
            .start()
        )
        return self.query

    def commit_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write the batch's tables, then count its findings. Idempotent per batch id."""
        self._flowing.wait()
        rows: pd.DataFrame = batch.toPandas()
        if not rows.empty:
            commit_ns = self._clock_ns()
            rows = self._judge_freshness(rows, commit_ns)
            self._write(rows, batch_id, commit_ns)
            self._count(rows, commit_ns)
        with self._committed:
            self.batches_committed += 1
            self._committed.notify_all()

    def _judge_freshness(self, rows: pd.DataFrame, commit_ns: int) -> pd.DataFrame:
        """Delivered or late by the latency a reader of the table sees: produce to commit.

        The stateful judge decides arrivals with the batch's start time (all it
        knows); the batch's own run time comes on top. Re-deciding here, at commit,
        keeps the verdicts table, the outcome counters and the latency histogram in
        agreement. Only delivered/late swap: which canaries got a fate is the judge's.
        """
        arrived = (rows["kind"] == "fate") & rows["outcome"].isin(
            [Outcome.DELIVERED.value, Outcome.LATE.value]
        )
        if not arrived.any():
            return rows
        latency = commit_ns - rows.loc[arrived, "produced_ns"].astype("int64")
        fresh = latency <= int(self.settings.freshness_s * 1e9)
        rows = rows.copy()
        rows.loc[arrived, "outcome"] = fresh.map(
            {True: Outcome.DELIVERED.value, False: Outcome.LATE.value}
        )
        return rows

    def stop(self) -> None:
        """Stop the query; a held batch is released first so the stop is between batches."""
        self.resume()
        if self.query is not None:
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

    def _write(self, rows: pd.DataFrame, batch_id: int, commit_ns: int) -> None:
        canaries = rows[rows["kind"] == "canary"].assign(sink_commit_ns=commit_ns)
        verdicts = rows[rows["kind"].isin(["fate", "anomaly"])]
        quarantine = (
            rows[rows["kind"] == "invalid"]
            .rename(columns={"outcome": "reason", "probe_id": "claimed_probe_id"})
            .assign(quarantined_ns=commit_ns)
        )
        for name, frame in (
            ("canaries", canaries),
            ("verdicts", verdicts),
            ("quarantine", quarantine),
        ):
            if not frame.empty:
                self._write_table(name, frame, batch_id)

    def _write_table(self, name: str, frame: pd.DataFrame, batch_id: int) -> None:
        """One Parquet file per table and batch, written by the driver through Arrow's
        file systems (local, HDFS, S3, GCS by URI): a handful of rows per batch does
        not need a Spark job, and the file name is fixed, so a replayed batch
        overwrites its own output instead of adding to it."""
        schema = TABLE_SCHEMAS[name]
        table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
        # Hadoop names S3 `s3a://` (the checkpoint goes through Hadoop); Arrow, `s3://`.
        uri = self.settings.table(name)
        if uri.startswith("s3a://"):
            uri = "s3://" + uri.removeprefix("s3a://")
        filesystem, root = pafs.FileSystem.from_uri(uri)
        directory = f"{root}/batch_id={batch_id}"
        filesystem.create_dir(directory, recursive=True)
        pq.write_table(table, f"{directory}/part-00000.parquet", filesystem=filesystem)

    def _count(self, rows: pd.DataFrame, commit_ns: int) -> None:
        target = self.settings.target
        findings: list[Finding] = []
        for row in rows.itertuples(index=False):
            if row.kind == "invalid":
                for recorder in self._recorders:
                    recorder.count_invalid(target, StageName.SINK, RejectReason(row.outcome))
                continue
            if row.kind == "canary":
                continue
            if row.kind == "foreign":
                key = StreamKey("", target, int(row.kafka_partition))
                findings.append(Anomaly(key, -1, AnomalyKind.FOREIGN))
                continue
            key = StreamKey(str(row.probe_id), str(row.target), int(row.partition))
            if row.kind == "fate":
                outcome = Outcome(row.outcome)
                latency = None
                if outcome in (Outcome.DELIVERED, Outcome.LATE):
                    # Produce to sink commit: what a reader of the table experiences.
                    latency = max(0, commit_ns - int(row.produced_ns))
                    self.freshness.committed(key, int(row.produced_ns))
                findings.append(Fate(key, int(row.seq), outcome, latency))
            else:
                findings.append(Anomaly(key, int(row.seq), AnomalyKind(row.outcome)))
        if findings:
            for recorder in self._recorders:
                recorder.count(target, StageName.SINK, findings)
