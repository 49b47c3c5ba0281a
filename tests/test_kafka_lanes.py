"""Which partitions each of the Kafka reader's lanes takes on (see
probe/transport/kafka_lanes.py): pure, no broker."""

from __future__ import annotations

from probe.transport.kafka_lanes import lane_target

LEADERS = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}


def test_a_partition_no_lane_reads_joins_the_lane_of_its_leader() -> None:
    wanted = frozenset(LEADERS)
    targets = {
        broker: lane_target(broker, frozenset(), wanted, {}, LEADERS.__getitem__)
        for broker in (1, 2, 3)
    }
    assert targets == {1: {0, 3}, 2: {1, 4}, 3: {2, 5}}


def test_a_partition_stays_with_the_lane_that_reads_it_when_its_leader_moves() -> None:
    # Partition 0 moved from broker 1 to broker 2 while lane 1 read it: taking it into
    # lane 2 as well would read it twice; lane 1 keeps it until it is done with it.
    held = {0: 1, 3: 1}
    moved = {**LEADERS, 0: 2}.__getitem__
    wanted = frozenset({0, 1, 3})
    assert lane_target(1, frozenset({0, 3}), wanted, held, moved) == {0, 3}
    assert lane_target(2, frozenset(), wanted, held, moved) == {1}


def test_a_lane_lets_go_of_what_is_no_longer_wanted_and_takes_nothing_held_elsewhere() -> None:
    held = {0: 1, 1: 2, 3: 1}
    wanted = frozenset({1, 4})
    assert lane_target(1, frozenset({0, 3}), wanted, held, LEADERS.__getitem__) == set()
    assert lane_target(2, frozenset({1}), wanted, held, LEADERS.__getitem__) == {1, 4}
