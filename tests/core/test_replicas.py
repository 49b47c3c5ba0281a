"""Replica health: leaders, replicas and ISR counted, and the troubled partitions and
the brokers behind them named, from the shape the clients hold.

Table-driven over hand-built topics, and over recorded 3-broker metadata in the shape
aiokafka's ClusterMetadata holds it (tests/data/metadata_3_brokers.json); the real
broker's metadata is mapped in tests/stages/test_target.py.
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from aiokafka.structs import BrokerMetadata, PartitionMetadata

import probe.core.replicas
from probe.core.replicas import (
    PartitionProblem,
    PartitionReplicas,
    ReplicaProblem,
    TopicReplicas,
    broker_address,
    partition_problems,
    replica_health,
    topic_replicas,
)

RECORDED = Path(__file__).parents[1] / "data" / "metadata_3_brokers.json"


def recorded_topic() -> TopicReplicas:
    data = json.loads(RECORDED.read_text())
    records = [PartitionMetadata(**p) for p in data["partitions"]]
    brokers = [BrokerMetadata(**b) for b in data["brokers"]]
    # As probe.transport.kafka maps the client's brokers.
    addresses = {b.nodeId: broker_address(b.host, b.port) for b in brokers}
    return topic_replicas(
        records, [b.nodeId for b in brokers], data["min_insync"], addresses=addresses
    )


def test_the_examples_in_the_module_hold() -> None:
    assert doctest.testmod(probe.core.replicas).failed == 0


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
    assert dict(health.out_of_sync) == {1: 1, 2: 2, 3: 3}  # 3 is missing from 2, 4 and 5
    assert topic.addresses == {
        1: "kafka-1.kafka.svc:9092",
        2: "kafka-2.kafka.svc:9092",
        3: "kafka-3.kafka.svc:9092",
    }
    assert partition_problems(topic) == (
        PartitionProblem(2, ReplicaProblem.OFFLINE, None, (3, 1, 2)),
        PartitionProblem(4, ReplicaProblem.UNDER_REPLICATED, 2, (3,)),
        PartitionProblem(5, ReplicaProblem.UNDER_MIN_ISR, 1, (3, 2)),
    )


@pytest.mark.parametrize(
    ("name", "topic", "out_of_sync"),
    [
        ("all in sync", TopicReplicas({0: _p(0, 1, "12", "12")}, frozenset({1, 2})), {1: 0, 2: 0}),
        (
            "a stopped broker: no longer listed, every replica it holds out of sync",
            TopicReplicas(
                {0: _p(0, 1, "123", "12"), 1: _p(1, 2, "312", "12"), 2: _p(2, 1, "12", "12")},
                frozenset({1, 2}),
            ),
            {1: 0, 2: 0, 3: 2},
        ),
        (
            "offline with an empty ISR: every replica out of sync",
            TopicReplicas({0: _p(0, None, "12", "")}, frozenset({1, 2})),
            {1: 1, 2: 1},
        ),
        ("no partitions", TopicReplicas({}, frozenset({1})), {1: 0}),
    ],
)
def test_out_of_sync_names_the_brokers_behind_under_replicated(
    name: str, topic: TopicReplicas, out_of_sync: dict[int, int]
) -> None:
    assert dict(replica_health(topic).out_of_sync) == out_of_sync, name


@pytest.mark.parametrize(
    ("name", "partition", "min_insync", "expected"),
    [
        ("healthy", _p(0, 1, "123", "123"), 2, None),
        ("a follower behind", _p(0, 1, "123", "12"), 2, (ReplicaProblem.UNDER_REPLICATED, (3,))),
        (
            "the leader alone in sync",
            _p(0, 1, "123", "1"),
            2,
            (ReplicaProblem.UNDER_MIN_ISR, (2, 3)),
        ),
        (
            "the leader alone, min ISR unknown: only under-replicated",
            _p(0, 1, "123", "1"),
            None,
            (ReplicaProblem.UNDER_REPLICATED, (2, 3)),
        ),
        (
            "fewer replicas than min ISR: nothing missing, still refused",
            _p(0, 1, "1", "1"),
            2,
            (ReplicaProblem.UNDER_MIN_ISR, ()),
        ),
        ("no leader is worst of all", _p(0, None, "123", "1"), 2, (ReplicaProblem.OFFLINE, (2, 3))),
        (
            "no leader with every replica in sync (the ISR not yet shrunk)",
            _p(0, None, "12", "12"),
            1,
            (ReplicaProblem.OFFLINE, ()),
        ),
    ],
)
def test_partition_problems_name_each_partition_once_under_its_worst(
    name: str,
    partition: PartitionReplicas,
    min_insync: int | None,
    expected: tuple[ReplicaProblem, tuple[int, ...]] | None,
) -> None:
    topic = TopicReplicas({0: partition}, frozenset({1, 2, 3}), min_insync)
    problems = partition_problems(topic)
    if expected is None:
        assert problems == (), name
    else:
        problem, missing = expected
        assert problems == (PartitionProblem(0, problem, partition.leader, missing),), name


def test_partition_problems_are_listed_by_partition_number() -> None:
    topic = TopicReplicas(
        {7: _p(7, 1, "12", "1"), 3: _p(3, None, "12", ""), 5: _p(5, 2, "21", "21")},
        frozenset({1, 2}),
    )
    assert [p.partition for p in partition_problems(topic)] == [3, 7]


def test_replicas_a_reassignment_is_adding_are_copying_not_lagging() -> None:
    # Partition 0 moves from (1, 2) to (3, 2): 3 is listed, out of the ISR, until it
    # has copied the log. Partition 1's replica 3 lags with no reassignment.
    topic = TopicReplicas(
        {0: PartitionReplicas(0, 1, (3, 2, 1), (1, 2)), 1: PartitionReplicas(1, 1, (1, 3), (1,))},
        brokers=frozenset({1, 2, 3}),
        min_insync=2,
        adding={0: (3,)},
    )
    health = replica_health(topic)
    assert health.under_replicated == 1
    assert dict(health.out_of_sync) == {1: 0, 2: 0, 3: 1}
    assert [(p.partition, p.missing) for p in partition_problems(topic)] == [(1, (3,))]
