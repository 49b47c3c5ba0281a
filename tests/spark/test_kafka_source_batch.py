"""The sla_kafka source in batch mode (spark.read): offset and timestamp bounds per
partition, against the real broker."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from pyspark.sql import DataFrame, SparkSession

from probe.embedded import EmbeddedBroker
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource
from tests.conftest import wait_for
from tests.spark.test_kafka_source import _create, _produce


def _read(spark: SparkSession, broker: EmbeddedBroker, topic: str, **options: str) -> DataFrame:
    spark.dataSource.register(KafkaStreamSource)
    reader = (
        spark.read.format(SOURCE_NAME)
        .option("bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _rows(frame: DataFrame) -> list[tuple[int, int, str]]:
    return sorted((r.partition, r.offset, bytes(r.value).decode()) for r in frame.collect())


async def test_offset_bounds_per_partition(
    spark: SparkSession, broker: EmbeddedBroker, topic: str
) -> None:
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 5, 1: 3, 2: 4}, "r")
    everything = _rows(_read(spark, broker, topic))
    assert len(everything) == 12
    bounded = _rows(
        _read(
            spark,
            broker,
            topic,
            startingOffsets=json.dumps({"0": 2, "2": 1}),
            endingOffsets=json.dumps({"0": 4, "1": 2}),
        )
    )
    assert bounded == [
        (0, 2, "r-0-2"),
        (0, 3, "r-0-3"),
        (1, 0, "r-1-0"),
        (1, 1, "r-1-1"),
        (2, 1, "r-2-1"),
        (2, 2, "r-2-2"),
        (2, 3, "r-2-3"),
    ]


async def test_timestamp_bounds_split_the_log_where_the_clock_was(
    spark: SparkSession, broker: EmbeddedBroker, topic: str
) -> None:
    """[earliest, t) and [t, latest) hold every record once, split at time t."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 3, 1: 2}, "before")
    # The broker stamps records with its clock (this machine's) when it appends them,
    # before the flush returns: every record so far is older than now. Produce the
    # rest only once that clock has passed the split.
    split_ms = int(time.time() * 1000) + 1
    wait_for(lambda: time.time() * 1000 > split_ms + 1, timeout=5, what="the clock past the split")
    _produce(broker, topic, {0: 2, 1: 1}, "after")
    earlier = _rows(_read(spark, broker, topic, endingTimestamp=str(split_ms)))
    later = _rows(_read(spark, broker, topic, startingTimestamp=str(split_ms)))
    assert [value for _, _, value in earlier] == [
        "before-0-0", "before-0-1", "before-0-2", "before-1-0", "before-1-1",
    ]  # fmt: skip
    assert later == [(0, 3, "after-0-0"), (0, 4, "after-0-1"), (1, 2, "after-1-0")]
    # Per partition, and mixed with offsets on the other side.
    mixed = _rows(
        _read(
            spark,
            broker,
            topic,
            startingOffsetsByTimestamp=json.dumps({"1": split_ms}),
            endingOffsets=json.dumps({"0": 1}),
        )
    )
    assert mixed == [(0, 0, "before-0-0"), (1, 2, "after-1-0")]
    # A time past every record: nothing from it on, everything before it.
    future = str(split_ms + 3_600_000)
    assert _rows(_read(spark, broker, topic, startingTimestamp=future)) == []
    assert len(_rows(_read(spark, broker, topic, endingTimestamp=future))) == 8


async def test_min_partitions_reads_a_large_partition_in_several_tasks(
    spark: SparkSession, broker: EmbeddedBroker, topic: str
) -> None:
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 9, 1: 1}, "m")
    frame = _read(spark, broker, topic, minPartitions="5")
    # Pieces of at most 10 / 5 = 2 records: partition 0's 9 in 5, partition 1's 1 in 1.
    assert frame.rdd.getNumPartitions() == 6
    rows = _rows(frame)
    assert rows == sorted(set(rows))
    assert len(rows) == 10
    assert all(isinstance(r.timestamp, datetime) for r in frame.collect())


async def test_an_unknown_partition_or_topic_fails_the_read_naming_it(
    spark: SparkSession, broker: EmbeddedBroker, topic: str
) -> None:
    await _create(broker, topic, 2)
    with pytest.raises(Exception, match="has no partition 7"):
        _read(spark, broker, topic, startingOffsets='{"7": 0}').collect()
    with pytest.raises(Exception, match="not found"):
        _read(spark, broker, f"{topic}-missing").collect()


async def test_assign_reads_only_the_partitions_named(
    spark: SparkSession, broker: EmbeddedBroker, topic: str
) -> None:
    await _create(broker, topic, 3)
    _produce(broker, topic, {0: 2, 1: 2, 2: 2}, "a")
    only = _rows(_read(spark, broker, topic, assign=json.dumps({topic: [2]})))
    assert only == [(2, 0, "a-2-0"), (2, 1, "a-2-1")]
    with pytest.raises(Exception, match="has no partition 5"):
        _read(spark, broker, topic, assign=json.dumps({topic: [5]})).collect()
