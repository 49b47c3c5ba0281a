"""What Kafka itself says, through an independent client (confluent-kafka's admin
API on librdkafka), for the tests to hold the probe's series against."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, TopicMetadata

from tests.conftest import wait_for


@dataclass(frozen=True)
class Described:
    """One partition as the controller's metadata has it (leader -1: none)."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def admin(bootstrap_servers: str, **security: str) -> AdminClient:
    """``security``: librdkafka's settings with ``_`` for ``.`` (sasl_username=...)."""
    settings = {name.replace("_", "."): value for name, value in security.items()}
    return AdminClient({"bootstrap.servers": bootstrap_servers, **settings})


def describe(bootstrap_servers: str, topic: str, **security: str) -> dict[int, Described]:
    """The topic's partitions. A broker learns of a topic a moment after the controller
    committed it, and the one asked is any of them: a topic it does not know yet is
    asked again, for up to 30 s, before it is taken for missing."""
    client = admin(bootstrap_servers, **security)

    def known() -> TopicMetadata | None:
        found = client.list_topics(topic, timeout=10).topics[topic]
        if found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        if found.error is not None:
            raise AssertionError(f"{topic}: {found.error}")
        return found

    found = wait_for(known, timeout=30, what=f"{topic} known to the brokers", every=0.2)
    return {
        p: Described(m.leader, tuple(m.replicas), tuple(m.isrs))
        for p, m in found.partitions.items()
    }


def leaders(partitions: dict[int, Described]) -> set[int]:
    return {d.leader for d in partitions.values() if d.leader >= 0}


def under_replicated(partitions: dict[int, Described]) -> int:
    return sum(1 for d in partitions.values() if len(d.isr) < len(d.replicas))


def under_min_isr(partitions: dict[int, Described], min_insync: int) -> int:
    return sum(1 for d in partitions.values() if len(d.isr) < min_insync)


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    replication: int = 3,
    *,
    assignment: list[list[int]] | None = None,
    config: dict[str, str] | None = None,
    **security: str,
) -> None:
    """A topic of ``partitions`` x ``replication``, or with these replica lists, and
    these settings of its own."""
    client = admin(bootstrap_servers, **security)  # held: a collected client fails its futures
    new = (
        NewTopic(topic, len(assignment), replica_assignment=assignment, config=config or {})
        if assignment
        else NewTopic(topic, partitions, replication, config=config or {})
    )
    futures = client.create_topics([new], operation_timeout=30)
    futures[topic].result(timeout=60)
    known_everywhere(bootstrap_servers, topic, **security)


def known_everywhere(
    bootstrap_servers: str, topic: str, timeout: float = 30, **security: str
) -> None:
    """Until every broker's metadata names the topic: created by the controller, it
    reaches each broker's metadata a moment apart, and a client that asks the last
    one is told "unknown topic" (a test's describe right after the creation was)."""
    unaware = set(bootstrap_servers.split(","))

    def known() -> bool:
        # A client bootstrapped with one address asks that broker first.
        for address in sorted(unaware):
            found = admin(address, **security).list_topics(topic, timeout=10).topics.get(topic)
            if found is not None and found.error is None:
                unaware.discard(address)
        return not unaware

    wait_for(known, timeout=timeout, what=f"{topic} known to every broker", every=0.1)


def delete_topic(bootstrap_servers: str, topic: str) -> None:
    client = admin(bootstrap_servers)
    client.delete_topics([topic], operation_timeout=30)[topic].result(60)


def end_offsets(bootstrap_servers: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "unused"})
    try:
        partitions = describe(bootstrap_servers, topic)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


@dataclass(frozen=True)
class GroupState:
    """A consumer group as its coordinator describes it."""

    coordinator: int
    state: str  # STABLE, PREPARING_REBALANCE, EMPTY, ...
    members: int
    protocol: str  # CLASSIC, CONSUMER (KIP-848)


def describe_group(bootstrap_servers: str, group: str) -> GroupState:
    client = admin(bootstrap_servers)  # held until the answer: a collected one never answers
    described = client.describe_consumer_groups([group])[group].result(timeout=10)
    return GroupState(
        described.coordinator.id,
        described.state.name,
        len(described.members),
        described.type.name,
    )


def committed_offsets(bootstrap_servers: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of each partition of the topic (-1001: none)."""
    request = ConsumerGroupTopicPartitions(group)
    client = admin(bootstrap_servers)  # held until the answer: a collected one never answers
    answer = client.list_consumer_group_offsets([request])[group].result(timeout=10)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.topic == topic}
