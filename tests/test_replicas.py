"""Replica health: leaders, replicas and ISR counted, from the shape the clients hold.

Table-driven over hand-built topics, and over recorded 3-broker metadata in the shape
aiokafka's ClusterMetadata holds it (tests/data/metadata_3_brokers.json); the real
broker's metadata is mapped in tests/test_target.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiokafka.structs import PartitionMetadata

from probe.replicas import PartitionReplicas, TopicReplicas, replica_health, topic_replicas

RECORDED = Path(__file__).parent / "data" / "metadata_3_brokers.json"


def recorded_topic() -> TopicReplicas:
    data = json.loads(RECORDED.read_text())
    records = [PartitionMetadata(**p) for p in data["partitions"]]
    return topic_replicas(records, data["brokers"], data["min_insync"])


def _p(partition: int, leader: int | None, replicas: str, isr: str) -> PartitionReplicas:
    return PartitionReplicas(
        partition, leader, tuple(int(b) for b in replicas), tuple(int(b) for b in isr)
    )


@pytest.mark.parametrize(
    ("name", "topic", "expected"),
    [
        (
            "healthy, one broker",
            TopicReplicas({0: _p(0, 1, "1", "1"), 1: _p(1, 1, "1", "1")}, frozenset({1}), 1),
            (0, 0, 0, {1: 2}, ()),
        ),
        (
            "a follower out of sync",
            TopicReplicas({0: _p(0, 1, "12", "1")}, frozenset({1, 2}), 1),
            (1, 0, 0, {1: 1, 2: 0}, (2,)),
        ),
        (
            "below min ISR",
            TopicReplicas(
                {0: _p(0, 1, "123", "1"), 1: _p(1, 2, "231", "23")}, frozenset({1, 2, 3}), 2
            ),
            (2, 0, 1, {1: 1, 2: 1, 3: 0}, (3,)),
        ),
        (
            "min ISR unknown: nothing counted under it",
            TopicReplicas({0: _p(0, 1, "123", "1")}, frozenset({1, 2, 3}), None),
            (1, 0, 0, {1: 1, 2: 0, 3: 0}, (2, 3)),
        ),
        (
            "offline: no leader, and its ISR empty",
            TopicReplicas(
                {0: _p(0, None, "12", ""), 1: _p(1, 2, "21", "21")}, frozenset({1, 2}), 1
            ),
            (1, 1, 1, {1: 0, 2: 1}, (1,)),
        ),
        (
            "a leader the metadata lists no broker for still counts",
            TopicReplicas({0: _p(0, 7, "7", "7")}, frozenset({1}), None),
            (0, 0, 0, {1: 0, 7: 1}, (1,)),
        ),
        ("no partitions", TopicReplicas({}, frozenset({1, 2}), 2), (0, 0, 0, {1: 0, 2: 0}, (1, 2))),
    ],
)
def test_replica_health(
    name: str,
    topic: TopicReplicas,
    expected: tuple[int, int, int, dict[int, int], tuple[int, ...]],
) -> None:
    health = replica_health(topic)
    assert (
        health.under_replicated,
        health.offline,
        health.under_min_isr,
        dict(health.leaders),
        health.leaderless_brokers,
    ) == expected, name


def test_recorded_three_broker_metadata() -> None:
    topic = recorded_topic()
    assert topic.leader_of(0) == 1
    assert topic.leader_of(2) is None  # leader -1: offline
    assert topic.leader_of(99) is None  # not a partition of the topic
    assert topic.partitions[5].replicas == (3, 1, 2)  # assignment order kept
    health = replica_health(topic)
    assert health.partitions == 6
    assert health.offline == 1
    assert health.under_replicated == 3  # 2 (empty ISR), 4, 5
    assert health.under_min_isr == 2  # 2 and 5 hold fewer than 2 in sync
    assert dict(health.leaders) == {1: 3, 2: 2, 3: 0}
    assert health.leaderless_brokers == (3,)
