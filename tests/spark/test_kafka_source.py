"""The sla_kafka streaming source on its own, against the real broker."""

from __future__ import annotations

import logging
import pickle
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable

from probe.core.judge import READ_AT_KEPT
from probe.core.offset_ranges import REREAD_RECORDS, OffsetRange
from probe.embedded import EmbeddedBroker
from probe.spark.kafka_reads import read_ranges
from probe.spark.kafka_source import (
    SOURCE_NAME,
    KafkaStreamReader,
    KafkaStreamSource,
    OffsetRanges,
)


def _produce(broker: EmbeddedBroker, topic: str, per_partition: dict[int, int], tag: str) -> None:
    """Records one at a time: the embedded broker lists end offsets right only for
    single-record batches, which is also what the probe writes."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, f"{tag}-{partition}-{i}".encode(), partition=partition)
            assert producer.flush(10) == 0


async def _create(
    broker: EmbeddedBroker, topic: str, partitions: int, *, drop: bool = False
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        if drop:
            await admin.delete_topics([topic])
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


Row = tuple[int, int, bytes]


def _drain(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    checkpoint: Path,
    *,
    tasks: list[int] | None = None,
    read_order: list[Row] | None = None,
    **options: str,
) -> tuple[list[int], list[Row]]:
    """Run the source with Trigger.AvailableNow from a checkpoint; return the size of
    each non-empty batch and every row read, as (partition, offset, value), sorted.

    ``tasks`` gets the number of input partitions of each non-empty batch, and
    ``read_order`` the rows in the order the tasks produced them."""
    spark.dataSource.register(KafkaStreamSource)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    batches: list[int] = []
    rows: list[Row] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        got = [(r.partition, r.offset, bytes(r.value)) for r in batch.collect()]
        if got:
            batches.append(len(got))
            rows.extend(got)
            if tasks is not None:
                tasks.append(batch.rdd.getNumPartitions())
            if read_order is not None:
                read_order.extend(got)

    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None
    return batches, sorted(rows)


async def test_capped_tasks_read_several_partitions_each_in_offset_order(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 5)
    _produce(broker, topic, {0: 4, 1: 1, 2: 1, 3: 1, 4: 2}, "g")
    tasks: list[int] = []
    order: list[Row] = []
    _, rows = _drain(
        spark, broker, topic, tmp_path / "ck", tasks=tasks, read_order=order, maxInputPartitions="2"
    )
    assert tasks == [2]
    assert [(p, o) for p, o, _ in rows] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0), (4, 0), (4, 1),
    ]  # fmt: skip
    for partition in range(5):
        offsets = [o for p, o, _ in order if p == partition]
        assert offsets == sorted(offsets)
    # The cap only ever lowers the task count: the next batch's one range is one task.
    _produce(broker, topic, {3: 2}, "h")
    tasks.clear()
    _, more = _drain(
        spark, broker, topic, tmp_path / "ck", tasks=tasks, read_order=order, maxInputPartitions="2"
    )
    assert tasks == [1]
    assert [(p, o, v.decode()) for p, o, v in more] == [(3, 1, "h-3-0"), (3, 2, "h-3-1")]


async def test_offsets_of_every_partition_advance(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 4, 1: 2, 2: 3}, "a")
    _, first = _drain(spark, broker, topic, tmp_path / "ck")
    assert [(p, o) for p, o, _ in first] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (2, 2),
    ]
    # Restarted from its checkpoint, the query reads only what came since.
    _produce(broker, topic, {0: 1, 2: 2}, "b")
    _, second = _drain(spark, broker, topic, tmp_path / "ck")
    assert [(p, o, v.decode()) for p, o, v in second] == [
        (0, 4, "b-0-0"),
        (2, 3, "b-2-0"),
        (2, 4, "b-2-1"),
    ]


async def test_max_records_splits_a_backlog(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 9, 1: 6}, "x")
    batches, rows = _drain(spark, broker, topic, tmp_path / "ck", maxRecordsPerBatch="4")
    assert len(batches) >= 4
    assert all(size <= 4 for size in batches)
    assert len(rows) == 15
    assert len(set(rows)) == 15  # every record once


async def test_an_added_partition_is_read(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The embedded broker cannot add partitions, so the topic is re-created with one
    more: the new partition is read from its beginning, and the re-created old ones,
    whose logs now end before the checkpointed offsets, are read again from theirs."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 3, 1: 3}, "old")
    _drain(spark, broker, topic, tmp_path / "ck")
    await _create(broker, topic, 3, drop=True)
    _produce(broker, topic, {0: 1, 1: 1, 2: 2}, "new")
    _, after = _drain(spark, broker, topic, tmp_path / "ck")
    assert [(p, o, v.decode()) for p, o, v in after] == [
        (0, 0, "new-0-0"),
        (1, 0, "new-1-0"),
        (2, 0, "new-2-0"),
        (2, 1, "new-2-1"),
    ]


def test_the_stream_readers_options_keep_their_names_as_spark_hands_them() -> None:
    """Spark passes options lower-cased; the executors' reads look them up by their
    documented names (fetchMaxWaitMs, readTimeoutSeconds)."""
    given = CaseInsensitiveDict(
        {"bootstrap.servers": "b:9092", "topic": "t", "fetchMaxWaitMs": "250"}
    )
    source = KafkaStreamSource(given)
    reader = source.streamReader(source.schema())
    assert reader.options.get("fetchMaxWaitMs") == "250"
    assert pickle.loads(pickle.dumps(reader.options)).get("fetchMaxWaitMs") == "250"


# --- What the source says at scale: counts and the first few, never every partition ---

MANY = 200


async def test_logs_that_start_over_are_one_warning_however_many_partitions(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A re-created topic truncates every partition at once: one line names them."""
    await _create(broker, topic, MANY)
    reader = KafkaStreamReader({"bootstrap.servers": broker.bootstrap_servers, "topic": topic})
    try:
        with caplog.at_level(logging.WARNING, logger="probe.spark.kafka_source"):
            latest = reader.latestOffset({str(p): 5 for p in range(MANY)}, ReadAllAvailable())
    finally:
        reader.stop()
    assert latest == {str(p): 0 for p in range(MANY)}
    (line,) = [r.getMessage() for r in caplog.records if r.name == "probe.spark.kafka_source"]
    assert f"{MANY} partitions, offsets 0..5 (first: 0:5->0, 1:5->0, " in line
    assert len(line) < 300


def test_a_log_that_ends_before_the_position_is_read_again_from_just_before_its_end() -> None:
    """After an unclean election the new leader's log ends before the position: what
    it holds below its end is history already read, then records written since the
    logs parted. The batch starts REREAD_RECORDS before that end (the judge knows the
    canaries read again there by their offsets), never at the log's beginning, which
    judged every canary of the partition's history a duplicate; never further back
    than the judge keeps offsets; and planned the same way on both sides."""
    assert REREAD_RECORDS <= READ_AT_KEPT
    options = {"bootstrap.servers": "127.0.0.1:9", "topic": "t", "maxInputPartitions": "1"}
    reader = KafkaStreamReader(options)
    start = {"0": 5_000, "1": 30, "2": 7}
    end = {"0": 4_900, "1": 12, "2": 9}
    (ranges,) = reader.partitions(start, end)
    assert isinstance(ranges, OffsetRanges)
    assert [(r.partition, r.start, r.end) for r in ranges.ranges] == [
        (0, 4_900 - REREAD_RECORDS, 4_900),
        (1, 0, 12),  # a log shorter than that: from its beginning
        (2, 7, 9),  # not truncated: on from the position
    ]


# --- The reader at scale, and through logs that change under it --------------------

THOUSANDS = 2_000


def _produce_one_each(broker: EmbeddedBroker, topic: str, partitions: range, tag: str) -> None:
    """One record to each partition, sent together (thousands in about a second), each
    alone in its partition's batch: the embedded broker lists a partition's end right
    only when its last batch holds one record."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for partition in partitions:
        producer.produce(topic, f"{tag}-{partition}".encode(), partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


def _read(broker: EmbeddedBroker, ranges: list[OffsetRange], timeout: float = 30) -> list[Row]:
    return [
        (partition, offset, value)
        for batch in read_ranges({"bootstrap.servers": broker.bootstrap_servers}, ranges, timeout)
        for partition, offset, value in zip(
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    ]


async def test_thousands_of_partitions_of_one_or_two_records_are_each_read_once(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The sink's shape at scale: every partition holds a record or two, read in two
    tasks of a thousand ranges each (the cap the sink sets on two cores). No batch
    fails, and every record is read exactly once."""
    await _create(broker, topic, THOUSANDS)
    _produce_one_each(broker, topic, range(THOUSANDS), "one")
    _produce_one_each(broker, topic, range(0, THOUSANDS, 2), "two")
    tasks: list[int] = []
    _, rows = _drain(spark, broker, topic, tmp_path / "ck", tasks=tasks, maxInputPartitions="2")
    assert tasks == [2]
    assert rows == sorted(
        [(p, 0, f"one-{p}".encode()) for p in range(THOUSANDS)]
        + [(p, 1, f"two-{p}".encode()) for p in range(0, THOUSANDS, 2)]
    )


async def test_ranges_of_a_topic_re_created_under_the_read_end_with_its_new_logs(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ranges planned on a log that is gone by the time they are read (the topic
    re-created, a broker that lost its data): what the new logs hold of them is read,
    and the read ends a few seconds after the logs were seen to end short, with one
    line for them all, not at its timeout."""
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 5, 1: 5, 2: 5}, "old")
    planned = [OffsetRange(topic, p, 0, 5) for p in range(3)]
    await _create(broker, topic, 3, drop=True)
    _produce(broker, topic, {0: 2}, "new")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="probe.spark.kafka_reads"):
        rows = _read(broker, planned, timeout=60)
    assert time.monotonic() - started < 30
    assert rows == [(0, 0, b"new-0-0"), (0, 1, b"new-0-1")]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "probe.spark.kafka_reads"]
    assert "logs end before the ranges planned" in line
    assert "3 partitions, offsets 0..5 (0:2..5, 1:0..5, 2:0..5)" in line


async def test_a_topic_gone_plans_no_batch_and_ends_a_read_of_it(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A topic deleted under the query: the driver plans nothing (one line, however
    many triggers), and a task reading it ends without its records."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 2}, "gone")
    reader = KafkaStreamReader({"bootstrap.servers": broker.bootstrap_servers, "topic": topic})
    try:
        start = reader.latestOffset({}, ReadAllAvailable())
        assert start == {"0": 2, "1": 0}
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
        # The driver's line is the reader's (kafka_source), the task's its read's.
        with (
            caplog.at_level(logging.INFO, logger="probe.spark.kafka_source"),
            caplog.at_level(logging.INFO, logger="probe.spark.kafka_reads"),
        ):
            assert reader.latestOffset(start, ReadAllAvailable()) == start
            assert reader.latestOffset(start, ReadAllAvailable()) == start
            assert reader.reportLatestOffset() is None
            assert _read(broker, [OffsetRange(topic, 0, 0, 2)], timeout=60) == []
    finally:
        reader.stop()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name in ("probe.spark.kafka_source", "probe.spark.kafka_reads")
    ]
    assert lines == [
        f"topic {topic} not found; no batch until it exists",
        f"topic {topic}: 1 partition 0 gone while being read; their records are gone with them",
    ]
