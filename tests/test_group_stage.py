"""The group stage on the embedded broker (Tansu): what it supports of the group
protocol (find the coordinator, join and sync with one member, commit, fetch the
committed offsets), the reader's positions through a lost commit, and its config."""

from __future__ import annotations

import asyncio
import doctest
import subprocess
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as LibrdkafkaPartition
from prometheus_client import CollectorRegistry

from probe.config import GroupConfig, KafkaConfig, load
from probe.core.errors import CommitFailure, ConfigError
from probe.embedded import EmbeddedBroker
from probe.metrics.group import GroupMetrics
from probe.transport import Arrival, kafka_group_consumer
from probe.transport.kafka_group import KafkaGroupReader
from tests.conftest import SLA_PROBE, target_report


class Recorded:
    """A GroupRecorder that keeps what it was told."""

    def __init__(self) -> None:
        self.commits: list[float] = []
        self.failures: list[CommitFailure] = []
        self.rebalances: list[tuple[float, int]] = []
        self.stable: list[bool] = []
        self.coordinators: list[int | None] = []
        self.first_records: list[float] = []
        self.refetched_records = 0

    def committed(self, target: str, seconds: float) -> None:
        self.commits.append(seconds)

    def commit_failed(self, target: str, reason: CommitFailure) -> None:
        self.failures.append(reason)

    def rebalanced(self, target: str, seconds: float, partitions: int) -> None:
        self.rebalances.append((seconds, partitions))

    def set_stable(self, target: str, stable: bool) -> None:
        self.stable.append(stable)

    def coordinated_by(self, target: str, broker: int | None) -> None:
        self.coordinators.append(broker)

    def first_record_after(self, target: str, seconds: float) -> None:
        self.first_records.append(seconds)

    def refetched(self, target: str, records: int) -> None:
        self.refetched_records += records


def test_once_judges_the_group_stage_on_the_embedded_broker() -> None:
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--json", "--stages", "consumer,group"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    delivered = stages["consumer"]["outcomes"]["delivered"]
    assert stages["group"]["outcomes"]["delivered"] == delivered > 0
    assert stages["group"]["outcomes"]["lost"] == 0


async def _read(reader: KafkaGroupReader, count: int) -> list[Arrival]:
    arrivals = reader.arrivals()
    return [await anext(arrivals) for _ in range(count)]


async def test_a_member_commits_what_it_read_and_never_hands_out_a_record_twice(
    broker: EmbeddedBroker, topic: str
) -> None:
    config = load(overrides={"kafka.bootstrap_servers": broker.bootstrap_servers,
                             "kafka.topic": topic, "kafka.send_timeout": "10s"}).kafka  # fmt: skip
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before", partition=0)
        recorded = Recorded()
        reader = KafkaGroupReader(config, f"{topic}-group", target="t", recorder=recorded)
        await reader.start()
        try:
            partitions = await reader.partitions()
            await reader.cover(partitions)
            assert recorded.rebalances[-1][1] == len(partitions)
            assert recorded.stable[-1] is True
            for n in range(3):
                await producer.send_and_wait(topic, b"canary %d" % n, partition=0)
            # Written before the first assignment: not read (the reset is to the end).
            got = await asyncio.wait_for(_read(reader, 3), timeout=30)
            assert [a.payload for a in got] == [b"canary 0", b"canary 1", b"canary 2"]
            assert len(recorded.first_records) == 1
            async with asyncio.timeout(20):
                while not recorded.commits:  # noqa: ASYNC110 - a recorder, no event
                    await asyncio.sleep(0.05)
            # The group's committed offset falls behind what was handed out (a commit
            # lost before a rebalance): the records come again, and are not handed out.
            reader._consumer.seek(TopicPartition(topic, 0), got[0].offset or 0)
            await producer.send_and_wait(topic, b"canary 3", partition=0)
            (after,) = await asyncio.wait_for(_read(reader, 1), timeout=30)
            assert after.payload == b"canary 3"
            assert recorded.refetched_records == 3
            assert recorded.failures == []
        finally:
            await reader.close()
        # The next member of the group starts where the last one committed.
        await producer.send_and_wait(topic, b"canary 4", partition=0)
        successor = KafkaGroupReader(config, f"{topic}-group", target="t")
        await successor.start()
        try:
            await successor.cover(await successor.partitions())
            (first,) = await asyncio.wait_for(_read(successor, 1), timeout=30)
            assert first.payload == b"canary 4"
        finally:
            await successor.close()
    finally:
        await producer.stop()


def test_the_group_id_is_one_per_probe_unless_given() -> None:
    assert load(overrides={"probe_id": "p1"}).group.group_id("p1") == "synthetic-sla-probe.p1"
    assert GroupConfig(id="payments-canary").group_id("p1") == "payments-canary"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"stages": "consumer,groups"}, "stages.1"),
        ({"group.commit_latency_objective": "1"}, "group.commit_latency_objective"),
        ({"group.commit_latency_threshold": "0"}, "group.commit_latency_threshold"),
        ({"group.id": ""}, "group.id"),
    ],
)
def test_bad_group_settings_name_their_field(overrides: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides)
    assert caught.value.field == field


def test_a_bad_stage_exits_2_naming_the_stages(tmp_path: Path) -> None:
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--stages", "consumer,groups"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "stages" in done.stderr, done.stderr
    assert "'group'" in done.stderr, done.stderr


def test_the_consumer_protocol_stage_on_a_broker_without_it_says_what_it_needs() -> None:
    # The embedded broker answers no ConsumerGroupHeartbeat, and librdkafka says nothing
    # of it: the member only never gets an assignment. The report says why it may be.
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--json", "--stages", "consumer,group_consumer",
         "--rounds", "1"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    assert stages["consumer"]["outcomes"]["delivered"] > 0
    assert stages["group_consumer"]["outcomes"]["delivered"] == 0
    assert "the consumer group protocol, KIP-848, which needs Apache Kafka 4.0" in done.stdout


def test_the_consumer_protocol_readers_pure_parts() -> None:
    # The commit-failure reasons of librdkafka's codes, and the coordinator read off
    # librdkafka's statistics (its doctests), plus statistics that name none.
    assert doctest.testmod(kafka_group_consumer).failed == 0
    assert kafka_group_consumer.coordinator_of({}) is None
    logical_only = {"brokers": {"GroupCoordinator": {"nodeid": -1, "nodename": "h:9"}}}
    assert kafka_group_consumer.coordinator_of(logical_only) is None


def test_the_consumer_protocol_member_counts_what_its_client_reports_by_name() -> None:
    # librdkafka's errors (its error callback, a consumed error) and an assignment lost
    # without a revocation (the member fenced: its heartbeats failed) are counted under
    # the member's stage by their names, on the probe's registry.
    registry = CollectorRegistry()
    metrics = GroupMetrics(registry, commit_buckets=(0.5,))
    reader = kafka_group_consumer.KafkaConsumerProtocolReader(
        KafkaConfig(bootstrap_servers="127.0.0.1:9", topic="canaries"),
        "g",
        target="kafka",
        recorder=metrics.of("group_consumer"),
    )

    class Unassigning:
        def incremental_unassign(self, partitions: list[LibrdkafkaPartition]) -> None:
            self.unassigned = partitions

    consumer = Unassigning()
    reader._client_error(KafkaError(KafkaError._TRANSPORT))
    reader._client_error(KafkaError(KafkaError.FENCED_MEMBER_EPOCH))
    reader._on_lost(consumer, [LibrdkafkaPartition("canaries", 0)])  # type: ignore[arg-type]
    assert [tp.partition for tp in consumer.unassigned] == [0]
    counted = {
        dict(sample.labels)["error"]: sample.value
        for family in registry.collect()
        if family.name == "synthetic_sla_group_member_errors"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert counted == {"transport": 1, "fenced_member_epoch": 1, "assignment_lost": 1}
