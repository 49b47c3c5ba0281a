"""A Kafka streaming source for Spark 4, written with the Python Data Source API.

Spark's own Kafka connector is a separate set of jars that ``pip install pyspark``
does not bring; this source installs with pip alone and runs on any Spark 4.2+
cluster where this package is installed on the executors. It is general: it reads
any topic, not only canaries.

Usage::

    from probe.spark.kafka_source import KafkaStreamSource
    spark.dataSource.register(KafkaStreamSource)
    frame = (
        spark.readStream.format("sla_kafka")
        .option("bootstrap.servers", "kafka-0:9092,kafka-1:9092")
        .option("topic", "synthetic-sla")
        .option("startingOffsets", "latest")       # or "earliest", or {"0": 42, ...}
        .option("maxRecordsPerBatch", "10000")     # admission control; default: no limit
        .option("maxInputPartitions", "4")         # tasks per batch; default: one per partition
        .load()
    )

Columns: ``topic`` string, ``partition`` int, ``offset`` long, ``timestamp``
timestamp (the record's broker/producer timestamp), ``key`` and ``value`` binary.

It also reads in batch (``spark.read``), between bounds fixed when the read is
planned; the option names are those of Spark's own Kafka connector::

    frame = (
        spark.read.format("sla_kafka")
        .option("bootstrap.servers", "kafka-0:9092")
        .option("topic", "orders")
        .option("startingOffsets", '{"0": 1000, "1": 0}')   # default "earliest"
        .option("endingOffsetsByTimestamp", '{"0": 1767225600000}')
        .option("minPartitions", "8")                       # split large ranges
        .load()
    )

Each side takes one of ``<side>Offsets`` (``earliest``/``latest`` or a JSON map
``{"<partition>": offset}``), ``<side>Timestamp`` (epoch milliseconds, every
partition) or ``<side>OffsetsByTimestamp`` (a JSON map of milliseconds), with
``<side>`` ``starting`` or ``ending``; ``assign`` (``{"<topic>": [0, 2]}``) reads only
the partitions named. A timestamp stands for the first offset whose
record timestamp is at or after it (Kafka's ListOffsets by time): the start is
inclusive, the end exclusive, so ``[t0, t1)`` and ``[t1, t2)`` never share a record.
A partition a map does not name is read from its beginning to its end; bounds
outside the log are clamped to it. Every Kafka partition (each piece of one, with
``minPartitions``) is one Spark task, read on the executors as in streaming.

**Where it lives.** This module is the glue Spark instantiates (the data source and its
stream and batch readers, registered by :data:`SOURCE_NAME`, unpickled on the executors
by this module's path); the rest is in modules of their own: the options read into
typed specs (probe.spark.kafka_options), the ranges planned (probe.core.offset_ranges,
pure), the offsets listed on the driver (probe.spark.topic_offsets), each task's read on
the executors (probe.spark.kafka_reads), and the librdkafka clients they make, with
their settings (``kafka.*`` options, in librdkafka's names) and their log
(probe.spark.librdkafka). No client the source makes creates a topic: a topic that
does not exist plans no batch (one log line while it lasts); a batch read fails naming
it.

**Planning a batch** costs a few requests, not one per partition: one Metadata request
for the topic, and one ListOffsets request per broker for the end offsets of each 1,000
partitions (``topic_offsets.LIST_CHUNK``; beginnings only when a log ends before the checkpointed
offsets, to name what was lost). Offsets are a map ``{"<partition>": next offset to
read}`` kept in Spark's checkpoint, so a restarted query resumes exactly where it
stopped. Every micro-batch gets one input partition (one Spark task) per Kafka partition
with new records (partitions without any are not read), read on the executors by a plain
consumer (no consumer group joined, nothing committed to Kafka). ``maxInputPartitions``
caps the tasks per batch: the offset ranges are then grouped, never split, so that the
groups hold about as many records each, and a task reads its group with one consumer. A
task's fixed cost (scheduling, its Python worker round trip) is far larger than reading
a few records, so a topic with many lightly used partitions wants the cap near the
cluster's cores: batches then take one wave. Partitions that appear while the query runs
are read from their beginning. A partition whose log now ends before the checkpointed
offset (truncated by an unclean election, topic re-created, or a broker that lost its
data) is read again from ``REREAD_RECORDS`` before its end (the judge skips the
canaries it read already: probe.core.offset_ranges.effective_start), and the reset is
logged. ``Trigger.AvailableNow`` reads what was there when
the query started, in batches of at most ``maxRecordsPerBatch``, then stops.

Every task reads its ranges with :func:`~probe.spark.kafka_reads.read_ranges`, into
Arrow record batches; a read that fails raises
:class:`~probe.core.errors.SourceReadFailed`, which names the source in the failed
query (probe.spark.health).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
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

from probe.core.errors import TransportError
from probe.core.offset_ranges import (
    REREAD_RECORDS,
    BoundSpec,
    OffsetRange,
    Offsets,
    admit,
    clamp_ranges,
    effective_start,
    group_ranges,
    split_ranges,
)
from probe.core.partition_summary import partitions_summary, ranges_summary
from probe.spark.kafka_options import batch_spec, stream_spec
from probe.spark.kafka_reads import read_ranges
from probe.spark.topic_offsets import TopicOffsets

log = logging.getLogger(__name__)

SOURCE_NAME = "sla_kafka"
SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)


class OffsetRanges(InputPartition):
    """The offset ranges one Spark task reads: one or more Kafka partitions."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; reads them on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options case-insensitively (lower-cased keys): a plain dict of
        # them would never find fetchMaxWaitMs again on the executors.
        self.options = CaseInsensitiveDict(options)
        spec = stream_spec(options)
        self.topic = spec.topic
        self.max_records = spec.max_records
        self.starting = spec.starting
        self._pinned = spec.pinned
        self.max_input_partitions = spec.max_input_partitions
        # How long a task may make no progress on its ranges before it fails.
        self.read_timeout = spec.read_timeout
        self._available_now_target: Offsets | None = None
        self._listed_end: Offsets = {}
        self._topic_missing = False
        self._offsets: TopicOffsets | None = None

    # -- driver side ---------------------------------------------------------------

    def _log(self) -> TopicOffsets:
        # Made lazily: the reader is pickled to Spark's source runner, a client is not.
        if self._offsets is None:
            self._offsets = TopicOffsets(self.options)
        return self._offsets

    def initialOffset(self) -> Offsets:
        # Spark asks again after a restart before the first commit: a map given by the
        # caller (pinned in the checkpoint) keeps that answer the same.
        if self._pinned is not None:
            return dict(self._pinned)
        return self.log_start(self.starting)

    def log_start(self, starting: str) -> Offsets:
        """The topic's ``earliest`` or ``latest`` offsets, right now: empty while the
        topic does not exist (its partitions are then read from their beginning)."""
        found = self._log().now(starting)
        if found is None:
            return {}
        partitions, listed = found
        unlisted = {str(p) for p in partitions} - listed.keys()
        if unlisted:
            # Left out, they would later be read from their beginning: not a start.
            raise TransportError(
                f"topic {self.topic}: no offsets listed for {partitions_summary(unlisted)}"
            )
        return listed

    def _latest(self, start: Offsets) -> Offsets | None:
        """Every partition's end as listed now (None: the topic does not exist)."""
        found = self._log().now("latest")
        if found is None:
            if not self._topic_missing:
                log.warning("topic %s not found; no batch until it exists", self.topic)
            self._topic_missing = True
            self._listed_end = {}
            return None
        partitions, end = found
        if self._topic_missing:
            log.info("topic %s found: %s", self.topic, partitions_summary(partitions))
            self._topic_missing = False
        self._listed_end = end
        present = {str(p) for p in partitions}
        # A partition without an answer this time (its leader moving) stays where it
        # is; one the topic no longer has is dropped (read from its beginning should
        # it come back: a topic re-created with more partitions).
        latest = {p: end.get(p, o) for p, o in start.items() if p in present}
        for partition in end.keys() - start.keys():
            latest[partition] = end[partition]  # new: planned from its beginning
        truncated = [p for p, last in latest.items() if last < start.get(p, 0)]
        if truncated:
            # One line for them all: a re-created topic truncates every partition.
            log.warning(
                "topic %s: logs end before the checkpointed offsets (log truncated or topic "
                "re-created); reading again up to %d records before their ends: %s",
                self.topic,
                REREAD_RECORDS,
                ranges_summary(
                    {p: (start[p], effective_start(start, latest, p)) for p in truncated},
                    joined_by="->",
                ),
            )
        return latest

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        try:
            latest = self._latest(start)
        except Exception as exc:  # any client failure: an empty batch
            # A broker outage must not kill the query: plan nothing new and try again
            # at the next trigger. Sink staleness and source lag show the outage.
            log.warning(
                "topic %s: cannot list offsets (%s); no new data this batch", self.topic, exc
            )
            self._listed_end = {}
            self._reset_client()
            return dict(start)
        if latest is None:
            return dict(start)
        if self._available_now_target is not None:
            target = self._available_now_target
            latest = {p: min(o, target.get(p, o)) for p, o in latest.items()}
        start_for_admit = {p: effective_start(start, latest, p) for p in latest}
        max_records = self.max_records
        if isinstance(limit, ReadMaxRows):
            max_records = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_records = None
        return admit(start_for_admit, latest, max_records)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def reportLatestOffset(self) -> Offsets | None:
        # Shown as the source's latestOffset in query progress: the lag metric reads it.
        # Spark asks right after latestOffset, whose listing is reused (one round trip
        # less per batch); None while the broker or the topic is away.
        return self._listed_end or None

    def _reset_client(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None

    def prepareForTriggerAvailableNow(self) -> None:
        found = self._log().now("latest")
        self._available_now_target = {} if found is None else found[1]

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        ranges = []
        for partition in sorted(end, key=int):
            first = effective_start(start, end, partition)
            if end[partition] > first:
                ranges.append(OffsetRange(self.topic, int(partition), first, end[partition]))
        return [OffsetRanges(group) for group in group_ranges(ranges, self.max_input_partitions)]

    def commit(self, end: Offsets) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        self._reset_client()

    # -- executor side --------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRanges)
        yield from read_ranges(self.options, partition.ranges, self.read_timeout)


# -- batch reads: the bounds resolved once, on the driver ----------------------------


def resolve_spec(
    spec: BoundSpec, begin: Offsets, end: Offsets, log: TopicOffsets
) -> dict[str, int]:
    """Offsets per partition for one side; a partition at its log's edge is left out."""
    unknown = sorted(set(spec.named) - set(end), key=int)
    if unknown:
        raise ValueError(f"topic {log.topic!r} has no partition {', '.join(unknown)}")
    offsets: dict[str, int] = {}
    times: dict[str, int] = {}
    for partition in end:
        bound = spec.on(partition)
        if bound is None:
            continue
        if bound.kind == "offset":
            offsets[partition] = bound.value
        else:
            times[partition] = bound.value
    for partition, offset in log.at_times(times).items():
        offsets[partition] = end[partition] if offset is None else offset
    return offsets


def plan_batch(options: Mapping[str, str]) -> list[OffsetRange]:
    """Every partition's ``[start, end)`` for a batch read of these options, resolved
    against the log as it is now (one listing, on the driver)."""
    spec = batch_spec(options)
    only = spec.only
    log = TopicOffsets(options)
    try:
        begin, end = log.bounds()
        if only is not None:
            unknown = sorted(only - set(end), key=int)
            if unknown:
                raise ValueError(f"topic {log.topic!r} has no partition {', '.join(unknown)}")
            begin = {p: o for p, o in begin.items() if p in only}
            end = {p: o for p, o in end.items() if p in only}
        starts = resolve_spec(spec.starting, begin, end, log)
        ends = resolve_spec(spec.ending, begin, end, log)
    finally:
        log.close()
    return clamp_ranges(spec.topic, begin, end, starts, ends)


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("sla_kafka")``: the bounds are resolved once, when Spark
    plans the read; each range is read by one task on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark's option names are case-insensitive, and so must every look-up be
        # (Spark hands them over lower-cased).
        self.options = CaseInsensitiveDict(options)
        # Fail at load(), naming the option, rather than in the planner.
        spec = batch_spec(self.options)
        self.min_partitions = spec.min_partitions
        self.read_timeout = spec.read_timeout

    def partitions(self) -> Sequence[InputPartition]:
        ranges = split_ranges(plan_batch(self.options), self.min_partitions)
        # Spark wants at least one partition; an empty one reads nothing.
        return [OffsetRanges([r]) for r in ranges] or [OffsetRanges([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRanges)
        yield from read_ranges(self.options, partition.ranges, self.read_timeout)


class KafkaStreamSource(DataSource):
    """``spark.readStream.format("sla_kafka")`` and ``spark.read.format("sla_kafka")``:
    see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        for required in ("bootstrap.servers", "topic"):
            if not self.options.get(required):
                raise ValueError(f"option {required!r} is required")
        return KafkaStreamReader(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        for required in ("bootstrap.servers", "topic"):
            if not self.options.get(required):
                raise ValueError(f"option {required!r} is required")
        return KafkaBatchReader(self.options)
