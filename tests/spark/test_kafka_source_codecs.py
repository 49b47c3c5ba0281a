"""The sla_kafka source reads compressed batches: gzip, snappy, lz4 and zstd.

Written by librdkafka (confluent-kafka), one codec per partition, onto the real
embedded broker, and read by the source's kafka-python consumers on Spark's executors.
"""

from __future__ import annotations

import time
from pathlib import Path

import kafka.codec
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer
from kafka.errors import UnsupportedCodecError
from pyspark.sql import DataFrame, SparkSession

from probe.embedded import EmbeddedBroker
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource, OffsetRange, read_ranges

CODECS = ["gzip", "snappy", "lz4", "zstd"]
PER_PARTITION = 3


def _value(codec: str, index: int) -> bytes:
    # Compressible, so librdkafka does not fall back to an uncompressed batch.
    return f"{codec}-{index}-".encode() + bytes(500)


async def _produce_one_codec_per_partition(broker: EmbeddedBroker, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, len(CODECS), 1)])
    finally:
        await admin.close()
    for partition, codec in enumerate(CODECS):
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "compression.type": codec,
                "linger.ms": 0,
            }
        )
        # One record a batch: the embedded broker lists end offsets right only for
        # single-record batches.
        for index in range(PER_PARTITION):
            producer.produce(topic, _value(codec, index), partition=partition)
            assert producer.flush(10) == 0


async def test_every_codec_is_read(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    await _produce_one_codec_per_partition(broker, topic)
    spark.dataSource.register(KafkaStreamSource)
    rows: list[tuple[int, int, bytes]] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows.extend((r.partition, r.offset, bytes(r.value)) for r in batch.collect())

    query = (
        spark.readStream.format(SOURCE_NAME)
        .option("bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None
    assert sorted(rows) == [
        (partition, index, _value(codec, index))
        for partition, codec in enumerate(CODECS)
        for index in range(PER_PARTITION)
    ]


async def test_a_batch_without_its_codec_fails_the_read_at_once(
    broker: EmbeddedBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fetching it again would fail the same way: the task fails on the first fetch,
    naming the codec, the partition and what to install, instead of retrying until
    its read timeout."""
    await _produce_one_codec_per_partition(broker, topic)
    monkeypatch.setattr(kafka.codec, "has_lz4", lambda: False)
    lz4_partition = CODECS.index("lz4")
    started = time.monotonic()
    with pytest.raises(UnsupportedCodecError) as failure:
        list(
            read_ranges(
                {"bootstrap.servers": broker.bootstrap_servers},
                [OffsetRange(topic, lz4_partition, 0, PER_PARTITION)],
                timeout=30,
            )
        )
    assert time.monotonic() - started < 10
    message = str(failure.value)
    assert f"cannot read topic {topic}, 1 partition {lz4_partition}: " in message
    assert "lz4 compression codec not found" in message
    assert "synthetic-sla-probe[spark]" in message
