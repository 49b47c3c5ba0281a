"""The leader-spread planner and when it acts: pure, table-driven."""

from __future__ import annotations

import pytest

from probe.core.leadership import LeaderKeeper, LeaderPlan, Reassignment, plan_leaders
from probe.core.replicas import PartitionReplicas, TopicReplicas, replica_health
from tests.core.test_replicas import recorded_topic


def _topic(brokers: str, *partitions: tuple[int | None, str, str]) -> TopicReplicas:
    """Partitions as (leader, replicas, isr), replicas and ISR as digit strings."""
    return TopicReplicas(
        {
            i: PartitionReplicas(i, leader, tuple(map(int, replicas)), tuple(map(int, isr)))
            for i, (leader, replicas, isr) in enumerate(partitions)
        },
        frozenset(map(int, brokers)),
    )


@pytest.mark.parametrize(
    ("name", "topic", "plan"),
    [
        (
            "one broker leads all: nothing to do",
            _topic("1", (1, "1", "1"), (1, "1", "1")),
            LeaderPlan(),
        ),
        (
            "every broker preferred and leading: nothing to do",
            _topic("123", (1, "123", "123"), (2, "231", "231"), (3, "312", "312")),
            LeaderPlan(),
        ),
        (
            "a broker back from a restart: preferred but not leading, elected",
            _topic("123", (1, "123", "123"), (2, "231", "231"), (1, "312", "312")),
            LeaderPlan(elect=(2,)),
        ),
        (
            "preferred but out of sync: not elected yet",
            _topic("123", (1, "123", "123"), (2, "231", "231"), (1, "312", "12")),
            LeaderPlan(),
        ),
        (
            "a new broker holding replicas takes one by a reorder, elected at once",
            _topic("123", (1, "13", "13"), (1, "13", "13"), (2, "23", "23")),
            LeaderPlan(reassign=(Reassignment(1, (3, 1)),), elect=(1,)),
        ),
        (
            "a new broker without replicas takes the last follower's place",
            _topic("1234", (1, "12", "12"), (1, "13", "13"), (2, "21", "21"), (3, "31", "31")),
            LeaderPlan(reassign=(Reassignment(1, (4, 1)),)),
        ),
        (
            "replication factor 1: the partition moves",
            _topic("12", (1, "1", "1"), (1, "1", "1"), (1, "1", "1")),
            LeaderPlan(reassign=(Reassignment(2, (2,)),)),
        ),
        (
            "two brokers lead nothing: each takes one from the busiest",
            _topic("123", (1, "1", "1"), (1, "1", "1"), (1, "1", "1"), (1, "1", "1")),
            LeaderPlan(reassign=(Reassignment(2, (3,)), Reassignment(3, (2,)))),
        ),
        (
            "fewer partitions than brokers: grow first",
            _topic("123", (1, "12", "12"), (2, "21", "21")),
            LeaderPlan(grow_to=3),
        ),
        (
            "a dead broker's partitions are not elected to it",
            _topic("12", (1, "12", "12"), (2, "21", "21"), (1, "31", "1")),
            LeaderPlan(),
        ),
        ("no partitions", _topic("12"), LeaderPlan()),
    ],
)
def test_plan_leaders(name: str, topic: TopicReplicas, plan: LeaderPlan) -> None:
    assert plan_leaders(topic) == plan, name


def test_a_plan_carried_out_leaves_no_broker_leading_nothing() -> None:
    """Applying the plan (the reassignments, then every election) gives every broker a
    leadership; planning again then says nothing is left to do."""
    topic = _topic("123", *[(1, "12", "12")] * 5, (2, "21", "21"))
    plan = plan_leaders(topic)
    parts = dict(topic.partitions)
    for change in plan.reassign:
        old = parts[change.partition]
        parts[change.partition] = PartitionReplicas(
            old.partition, old.leader, change.replicas, change.replicas
        )
    applied = TopicReplicas(parts, topic.brokers)
    elected = {p: PartitionReplicas(p, r.replicas[0], r.replicas, r.isr) for p, r in parts.items()}
    settled = TopicReplicas(elected, topic.brokers)
    assert plan_leaders(applied).elect  # the reassigned partitions' new leaders, once in sync
    assert replica_health(settled).leaderless_brokers == ()
    assert plan_leaders(settled).empty


def test_recorded_three_broker_metadata_plan() -> None:
    # Broker 3 is preferred for partitions 2 and 5 but leads neither: 2 has no leader
    # and an empty ISR, 5 has lost broker 3 from its ISR. Nothing can be elected to it
    # until it is back in sync, and it is already the preferred leader of two: no
    # reassignment either. The planner waits.
    assert plan_leaders(recorded_topic()) == LeaderPlan()


def test_the_keeper_acts_when_the_broker_set_changes_and_never_churns() -> None:
    keeper = LeaderKeeper(min_gap=300.0)
    three = frozenset({1, 2, 3})
    assert keeper.due(three, now=0.0)  # nothing settled yet
    keeper.acted(now=0.0)
    assert not keeper.due(three, now=299.0)  # at most every min_gap
    assert keeper.due(three, now=300.0)  # the last action's elections may be left
    keeper.settled(three)
    assert not keeper.due(three, now=10_000.0)  # settled: nothing until the set changes
    assert keeper.due(frozenset({1, 2, 3, 4}), now=10_000.0)
    keeper.acted(now=10_000.0)
    assert not keeper.due(frozenset({1, 2}), now=10_100.0)  # a change, but too soon
    assert keeper.due(frozenset({1, 2}), now=10_300.0)
