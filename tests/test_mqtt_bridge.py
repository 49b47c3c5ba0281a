"""The bridge stage: canaries published to MQTT, carried into Kafka by a bridge, judged there.

The bridge here is the test's own: an MQTT subscriber that produces every message to
a Kafka topic on the embedded broker (keyed by MQTT topic, user properties as
headers), as an MQTT-to-Kafka connector does. The topic has fewer partitions than
there are shards, so the shard can only come from the canary itself.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import aiomqtt
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from probe.config import ProbeConfig, StageName, load
from probe.core.errors import RejectReason
from probe.core.judge import Fate, Finding, Outcome
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.metrics import ProbeMetrics
from probe.stages.target import TargetProbe
from tests.conftest import KafkaBrokers, until
from tests.mosquitto import Mosquitto


class FatesByShard:
    """A recorder counting fates per (stage, shard, outcome)."""

    def __init__(self) -> None:
        self.fates: Counter[tuple[str, int, str]] = Counter()

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        for finding in findings:
            if isinstance(finding, Fate):
                self.fates[stage, finding.key.partition, finding.outcome.value] += 1

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        raise AssertionError(f"unexpected invalid record at {stage}: {reason}")

    def of(self, stage: str) -> dict[tuple[int, str], int]:
        return {(s, o): n for (st, s, o), n in self.fates.items() if st == stage}


@asynccontextmanager
async def forwarding_bridge(
    mosquitto: Mosquitto, prefix: str, kafka: KafkaBrokers, topic: str, drop_shard: int = -1
) -> AsyncIterator[None]:
    """MQTT `<prefix>/+` -> Kafka `topic`, running until the block ends.

    ``drop_shard`` is a shard the bridge silently does not carry: a broken route.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        # Replicated as a bridge's topic is on a real cluster (min ISR 2 there).
        replicas = min(3, len((await admin.describe_cluster())["brokers"]))
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=replicas)])
    finally:
        await admin.close()
    # A bridge is another system: librdkafka (confluent-kafka), whose producer lets
    # the broker auto-create its topic (allow.auto.create.topics, true for producers),
    # as a bridge relying on that does when its Kafka comes back empty. The probe's
    # own clients never do (probe.transport.kafka_client).
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "acks": "all",
            # Dropped once it cannot be written within 2 s, as a bridge does while its
            # Kafka is away: it goes on with the next message.
            "message.timeout.ms": 2000,
            "linger.ms": 0,
        }
    )
    subscribed = asyncio.Event()

    async def carry() -> None:
        async with aiomqtt.Client(
            "127.0.0.1",
            mosquitto.port,
            identifier=f"test-bridge-{topic}",
            protocol=aiomqtt.ProtocolVersion.V5,
        ) as client:
            await client.subscribe(f"{prefix}/+", qos=1)
            subscribed.set()
            async for message in client.messages:
                if message.topic.value == f"{prefix}/{drop_shard}":
                    continue
                properties = getattr(message.properties, "UserProperty", [])
                assert isinstance(message.payload, bytes)
                producer.produce(
                    topic,
                    message.payload,
                    key=message.topic.value.encode(),
                    headers=[(name, value.encode()) for name, value in properties],
                )
                producer.poll(0)  # serves delivery reports; failed ones are dropped

    task = asyncio.create_task(carry())
    try:
        await asyncio.wait_for(subscribed.wait(), 10)
        yield
    finally:
        task.cancel()
        await asyncio.to_thread(producer.flush, 5)


def _config(mosquitto: Mosquitto, prefix: str, kafka: KafkaBrokers, topic: str) -> ProbeConfig:
    return load(
        overrides={
            "probe_id": "bridge-test",
            "mqtt.url": mosquitto.url,
            "mqtt.topic_prefix": prefix,
            "mqtt.bridge.topic": topic,
            "kafka.bootstrap_servers": kafka.bootstrap_servers,
            "kafka.fetch_max_wait": "20ms",
            "targets": "mqtt",
            "judge.freshness": "2s",
            "judge.loss_timeout": "2s",
        }
    )


async def _decide(probe: TargetProbe, within: float = 15.0) -> None:
    assert await probe.settle(within), "every canary's fate at every stage"


@pytest.fixture(params=["embedded", "apache-kafka"])
def bridge_kafka(request: pytest.FixtureRequest) -> KafkaBrokers:
    """The Kafka the bridge writes into: the embedded broker, Apache Kafka's cluster."""
    fixture = {"embedded": "broker", "apache-kafka": "kafka_cluster"}[request.param]
    found: KafkaBrokers = request.getfixturevalue(fixture)
    return found


async def test_bridge_stage_judges_canaries_carried_into_kafka(
    mosquitto: Mosquitto, bridge_kafka: KafkaBrokers, topic_prefix: str, topic: str
) -> None:
    broker = bridge_kafka
    fates = FatesByShard()
    config = _config(mosquitto, topic_prefix, broker, topic)
    assert config.mqtt.stages == (StageName.MQTT, StageName.BRIDGE)
    probe = TargetProbe(config, generate_key_ring(), [fates], kind="mqtt")
    async with forwarding_bridge(mosquitto, topic_prefix, broker, topic):
        await probe.connect(give_up_after=10)
        consumer = asyncio.create_task(probe.consume())
        try:
            assert probe.readiness()[0], probe.readiness()
            for _ in range(2):
                await probe.produce_round()
            await _decide(probe)
        finally:
            consumer.cancel()
            await probe.close()
    every_shard_delivered_twice = {(shard, "delivered"): 2 for shard in range(3)}
    assert fates.of(StageName.MQTT) == every_shard_delivered_twice
    # Three shards judged as three streams although the topic has two partitions.
    assert fates.of(StageName.BRIDGE) == every_shard_delivered_twice


async def test_a_bridge_that_drops_a_shard(
    mosquitto: Mosquitto, broker: EmbeddedBroker, topic_prefix: str, topic: str
) -> None:
    """The dropped shard's canaries are lost at the bridge stage and its staleness keeps
    rising; the other shards, and the MQTT stage, are unaffected."""
    fates = FatesByShard()
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    config = _config(mosquitto, topic_prefix, broker, topic)
    probe = TargetProbe(config, generate_key_ring(), [fates, metrics], kind="mqtt", metrics=metrics)

    def staleness(shard: int) -> float:
        value = registry.get_sample_value(
            "synthetic_sla_partition_staleness_seconds",
            {"target": "mqtt", "stage": StageName.BRIDGE, "partition": str(shard)},
        )
        assert value is not None
        return value

    async with forwarding_bridge(mosquitto, topic_prefix, broker, topic, drop_shard=1):
        await probe.connect(give_up_after=10)
        consumer = asyncio.create_task(probe.consume())
        try:
            for _ in range(2):
                await probe.produce_round()
            await _decide(probe)
            await probe.produce_round()
            await until(
                lambda: fates.of(StageName.BRIDGE).get((2, "delivered")) == 3, 10, "a third round"
            )
            fresh, silent = staleness(0), staleness(1)
            await asyncio.sleep(0.3)  # staleness is computed at scrape time: let time pass
            assert staleness(1) >= silent + 0.3
        finally:
            consumer.cancel()
            await probe.close()
    assert fates.of(StageName.BRIDGE) == {
        (0, "delivered"): 3,
        (1, "lost"): 2,
        (2, "delivered"): 3,
    }
    assert fates.of(StageName.MQTT) == {(shard, "delivered"): 3 for shard in range(3)}
    # The silent shard has seen nothing since the probe started, over 2 s ago.
    assert silent > 2.0
    assert fresh < 1.0
    lost = registry.get_sample_value(
        "synthetic_sla_canaries_total",
        {"target": "mqtt", "stage": StageName.BRIDGE, "outcome": Outcome.LOST.value},
    )
    assert lost == 2


async def test_a_missing_bridge_topic_is_unready_and_lost(
    mosquitto: Mosquitto, broker: EmbeddedBroker, topic_prefix: str, topic: str
) -> None:
    """No bridge has written anything: the target is unready naming the topic, the bridge
    stage judges its canaries lost, and the MQTT stage goes on delivering."""
    fates = FatesByShard()
    probe = TargetProbe(
        _config(mosquitto, topic_prefix, broker, topic), generate_key_ring(), [fates], kind="mqtt"
    )
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        await probe.produce_round()
        assert probe.readiness() == (False, f"bridge: topic {topic} not found")
        await _decide(probe)
    finally:
        consumer.cancel()
        await probe.close()
    assert fates.of(StageName.MQTT) == {(shard, "delivered"): 1 for shard in range(3)}
    assert fates.of(StageName.BRIDGE) == {(shard, "lost"): 1 for shard in range(3)}


async def test_a_bridge_topic_that_starts_over_is_read_from_its_new_beginning(
    mosquitto: Mosquitto, own_broker: EmbeddedBroker, topic_prefix: str, topic: str
) -> None:
    """The bridge's Kafka loses its storage and the bridge writes to a topic created
    anew: the bridge stage must read it at once, not wait at its old positions."""
    fates = FatesByShard()
    config = _config(mosquitto, topic_prefix, own_broker, topic)
    probe = TargetProbe(config, generate_key_ring(), [fates], kind="mqtt")
    async with forwarding_bridge(mosquitto, topic_prefix, own_broker, topic):
        await probe.connect(give_up_after=10)
        consumer = asyncio.create_task(probe.consume())
        try:
            for _ in range(50):  # 150 canaries: 75 records on each of two partitions
                await probe.produce_round()
            await _decide(probe)
            assert fates.of(StageName.BRIDGE) == {(shard, "delivered"): 50 for shard in range(3)}

            own_broker.stop()
            own_broker.start()
            before = Counter(fates.fates)

            async def bridged_again() -> bool:
                # Rounds until the bridge has put the topic back and carries again.
                await probe.produce_round()
                await probe.settle(0.5)
                return (fates.fates - before)[StageName.BRIDGE, 0, "delivered"] > 0

            await until(bridged_again, 20, "the bridge stage delivering again", every=0.5)
            # Canaries of the transition (produced while the broker was away or the
            # bridge re-created its topic) may be lost for real: their fates first.
            await _decide(probe)
            after_return = Counter(fates.fates)
            for _ in range(3):
                await probe.produce_round()
            await _decide(probe)
        finally:
            consumer.cancel()
            await probe.close()
    since = fates.fates - after_return
    assert {(shard, "delivered"): 3 for shard in range(3)}.items() <= {
        (shard, outcome): n for (stage, shard, outcome), n in since.items() if stage == "bridge"
    }.items()
    assert not [key for key in since if key[0] == "bridge" and key[2] == "lost"], since
