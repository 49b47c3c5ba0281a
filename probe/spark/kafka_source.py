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
record timestamp is at or after it (Kafka's ``offsets_for_times``): the start is
inclusive, the end exclusive, so ``[t0, t1)`` and ``[t1, t2)`` never share a record.
A partition a map does not name is read from its beginning to its end; bounds
outside the log are clamped to it. Every Kafka partition (each piece of one, with
``minPartitions``) is one Spark task, read on the executors as in streaming.

Options prefixed ``kafka.`` are passed to the kafka-python client with the prefix
removed and dots turned into underscores (``kafka.security.protocol=SASL_SSL`` becomes
``security_protocol="SASL_SSL"``), so TLS and SASL work as for any kafka-python client.

Offsets are a map ``{"<partition>": next offset to read}`` kept in Spark's
checkpoint, so a restarted query resumes exactly where it stopped. Every micro-batch
gets one input partition (one Spark task) per Kafka partition with new records, read on
the executors with a plain kafka-python consumer (no consumer group, nothing committed
to Kafka). ``maxInputPartitions`` caps the tasks per batch: the offset ranges are then
grouped, never split, so that the groups hold about as many records each, and a task
reads its group with one consumer. A task's fixed cost (scheduling, its Python worker
round trip) is far larger than reading a few records, so a topic with many lightly
used partitions wants the cap near the cluster's cores: batches then take one wave.
Partitions that appear while the query runs are read from their beginning. A
partition whose log now ends before the checkpointed offset (topic re-created, or a
broker that lost its data) is read again from its beginning, and the reset is logged.
``Trigger.AvailableNow`` reads what was there when the query started, in batches of at
most ``maxRecordsPerBatch``, then stops. Compressed batches (gzip, snappy, lz4, zstd)
are read with the codec packages of the ``spark`` extra; a batch whose codec is missing
on an executor fails the query with an error naming the codec.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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

from probe.partition_summary import partitions_summary, ranges_summary

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


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python settings from the source options (see the module docstring)."""
    config: dict[str, Any] = {"bootstrap_servers": options["bootstrap.servers"].split(",")}
    for name, value in options.items():
        if name.startswith("kafka."):
            config[name.removeprefix("kafka.").replace(".", "_")] = _option_value(value)
    return config


def _option_value(text: str) -> str | int | bool:
    # Spark options are strings; kafka-python wants its booleans and numbers typed.
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if text.isdigit() else text


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
        # Bounds how long a task waits for records its ranges promise.
        self.read_timeout = float(options.get("readTimeoutSeconds", "60"))
        self._available_now_target: Offsets | None = None
        self._listed_end: Offsets = {}
        self._client: Any = None

    # -- driver side ---------------------------------------------------------------

    def _admin(self) -> Any:
        # Created lazily: the reader is pickled to Spark's source runner, a client is not.
        if self._client is None:
            from kafka import KafkaConsumer  # noqa: PLC0415 - optional dependency

            self._client = KafkaConsumer(
                **client_config(self.options), enable_auto_commit=False, group_id=None
            )
        return self._client

    def _log_bounds(self) -> tuple[Offsets, Offsets]:
        """(beginning, end) offsets of every partition of the topic right now."""
        from kafka import TopicPartition  # noqa: PLC0415

        client = self._admin()
        client.topics()  # refreshes metadata so added partitions are seen
        partitions = client.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        if not tps:
            return {}, {}
        begin = client.beginning_offsets(tps)
        end = client.end_offsets(tps)
        return (
            {str(tp.partition): int(begin[tp]) for tp in tps},
            {str(tp.partition): int(end[tp]) for tp in tps},
        )

    def initialOffset(self) -> Offsets:
        # Spark asks again after a restart before the first commit: a map given by the
        # caller (pinned in the checkpoint) keeps that answer the same.
        if self._pinned is not None:
            return dict(self._pinned)
        return self.log_start(self.starting)

    def log_start(self, starting: str) -> Offsets:
        """The topic's ``earliest`` or ``latest`` offsets, right now."""
        begin, end = self._log_bounds()
        return begin if starting == "earliest" else end

    def _latest(self, start: Offsets) -> Offsets:
        begin, end = self._log_bounds()
        self._listed_end = end
        latest: Offsets = {}
        for partition, last in end.items():
            if partition not in start:
                continue  # new partition: planned from its beginning below
            latest[partition] = last
        truncated = {p: (start[p], begin[p]) for p, last in latest.items() if last < start[p]}
        if truncated:
            # One line for them all: a re-created topic truncates every partition.
            log.warning(
                "topic %s: logs end before the checkpointed offsets (log truncated or topic "
                "re-created); reading them again from their beginning: %s",
                self.topic, ranges_summary(truncated, joined_by="->"),
            )  # fmt: skip
        for partition in end.keys() - start.keys():
            latest[partition] = end[partition]
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
        # less per batch); None while the broker is away.
        return self._listed_end or None

    def _reset_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a client that already broke
                self._client.close()
            self._client = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self._log_bounds()[1]

    @staticmethod
    def _effective_start(start: Offsets, latest: Offsets, partition: str) -> int:
        begun = start.get(partition, 0)
        # A log that now ends before our position was truncated or re-created.
        return 0 if begun > latest[partition] else begun

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

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, OffsetRanges)
        yield from read_ranges(self.options, partition.ranges, self.read_timeout)


def read_ranges(
    options: Mapping[str, str], ranges: Sequence[OffsetRange], timeout: float
) -> Iterator[tuple[Any, ...]]:
    """Every record of the ranges, each partition's in offset order, with one consumer.

    Records deleted in the meantime (retention, truncation) are skipped: a range ends
    at its ``end`` whatever the log holds now, so the batch always completes.
    """
    from datetime import UTC, datetime  # noqa: PLC0415

    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415
    from kafka.errors import UnsupportedCodecError  # noqa: PLC0415

    wanted = {TopicPartition(r.topic, r.partition): r for r in ranges if r.size > 0}
    if not wanted:
        return
    consumer = KafkaConsumer(
        **client_config(options),
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        # Brokers that hold a fetch for its whole max wait would otherwise slow reads.
        fetch_max_wait_ms=int(options.get("fetchMaxWaitMs", "20")),
    )
    try:
        consumer.assign(list(wanted))
        for tp, offsets in wanted.items():
            consumer.seek(tp, offsets.start)
        position = {tp: offsets.start for tp, offsets in wanted.items()}
        deadline = time.monotonic() + timeout
        while wanted:
            if time.monotonic() > deadline:
                # Named by count and the first few: a task may owe thousands of them.
                missing = ranges_summary(
                    {tp.partition: (position[tp], r.end) for tp, r in wanted.items()}
                )
                raise TimeoutError(
                    f"offsets of topic {_topics(wanted)} not readable within {timeout:g}s: "
                    f"{missing}"
                )
            try:
                fetched = consumer.poll(timeout_ms=500)
            except UnsupportedCodecError as exc:
                # Fetching again would fail the same way: the task (and so the query)
                # fails at once, naming the codec and where its package belongs.
                raise UnsupportedCodecError(
                    f"cannot read topic {_topics(wanted)}, "
                    f"{partitions_summary(tp.partition for tp in wanted)}: "
                    f"{exc}; install synthetic-sla-probe[spark] on the executors"
                ) from exc
            for tp in list(wanted):
                offsets = wanted[tp]
                for record in fetched.get(tp, []):
                    if record.offset >= offsets.end:
                        position[tp] = offsets.end
                        break
                    position[tp] = record.offset + 1
                    stamp = (
                        datetime.fromtimestamp(record.timestamp / 1000, tz=UTC)
                        if record.timestamp is not None and record.timestamp >= 0
                        else None
                    )
                    yield (tp.topic, tp.partition, record.offset, stamp, record.key, record.value)
                if not fetched.get(tp) and consumer.position(tp) >= offsets.end:
                    # An empty fetch past the range's end: the rest was deleted.
                    position[tp] = offsets.end
                if position[tp] >= offsets.end:
                    del wanted[tp]
                    consumer.pause(tp)  # fetch only what is still owed
    finally:
        consumer.close()


def _topics(partitions: Iterable[Any]) -> str:
    """The topic (one per source; a comma-separated list otherwise) of TopicPartitions."""
    return ", ".join(sorted({tp.topic for tp in partitions}))


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


class TopicOffsets:
    """Offsets of a topic's partitions as the brokers list them now (driver side)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        from kafka import KafkaConsumer  # noqa: PLC0415 - optional dependency

        self.topic = options["topic"]
        self._client = KafkaConsumer(
            **client_config(options), enable_auto_commit=False, group_id=None
        )

    def _partitions(self) -> list[Any]:
        from kafka import TopicPartition  # noqa: PLC0415

        self._client.topics()  # refreshes metadata so added partitions are seen
        partitions = self._client.partitions_for_topic(self.topic)
        if not partitions:
            raise ValueError(f"topic {self.topic!r} not found")
        return [TopicPartition(self.topic, p) for p in sorted(partitions)]

    def bounds(self) -> tuple[Offsets, Offsets]:
        """(beginning, end) offsets of every partition."""
        tps = self._partitions()
        begin = self._client.beginning_offsets(tps)
        end = self._client.end_offsets(tps)
        return (
            {str(tp.partition): int(begin[tp]) for tp in tps},
            {str(tp.partition): int(end[tp]) for tp in tps},
        )

    def at_times(self, times_ms: Mapping[str, int]) -> dict[str, int | None]:
        """Per partition, the first offset whose record timestamp is at or after the
        time given, or None when every record is older (the time is past the log)."""
        from kafka import TopicPartition  # noqa: PLC0415

        if not times_ms:
            return {}
        found = self._client.offsets_for_times(
            {TopicPartition(self.topic, int(p)): ms for p, ms in times_ms.items()}
        )
        # Apache Kafka answers "none" with offset -1, which the client turns into None;
        # some Kafka-protocol brokers (the embedded one) answer offset 0 and timestamp -1.
        return {
            str(tp.partition): None if at is None or at.timestamp < 0 else int(at.offset)
            for tp, at in found.items()
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a client that already broke
            self._client.close()


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
        self.read_timeout = float(options.get("readTimeoutSeconds", "60"))

    def partitions(self) -> Sequence[InputPartition]:
        ranges = split_ranges(plan_batch(self.options), self.min_partitions)
        # Spark wants at least one partition; an empty one reads nothing.
        return [OffsetRanges([r]) for r in ranges] or [OffsetRanges([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRanges)
        yield from record_batches(
            read_ranges(self.options, partition.ranges, self.read_timeout), ARROW_SCHEMA
        )


# SCHEMA in Arrow's terms, for reads that hand Spark record batches.
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


def record_batches(rows: Iterator[tuple[Any, ...]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Rows as Arrow record batches: Spark takes them without converting each row in
    Python, which is most of a large read's cost when rows are yielded one by one."""
    columns: list[list[Any]] = [[] for _ in schema.names]
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
        if len(columns[0]) >= ARROW_BATCH_ROWS:
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
            columns = [[] for _ in schema.names]
    if columns[0]:
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


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
