"""The sla_kafka streaming source on its own, against the real broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession

from probe.embedded import EmbeddedBroker
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource, admit


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
    spark: SparkSession, broker: EmbeddedBroker, topic: str, checkpoint: Path, **options: str
) -> tuple[list[int], list[Row]]:
    """Run the source with Trigger.AvailableNow from a checkpoint; return the size of
    each non-empty batch and every row read, as (partition, offset, value)."""
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


@pytest.mark.parametrize(
    ("start", "latest", "limit", "end"),
    [
        ({"0": 0, "1": 0}, {"0": 10, "1": 2}, None, {"0": 10, "1": 2}),
        ({"0": 0, "1": 0}, {"0": 10, "1": 2}, 6, {"0": 4, "1": 2}),
        ({"0": 0, "1": 0, "2": 0}, {"0": 5, "1": 5, "2": 5}, 3, {"0": 1, "1": 1, "2": 1}),
        ({"0": 3}, {"0": 3, "1": 4}, 100, {"0": 3, "1": 4}),
        ({"0": 0, "1": 0}, {"0": 100, "1": 100}, 1, {"0": 1, "1": 0}),
    ],
)
def test_admission_spreads_the_budget(
    start: dict[str, int], latest: dict[str, int], limit: int | None, end: dict[str, int]
) -> None:
    planned = admit(start, latest, limit)
    assert planned == end
    if limit is not None:
        assert sum(planned[p] - start.get(p, 0) for p in planned) <= limit


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
