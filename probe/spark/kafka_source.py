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
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
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
        self.options = dict(options)
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
            if last < start[partition]:
                log.warning(
                    "topic %s partition %s ends at %d before the checkpointed offset %d: "
                    "log truncated or topic re-created; reading it again from %d",
                    self.topic, partition, last, start[partition], begin[partition],
                )  # fmt: skip
            latest[partition] = last
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
                missing = ", ".join(
                    f"{tp.topic}/{tp.partition} {position[tp]}..{r.end}" for tp, r in wanted.items()
                )
                raise TimeoutError(f"offsets not readable within {timeout:g}s: {missing}")
            try:
                fetched = consumer.poll(timeout_ms=500)
            except UnsupportedCodecError as exc:
                # Fetching again would fail the same way: the task (and so the query)
                # fails at once, naming the codec and where its package belongs.
                raise UnsupportedCodecError(
                    f"cannot read {', '.join(f'{tp.topic}/{tp.partition}' for tp in wanted)}: "
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


class KafkaStreamSource(DataSource):
    """``spark.readStream.format("sla_kafka")``: see the module docstring."""

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
