"""The flapping member: an extra member joining and leaving the probe's consumer group
until healed. A real broker behind the Kafka-aware proxy, and the probe's own kind of
member (a plain aiokafka group consumer) in the group, counting its rebalances."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

from probe.gameday.faults import build_fault
from probe.gameday.faults.base import LocalTargets
from probe.gameday.faults.group_member import GroupMemberFlappingFault
from probe.gameday.scenario import GroupMemberFlapping
from probe.transport.kafka_records import write_records


def test_the_group_id_is_the_probes_own_or_the_derived_one(targets: LocalTargets) -> None:
    assert targets.probe_group_id() == f"synthetic-sla-probe.{targets.probe_id}"
    targets.group_id = "payments-canary"
    assert targets.probe_group_id() == "payments-canary"


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self) -> None:
        self.count = 0

    async def on_partitions_revoked(self, revoked: object) -> None:
        pass

    async def on_partitions_assigned(self, assigned: object) -> None:
        self.count += 1


async def _until(condition: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {within:g}s")
        await asyncio.sleep(0.1)


@pytest.mark.gameday
def test_a_member_of_the_probes_group_rebalances_while_on_and_no_more_once_healed(
    targets: LocalTargets,
) -> None:
    # The topic exists before anyone subscribes to it.
    write_records(targets.bootstrap_servers, targets.topic, [(0, b"first")])
    fault = build_fault(GroupMemberFlapping(kind="group-member-flapping", period=2.0), targets)
    assert isinstance(fault, GroupMemberFlappingFault)

    async def scenario() -> tuple[int, int, int]:
        assignments = _Assignments()
        member = AIOKafkaConsumer(
            bootstrap_servers=targets.bootstrap_servers,
            group_id=targets.probe_group_id(),
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
            # Above the 5 s the embedded broker holds a first JoinGroup.
            request_timeout_ms=30_000,
        )
        await member.start()
        # The member keeps polling, as the probe's reader does.
        polling = asyncio.create_task(_poll(member))
        try:
            member.subscribe([targets.topic], listener=assignments)
            await _until(lambda: assignments.count >= 1, 30, "first assignment")
            before = assignments.count
            await asyncio.to_thread(fault.inject)
            # A join and a leave are a rebalance each for the member already there.
            await _until(lambda: assignments.count >= before + 3, 60, "rebalances while on")
            await asyncio.to_thread(fault.heal)
            # Healed, the extra member has left: once its leave's rebalance is over
            # (the member's next heartbeat, 3 s, and the broker's 5 s hold of the
            # rejoin) the member holds every partition again, and the group stays as
            # it is. Absence is only seen over a stretch of time: 10 s, three
            # heartbeats and more.
            topic_partitions = member.partitions_for_topic(targets.topic)
            await _until(
                lambda: {tp.partition for tp in member.assignment()} == topic_partitions,
                30,
                "every partition back",
            )
            healed = assignments.count
            await asyncio.sleep(10)
            return before, healed, assignments.count
        finally:
            polling.cancel()
            await member.stop()

    before, healed, after = asyncio.run(scenario())
    assert healed - before > 1
    assert after == healed
    assert isinstance(fault, GroupMemberFlappingFault)
    assert fault.assigned >= 1


async def _poll(member: AIOKafkaConsumer) -> None:
    while True:
        await member.getmany(timeout_ms=100)
