"""The reconciliation job on Spark: a topic's records against a table's rows, counted
and checksummed per window and partition on the executors.

::

    driver: list the topic's offsets ─▶ plan windows (probe.reconcile.windows)
        │                                  small: one row per window and partition
        ▼                                                  │ broadcast
    sla_kafka batch read (the planned offset ranges,       ▼
      one task per partition or piece of one) ─▶ canonical record ─▶ checksum ─▶ window
    Parquet table (partition, offset, checksum columns) ─▶ canonical record ─▶ checksum
      ─▶ window
        ▼
    per window, each side apart: count, checksum sum, fingerprint ─▶ driver: windows
      whose sides agree are complete (every record matched its one row)
        ▼ the others alone: their records read again
    per offset: copies, checksums ─▶ full outer join on (partition, offset) ─▶ per
      record: matched, missing, extra, duplicated, checksum mismatch ─▶ per window:
      counts, window checksums, and a bounded sample of offsets of each discrepancy
        ▼
    driver: only per-window rows ever come back (probe.reconcile.outcome)

No record of a large run reaches the driver: the work splits by Kafka partition and
offset (the source's tasks, the aggregations' and the join's shuffles), so it scales
with the cluster. A healthy run shuffles no record at all: its windows agree by their
sums (a fingerprint sums a hash of each record's checksum bound to its offset, so a
discrepancy goes unseen only through a 64-bit hash collision), and the join, two
shuffles of every record, is left to the windows that differ.

**A small run reads on the driver** (at most :data:`DRIVER_READ_RECORDS` records and
:data:`DRIVER_READ_BYTES`), with the same reader, and hands the records to Spark as
Arrow: the driver lists the offsets anyway, and the executors' read would start
Spark's Python workers (a daemon, then a process a task, each importing pyarrow and
the reader), seconds of a run over a few thousand records. Such a run starts no
Python worker at all; the canary format's verification runs on the driver too, with
the same function.

Both sides place a record in its window by partition and offset only, so a record is
in the same window on both sides whatever its timestamps (see windows).

**Matched by key.** A table without partition and offset columns (what most
pipelines write: an ``order_id``, not a Kafka coordinate) is matched by a key column
instead: the source's records and the table's rows are each grouped by key and joined
on it (full outer, shuffled by key), a key is in the window of its first record, and a
row whose key no compared record holds is *extra* only when the table's time column
places it in the compared stretch of time (a window with no partition); without a
time column such rows cannot be told from rows of older records, and are not judged.
Keys are meant to name one record each (an append table of ids); a key the topic
holds twice is expected twice (see probe.reconcile.outcome).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark import StorageLevel
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from probe.core.errors import ConfigError, ReconcileFailed, TransportError
from probe.core.offset_ranges import OffsetRange, group_ranges, split_ranges
from probe.reconcile.outcome import Reconciliation, Samples, Tally, WindowResult
from probe.reconcile.windows import (
    PartitionLog,
    Pending,
    WindowSpec,
    offset_pending,
    offset_windows,
    open_boundaries,
    rows_by_time,
    time_boundaries,
    time_pending,
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
from probe.spark.kafka_connector import CONNECTOR_NAME, batch_options
from probe.spark.kafka_options import READ_TIMEOUT_S
from probe.spark.kafka_reads import ARROW_SCHEMA, planned_reads, read_ranges
from probe.spark.kafka_source import SCHEMA as SOURCE_SCHEMA
from probe.spark.kafka_source import SOURCE_NAME
from probe.spark.topic_offsets import TopicOffsets

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
# Windows of the table's rows placed by time (their extra rows, matched by key).
TIME_PLAN = StructType(
    [
        StructField("span_start", LongType(), True),
        StructField("span_end", LongType(), False),
        StructField("window", IntegerType(), False),
    ]
)
# The source's records in the planned windows, as _source gives them.
SOURCE_RECORDS = StructType(
    [
        StructField("kafka_partition", IntegerType(), False),
        StructField("kafka_offset", LongType(), False),
        StructField("in_table", BooleanType(), True),
        StructField("h", LongType(), True),
        StructField("k", StringType(), True),
        StructField("window", IntegerType(), False),
    ]
)
SAMPLE_KINDS = ("missing", "mismatched", "extra", "duplicated")
# Per-record (or per-key) counts, summed per window: what a Tally is made of.
COUNTS = ("source", "excluded", "sink", "matched", "mismatched", "missing", "extra", "duplicated")
# Read tasks per core, at most: ranges are grouped into as many, so a skewed one
# leaves the other cores work.
READ_WAVES = 4
# A run reads on the driver (see the module doc) when its windows hold at most this
# many offsets, and while what it read stays within DRIVER_READ_BYTES: past that the
# read is dropped and the executors read instead (a topic of large records costs
# the driver at most that much memory and a read of it, well under a second).
# A run over a few thousand records: 12.9 s with the executors' read, 11.5 s
# without (the whole command, medians of 3, a 2-CPU VM).
DRIVER_READ_RECORDS = 50_000
DRIVER_READ_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ReconcileSettings:
    """What to compare with what. ``checksum_columns`` None: the format's own
    (canary: its signed fields; raw: ``value``); json needs them named.

    ``key_column`` set: rows are matched to records by key, not by partition and
    offset; the record's key is its Kafka key (UTF-8), or with ``source_key`` that
    field of its JSON value. ``time_column`` (a timestamp, or epoch milliseconds)
    places rows whose key matches no record, so they count as extra."""

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
    key_column: str | None = None
    source_key: str | None = None
    time_column: str | None = None
    sample_size: int = 10
    # TLS and SASL in librdkafka's names (probe.transport.kafka_settings), text: the
    # sla_kafka source's kafka.* options; Spark's connector gets them translated.
    kafka_options: dict[str, str] = field(default_factory=dict)
    # The canary format verifies records as the sink stage does.
    keyring_json: str | None = None
    probe_id: str = ""
    max_size: int = 1_048_576
    # What the records are read with (sink.source): sla_kafka, or kafka (Spark's
    # connector). The offsets are listed on the driver alike (TopicOffsets).
    source: str = SOURCE_NAME
    # Offsets a run reads on the driver, at most (0: the executors read every run).
    driver_read_records: int = DRIVER_READ_RECORDS

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

    @property
    def by_key(self) -> bool:
        return self.key_column is not None


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
        if settings.by_key and settings.record_format is RecordFormat.CANARY:
            raise ConfigError(
                "reconcile.key_column", "format canary matches by partition and offset"
            )
        if settings.source_key is not None and settings.record_format is not RecordFormat.JSON:
            raise ConfigError("reconcile.source_key", "a field of a JSON value: format json only")
        if not settings.by_key and (settings.source_key or settings.time_column):
            raise ConfigError(
                "reconcile.key_column",
                "required by source_key and time_column (they match rows by key)",
            )

    def run(self, run_id: str, planned: Plan | None = None) -> Reconciliation:
        """Plan (unless ``planned`` already) and compare. Raises ReconcileFailed when
        no comparison could be made (brokers, topic, a Spark job), ConfigError for a
        table that does not fit."""
        plan = planned or plan_run(self.settings, self._clock_ms())
        try:
            results = self.compare(plan.windows)
        except (TransportError, ValueError, OSError, Py4JError, PySparkException) as exc:
            raise ReconcileFailed(_reason(exc)) from exc
        return Reconciliation(
            run_id,
            self.settings.topic,
            self.settings.table,
            plan.now_ms,
            self._clock_ms(),
            results,
            plan.pending,
        )

    def plan(self, now_ms: int) -> list[ReconcileWindow]:
        """The windows to compare now, from the log's offsets as listed now; matched
        by key with a time column, then the windows of rows placed by time."""
        return plan_run(self.settings, now_ms).windows

    # -- executors: the comparison ----------------------------------------------------

    def compare(self, windows: Sequence[ReconcileWindow]) -> list[WindowResult]:
        """Count and checksum every window on the executors; only per-window rows
        come back. Windows holding no offsets are empty on both sides by definition."""
        planned = [
            (w.partition, w.start, w.end, index)
            for index, w in enumerate(windows)
            if w.partition is not None and w.end > w.start
        ]
        by_time = [
            (w.start_ms, w.end_ms, index)
            for index, w in enumerate(windows)
            if w.partition is None and w.end_ms is not None
        ]
        if not planned and not by_time:
            return [WindowResult(w, Tally()) for w in windows]
        # The table is read (its files listed, their footers) once per run.
        table = self._sink_table()
        plan = F.broadcast(self._frame(planned, PLAN))
        source = self._source(plan, windows, table) if planned else self._frame([], SOURCE_RECORDS)
        if self.settings.by_key:
            time_plan = F.broadcast(self._frame(by_time, TIME_PLAN))
            counts, samples = self._judged(self._records_by_key(source, time_plan, table))
        else:
            counts = self._agreed(self._window_sums(source, self._sink_rows(plan, table)))
            # Only windows whose sums differ are compared record by record: their
            # records read again (the others' never leave their side's aggregation).
            differ = [row for row in planned if row[3] not in counts]
            samples = {}
            if differ:
                plan = F.broadcast(self._frame(differ, PLAN))
                looked_at = [windows[row[3]] for row in differ]
                records = self._records(
                    self._source(plan, looked_at, table), self._sink(plan, table)
                )
                judged, samples = self._judged(records)
                counts.update(judged)
        return [
            WindowResult(w, _tally(counts.get(index), samples.get(index, {})))
            for index, w in enumerate(windows)
        ]

    def _frame(self, rows: Sequence[tuple[object, ...]], schema: StructType) -> DataFrame:
        """A small frame of the driver's rows, handed to the JVM as Arrow: a list of
        tuples would be unpickled by a Python worker, a stage of its own."""
        names = schema.fieldNames()
        arrow = pa.Table.from_pylist(
            [dict(zip(names, row, strict=True)) for row in rows], schema=to_arrow_schema(schema)
        )
        return self.spark.createDataFrame(arrow, schema)

    def _source(
        self, plan: DataFrame, windows: Sequence[ReconcileWindow], table: DataFrame
    ) -> DataFrame:
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
        # Only what the windows cover: other partitions, and other offsets, unread.
        tasks = self.spark.sparkContext.defaultParallelism
        raw: DataFrame | pa.Table
        if s.source == CONNECTOR_NAME:
            reader = self.spark.read.format(CONNECTOR_NAME)
            options = batch_options(
                s.bootstrap_servers,
                s.topic,
                starts,
                ends,
                min_partitions=tasks,
                kafka_options=s.kafka_options,
            )
            for option, value in options.items():
                reader = reader.option(option, value)
            raw = reader.load()
        else:
            # The offsets were listed on the driver to plan the windows: the ranges
            # are read with the sla_kafka source's reader, no second listing.
            ranges = [OffsetRange(s.topic, int(p), starts[p], ends[p]) for p in starts]
            read = self._read_on_driver(ranges)
            if read is not None:
                raw = read
            else:
                # Large ranges in pieces, many small ones grouped (a task per partition
                # of a 10,000-partition topic would cost more than its read).
                groups = group_ranges(split_ranges(ranges, tasks), tasks * READ_WAVES)
                raw = self.spark.range(0, len(groups), 1, len(groups)).mapInArrow(
                    planned_reads(s.source_options(), groups, READ_TIMEOUT_S), SOURCE_SCHEMA
                )
        if s.record_format is RecordFormat.CANARY:
            assert s.keyring_json is not None
            decode = decode_canaries(s.keyring_json, s.max_size, s.probe_id)
            if isinstance(raw, pa.Table):
                decoded = self._arrow_frame(list(decode(iter(raw.to_batches()))), DECODED_CANARY)
            else:
                decoded = raw.select("partition", "offset", "value").mapInArrow(
                    decode, DECODED_CANARY
                )
            canonical = [F.col(f"`{f.name}`").cast(f.dataType) for f in CANARY_FIELDS.fields]
            record_key = F.lit(None).cast(StringType())
        else:
            if isinstance(raw, pa.Table):
                raw = self.spark.createDataFrame(raw, SOURCE_SCHEMA)
            decoded = raw.select(
                F.col("partition").alias("kafka_partition"),
                F.col("offset").alias("kafka_offset"),
                F.lit(True).alias("in_table"),
                "key",
                "value",
            )
            canonical = self._source_canonical(F.col("value"), table)
            record_key = (
                F.col("key").cast(StringType())
                if s.source_key is None
                else F.get_json_object(
                    F.col("value").cast(StringType()), f"$['{_json_name(s.source_key)}']"
                )
            )
        keyed = decoded.select(
            "kafka_partition",
            "kafka_offset",
            "in_table",
            # Records the table is not meant to hold have no checksum: they are
            # counted as excluded, and a row at their offset is extra.
            F.when(F.col("in_table"), record_checksum(canonical)).alias("h"),
            record_key.alias("k"),
        )
        return _in_windows(keyed, plan)

    def _read_on_driver(self, ranges: Sequence[OffsetRange]) -> pa.Table | None:
        """The ranges' records, read here (see the module doc); None when they are
        more than the driver reads (:data:`DRIVER_READ_RECORDS` offsets,
        :data:`DRIVER_READ_BYTES`): the executors read them then."""
        s = self.settings
        if sum(r.end - r.start for r in ranges) > s.driver_read_records:
            return None
        batches: list[pa.RecordBatch] = []
        size = 0
        with contextlib.closing(read_ranges(s.source_options(), ranges, READ_TIMEOUT_S)) as read:
            for batch in read:
                size += batch.nbytes
                if size > DRIVER_READ_BYTES:
                    log.info("records over %d bytes: the executors read them", DRIVER_READ_BYTES)
                    return None
                batches.append(batch)
        return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)

    def _arrow_frame(self, batches: Sequence[pa.RecordBatch], schema: StructType) -> DataFrame:
        """Arrow batches made on the driver, as a frame of ``schema``."""
        table = pa.Table.from_batches(batches) if batches else to_arrow_schema(schema).empty_table()
        return self.spark.createDataFrame(table, schema)

    def _source_canonical(self, value: Column, table: DataFrame) -> list[Column]:
        s = self.settings
        types = {f.name: f.dataType for f in table.schema.fields}
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

    def _require(self, table: DataFrame, named: Sequence[str]) -> None:
        absent = [name for name in named if name not in table.columns]
        if absent:
            raise ConfigError(
                "reconcile.table",
                f"{self.settings.table} has no column {', '.join(absent)} "
                f"(it has {', '.join(table.columns)})",
            )

    def _sink_canonical(self, table: DataFrame) -> list[Column]:
        """A row's canonical record: the columns the checksum covers, typed as the
        source's are."""
        s = self.settings
        if s.record_format is RecordFormat.CANARY:
            return [F.col(f"`{f.name}`").cast(f.dataType) for f in CANARY_FIELDS.fields]
        if s.record_format is RecordFormat.RAW:
            return [F.col(f"`{s.columns[0]}`").cast(BinaryType())]
        types = {f.name: f.dataType for f in table.schema.fields}
        return [F.col(f"`{name}`").cast(types[name]) for name in s.columns]

    def _sink_rows(self, plan: DataFrame, table: DataFrame) -> DataFrame:
        """The table's rows in the planned windows: partition, offset, checksum,
        window."""
        s = self.settings
        self._require(table, [s.partition_column, s.offset_column, *s.columns])
        rows = table.select(
            F.col(f"`{s.partition_column}`").cast(IntegerType()).alias("kafka_partition"),
            F.col(f"`{s.offset_column}`").cast(LongType()).alias("kafka_offset"),
            record_checksum(self._sink_canonical(table)).alias("h"),
        )
        return _in_windows(rows, plan)

    def _sink(self, plan: DataFrame, table: DataFrame) -> DataFrame:
        """The table's rows in the planned windows, one per (partition, offset):
        copies, smallest and largest checksum, and the sum of every copy's."""
        return (
            self._sink_rows(plan, table)
            .groupBy("kafka_partition", "kafka_offset", "window")
            .agg(
                F.count(F.lit(1)).alias("copies"),
                F.min("h").alias("h_min"),
                F.max("h").alias("h_max"),
                F.sum(unsigned(F.col("h"))).alias("h_sum"),
            )
        )

    def _sink_by_key(self, table: DataFrame) -> DataFrame:
        """The table's rows by key: copies, smallest and largest checksum, the sum of
        every copy's, and the earliest time (null without a time column)."""
        s = self.settings
        assert s.key_column is not None
        self._require(table, [s.key_column, *s.columns, *filter(None, [s.time_column])])
        types = {f.name: f.dataType for f in table.schema.fields}
        moment = (
            _millis(s.time_column, types[s.time_column])
            if s.time_column is not None
            else F.lit(None).cast(LongType())
        )
        rows = table.select(
            F.col(f"`{s.key_column}`").cast(StringType()).alias("k"),
            record_checksum(self._sink_canonical(table)).alias("h"),
            moment.alias("t_ms"),
        )
        return rows.groupBy("k").agg(
            F.count(F.lit(1)).alias("copies"),
            F.min("h").alias("h_min"),
            F.max("h").alias("h_max"),
            F.sum(unsigned(F.col("h"))).alias("h_sum"),
            F.min("t_ms").alias("t_ms"),
        )

    def _records_by_key(
        self, source: DataFrame, time_plan: DataFrame, table: DataFrame
    ) -> DataFrame:
        """One row per key present on either side (and per record the table cannot
        hold), with what became of it; see probe.reconcile.outcome for the rule."""
        usable = F.col("h").isNotNull() & F.col("k").isNotNull()
        excluded = source.filter(~usable).select(
            "window",
            F.col("kafka_offset").alias("at"),
            F.lit(None).cast(StringType()).alias("extra_key"),
            F.lit(1).alias("excluded"),
        )
        records = (
            source.filter(usable)
            .groupBy("k")
            .agg(
                # A key is in the window of its first record, named by that offset.
                F.min(F.struct("window", "kafka_offset")).alias("first"),
                F.count(F.lit(1)).alias("n"),
                F.min("h").alias("s_min"),
                F.max("h").alias("s_max"),
                F.sum(unsigned(F.col("h"))).alias("source_sum"),
            )
        )
        joined = records.join(self._sink_by_key(table), "k", "full_outer")
        placed = joined.filter(F.col("n").isNotNull()).select(
            "*",
            F.col("first.window").alias("window"),
            F.col("first.kafka_offset").alias("at"),
        )
        # Rows whose key no compared record holds: extra where their time places
        # them in a compared stretch; elsewhere they belong to records not compared.
        extra = (
            joined.filter(F.col("n").isNull())
            .join(
                time_plan,
                (F.col("span_start").isNull() | (F.col("t_ms") >= F.col("span_start")))
                & (F.col("t_ms") < F.col("span_end")),
            )
            .select(*joined.columns, "window", F.lit(None).cast(LongType()).alias("at"))
        )
        n = F.coalesce(F.col("n"), F.lit(0))
        c = F.coalesce(F.col("copies"), F.lit(0))
        same = (F.col("h_min") == F.col("s_min")) & (F.col("h_max") == F.col("s_max"))
        both = (n > 0) & (c > 0)
        compared = placed.unionByName(extra).select(
            "window",
            "at",
            F.when(n == 0, F.col("k")).alias("extra_key"),
            n.alias("source"),
            c.alias("sink"),
            F.when(both & same, F.least(n, c)).alias("matched"),
            F.when(both & ~same, F.least(n, c)).alias("mismatched"),
            F.greatest(n - c, F.lit(0)).alias("missing"),
            F.when(n == 0, c).alias("extra"),
            F.when(n > 0, F.greatest(c - n, F.lit(0))).alias("duplicated"),
            "source_sum",
            F.col("h_sum").alias("sink_sum"),
        )
        return _counted(compared.unionByName(excluded, allowMissingColumns=True))

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
        copies = F.coalesce(F.col("copies"), F.lit(0))
        return _counted(
            joined.select(
                F.coalesce("source_window", "sink_window").alias("window"),
                F.col("kafka_offset").alias("at"),
                F.lit(None).cast(StringType()).alias("extra_key"),
                F.when(in_source, 1).alias("source"),
                F.when(F.col("in_table") == F.lit(False), 1).alias("excluded"),
                copies.alias("sink"),
                F.when(in_source & in_sink & same, 1).alias("matched"),
                F.when(in_source & in_sink & ~same, 1).alias("mismatched"),
                F.when(in_source & ~in_sink, 1).alias("missing"),
                F.when(~in_source & in_sink, copies).alias("extra"),
                F.when(in_source & (copies > 1), copies - 1).alias("duplicated"),
                F.when(in_source, unsigned(F.col("h"))).alias("source_sum"),
                F.col("h_sum").alias("sink_sum"),
            )
        )

    def _judged(
        self, records: DataFrame
    ) -> tuple[dict[int, Any], dict[int, dict[str, tuple[object, ...]]]]:
        """Per window, the counts of what became of its records, and samples of
        each discrepancy."""
        records = records.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = {row["window"]: row for row in self._counts(records).collect()}
            # Samples name discrepancies: where the counts found none, there are none
            # to name, and a query (two Spark jobs) is saved.
            found = any(row[kind] for row in counts.values() for kind in SAMPLE_KINDS)
            return counts, (self._samples(records) if found else {})
        finally:
            records.unpersist()

    @staticmethod
    def _window_sums(source: DataFrame, sink_rows: DataFrame) -> DataFrame:
        """Per window, each side's count, checksum sum and fingerprint, each side
        aggregated apart: no record is shuffled, let alone joined. A fingerprint
        sums a hash of each record's checksum with its offset, so records swapped
        between offsets, or one lost and another written twice, change it."""
        fingerprint = unsigned(F.xxhash64("kafka_partition", "kafka_offset", "h"))
        in_source = F.col("h").isNotNull()
        sources = source.groupBy("window").agg(
            F.count("h").alias("source"),
            F.count_if(F.col("in_table") == F.lit(False)).alias("excluded"),
            F.sum(F.when(in_source, unsigned(F.col("h")))).alias("source_sum"),
            F.sum(F.when(in_source, fingerprint)).alias("source_print"),
        )
        sinks = sink_rows.groupBy("window").agg(
            F.count(F.lit(1)).alias("sink"),
            F.sum(unsigned(F.col("h"))).alias("sink_sum"),
            F.sum(fingerprint).alias("sink_print"),
        )
        return sources.join(sinks, "window", "full_outer")

    @staticmethod
    def _agreed(sums: DataFrame) -> dict[int, dict[str, object]]:
        """The counts of the windows whose two sides agree: as many records as rows,
        and the same fingerprint (the same checksum at each offset, but for a 64-bit
        hash collision). Each record then matched its one row."""
        agreed: dict[int, dict[str, object]] = {}
        for row in sums.collect():
            records, rows = row["source"] or 0, row["sink"] or 0
            if records != rows or (row["source_print"] or 0) != (row["sink_print"] or 0):
                continue
            agreed[row["window"]] = {
                **dict.fromkeys(COUNTS, 0),
                "source": records,
                "sink": rows,
                "matched": records,
                "excluded": row["excluded"] or 0,
                "source_sum": row["source_sum"],
                "sink_sum": row["sink_sum"],
            }
        return agreed

    @staticmethod
    def _counts(records: DataFrame) -> DataFrame:
        return records.groupBy("window").agg(
            *[F.sum(name).alias(name) for name in (*COUNTS, "source_sum", "sink_sum")]
        )

    def _samples(self, records: DataFrame) -> dict[int, dict[str, tuple[object, ...]]]:
        """Up to ``sample_size`` of each discrepancy per window, lowest offset (or
        key) first; ranked on the executors, so only the sample comes back."""
        kinds = F.explode(
            F.array(*[F.when(F.col(kind) > 0, F.lit(kind)) for kind in SAMPLE_KINDS])
        ).alias("kind")
        flagged = records.filter(" OR ".join(f"{kind} > 0" for kind in SAMPLE_KINDS)).select(
            "window", "at", "extra_key", kinds
        )
        order = (F.col("at").asc_nulls_last(), F.col("extra_key").asc_nulls_last())
        rank = F.row_number().over(Window.partitionBy("window", "kind").orderBy(*order))
        ranked = flagged.filter(F.col("kind").isNotNull()).withColumn("rank", rank)
        samples: dict[int, dict[str, tuple[object, ...]]] = {}
        for row in (
            ranked.filter(F.col("rank") <= self.settings.sample_size)
            .groupBy("window", "kind")
            .agg(F.collect_list(F.struct("at", "extra_key")).alias("named"))
            .collect()
        ):
            offsets = sorted(at for at, _ in row["named"] if at is not None)
            keys = sorted(key for at, key in row["named"] if at is None and key is not None)
            samples.setdefault(row["window"], {})[row["kind"]] = (*offsets, *keys)
        return samples


# -- driver: the plan (before Spark: it lists offsets only) ----------------------------


@dataclass(frozen=True)
class Plan:
    """What a run compares, planned at ``now_ms``: its windows, and the records it
    leaves for a later run (in windows still open, or younger than the settle delay)."""

    now_ms: int
    windows: list[ReconcileWindow]
    pending: list[Pending]

    @property
    def records(self) -> int:
        """The topic's records in the windows: what the run reads."""
        return sum(w.end - w.start for w in self.windows if w.partition is not None)


def plan_run(settings: ReconcileSettings, now_ms: int) -> Plan:
    """The windows to compare now, from the log's offsets as listed now; matched by
    key with a time column, then the windows of rows placed by time. Needs no Spark
    session: a single run plans first, then starts Spark for what it found. Raises
    ReconcileFailed when the offsets cannot be listed."""
    try:
        placed, spans, pending = _placed(settings, now_ms)
    except (TransportError, ValueError, OSError) as exc:
        raise ReconcileFailed(_reason(exc)) from exc
    if settings.time_column is None:
        return Plan(now_ms, placed, pending)
    return Plan(now_ms, [*placed, *rows_by_time(placed, spans)], pending)


def _placed(
    settings: ReconcileSettings, now_ms: int
) -> tuple[list[ReconcileWindow], list[tuple[int | None, int]], list[Pending]]:
    """The windows of the records, the stretches of time they cover, and the
    records after them (in windows still open, or younger than the settle delay)."""
    s = settings
    offsets = TopicOffsets(s.source_options())
    try:
        begin, end = offsets.bounds()
        logs = [PartitionLog(int(p), begin[p], end[p]) for p in sorted(end, key=int)]
        settle_ms = round(s.settle_s * 1000)
        lookback_ms = None if s.lookback_s is None else round(s.lookback_s * 1000)
        if s.window.duration_ms is not None:
            boundaries = time_boundaries(now_ms, lookback_ms or 0, settle_ms, s.window.duration_ms)
            still_open = open_boundaries(now_ms, lookback_ms or 0, settle_ms, s.window.duration_ms)
            # The last open boundary lies after now: its windows run to the log's
            # end, with no need to ask.
            asked = sorted({*boundaries, *still_open[:-1]})
            at = {moment: offsets.at_times(dict.fromkeys(end, moment)) for moment in asked}
            windows = [
                window
                for partition in logs
                for window in time_windows(
                    partition, boundaries, _offsets_at(at, partition, boundaries)
                )
            ]
            pending = [
                records
                for partition in logs
                for records in time_pending(
                    partition, still_open, _offsets_at(at, partition, still_open), settle_ms
                )
            ]
            return windows, list(pairwise(boundaries)), pending
        assert s.window.offsets is not None
        settled = offsets.at_times(dict.fromkeys(end, now_ms - settle_ms))
        since = (
            offsets.at_times(dict.fromkeys(end, now_ms - lookback_ms))
            if lookback_ms is not None
            else dict(begin)
        )
    finally:
        offsets.close()
    windows = [
        window
        for partition in logs
        for window in offset_windows(
            partition,
            s.window.offsets,
            since=_or(since[str(partition.partition)], partition.end),
            settled=_or(settled[str(partition.partition)], partition.end),
        )
    ]
    pending = [
        records
        for partition in logs
        for records in offset_pending(
            partition,
            _or(settled[str(partition.partition)], partition.end),
            now_ms,
            settle_ms,
        )
    ]
    # Offset windows start at or before the lookback and end at the settled
    # offsets: they cover the records of that stretch of time, taken inward to
    # whole seconds (a row on the edge is left alone rather than misjudged).
    since_ms = None if lookback_ms is None else -(-(now_ms - lookback_ms) // 1000) * 1000
    return windows, [(since_ms, (now_ms - settle_ms) // 1000 * 1000)], pending


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


def _counted(records: DataFrame) -> DataFrame:
    """Every count as a long, 0 where the record (or key) has none of it."""
    return records.select(
        "window",
        "at",
        "extra_key",
        *[F.coalesce(F.col(name), F.lit(0)).cast(LongType()).alias(name) for name in COUNTS],
        "source_sum",
        "sink_sum",
    )


def _millis(name: str, dtype: DataType) -> Column:
    """A time column as epoch milliseconds: timestamps and dates as such, integers
    as milliseconds already."""
    column = F.col(f"`{name}`")
    if isinstance(dtype, IntegerType | LongType):
        return column.cast(LongType())
    if isinstance(dtype, TimestampType | TimestampNTZType | DateType):
        return F.unix_millis(column.cast(TimestampType()))
    raise ConfigError(
        "reconcile.time_column",
        f"{name} is {dtype.simpleString()}: a timestamp, a date or epoch milliseconds",
    )


def _json_name(name: str) -> str:
    # A field name inside $['...']: a quote or backslash would end or escape it.
    if "'" in name or "\\" in name:
        raise ConfigError("reconcile.source_key", f"{name!r}: a field name without ' or \\")
    return name


def _reason(exc: BaseException) -> str:
    """One line saying why a run failed: Spark's and py4j's messages run to pages."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _offsets_at(
    at: Mapping[int, Mapping[str, int | None]], partition: PartitionLog, moments: Sequence[int]
) -> dict[int, int | None]:
    """One partition's first offset at or after each moment (None: past its log, or a
    moment not asked about because it lies after now)."""
    return {
        moment: at[moment][str(partition.partition)] if moment in at else None for moment in moments
    }


def _or(offset: int | None, default: int) -> int:
    return default if offset is None else offset


def _tally(counts: object, samples: dict[str, tuple[object, ...]]) -> Tally:
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
            missing=_offsets(samples.get("missing", ())),
            mismatched=_offsets(samples.get("mismatched", ())),
            extra=_offsets(samples.get("extra", ())),
            duplicated=_offsets(samples.get("duplicated", ())),
            extra_keys=tuple(str(key) for key in samples.get("extra", ()) if isinstance(key, str)),
        ),
    )


def _offsets(sample: tuple[object, ...]) -> tuple[int, ...]:
    return tuple(item for item in sample if isinstance(item, int))
