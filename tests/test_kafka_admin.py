"""The admin requests' own rules: how a topic grows, which election a broker's version
allows, and refusals against the real (embedded) broker, which speaks neither
ElectLeaders nor partition reassignment."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import IncompatibleBrokerVersion

from probe.embedded import EmbeddedBroker
from probe.transport.kafka_admin import (
    Election,
    ElectLeadersRequest,
    ElectLeadersRequest_v0,
    ElectLeadersRequest_v1,
    elect,
    growth_steps,
    reassign,
)


def test_a_topic_grows_a_bounded_number_of_partitions_per_request() -> None:
    assert growth_steps(1, 12_000) == [5_001, 10_001, 12_000]
    assert growth_steps(3, 5_003) == [5_003]
    assert growth_steps(3, 3) == growth_steps(5, 3) == []
    assert growth_steps(0, 10, per_request=4) == [4, 8, 10]


def test_a_broker_before_kafka_2_4_gets_preferred_elections_only() -> None:
    preferred = ElectLeadersRequest(Election.PREFERRED, "canaries", [0, 1], 1000)
    assert preferred.build(ElectLeadersRequest_v0).to_object() == {
        "topic_partitions": [{"topic": "canaries", "partition_id": [0, 1]}],
        "timeout_ms": 1000,
    }
    assert preferred.build(ElectLeadersRequest_v1).to_object()["election_type"] == 0
    unclean = ElectLeadersRequest(Election.UNCLEAN, "canaries", [0], 1000)
    assert unclean.build(ElectLeadersRequest_v1).to_object()["election_type"] == 1
    with pytest.raises(IncompatibleBrokerVersion):
        unclean.build(ElectLeadersRequest_v0)


async def test_requests_a_broker_does_not_speak_come_back_refused_not_raised(
    broker: EmbeddedBroker, topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
        elected = await asyncio.wait_for(elect(admin, Election.PREFERRED, topic, [0, 1]), 60)
        moved = await asyncio.wait_for(reassign(admin, topic, {1: [1]}), 60)
    finally:
        await admin.close()
    for refused in (elected, moved):
        assert len(refused) == 1, refused
        assert refused[0].partition is None  # the whole request
        assert refused[0].error is None  # no answer: the broker does not know it
