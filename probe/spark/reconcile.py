"""The reconciliation job on Spark: a topic's records against a table's rows, counted
and checksummed per window and partition on the executors.

::

    driver: list the topic's offsets ─▶ plan windows (probe.reconcile.windows)
        │                                  small: one row per window and partition
        ▼                                                  │ broadcast
    sla_kafka batch read (the planned offset ranges,       ▼
      one task per partition or piece of one) ─▶ canonical record ─▶ checksum ─▶ window
    Parquet table (partition, offset, checksum columns) ─▶ canonical record ─▶ checksum
      ─▶ window ─▶ per offset: copies, checksums
        ▼
    full outer join on (partition, offset) ─▶ per record: matched, missing, extra,
      duplicated, checksum mismatch ─▶ per window: counts, window checksums, and a
      bounded sample of offsets of each discrepancy
        ▼
    driver: only those per-window rows come back (probe.reconcile.outcome)

No record ever reaches the driver: the work splits by Kafka partition and offset (the
source's tasks, the join's and the aggregation's shuffle), so it scales with the
cluster. Both sides place a record in its window by partition and offset only, so a
record is in the same window on both sides whatever its timestamps (see windows).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kafka.errors import KafkaError
from py4j.protocol import Py4JError
from pyspark import StorageLevel
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from probe.errors import ConfigError, ReconcileFailed
from probe.reconcile.outcome import Reconciliation, Samples, Tally, WindowResult
from probe.reconcile.windows import (
    PartitionLog,
    WindowSpec,
    offset_windows,
    time_boundaries,
    time_windows,
)
from probe.reconcile.windows import Window as ReconcileWindow
from probe.spark.checksum import (
    CANARY_FIELDS,
    DECODED_CANARY,
    RecordFormat,
    decode_canaries,
    record_checksum,
    unsigned,
    window_checksum,
)
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource, TopicOffsets

log = logging.getLogger(__name__)

# The plan, broadcast to both sides: the offsets of each window (`window` numbers it).
PLAN = StructType(
    [
        StructField("plan_partition", IntegerType(), False),
        StructField("window_start", LongType(), False),
        StructField("window_end", LongType(), False),
        StructField("window", IntegerType(), False),
    ]
)
SAMPLE_KINDS = ("missing", "mismatched", "extra", "duplicated")


@dataclass(frozen=True)
class ReconcileSettings:
    """What to compare with what. ``checksum_columns`` None: the format's own
    (canary: its signed fields; raw: ``value``); json needs them named."""

    bootstrap_servers: str
    topic: str
    table: str
    window: WindowSpec
    settle_s: float
    lookback_s: float | None = 3600.0
    record_format: RecordFormat = RecordFormat.CANARY
    partition_column: str = "kafka_partition"
    offset_column: str = "kafka_offset"
    checksum_columns: tuple[str, ...] | None = None
    sample_size: int = 10
    kafka_options: dict[str, str] = field(default_factory=dict)
    # The canary format verifies records as the sink stage does.
    keyring_json: str | None = None
    probe_id: str = ""
    max_size: int = 1_048_576

    def source_options(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "topic": self.topic,
            **{f"kafka.{name}": value for name, value in self.kafka_options.items()},
        }

    @property
    def columns(self) -> tuple[str, ...]:
        if self.checksum_columns:
            return self.checksum_columns
        if self.record_format is RecordFormat.CANARY:
            return tuple(CANARY_FIELDS.fieldNames())
        if self.record_format is RecordFormat.RAW:
            return ("value",)
        raise ConfigError("reconcile.checksum_columns", "required with format json")


class ReconcileJob:
    """Plans the windows (:meth:`plan`), compares them (:meth:`compare`), or both
    (:meth:`run`). ``clock_ms`` is read once per run, to plan."""

    def __init__(
        self,
        spark: SparkSession,
        settings: ReconcileSettings,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self._clock_ms = clock_ms
        if settings.record_format is RecordFormat.RAW and len(settings.columns) != 1:
            raise ConfigError(
                "reconcile.checksum_columns", "format raw compares one column with the value"
            )
        if settings.record_format is RecordFormat.CANARY and settings.keyring_json is None:
            raise ConfigError(
                "signing_key_file",
                "required by format canary: records are verified as the sink stage does",
            )

    def run(self, run_id: str) -> Reconciliation:
        """Plan and compare. Raises ReconcileFailed when no comparison could be made
        (brokers, topic, a Spark job), ConfigError for a table that does not fit."""
        started_ms = self._clock_ms()
        try:
            windows = self.plan(started_ms)
            results = self.compare(windows)
        except (KafkaError, ValueError, OSError, Py4JError, PySparkException) as exc:
            raise ReconcileFailed(_reason(exc)) from exc
        return Reconciliation(
            run_id, self.settings.topic, self.settings.table, started_ms, self._clock_ms(), results
        )

    # -- driver: the plan -----------------------------------------------------------

    def plan(self, now_ms: int) -> list[ReconcileWindow]:
        """The windows to compare now, from the log's offsets as listed now."""
        s = self.settings
        offsets = TopicOffsets(s.source_options())
        try:
            begin, end = offsets.bounds()
            logs = [PartitionLog(int(p), begin[p], end[p]) for p in sorted(end, key=int)]
            settle_ms = round(s.settle_s * 1000)
            lookback_ms = None if s.lookback_s is None else round(s.lookback_s * 1000)
            if s.window.duration_ms is not None:
                boundaries = time_boundaries(
                    now_ms, lookback_ms or 0, settle_ms, s.window.duration_ms
                )
                at = {moment: offsets.at_times(dict.fromkeys(end, moment)) for moment in boundaries}
                return [
                    window
                    for partition in logs
                    for window in time_windows(
                        partition,
                        boundaries,
                        {moment: at[moment][str(partition.partition)] for moment in boundaries},
                    )
                ]
            assert s.window.offsets is not None
            settled = offsets.at_times(dict.fromkeys(end, now_ms - settle_ms))
            since = (
                offsets.at_times(dict.fromkeys(end, now_ms - lookback_ms))
                if lookback_ms is not None
                else dict(begin)
            )
        finally:
            offsets.close()
        return [
            window
            for partition in logs
            for window in offset_windows(
                partition,
                s.window.offsets,
                since=_or(since[str(partition.partition)], partition.end),
                settled=_or(settled[str(partition.partition)], partition.end),
            )
        ]

    # -- executors: the comparison ----------------------------------------------------

    def compare(self, windows: Sequence[ReconcileWindow]) -> list[WindowResult]:
        """Count and checksum every window on the executors; only per-window rows
        come back. Windows holding no offsets are empty on both sides by definition."""
        planned = [
            (w.partition, w.start, w.end, index)
            for index, w in enumerate(windows)
            if w.end > w.start
        ]
        if not planned:
            return [WindowResult(w, Tally()) for w in windows]
        plan = F.broadcast(self.spark.createDataFrame(planned, PLAN))
        sink = self._sink(plan)
        source = self._source(plan, windows)
        records = self._records(source, sink).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = {row["window"]: row for row in self._counts(records).collect()}
            samples = self._samples(records)
        finally:
            records.unpersist()
        return [
            WindowResult(w, _tally(counts.get(index), samples.get(index, {})))
            for index, w in enumerate(windows)
        ]

    def _source(self, plan: DataFrame, windows: Sequence[ReconcileWindow]) -> DataFrame:
        """The source's records in the planned windows: kafka_partition,
        kafka_offset, window, in_table, checksum."""
        s = self.settings
        starts: dict[str, int] = {}
        ends: dict[str, int] = {}
        for w in windows:
            if w.end > w.start:
                key = str(w.partition)
                starts[key] = min(starts.get(key, w.start), w.start)
                ends[key] = max(ends.get(key, w.end), w.end)
        self.spark.dataSource.register(KafkaStreamSource)
        reader = self.spark.read.format(SOURCE_NAME)
        options = {
            **s.source_options(),
            # Only what the windows cover: other partitions, and other offsets, unread.
            "assign": json.dumps({s.topic: sorted(int(p) for p in starts)}),
            "startingOffsets": json.dumps(starts),
            "endingOffsets": json.dumps(ends),
            "minPartitions": str(self.spark.sparkContext.defaultParallelism),
        }
        for name, value in options.items():
            reader = reader.option(name, value)
        raw = reader.load().select("partition", "offset", "value")
        if s.record_format is RecordFormat.CANARY:
            assert s.keyring_json is not None
            decoded = raw.mapInPandas(
                decode_canaries(s.keyring_json, s.max_size, s.probe_id), DECODED_CANARY
            )
            canonical = [F.col(f"`{f.name}`").cast(f.dataType) for f in CANARY_FIELDS.fields]
        else:
            decoded = raw.select(
                F.col("partition").alias("kafka_partition"),
                F.col("offset").alias("kafka_offset"),
                F.lit(True).alias("in_table"),
                "value",
            )
            canonical = self._source_canonical(F.col("value"))
        keyed = decoded.select(
            "kafka_partition",
            "kafka_offset",
            "in_table",
            # Records the table is not meant to hold have no checksum: they are
            # counted as excluded, and a row at their offset is extra.
            F.when(F.col("in_table"), record_checksum(canonical)).alias("h"),
        )
        return _in_windows(keyed, plan)

    def _source_canonical(self, value: Column) -> list[Column]:
        s = self.settings
        types = self._sink_types()
        if s.record_format is RecordFormat.RAW:
            return [value.cast(BinaryType())]
        parsed = F.from_json(
            value.cast(StringType()),
            StructType([StructField(name, types[name]) for name in s.columns]),
        )
        return [parsed.getField(name).cast(types[name]) for name in s.columns]

    def _sink_table(self) -> DataFrame:
        try:
            return self.spark.read.parquet(self.settings.table)
        except AnalysisException as exc:
            raise ConfigError(
                "reconcile.table", f"no Parquet table at {self.settings.table}: {exc.getMessage()}"
            ) from None

    def _sink_types(self) -> dict[str, DataType]:
        schema = self._sink_table().schema
        return {f.name: f.dataType for f in schema.fields}

    def _sink(self, plan: DataFrame) -> DataFrame:
        """The table's rows in the planned windows, one per (partition, offset):
        copies, smallest and largest checksum, and the sum of every copy's."""
        s = self.settings
        table = self._sink_table()
        named = [s.partition_column, s.offset_column, *s.columns]
        absent = [name for name in named if name not in table.columns]
        if absent:
            raise ConfigError(
                "reconcile.table",
                f"{s.table} has no column {', '.join(absent)} (it has {', '.join(table.columns)})",
            )
        if s.record_format is RecordFormat.CANARY:
            canonical = [F.col(f"`{f.name}`").cast(f.dataType) for f in CANARY_FIELDS.fields]
        elif s.record_format is RecordFormat.RAW:
            canonical = [F.col(f"`{s.columns[0]}`").cast(BinaryType())]
        else:
            types = dict((f.name, f.dataType) for f in table.schema.fields)
            canonical = [F.col(f"`{name}`").cast(types[name]) for name in s.columns]
        rows = table.select(
            F.col(f"`{s.partition_column}`").cast(IntegerType()).alias("kafka_partition"),
            F.col(f"`{s.offset_column}`").cast(LongType()).alias("kafka_offset"),
            record_checksum(canonical).alias("h"),
        )
        return (
            _in_windows(rows, plan)
            .groupBy("kafka_partition", "kafka_offset", "window")
            .agg(
                F.count(F.lit(1)).alias("copies"),
                F.min("h").alias("h_min"),
                F.max("h").alias("h_max"),
                F.sum(unsigned(F.col("h"))).alias("h_sum"),
            )
        )

    @staticmethod
    def _records(source: DataFrame, sink: DataFrame) -> DataFrame:
        """One row per offset present on either side, with what became of it."""
        joined = source.withColumnRenamed("window", "source_window").join(
            sink.withColumnRenamed("window", "sink_window"),
            ["kafka_partition", "kafka_offset"],
            "full_outer",
        )
        in_source = F.col("h").isNotNull()
        in_sink = F.col("copies").isNotNull()
        same = (F.col("h_min") == F.col("h")) & (F.col("h_max") == F.col("h"))
        return joined.select(
            F.coalesce("source_window", "sink_window").alias("window"),
            "kafka_offset",
            in_source.alias("in_source"),
            (F.col("in_table") == F.lit(False)).alias("excluded"),
            F.coalesce(F.col("copies"), F.lit(0)).alias("copies"),
            (in_source & in_sink & same).alias("matched"),
            (in_source & in_sink & ~same).alias("mismatched"),
            (in_source & ~in_sink).alias("missing"),
            (~in_source & in_sink).alias("extra"),
            (in_source & (F.col("copies") > 1)).alias("duplicated"),
            F.when(in_source, unsigned(F.col("h"))).alias("source_sum"),
            F.col("h_sum").alias("sink_sum"),
        )

    @staticmethod
    def _counts(records: DataFrame) -> DataFrame:
        def count(flag: str) -> Column:
            return F.sum(F.col(flag).cast("long"))

        return records.groupBy("window").agg(
            count("in_source").alias("source"),
            F.sum("copies").alias("sink"),
            count("matched").alias("matched"),
            count("mismatched").alias("mismatched"),
            count("missing").alias("missing"),
            count("excluded").alias("excluded"),
            F.sum(F.when(F.col("extra"), F.col("copies"))).alias("extra"),
            F.sum(F.when(F.col("duplicated"), F.col("copies") - 1)).alias("duplicated"),
            F.sum("source_sum").alias("source_sum"),
            F.sum("sink_sum").alias("sink_sum"),
        )

    def _samples(self, records: DataFrame) -> dict[int, dict[str, tuple[int, ...]]]:
        """Up to ``sample_size`` offsets of each discrepancy per window, lowest first;
        ranked on the executors, so only the sample comes back."""
        kinds = F.explode(
            F.array(*[F.when(F.col(kind), F.lit(kind)) for kind in SAMPLE_KINDS])
        ).alias("kind")
        flagged = records.filter(" OR ".join(SAMPLE_KINDS)).select("window", "kafka_offset", kinds)
        rank = F.row_number().over(Window.partitionBy("window", "kind").orderBy("kafka_offset"))
        ranked = flagged.filter(F.col("kind").isNotNull()).withColumn("rank", rank)
        samples: dict[int, dict[str, tuple[int, ...]]] = {}
        for row in (
            ranked.filter(F.col("rank") <= self.settings.sample_size)
            .groupBy("window", "kind")
            .agg(F.sort_array(F.collect_list("kafka_offset")).alias("offsets"))
            .collect()
        ):
            samples.setdefault(row["window"], {})[row["kind"]] = tuple(row["offsets"])
        return samples


def _in_windows(rows: DataFrame, plan: DataFrame) -> DataFrame:
    """Rows inside a planned window, with its number; the others dropped. A hash join
    on the partition (the plan is broadcast), then the offset range."""
    placed = rows.join(
        plan,
        (F.col("kafka_partition") == F.col("plan_partition"))
        & (F.col("kafka_offset") >= F.col("window_start"))
        & (F.col("kafka_offset") < F.col("window_end")),
    )
    return placed.drop("plan_partition", "window_start", "window_end")


def _reason(exc: BaseException) -> str:
    """One line saying why a run failed: Spark's and py4j's messages run to pages."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _or(offset: int | None, default: int) -> int:
    return default if offset is None else offset


def _tally(counts: object, samples: dict[str, tuple[int, ...]]) -> Tally:
    if counts is None:
        return Tally()

    def number(name: str) -> int:
        value = counts[name]  # type: ignore[index]
        return int(value) if value is not None else 0

    return Tally(
        source=number("source"),
        sink=number("sink"),
        matched=number("matched"),
        missing=number("missing"),
        extra=number("extra"),
        duplicated=number("duplicated"),
        mismatched=number("mismatched"),
        excluded=number("excluded"),
        source_checksum=window_checksum(counts["source_sum"]),  # type: ignore[index]
        sink_checksum=window_checksum(counts["sink_sum"]),  # type: ignore[index]
        samples=Samples(
            missing=samples.get("missing", ()),
            mismatched=samples.get("mismatched", ()),
            extra=samples.get("extra", ()),
            duplicated=samples.get("duplicated", ()),
        ),
    )
