"""Carrying out a leader plan against the real (embedded) broker.

The embedded broker is a single broker without partition reassignment or leader
election: a plan is never needed on it (one broker leads everything), and one forced
on it comes back as problems in words, not as an exception.
"""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from probe.config import load
from probe.core.keys import generate_key_ring
from probe.core.leadership import LeaderPlan, Reassignment, plan_leaders
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.stages.target import TargetProbe
from probe.transport.kafka_leaders import carry_out, partitions_by_problem


async def test_a_plan_the_broker_cannot_carry_out_comes_back_as_problems(
    broker: EmbeddedBroker, topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
        plan = LeaderPlan(reassign=(Reassignment(1, (1,)),), elect=(1,))
        problems = await asyncio.wait_for(carry_out(admin, topic, plan), 60)
    finally:
        await admin.close()
    assert problems, "the embedded broker has neither API"
    assert all(p.startswith(("reassigning", "electing preferred leaders")) for p in problems)


async def test_one_broker_needs_no_plan_and_the_probe_settles(
    broker: EmbeddedBroker, topic: str
) -> None:
    config = load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.partitions": 3,
        }
    )
    assert config.kafka.create_topic, "topic management is on by default"
    probe = TargetProbe(config, generate_key_ring(), [Tally("kafka")])
    await probe.connect(give_up_after=10)
    try:
        assert probe.replicas is not None
        assert plan_leaders(probe.replicas).empty
        # Settled: it will not plan again until the broker set changes.
        assert not probe._leaders.due(probe.replicas.brokers, now=1e12)
    finally:
        await probe.close()


def test_refused_partitions_are_named_per_problem_by_count_and_the_first_few() -> None:
    """An outage refuses thousands of partitions alike: one line per problem, whose size
    does not grow with them."""
    refused = [(p, "PreferredLeaderNotAvailableError") for p in range(10_000)]
    refused += [(3, "NotControllerError"), (7, "NotControllerError")]
    assert partitions_by_problem(refused) == [
        "10000 partitions 0-9999: PreferredLeaderNotAvailableError",
        "2 partitions 3,7: NotControllerError",
    ]
    assert partitions_by_problem([]) == []
