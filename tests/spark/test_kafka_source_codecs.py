"""The sla_kafka source reads compressed batches: gzip, snappy, lz4 and zstd.

Written by librdkafka (confluent-kafka), one codec per partition, onto the real
embedded broker, and read by the source's kafka-python consumers on Spark's executors.
"""

from __future__ import annotations

from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession

from probe.embedded import EmbeddedBroker
from probe.spark.kafka_source import SOURCE_NAME, KafkaStreamSource

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
