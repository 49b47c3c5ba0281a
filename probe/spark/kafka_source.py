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

**The client.** The driver and the executors use confluent-kafka (librdkafka), chosen
by ``benchmarks/bench_source_read.py``: its executors read 7x more records per
CPU-second than kafka-python did, and a task owing one record on each of 10,000
partitions finishes in seconds where kafka-python's ran out of its minute. Options
prefixed ``kafka.`` are client settings in librdkafka's names (``kafka.ssl.ca.location``,
``kafka.sasl.username``), passed on with the prefix removed: the probe's TLS and SASL
arrive so, translated on the driver (probe.transport.kafka_settings.librdkafka_security).
An unknown name fails the query at once, naming it.

**Nothing here creates a topic.** Every client the source makes is told
``allow.auto.create.topics=false`` (whatever the options say), and asks for the
metadata of its one topic, never of all: a broker that lost its data, or a topic
deleted by hand, is never brought back by a reader, with the broker's default
partition count, behind the back of whoever manages it. A topic that does not exist
plans no batch (one log line while it lasts); a batch read fails naming it.

**Planning a batch** costs a few requests, not one per partition: one Metadata request
for the topic, and one ListOffsets request per broker for the end offsets of each 1,000
partitions (``LIST_CHUNK``; beginnings only when a log ends before the checkpointed
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
offset (topic re-created, or a broker that lost its data) is read again from its
beginning, and the reset is logged. ``Trigger.AvailableNow`` reads what was there when
the query started, in batches of at most ``maxRecordsPerBatch``, then stops.

**Reading a task's ranges** (:func:`read_ranges`) yields Arrow record batches, which
Spark takes without converting a row in Python. The consumer fetches only the ranges
still owed (a finished one is paused), and a range ends at its planned end whatever
the log holds: records deleted meanwhile by retention or ``DeleteRecords`` are skipped,
and a log that stays shorter than the range (the topic re-created, the broker's data
lost) ends it with a warning after a few seconds, as does a partition or topic that is
gone. The read fails only when it has made no progress at all for
``readTimeoutSeconds`` (default 60), naming the count of ranges owed and the first few.
Compressed batches (gzip, snappy, lz4, zstd) are decompressed by librdkafka; one whose
codec this librdkafka was built without fails the task at once, naming the codec.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
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
from probe.core.judge import READ_AT_KEPT
from probe.core.partition_summary import partitions_summary, ranges_summary

log = logging.getLogger(__name__)

SOURCE_NAME = "sla_kafka"
# How long a task's read may go without any progress before it fails (readTimeoutSeconds).
READ_TIMEOUT_S = 60.0
# How far before a truncated log's end a stream reads again (see _effective_start):
# no further back than the judge can tell records read before from duplicates.
REREAD_RECORDS = READ_AT_KEPT
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

Offsets = dict[str, int]


def starting_map(starting: str) -> Offsets | None:
    """``startingOffsets``: None for ``latest``/``earliest`` (resolved when the query
    first starts), the map for a JSON ``{"<partition>": offset}``.

    >>> starting_map('{"0": 12, "1": 0}')
    {'0': 12, '1': 0}
    """
    if starting in ("latest", "earliest"):
        return None
    try:
        offsets = json.loads(starting)
    except ValueError:
        offsets = None
    if not isinstance(offsets, dict) or not all(
        str(p).isdigit() and isinstance(o, int) and o >= 0 for p, o in offsets.items()
    ):
        raise ValueError(
            'startingOffsets must be latest, earliest or a JSON map {"<partition>": offset}'
        )
    return {str(p): int(o) for p, o in offsets.items()}


# -- the client's settings ------------------------------------------------------------

# Set by the source whatever the options say: a reader never creates a topic, never
# commits offsets (they live in Spark's checkpoint).
FORCED: Mapping[str, str] = {"allow.auto.create.topics": "false", "enable.auto.commit": "false"}
# librdkafka wants a group id for any consumer; the source never joins it (partitions
# are assigned, not subscribed) nor commits to it.
GROUP_ID = "sla_kafka"


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from the source options (see the module docstring).

    >>> client_config({"bootstrap.servers": "k:9092", "kafka.security.protocol": "SSL"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bootstrap.servers': 'k:9092', 'security.protocol': 'SSL',
     'allow.auto.create.topics': 'false', 'enable.auto.commit': 'false'}
    """
    config = {"bootstrap.servers": options["bootstrap.servers"]}
    for name, value in options.items():
        # librdkafka's names are lower case; Spark hands its options lower-cased.
        if name.lower().startswith("kafka."):
            config[name[len("kafka.") :].lower()] = value
    return {**config, **FORCED}


# The same client log line (numbers aside) at most once in this many seconds.
CLIENT_LOG_REPEAT_S = 60.0


class ClientLog:
    """librdkafka's log lines for the source's clients, to this module's logger: a
    distinct line at most once a minute (a broker away is retried every second, and
    each retry logs), the last warning or error kept to be named in a failure.

    librdkafka hands its lines to whatever has a ``log(level, format, *args)``
    method, from the client's poll and consume calls.
    """

    def __init__(self) -> None:
        self.last_problem: str | None = None
        self._shown: dict[str, float] = {}

    def log(self, level: int, text: str, *args: object) -> None:
        line = text % args if args else text
        if level >= logging.WARNING:
            self.last_problem = line
        now = time.monotonic()
        key = re.sub(r"\d+", "#", line)
        if now - self._shown.get(key, -CLIENT_LOG_REPEAT_S) < CLIENT_LOG_REPEAT_S:
            return
        if len(self._shown) > 1000:
            self._shown.clear()
        self._shown[key] = now
        log.log(level, "kafka client: %s", line)


def _consumer(options: Mapping[str, str], client_log: ClientLog, **settings: str) -> Any:
    """A consumer with the source's settings, logging to ``client_log``."""
    config: dict[str, Any] = {
        "group.id": GROUP_ID,
        # kafka-python's default, which the source had: records of open or aborted
        # transactions are read too, as Spark's own Kafka source does by default.
        "isolation.level": "read_uncommitted",
        # Brokers close idle connections; a reconnect is not news.
        "log.connection.close": "false",
        **settings,
        **client_config(options),
        "logger": client_log,
    }
    try:
        return Consumer(config)
    except KafkaException as exc:  # an unknown or invalid setting: name it
        raise TransportError(f"kafka client settings: {_kafka_error(exc)}") from exc


def _kafka_error(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return str(error.str()) if isinstance(error, KafkaError) else str(exc)


def admit(start: Offsets, latest: Offsets, max_records: int | None) -> Offsets:
    """The end offsets of the next batch: everything up to latest, or at most
    ``max_records`` records spread evenly over the partitions that have some.

    Pure, so the split is easy to reason about: every partition with a backlog gets a
    fair share each batch (no partition starves behind a large one), and whatever
    budget a small partition leaves is handed on to the others.

    >>> admit({"0": 0, "1": 0}, {"0": 10, "1": 2}, max_records=6)
    {'0': 4, '1': 2}
    """
    if max_records is None:
        return dict(latest)
    end = {p: start.get(p, 0) for p in latest}
    budget = max_records
    waiting = sorted((p for p in latest if latest[p] > end[p]), key=lambda p: latest[p] - end[p])
    while budget > 0 and waiting:
        share = max(1, budget // len(waiting))
        still_waiting = []
        for partition in waiting:
            take = min(share, latest[partition] - end[partition], budget)
            end[partition] += take
            budget -= take
            if end[partition] < latest[partition]:
                still_waiting.append(partition)
            if budget == 0:
                break
        waiting = still_waiting
    return end


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class OffsetRanges(InputPartition):
    """The offset ranges one Spark task reads: one or more Kafka partitions."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def group_ranges(ranges: Sequence[OffsetRange], groups: int | None) -> list[list[OffsetRange]]:
    """At most ``groups`` groups of ranges with record counts as even as can be.

    Pure. Every range is in exactly one group, never split (a partition's records
    stay in offset order in one task); ``None`` keeps one range per group. Largest
    range first into the group with fewest records so far (LPT), so a backlog is
    spread over the tasks while the many tiny ranges of a steady stream collapse
    into a few tasks, whose fixed cost is what bounds a micro-batch's latency.

    >>> [[r.partition for r in g] for g in group_ranges(
    ...     [OffsetRange("t", p, 0, n) for p, n in enumerate([5, 1, 1, 3])], 2)]
    [[0], [1, 2, 3]]
    """
    if groups is None or len(ranges) <= groups:
        return [[r] for r in ranges]
    bins: list[list[OffsetRange]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for offsets in sorted(ranges, key=lambda r: (-r.size, r.partition)):
        lightest = loads.index(min(loads))
        bins[lightest].append(offsets)
        loads[lightest] += offsets.size
    return [sorted(group, key=lambda r: r.partition) for group in bins if group]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; reads them on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options case-insensitively (lower-cased keys): a plain dict of
        # them would never find fetchMaxWaitMs again on the executors.
        self.options = CaseInsensitiveDict(options)
        self.topic = options["topic"]
        limit = options.get("maxRecordsPerBatch")
        self.max_records = int(limit) if limit else None
        if self.max_records is not None and self.max_records < 1:
            raise ValueError("maxRecordsPerBatch must be >= 1")
        self.starting = options.get("startingOffsets", "latest")
        self._pinned = starting_map(self.starting)
        groups = options.get("maxInputPartitions")
        self.max_input_partitions = int(groups) if groups else None
        if self.max_input_partitions is not None and self.max_input_partitions < 1:
            raise ValueError("maxInputPartitions must be >= 1")
        # How long a task may make no progress on its ranges before it fails.
        self.read_timeout = float(options.get("readTimeoutSeconds", READ_TIMEOUT_S))
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
                    {p: (start[p], self._effective_start(start, latest, p)) for p in truncated},
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
        start_for_admit = {p: self._effective_start(start, latest, p) for p in latest}
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

    @staticmethod
    def _effective_start(start: Offsets, latest: Offsets, partition: str) -> int:
        """Where a partition's next batch starts: where the last one ended, unless the
        log now ends before that (truncated by an unclean leader election, or the
        topic re-created).

        Then the log holds, below its end, history already read and, after the point
        where the new leader's log parted from the one read, records not read yet;
        that point is not known here. The batch starts REREAD_RECORDS before the end:
        the judge knows the canaries read again there by their offsets and skips them
        (probe.core.judge, "Re-reads"), where reading from the log's beginning judged
        every one a duplicate. Records written after the truncation beyond that many
        are not read (a re-created topic that filled while the sink was away).
        """
        begun = start.get(partition, 0)
        end = latest[partition]
        return max(0, end - REREAD_RECORDS) if begun > end else begun

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        ranges = []
        for partition in sorted(end, key=int):
            first = self._effective_start(start, end, partition)
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


# -- the executors: reading a task's ranges -------------------------------------------

# SCHEMA in Arrow's terms: what read_ranges yields.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)
# Rows per Arrow batch handed to Spark: large enough that the per-batch cost
# vanishes, small enough to bound a task's memory (records are up to a few MB).
ARROW_BATCH_ROWS = 4096
# One consume() call returns once it has this many messages or its wait is over
# (librdkafka does not return early with fewer): the wait is what the last records
# of a read pay, so it is short.
CONSUME_WAIT_S = 0.02
# How long a log may end before a range owed from it (or its partition, or topic, be
# gone) before the range is ended without the records. Brokers answer with their high
# watermark, and a leader just elected may lag the old one's for a moment: never a
# reason to skip records that exist. A log re-created, or a broker that lost its data,
# stays short.
SHORT_LOG_GRACE_S = 3.0
# How long a broker may hold a fetch that has nothing to answer yet (``fetchMaxWaitMs``
# overrides it; Kafka's own default). A read asks only for records that exist, so a
# fetch is answered at once and the wait is paid only at a log that ends short of its
# range. A short wait is no faster and costs the broker: two tasks reading the last
# record of 5,000 partitions each at 20 ms kept the embedded broker busy for 19 to 41
# CPU-seconds over 14 to 32 s, against 3 to 4 CPU-seconds over 3 s at 200 to 500 ms
# (the batches of a sink at 10,000 partitions took 22 s instead of 7).
FETCH_WAIT_MS = 500
# What a task's consumer buffers ahead of its reads, at most (librdkafka's default,
# 64 MiB, is sized for a consumer that has a process of its own).
PREFETCH_KIB = 16384
# Errors after which reading on cannot help: the task fails at once, naming them.
_FAILS_AT_ONCE = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
# librdkafka's decompression failure, and its codec numbers (Kafka's record batch
# attributes).
_CODEC_FAILURE = re.compile(r"Decompression \(codec 0x([0-9a-f]+)\)")
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass
class RangeReads:
    """What one task still owes of its ranges (one topic), fed the consumer's messages.

    Pure but for the records it keeps: times are passed in. A range is done at the
    first record at or past its end, or when the log's end (an end-of-partition event)
    is at or past it; records before its start (read after the consumer went back to
    the start of a log that was re-created) are skipped.
    """

    topic: str
    owed: dict[int, OffsetRange]
    progress_at: float
    # Ranges done since the consumer last paused them.
    finished: list[int] = field(default_factory=list)
    # Partitions whose log ends before their range does: since when, and where.
    short: dict[int, tuple[float, int]] = field(default_factory=dict)
    # Ranges ended without their records: {partition: (log end, range end)} for logs
    # that stayed short, and the partitions that were gone.
    cut_short: dict[int, tuple[int, int]] = field(default_factory=dict)
    gone: list[int] = field(default_factory=list)
    last_error: str | None = None
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    stamps: list[int | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)

    @classmethod
    def of(cls, ranges: Sequence[OffsetRange], now: float) -> RangeReads:
        topics = {r.topic for r in ranges}
        if len(topics) > 1:
            raise ValueError(f"one topic per read, got {', '.join(sorted(topics))}")
        owed = {r.partition: r for r in ranges if r.size > 0}
        return cls(topics.pop() if topics else "", owed, now)

    def take(self, messages: Sequence[Any], now: float) -> None:
        """One consume() call's messages: records kept, ranges finished, errors raised
        or remembered. The loop is the read's only per-record Python."""
        owed, finished, short = self.owed, self.finished, self.short
        partitions, offsets, stamps = self.partitions, self.offsets, self.stamps
        keys, values = self.keys, self.values
        # Progress is a record or a log's end heard of; errors are not.
        progressed = False
        for message in messages:
            if message.error() is not None:
                progressed |= self._error(message, now)
                continue
            progressed = True
            partition = message.partition()
            offset = message.offset()
            wanted = owed.get(partition)
            if wanted is None or offset < wanted.start:
                continue
            if short:
                short.pop(partition, None)
            if offset >= wanted.end:
                del owed[partition]
                finished.append(partition)
                continue
            kind, stamp = message.timestamp()
            partitions.append(partition)
            offsets.append(offset)
            stamps.append(stamp if kind and stamp >= 0 else None)
            keys.append(message.key())
            values.append(message.value())
            if offset + 1 >= wanted.end:
                del owed[partition]
                finished.append(partition)
        if progressed:
            self.progress_at = now

    def _error(self, message: Any, now: float) -> bool:
        """An error event: True for a log's end (progress), False for an error the
        client retries (remembered); raises for one that reading on cannot cure."""
        error = message.error()
        code = error.code()
        partition = message.partition()
        if code == KafkaError._PARTITION_EOF:
            wanted = self.owed.get(partition)
            if wanted is None:
                return True
            if message.offset() >= wanted.end:
                del self.owed[partition]
                self.finished.append(partition)
            else:
                self.short.setdefault(partition, (now, message.offset()))
            return True
        codec = _CODEC_FAILURE.search(error.str())
        if codec is not None:
            # Fetching again would fail the same way: the task (and so the query)
            # fails at once, naming the codec and what to do about it.
            number = int(codec.group(1), 16)
            raise TransportError(
                f"cannot read topic {self.topic}, {partitions_summary([partition])}: records "
                f"compressed with {CODECS.get(number, f'codec {number}')}, which this "
                f"librdkafka cannot decompress ({error.str()}); install confluent-kafka "
                "with its bundled librdkafka (synthetic-sla-probe[spark]) on the executors"
            )
        if error.fatal() or code in _FAILS_AT_ONCE:
            raise TransportError(f"cannot read topic {self.topic}: {error.str()}")
        # Brokers away, leaders moving: the client retries; the read waits, and says
        # what it last heard should it time out.
        self.last_error = error.str()
        return False

    def end_short(self, now: float, grace: float) -> None:
        """Ends the ranges whose log has ended before them for ``grace`` seconds."""
        for partition, (since, log_end) in list(self.short.items()):
            if now - since >= grace:
                del self.short[partition]
                wanted = self.owed.pop(partition, None)
                if wanted is not None:
                    self.finished.append(partition)
                    self.cut_short[partition] = (log_end, wanted.end)

    def end_gone(self, present: set[int] | None) -> None:
        """Ends the ranges of partitions the topic no longer has (all of them when the
        topic is gone, ``present`` None)."""
        gone = [p for p in self.owed if present is None or p not in present]
        for partition in gone:
            del self.owed[partition]
            self.finished.append(partition)
        self.gone += gone

    def warn_lost(self) -> None:
        """One line for the ranges ended without their records, one for those whose
        partition was gone: however many, since a re-created topic cuts them all."""
        if self.cut_short:
            log.warning(
                "topic %s: logs end before the ranges planned (log truncated or topic "
                "re-created); their records are gone: %s",
                self.topic,
                ranges_summary(self.cut_short),
            )
        if self.gone:
            log.warning(
                "topic %s: %s gone while being read; their records are gone with them",
                self.topic,
                partitions_summary(self.gone),
            )

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def batch(self) -> pa.RecordBatch:
        """The records kept so far as one Arrow batch, and a fresh start."""
        stamps_ms = pa.array(self.stamps, pa.int64())
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * self.rows, pa.string()),
                pa.array(self.partitions, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pc.multiply(stamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        self.partitions, self.offsets, self.stamps, self.keys, self.values = [], [], [], [], []
        return batch

    def timed_out(self, timeout: float, logged: str | None = None) -> TimeoutError:
        """The failure of a read that made no progress for ``timeout`` seconds, naming
        the client's last error, or else the last problem it ``logged``."""
        # Named by count and the first few: a task may owe thousands of them.
        missing = ranges_summary({p: (r.start, r.end) for p, r in self.owed.items()})
        problem = self.last_error or logged
        heard = f"; last client error: {problem}" if problem else ""
        return TimeoutError(
            f"offsets of topic {self.topic} not readable within {timeout:g}s: {missing}{heard}"
        )


def read_ranges(
    options: Mapping[str, str], ranges: Sequence[OffsetRange], timeout: float
) -> Generator[pa.RecordBatch, None, None]:
    """Every record of the ranges (one topic), each partition's in offset order, as
    Arrow record batches (:data:`ARROW_SCHEMA`), with one consumer.

    A range ends at its ``end`` whatever the log holds now (see the module docstring),
    so the read completes as soon as every range is done; it fails only after
    ``timeout`` seconds without any progress, or at once on an error reading on cannot
    cure (a codec missing, credentials refused).
    """
    reads = RangeReads.of(ranges, time.monotonic())
    if not reads.owed:
        return
    client_log = ClientLog()
    consumer = _consumer(
        options,
        client_log,
        **{
            "enable.partition.eof": "true",
            # A range whose start the log no longer holds (retention, DeleteRecords)
            # reads from the log's first record.
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": options.get("fetchMaxWaitMs", str(FETCH_WAIT_MS)),
            "queued.max.messages.kbytes": str(PREFETCH_KIB),
        },
    )
    grace = min(SHORT_LOG_GRACE_S, timeout / 2)
    checked_at = reads.progress_at
    try:
        consumer.assign(
            [TopicPartition(reads.topic, p, r.start) for p, r in sorted(reads.owed.items())]
        )
        while reads.owed:
            messages = consumer.consume(ARROW_BATCH_ROWS, CONSUME_WAIT_S)
            now = time.monotonic()
            reads.take(messages, now)
            if reads.short:
                reads.end_short(now, grace)
            if reads.owed and now - max(reads.progress_at, checked_at) >= grace:
                # Stalled: a partition, or the topic, may be gone (librdkafka says
                # nothing of a topic deleted under an assignment).
                checked_at = now
                reads.end_gone(_present(consumer, reads.topic, reads.owed, grace))
            if reads.finished:
                # Fetch only what is still owed: at 10,000 partitions a broker that
                # answers a fetch within its max wait serves the first partitions it
                # was asked for, and would serve the finished ones again and again.
                consumer.pause([TopicPartition(reads.topic, p) for p in reads.finished])
                reads.finished.clear()
            if reads.rows >= ARROW_BATCH_ROWS:
                yield reads.batch()
            if reads.owed and now - reads.progress_at > timeout:
                raise reads.timed_out(timeout, client_log.last_problem)
        if reads.rows:
            yield reads.batch()
    finally:
        reads.warn_lost()
        consumer.close()


def planned_reads(
    options: Mapping[str, str], groups: Sequence[Sequence[OffsetRange]], timeout: float
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function over ``spark.range(len(groups), numPartitions=...)``:
    each id names a group of ranges, and a task reads the groups of its ids with one
    consumer, as :func:`read_ranges` does, yielding :data:`SCHEMA`'s rows.

    For a job whose driver has listed the offsets already (reconcile): a batch read
    through the data source would list them again, and the Python Data Source API
    costs three more Python processes on the driver per read (looking the source up,
    creating it, planning it), seconds of a small job.
    """
    planned = [list(group) for group in groups]
    settings = dict(options)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        owed = [r for batch in ids for i in batch.column(0).to_pylist() for r in planned[i]]
        yield from read_ranges(settings, owed, timeout)

    return read


def _present(consumer: Any, topic: str, owed: Iterable[int], wait: float) -> set[int] | None:
    """The topic's partitions now (None: the topic is gone); those ``owed`` too
    while the brokers cannot say."""
    with contextlib.suppress(KafkaException):
        meta = consumer.list_topics(topic, timeout=wait).topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() in _NO_TOPIC):
            return None
        if meta.error is None:
            return set(meta.partitions)
    return set(owed)


# -- batch reads -------------------------------------------------------------------------

SIDES = ("starting", "ending")


@dataclass(frozen=True)
class Bound:
    """Where one side of a batch read lies on one partition: an ``offset``, or a
    ``timestamp`` (epoch ms) standing for the first offset at or after it."""

    kind: str
    value: int


@dataclass(frozen=True)
class BoundSpec:
    """One side of a batch read on every partition. ``default`` (None: the log's own
    edge, its beginning or its end) applies to the partitions ``named`` leaves out."""

    default: Bound | None
    named: Mapping[str, Bound]

    def on(self, partition: str) -> Bound | None:
        return self.named.get(partition, self.default)


def bound_spec(options: Mapping[str, str], side: str) -> BoundSpec:
    """The ``starting`` or ``ending`` bound the options give (see the module docstring).

    >>> bound_spec({"endingTimestamp": "1700000000000"}, "ending").on("3")
    Bound(kind='timestamp', value=1700000000000)
    >>> bound_spec({}, "starting")
    BoundSpec(default=None, named={})
    """
    given = [
        name
        for name in (f"{side}Offsets", f"{side}Timestamp", f"{side}OffsetsByTimestamp")
        if options.get(name)
    ]
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)}, not several")
    if not given:
        return BoundSpec(None, {})
    name = given[0]
    text = options[name]
    if name == f"{side}Timestamp":
        if not text.isdigit():
            raise ValueError(f"{name} must be epoch milliseconds, got {text!r}")
        return BoundSpec(Bound("timestamp", int(text)), {})
    edge = "earliest" if side == "starting" else "latest"
    if name == f"{side}Offsets" and text == edge:
        return BoundSpec(None, {})
    named = starting_map(text) if text not in ("earliest", "latest") else None
    if named is None:
        raise ValueError(f'{name} must be {edge} or a JSON map {{"<partition>": value}}')
    kind = "timestamp" if name.endswith("ByTimestamp") else "offset"
    return BoundSpec(None, {p: Bound(kind, value) for p, value in named.items()})


def clamp_ranges(
    topic: str, begin: Offsets, end: Offsets, starts: Mapping[str, int], ends: Mapping[str, int]
) -> list[OffsetRange]:
    """Each partition's ``[start, end)`` held inside its log, never negative.

    Pure. A start before the log's beginning reads from the beginning (the records
    before it are gone), an end past its end stops there, and an end before its start
    reads nothing.

    >>> clamp_ranges("t", {"0": 5}, {"0": 9}, {"0": 2}, {"0": 20})
    [OffsetRange(topic='t', partition=0, start=5, end=9)]
    """
    ranges = []
    for partition in sorted(end, key=int):
        low, high = begin[partition], end[partition]
        first = min(max(starts.get(partition, low), low), high)
        last = min(max(ends.get(partition, high), first), high)
        ranges.append(OffsetRange(topic, int(partition), first, last))
    return ranges


def split_ranges(ranges: Sequence[OffsetRange], pieces: int | None) -> list[OffsetRange]:
    """The non-empty ranges, cut into about ``pieces`` ranges of even size when there
    are fewer (``minPartitions``): one large partition is then read by several tasks.

    Pure. The pieces of a range are contiguous and cover it exactly.

    >>> [(r.start, r.end) for r in split_ranges([OffsetRange("t", 0, 0, 10)], 3)]
    [(0, 4), (4, 8), (8, 10)]
    """
    filled = [r for r in ranges if r.size > 0]
    if not pieces or len(filled) >= pieces:
        return filled
    target = math.ceil(sum(r.size for r in filled) / pieces)
    cut = []
    for offsets in filled:
        step = math.ceil(offsets.size / math.ceil(offsets.size / target))
        for start in range(offsets.start, offsets.end, step):
            cut.append(replace(offsets, start=start, end=min(start + step, offsets.end)))
    return cut


# -- the driver: a topic's offsets ----------------------------------------------------

# How long the driver waits for one listing before it plans nothing (stream) or
# fails (batch).
LIST_TIMEOUT_S = 15.0
# ListOffsets markers: the log's first offset and its end.
_EARLIEST, _LATEST = -2, -1
# Partitions asked per listing call. librdkafka matches each partition of an answer to
# its request by a linear search, so a call's cost grows with the square of its size:
# 10,000 partitions' ends in one call cost 0.6-0.75 CPU-seconds, in calls of 1,000 0.1-0.15
# (and no more wall time on loopback), measured on the embedded broker. A call is one
# ListOffsets request per broker leading any of its partitions.
LIST_CHUNK = 1_000
_NO_TOPIC = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
# A listing's answers that the topic is gone: its leaders' "unknown topic", or the
# client's own metadata, refreshed meanwhile, lacking a partition (Kafka never takes
# partitions away: the topic was deleted, or re-created with fewer).
_GONE = (*_NO_TOPIC, KafkaError._UNKNOWN_PARTITION)


class TopicGone(TransportError):
    """The brokers answered a listing with "unknown topic": the topic was deleted
    after the metadata that named its partitions (a broker's metadata lags a
    deletion by moments, so the listing is the later, truer answer)."""


class TopicOffsets:
    """Offsets of one topic's partitions as its brokers list them now (driver side).

    One consumer, made on first use and kept (a source is pickled to Spark's source
    runner, a client is not). Each call asks the brokers once: the topic's metadata
    (that topic's alone), or one ListOffsets request per broker for each
    :data:`LIST_CHUNK` partitions. A listing of 10,000 partitions' ends costs about
    a tenth of a CPU-second (librdkafka in one call: 0.6-0.75; kafka-python's listing
    of both ends and every topic's metadata: 0.4; benchmarks/bench_source_read.py);
    beginnings are listed only when needed. Client failures are raised as
    TransportError.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = options["topic"]
        self._options = dict(options)
        self._client: Any = None
        self._client_log = ClientLog()

    def _consumer(self) -> Any:
        if self._client is None:
            self._client = _consumer(self._options, self._client_log)
        return self._client

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        try:
            yield
        except KafkaException as exc:
            raise TransportError(f"topic {self.topic}: {what}: {_kafka_error(exc)}") from exc
        finally:
            if self._client is not None:
                self._client.poll(0)  # serves the client's log lines

    def partitions(self) -> list[int] | None:
        """The topic's partitions, or None when it does not exist."""
        with self._asking("metadata"):
            meta = self._consumer().list_topics(self.topic, timeout=LIST_TIMEOUT_S)
        topic = meta.topics.get(self.topic)
        if topic is None or (topic.error is not None and topic.error.code() in _NO_TOPIC):
            return None
        if topic.error is not None:
            raise TransportError(f"topic {self.topic}: metadata: {topic.error.str()}")
        return sorted(topic.partitions)

    def _listed(self, partitions: Sequence[int | str], marker: int) -> Offsets:
        """Offsets at ``marker`` of the partitions the brokers answered for."""
        if not partitions:
            return {}
        asked = [TopicPartition(self.topic, int(p), marker) for p in partitions]
        found: list[TopicPartition] = []
        with self._asking("list offsets"):
            try:
                for first in range(0, len(asked), LIST_CHUNK):
                    chunk = asked[first : first + LIST_CHUNK]
                    found.extend(self._consumer().offsets_for_times(chunk, LIST_TIMEOUT_S))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _GONE:
                    raise TopicGone(f"topic {self.topic} not found") from exc
                raise
        return {str(tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    def ends(self, partitions: Sequence[int | str]) -> Offsets:
        """End offsets (the next offset to be written); a partition the brokers could
        not answer for (its leader moving) is left out. Raises TopicGone when the
        brokers no longer know the topic."""
        return self._listed(partitions, _LATEST)

    def begins(self, partitions: Sequence[int | str]) -> Offsets:
        """First offsets still in the logs; a partition without an answer is left out."""
        return self._listed(partitions, _EARLIEST)

    def now(self, side: str) -> tuple[list[int], Offsets] | None:
        """The topic's partitions and their ``earliest`` or ``latest`` offsets (a
        partition without an answer left out), or None while the topic does not
        exist: its metadata says so, or the listing meets its deletion."""
        partitions = self.partitions()
        if partitions is None:
            return None
        try:
            listed = (self.begins if side == "earliest" else self.ends)(partitions)
        except TopicGone:
            return None
        return partitions, listed

    def bounds(self) -> tuple[Offsets, Offsets]:
        """(beginning, end) offsets of every partition. Raises ValueError when the
        topic does not exist, TransportError when a partition has no answer."""
        partitions = self.partitions()
        if partitions is None:
            raise ValueError(f"topic {self.topic!r} not found")
        try:
            begin, end = self.begins(partitions), self.ends(partitions)
        except TopicGone as exc:
            raise ValueError(f"topic {self.topic!r} not found") from exc
        unlisted = {str(p) for p in partitions} - (begin.keys() & end.keys())
        if unlisted:
            raise TransportError(
                f"topic {self.topic}: no offsets listed for {partitions_summary(unlisted)}"
            )
        return begin, end

    def at_times(self, times_ms: Mapping[str, int]) -> dict[str, int | None]:
        """Per partition, the first offset whose record timestamp is at or after the
        time given, or None when every record is older (the time is past the log).

        Asked of an admin client, whose answer carries the record's timestamp:
        Apache Kafka answers "none" with offset -1, the embedded broker with offset 0
        and timestamp -1, which only the timestamp tells apart from a real answer."""
        # OffsetSpec is exported, but not listed so in confluent_kafka.admin's stubs.
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: PLC0415
            AdminClient,
            OffsetSpec,
        )

        if not times_ms:
            return {}
        settings = client_config(self._options)
        del settings["enable.auto.commit"]  # a consumer's setting; this is an admin client
        admin = AdminClient(dict[str, Any]({**settings, "logger": self._client_log}))
        asked = {
            TopicPartition(self.topic, int(p)): OffsetSpec.for_timestamp(ms)
            for p, ms in times_ms.items()
        }
        found: dict[str, int | None] = {}
        with self._asking("list offsets by time"):
            for tp, answer in admin.list_offsets(asked, request_timeout=LIST_TIMEOUT_S).items():
                info = answer.result()
                found[str(tp.partition)] = (
                    None if info.offset < 0 or info.timestamp < 0 else int(info.offset)
                )
        return found

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a client that already broke
                self._client.close()
            self._client = None


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


def assigned(options: Mapping[str, str]) -> set[str] | None:
    """The partitions ``assign`` names (Spark's Kafka option: ``{"<topic>": [0, 2]}``),
    None to read them all.

    >>> sorted(assigned({"topic": "t", "assign": '{"t": [2, 0]}'}))
    ['0', '2']
    """
    text = options.get("assign")
    if not text:
        return None
    try:
        named = json.loads(text).get(options["topic"])
    except (ValueError, AttributeError):
        named = None
    if not isinstance(named, list) or not all(isinstance(p, int) and p >= 0 for p in named):
        raise ValueError(f'assign must be a JSON map {{"{options["topic"]}": [partition, ...]}}')
    return {str(p) for p in named}


def plan_batch(options: Mapping[str, str]) -> list[OffsetRange]:
    """Every partition's ``[start, end)`` for a batch read of these options, resolved
    against the log as it is now (one listing, on the driver)."""
    starting, ending = bound_spec(options, "starting"), bound_spec(options, "ending")
    only = assigned(options)
    log = TopicOffsets(options)
    try:
        begin, end = log.bounds()
        if only is not None:
            unknown = sorted(only - set(end), key=int)
            if unknown:
                raise ValueError(f"topic {log.topic!r} has no partition {', '.join(unknown)}")
            begin = {p: o for p, o in begin.items() if p in only}
            end = {p: o for p, o in end.items() if p in only}
        starts = resolve_spec(starting, begin, end, log)
        ends = resolve_spec(ending, begin, end, log)
    finally:
        log.close()
    return clamp_ranges(options["topic"], begin, end, starts, ends)


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("sla_kafka")``: the bounds are resolved once, when Spark
    plans the read; each range is read by one task on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark's option names are case-insensitive, and so must every look-up be
        # (Spark hands them over lower-cased).
        self.options = CaseInsensitiveDict(options)
        # Fail at load(), naming the option, rather than in the planner.
        for side in SIDES:
            bound_spec(self.options, side)
        assigned(self.options)
        pieces = options.get("minPartitions")
        self.min_partitions = int(pieces) if pieces else None
        if self.min_partitions is not None and self.min_partitions < 1:
            raise ValueError("minPartitions must be >= 1")
        self.read_timeout = float(options.get("readTimeoutSeconds", READ_TIMEOUT_S))

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
