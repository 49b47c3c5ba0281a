"""The sla_kafka source's reader on Apache Kafka's three-broker cluster: records
deleted under a read (DeleteRecords, which the embedded broker lacks), SASL settings
as the sink writes them, and no topic ever created by the source, on brokers that
create one for any client that asks."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql.streaming.datasource import ReadAllAvailable

from probe.apache_kafka.cluster import KafkaCluster
from probe.config import load
from probe.core.errors import TransportError
from probe.core.offset_ranges import OffsetRange
from probe.spark.kafka_reads import read_ranges
from probe.spark.kafka_source import KafkaStreamReader, plan_batch
from probe.spark.topic_offsets import TopicGone, TopicOffsets
from probe.transport.kafka_settings import librdkafka_security
from tests.apache_kafka.kafka_admin import admin, create_topic

Row = tuple[int, int, bytes]


def _produce(servers: str, topic: str, per_partition: dict[int, int], **security: str) -> None:
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0, **security})
    for partition, count in per_partition.items():
        for index in range(count):
            producer.produce(topic, f"r-{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _read(options: dict[str, str], ranges: list[OffsetRange], timeout: float = 60) -> list[Row]:
    return [
        (partition, offset, value)
        for batch in read_ranges(options, ranges, timeout)
        for partition, offset, value in zip(
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    ]


def test_records_deleted_inside_a_range_are_skipped(kafka_cluster: KafkaCluster) -> None:
    """Ranges planned before DeleteRecords (as retention does) moved the logs' start:
    the read skips what is gone and ends at each range's end, at once."""
    servers = kafka_cluster.bootstrap_servers
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    create_topic(servers, topic, 2)
    _produce(servers, topic, {0: 10, 1: 4})
    planned = [OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 0, 4)]
    client = admin(servers)  # held: a collected client fails its futures
    deleted = client.delete_records(
        [TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 4)], operation_timeout=30
    )
    for done in deleted.values():
        done.result(timeout=60)
    started = time.monotonic()
    rows = _read({"bootstrap.servers": servers}, planned)
    assert time.monotonic() - started < 20
    assert rows == [(0, offset, f"r-0-{offset}".encode()) for offset in range(6, 10)]
    # The driver plans from the logs' new start.
    offsets = TopicOffsets({"bootstrap.servers": servers, "topic": topic})
    try:
        assert offsets.bounds() == ({"0": 6, "1": 4}, {"0": 10, "1": 4})
    finally:
        offsets.close()


class _StaleMetadata(TopicOffsets):
    """Metadata as a broker that has not yet heard of the topic's deletion gives it."""

    def partitions(self) -> list[int] | None:
        return [0, 1]


def _until_listed(offsets: TopicOffsets, ends: dict[str, int]) -> None:
    """Waits out a new topic's elections (its leaders answer "not leader" meanwhile)."""
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(TransportError):
            if offsets.ends(list(map(int, ends))) == ends:
                return
        assert time.monotonic() < deadline, f"{offsets.topic}: ends never listed as {ends}"
        time.sleep(0.2)


def _listing_once_gone(offsets: TopicOffsets) -> TopicGone:
    """What listing the ends raises once the leaders have applied a deletion (they
    list the ends still until then; any other answer fails the test)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            assert offsets.ends([0, 1]) == {"0": 0, "1": 0}
        except TopicGone as gone:
            return gone
        assert time.monotonic() < deadline, f"{offsets.topic} still listed after its deletion"
        time.sleep(0.2)


def test_a_listing_that_meets_a_deleted_topic_takes_it_for_gone(
    kafka_cluster: KafkaCluster,
) -> None:
    """A broker's metadata lags a deletion by moments: it names the partitions, then
    their leaders answer the listing with "unknown topic". The reader believes the
    listing: no start offsets, no new batch, "not found" for a batch read."""
    servers = kafka_cluster.bootstrap_servers
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    create_topic(servers, topic, 2)
    options = {"bootstrap.servers": servers, "topic": topic}
    reader = KafkaStreamReader(options)
    reader._offsets = stale = _StaleMetadata(options)
    try:
        _until_listed(stale, {"0": 0, "1": 0})  # the client knows the leaders
        deleting = admin(servers)  # held: a collected client fails its futures
        deleting.delete_topics([topic], operation_timeout=30)[topic].result(60)
        assert str(_listing_once_gone(stale)) == f"topic {topic} not found"
        assert reader.log_start("latest") == {}
        assert reader.latestOffset({"0": 3}, ReadAllAvailable()) == {"0": 3}
        assert reader.reportLatestOffset() is None
        with pytest.raises(ValueError, match="not found"):
            stale.bounds()
    finally:
        reader.stop()


# --- Brokers that create topics for any client asking ---------------------------------

USERS = {"probe": "probe-secret"}
# librdkafka's names, for the tests' own clients.
AS_PROBE = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanisms": "PLAIN",
    "sasl.username": "probe",
    "sasl.password": USERS["probe"],
}


@pytest.fixture(scope="module")
def creating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A cluster whose brokers create a topic a metadata request names (Kafka's own
    default, which the shared cluster turns off), its clients on SASL/PLAIN."""
    workdir = tmp_path_factory.mktemp("kafka-creating")
    with KafkaCluster(
        workdir=workdir,
        settings={"auto.create.topics.enable": "true"},
        plain_users=USERS,
    ) as cluster:
        yield cluster


def _exists(cluster: KafkaCluster, topic: str) -> bool:
    # A client that never asks for creation, listing every topic.
    listing = AdminClient(
        {"bootstrap.servers": cluster.bootstrap_servers, "allow.auto.create.topics": False}
        | AS_PROBE
    )
    return topic in listing.list_topics(timeout=30).topics


def _source_options(cluster: KafkaCluster, topic: str) -> dict[str, str]:
    """The source's options as the sink stage builds them from the probe's config
    (kafka.sasl in librdkafka's names)."""
    config = load(
        overrides={
            "kafka.bootstrap_servers": cluster.bootstrap_servers,
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": USERS["probe"],
        }
    )
    security = {f"kafka.{n}": v for n, v in librdkafka_security(config.kafka).items()}
    return {"bootstrap.servers": cluster.bootstrap_servers, "topic": topic, **security}


def test_the_brokers_do_create_a_topic_a_client_asks_for(creating: KafkaCluster) -> None:
    """The control: a librdkafka admin client with its defaults (a producer's, which
    allow creation) makes these brokers create a topic by asking for its metadata."""
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    asking = AdminClient({"bootstrap.servers": creating.bootstrap_servers} | AS_PROBE)
    asking.list_topics(topic, timeout=30)
    deadline = time.monotonic() + 30
    while not _exists(creating, topic):
        assert time.monotonic() < deadline, f"{topic} was not auto-created"
        time.sleep(0.5)


def test_the_source_reads_over_sasl_and_never_creates_the_topic_it_lost(
    creating: KafkaCluster,
) -> None:
    """Read over SASL with the sink's options; then, the topic deleted, every client
    of the source asks about it (the driver's plans, a task's read, a batch read's
    listing, the stream's start) and none brings it back."""
    topic = f"sla-{uuid.uuid4().hex[:10]}"
    servers = creating.bootstrap_servers
    create_topic(servers, topic, 2, **{k.replace(".", "_"): v for k, v in AS_PROBE.items()})
    _produce(servers, topic, {0: 3, 1: 1}, **AS_PROBE)
    options = _source_options(creating, topic)
    reader = KafkaStreamReader(options)
    try:
        start = reader.latestOffset({}, ReadAllAvailable())
        assert start == {"0": 3, "1": 1}
        ranges = [OffsetRange(topic, int(p), 0, end) for p, end in start.items()]
        assert sorted(_read(options, ranges)) == [
            (0, 0, b"r-0-0"), (0, 1, b"r-0-1"), (0, 2, b"r-0-2"), (1, 0, b"r-1-0"),
        ]  # fmt: skip
        delete_topic_as_probe(creating, topic)
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        assert reader.log_start("latest") == {}
        assert _read(options, ranges, timeout=60) == []
        with pytest.raises(ValueError, match="not found"):
            plan_batch(options)
    finally:
        reader.stop()
    time.sleep(2)  # what a broker creates shows in its metadata within moments
    assert not _exists(creating, topic)


def delete_topic_as_probe(cluster: KafkaCluster, topic: str) -> None:
    deleting = AdminClient({"bootstrap.servers": cluster.bootstrap_servers} | AS_PROBE)
    deleting.delete_topics([topic], operation_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 30
    while _exists(cluster, topic):
        assert time.monotonic() < deadline, f"{topic} still listed after its deletion"
        time.sleep(0.5)
