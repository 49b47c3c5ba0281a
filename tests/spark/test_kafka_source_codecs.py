"""The sla_kafka source reads compressed batches: gzip, snappy, lz4 and zstd.

Written by librdkafka (confluent-kafka), one codec per partition, onto the real
embedded broker (which keeps the batches as written), and read by the source's
librdkafka consumers on Spark's executors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql import DataFrame, SparkSession

from probe.core.errors import TransportError
from probe.core.offset_ranges import OffsetRange
from probe.embedded import EmbeddedBroker
from probe.spark.kafka_reads import RangeReads, read_ranges
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


BATCHES, PER_BATCH = 3, 4


async def test_reads_start_and_end_inside_compressed_batches(
    broker: EmbeddedBroker, topic: str
) -> None:
    """Ranges that begin and end in the middle of compressed batches of several
    records: exactly the records of the range, in order, whatever the codec."""
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
                "linger.ms": 1000,
            }
        )
        for batch in range(BATCHES):  # a flush per batch: PER_BATCH records in each
            for index in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
                producer.produce(topic, _value(codec, index), partition=partition)
            assert producer.flush(10) == 0
    # From the middle of the first batch to the middle of the last.
    start, end = PER_BATCH // 2, BATCHES * PER_BATCH - PER_BATCH // 2
    ranges = [OffsetRange(topic, p, start, end) for p in range(len(CODECS))]
    read = [
        (p, o, v)
        for batch in read_ranges({"bootstrap.servers": broker.bootstrap_servers}, ranges, 30)
        for p, o, v in zip(
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    ]
    assert sorted(read) == [
        (partition, index, _value(codec, index))
        for partition, codec in enumerate(CODECS)
        for index in range(start, end)
    ]
    for partition in range(len(CODECS)):
        offsets = [o for p, o, _ in read if p == partition]
        assert offsets == sorted(offsets)


def test_a_batch_whose_codec_the_client_lacks_fails_the_read_naming_it() -> None:
    """Fetching it again would fail the same way: the task fails on the first such
    error, naming the codec, the partition and what to install, instead of waiting
    until its read timeout. The error is librdkafka's own, as its consumer hands it
    over for a batch whose codec it was built without (the wheel's librdkafka has
    every codec, so no broker can make it say this)."""
    reads = RangeReads.of([OffsetRange("orders", 2, 0, 10)], now=0.0)
    lacking = KafkaError(
        KafkaError._NOT_IMPLEMENTED,
        "Decompression (codec 0x3) of message at 5 of 812 bytes failed: Local: Not implemented",
    )
    with pytest.raises(TransportError) as failure:
        reads.take([Message(topic="orders", partition=2, offset=5, error=lacking)], now=1.0)
    message = str(failure.value)
    assert message.startswith("cannot read topic orders, 1 partition 2: records compressed ")
    assert "with lz4, which this librdkafka cannot decompress (Decompression (codec 0x3)" in message
    assert "synthetic-sla-probe[spark]" in message
