"""The transport map: one entry per kind of target, each laid out from the config; and
the few reasons the Kafka transport gives a failed send."""

from __future__ import annotations

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NotLeaderForPartitionError

from probe.config import StageName, TargetKind, load
from probe.transport import TRANSPORTS
from probe.transport.kafka import produce_failure_reason


def test_the_map_has_a_transport_for_every_kind_the_config_knows() -> None:
    assert set(TRANSPORTS) == set(TargetKind)


def test_layouts_follow_the_config() -> None:
    config = load(
        overrides={
            "kafka.bootstrap_servers": "kafka:9092",
            "mqtt.url": "mqtt://broker",
            "mqtt.bridge.topic": "bridged",
            "mqtt.max_send_rate": 100,
            "kafka.max_send_rate": 2000,
            "targets": "kafka,mqtt",
            "mqtt.target": "mqtt-target",
        }
    )
    kafka = TRANSPORTS[TargetKind.KAFKA].layout(config)
    assert (kafka.label, kafka.stages, kafka.spacing) == ("kafka", (StageName.CONSUMER,), 0.0005)
    assert kafka.routed(StageName.CONSUMER)
    mqtt = TRANSPORTS[TargetKind.MQTT].layout(config)
    assert mqtt.label == "mqtt-target"
    assert mqtt.stages == (StageName.MQTT, StageName.BRIDGE)
    assert mqtt.spacing == 0.01
    assert mqtt.routed(StageName.MQTT)
    assert not mqtt.routed(StageName.BRIDGE)  # the bridge puts a shard where it likes
    assert set(mqtt.readers) == {StageName.BRIDGE}


def test_kafka_rounds_are_paced_unless_told_not_to() -> None:
    paced = load(overrides={"kafka.bootstrap_servers": "kafka:9092"})
    assert TRANSPORTS[TargetKind.KAFKA].layout(paced).spacing == 0.001  # 1,000/s
    burst = load(overrides={"kafka.bootstrap_servers": "kafka:9092", "kafka.max_send_rate": 0})
    assert TRANSPORTS[TargetKind.KAFKA].layout(burst).spacing == 0.0


def test_the_group_stage_reads_the_canary_topic_with_a_reader_of_its_own() -> None:
    config = load(overrides={"kafka.bootstrap_servers": "kafka:9092", "stages": "consumer,group"})
    kafka = TRANSPORTS[TargetKind.KAFKA].layout(config)
    assert kafka.stages == (StageName.CONSUMER, StageName.GROUP)
    assert set(kafka.readers) == {StageName.GROUP}
    # Its reader reads the canary topic itself: a canary must be on the partition it names.
    assert kafka.routed(StageName.GROUP)


def test_produce_failures_map_to_few_reasons() -> None:
    assert produce_failure_reason(KafkaTimeoutError()) == "timeout"
    assert produce_failure_reason(TimeoutError()) == "timeout"
    assert produce_failure_reason(KafkaConnectionError()) == "broker_unavailable"
    assert produce_failure_reason(NotLeaderForPartitionError()) == "not_leader"
    assert produce_failure_reason(RuntimeError()) == "other"
