"""The Kafka target against the real embedded broker: rounds, coverage, outcomes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import UnknownTopicOrPartitionError
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from probe.config import ProbeConfig, StageName, load
from probe.core.errors import RejectReason
from probe.core.judge import Fate, Finding, Outcome
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.metrics import ProbeMetrics
from probe.services.report import Tally
from probe.stages.target import TargetProbe
from probe.transport import kafka as kafka_transport
from probe.transport.kafka_client import connection_options
from tests.conftest import until


def _config(broker: EmbeddedBroker, topic: str, **extra: object) -> ProbeConfig:
    return load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.fetch_max_wait": "20ms",
            "judge.loss_timeout": "10s",
            **extra,
        }
    )


async def test_every_partition_is_delivered(broker: EmbeddedBroker, topic: str) -> None:
    tally = Tally("kafka")
    probe = TargetProbe(
        _config(broker, topic, **{"kafka.partitions": 5}), generate_key_ring(), [tally]
    )
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        assert probe.partitions == [0, 1, 2, 3, 4]
        for _ in range(2):
            await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
    finally:
        consumer.cancel()
        await probe.close()
    outcomes = tally.stages[StageName.CONSUMER].outcomes
    assert outcomes == {Outcome.DELIVERED.value: 10}
    # Each partition's stream saw its own canaries: staleness is tracked per partition.
    assert sorted(key.partition for key in probe.judge.streams()) == [0, 1, 2, 3, 4]


@dataclass
class Findings:
    """A recorder keeping every finding, to assert per partition."""

    fates: list[Fate] = field(default_factory=list)

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        self.fates.extend(f for f in findings if isinstance(f, Fate))

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        raise AssertionError(f"unexpected invalid record: {reason}")

    def delivered_on(self, partition: int) -> int:
        return sum(
            1 for f in self.fates if f.key.partition == partition and f.outcome is Outcome.DELIVERED
        )


async def test_added_partitions_are_covered(broker: EmbeddedBroker, topic: str) -> None:
    """Partitions that appear later get canaries, read from their beginning.

    The embedded broker has no CreatePartitions, so the topic is recreated with more
    partitions; the two new partitions must be covered from their first canary on.
    """
    findings = Findings()
    probe = TargetProbe(
        _config(broker, topic, **{"kafka.partitions": 2}), generate_key_ring(), [findings]
    )
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "first round")
        assert probe.partitions == [0, 1]
        await admin.delete_topics([topic])
        await admin.create_topics([NewTopic(topic, 4, 1)])
        for _ in range(2):
            await probe.produce_round()
        assert probe.partitions == [0, 1, 2, 3]
        await until(
            lambda: findings.delivered_on(2) == 2 and findings.delivered_on(3) == 2,
            10,
            "both canaries on each new partition",
        )
    finally:
        await admin.close()
        consumer.cancel()
        await probe.close()
    assert sorted(key.partition for key in probe.judge.streams()) == [0, 1, 2, 3]


async def test_loss_is_detected_at_the_tail(broker: EmbeddedBroker, topic: str) -> None:
    """A canary acknowledged and then never read back is lost after the loss timeout."""
    tally = Tally("kafka")
    config = _config(
        broker,
        topic,
        **{"kafka.partitions": 1, "judge.freshness": "1s", "judge.loss_timeout": "1s"},
    )
    probe = TargetProbe(config, generate_key_ring(), [tally])
    await probe.connect(give_up_after=10)
    # No consumer task: the canary is acknowledged but nothing reads it.
    try:
        await probe.produce_round()
        assert probe.judge.pending_count() == 1
        assert await probe.settle(5), "the loss timeout"
    finally:
        await probe.close()
    assert tally.stages[StageName.CONSUMER].outcomes == {Outcome.LOST.value: 1}


async def test_a_broker_that_lost_its_data_is_read_from_the_new_log_at_once(
    own_broker: EmbeddedBroker, topic: str
) -> None:
    """The log grew, the broker restarts empty and the probe re-creates the topic: the
    reader must not wait at its old positions for the new log to get there."""
    findings = Findings()
    probe = TargetProbe(_config(own_broker, topic), generate_key_ring(), [findings])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        for _ in range(50):
            await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 20, "the first 150 fates")
        assert {f.outcome for f in findings.fates} == {Outcome.DELIVERED}
        assert all(findings.delivered_on(p) == 50 for p in probe.partitions)

        own_broker.stop()
        own_broker.start()
        # The probe's own clients ask about the topic as they send (the producer) or
        # read (each lane): the first to ask, before the round's refresh, must not have
        # the broker auto-create it, hiding that its log started over.
        await _ask_about(_config(own_broker, topic), topic)
        before = len(findings.fates)
        # The interval of the run this stands for is one second: two rounds a second
        # apart after the broker is back, and the second one must be delivered.
        for _ in range(2):
            started = time.monotonic()
            await probe.produce_round()
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        await until(
            lambda: sum(f.outcome is Outcome.DELIVERED for f in findings.fates[before:]) >= 3,
            within=2,
            what="delivery within two intervals of the broker's return",
        )
        for _ in range(3):
            await probe.produce_round()
        # Whatever has not arrived within a few seconds (they take milliseconds) is
        # declared lost by an expiry past every loss deadline.
        await probe.settle(5)  # arrivals take milliseconds; lost ones stay pending
        probe.expire(time.time_ns() + 11 * 10**9)
        after = findings.fates[before:]
        assert not [f for f in after if f.outcome is Outcome.LOST], after
    finally:
        consumer.cancel()
        await probe.close()


async def _ask_about(config: ProbeConfig, topic: str) -> None:
    # A producer as the probe makes its own (the transport's factory).
    asking = kafka_transport.KafkaTransport._new_producer(
        connection_options(config.kafka), idempotent=False
    )
    await asking.start()
    try:
        # aiokafka asks again until its request timeout; a second is plenty for an
        # auto-creating broker to answer with the topic.
        with pytest.raises((UnknownTopicOrPartitionError, TimeoutError)):
            await asyncio.wait_for(asking.partitions_for(topic), 1)
    finally:
        await asking.stop()


async def test_every_tick_of_an_outage_is_a_round_and_every_canary_has_a_fate(
    own_broker: EmbeddedBroker, topic: str
) -> None:
    """With the interval shorter than the send timeout, a round blocked on a broker
    that is gone must not swallow the ticks after it: the SLI would under-weight the
    outage by as many ticks."""
    interval, send_timeout, outage = 1.0, 3.0, 8.0
    tally = Tally("kafka")
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    config = _config(own_broker, topic, **{"kafka.send_timeout": f"{send_timeout}s"})
    probe = TargetProbe(config, generate_key_ring(), [tally, metrics], metrics=metrics)
    await probe.connect(give_up_after=10)
    stop = asyncio.Event()
    consumer = asyncio.create_task(probe.consume())
    rounds = asyncio.create_task(probe.run_rounds(interval, stop))
    tally.declare_stage(StageName.CONSUMER)
    outcomes = tally.stages[StageName.CONSUMER].outcomes
    try:
        await until(lambda: outcomes[Outcome.DELIVERED.value] >= 6, 10, "delivery")
        own_broker.stop()
        stopped = time.monotonic()
        await asyncio.sleep(outage)  # the fault's duration, not a wait for a condition
        own_broker.start()
        restarted = time.monotonic()
        delivered = outcomes[Outcome.DELIVERED.value]
        await until(
            lambda: outcomes[Outcome.DELIVERED.value] >= delivered + 6, 30, "delivery again"
        )
    finally:
        stop.set()
        await rounds
        consumer.cancel()
        await probe.close()
    probe.expire(time.time_ns() + 11 * 10**9)
    ticks_in_outage = int((restarted - stopped) / interval)
    failed = outcomes[Outcome.PRODUCE_FAILED.value] + outcomes[Outcome.LOST.value]
    assert failed >= 3 * (ticks_in_outage - 1), (failed, ticks_in_outage, dict(outcomes))
    # One canary per partition per round, and each one has exactly one fate (but those
    # of a round the stop may have cancelled in flight).
    started = registry.get_sample_value("synthetic_sla_rounds_total", {"target": "kafka"})
    assert started is not None
    assert 3 * (started - 1) <= sum(outcomes.values()) <= 3 * started, (dict(outcomes), started)


async def test_one_round_per_tick_when_the_loop_wakes_before_the_wall_clock(
    broker: EmbeddedBroker, topic: str
) -> None:
    """The event loop's timers may fire a little before the wall clock reaches the
    tick they were set for: here the probe's wall clock runs 1 % slower than the
    loop's, so every wait ends just short of its tick. Each tick must still start
    exactly one round."""
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    config = _config(broker, topic)
    base = time.time_ns()
    probe = TargetProbe(
        config, generate_key_ring(), [metrics], metrics=metrics,
        clock_ns=lambda: base + (time.time_ns() - base) * 99 // 100,
    )  # fmt: skip
    await probe.connect(give_up_after=10)
    stop = asyncio.Event()
    interval = 0.25
    rounds = asyncio.create_task(probe.run_rounds(interval, stop))

    def started() -> float:
        return registry.get_sample_value("synthetic_sla_rounds_total", {"target": "kafka"}) or 0

    try:
        await until(lambda: started() >= 1, 10, "a first round")
        first, since = started(), time.monotonic()
        await until(lambda: started() >= first + 8, 10, "eight more rounds")
        elapsed = time.monotonic() - since
    finally:
        stop.set()
        await rounds
        await probe.close()
    # Eight ticks take at least seven intervals; two rounds per tick would take four.
    assert elapsed >= 7 * interval, elapsed


async def test_a_large_topic_is_read_where_canaries_are_on_their_way(
    broker: EmbeddedBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above FOLLOW_ABOVE partitions the reader follows the writer: every canary is
    still delivered, and a record nobody expects is read once the probe writes to
    its partition again (the next round), not lost and not counted twice."""
    monkeypatch.setattr(kafka_transport, "FOLLOW_ABOVE", 0)
    tally = Tally("kafka")
    probe = TargetProbe(
        _config(broker, topic, **{"kafka.partitions": 6}), generate_key_ring(), [tally]
    )
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        for _ in range(3):
            await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
        # Nothing on its way: the reader fetches nothing until the next round (its
        # consumers keep their partitions, paused).
        transport = probe.transport
        assert isinstance(transport, kafka_transport.KafkaTransport)

        def idle() -> bool:
            consumers = [lane.consumer for lane in transport._lanes.values()]
            return all(c.paused() == c.assignment() for c in consumers)

        await until(idle, 10, "every lane paused")
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce(topic, b"not a canary", partition=4)
        assert producer.flush(10) == 0
        await probe.produce_round()
        stage = tally.stages[StageName.CONSUMER]
        await until(lambda: sum(stage.invalid.values()) == 1, 10, "the stray record read")
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
    finally:
        consumer.cancel()
        await probe.close()
    assert stage.outcomes == {Outcome.DELIVERED.value: 24}
    assert sum(stage.invalid.values()) == 1


async def test_the_real_brokers_metadata_becomes_per_broker_series(
    broker: EmbeddedBroker, topic: str
) -> None:
    """One broker: it leads every canary partition, every fate is counted against it,
    and nothing is under-replicated or offline."""
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    probe = TargetProbe(
        _config(broker, topic, **{"kafka.partitions": 4}),
        generate_key_ring(),
        [metrics],
        metrics=metrics,
    )
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        for _ in range(2):
            await probe.produce_round()
        await until(lambda: probe.judge.pending_count() == 0, 10, "every fate")
    finally:
        consumer.cancel()
        await probe.close()
    assert probe.replicas is not None
    (node,) = probe.replicas.brokers
    assert {probe.replicas.leader_of(p) for p in range(4)} == {node}

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"target": "kafka", **labels})

    assert value("synthetic_sla_brokers") == 1
    assert value("synthetic_sla_broker_leader_partitions", broker=str(node)) == 4
    assert value("synthetic_sla_brokers_without_canary_leader") == 0
    assert value("synthetic_sla_partitions_under_replicated") == 0
    assert value("synthetic_sla_partitions_offline") == 0
    assert value("synthetic_sla_partitions_under_min_isr") == 0
    delivered = {"stage": "consumer", "broker": str(node), "outcome": "delivered"}
    assert value("synthetic_sla_broker_canaries_total", **delivered) == 8
    latency = {"stage": "consumer", "broker": str(node)}
    assert value("synthetic_sla_broker_e2e_latency_seconds_count", **latency) == 8
    # The broker's address as its metadata advertises it, and who leads each partition.
    assert probe.replicas.addresses == {node: broker.bootstrap_servers}
    address = {"broker": str(node), "address": broker.bootstrap_servers, "listed": "true"}
    assert value("synthetic_sla_broker_info", **address) == 1
    for partition in range(4):
        assert (
            value("synthetic_sla_partition_leader", partition=str(partition), broker=str(node)) == 1
        )
    assert value("synthetic_sla_broker_replicas_out_of_sync", broker=str(node)) == 0
