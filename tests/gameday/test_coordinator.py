"""The coordinator fault: the group coordinator's requests delayed or dropped by the
Kafka-aware proxy, while fetches and produces pass. A real broker behind the proxy,
real aiokafka clients through it."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from probe.gameday.faults import build_fault
from probe.gameday.faults.base import LocalTargets
from probe.gameday.faults.coordinator import CoordinatorApi
from probe.gameday.faults.kafka_wire import UNKNOWN_API, Frame, KafkaWire
from probe.gameday.faults.proxy_rules import RequestHold
from probe.gameday.scenario import CoordinatorApiName, CoordinatorRequests
from probe.transport.kafka_records import write_records

# Every API a member sends its coordinator: with all of them dropped it is cut off.
ALL_COORDINATOR_APIS: tuple[CoordinatorApiName, ...] = (
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "OffsetFetch",
    "OffsetCommit",
)


def _request(api_key: int, correlation_id: int, payload: bytes = b"") -> bytes:
    body = struct.pack(">hhi", api_key, 2, correlation_id) + payload
    return struct.pack(">i", len(body)) + body


def test_the_wire_splits_frames_across_reads_and_pairs_responses_with_requests() -> None:
    wire = KafkaWire()
    both = _request(8, 7, b"commit") + _request(1, 8, b"fetch")
    # A frame split anywhere is held until its rest arrives.
    assert wire.requests(both[:5]) == []
    requests = wire.requests(both[5:])
    assert [(r.api_key, r.api_version) for r in requests] == [(8, 2), (1, 2)]
    assert b"".join(r.framed() for r in requests) == both
    responses = wire.responses(struct.pack(">ii", 4, 8) + struct.pack(">ii", 6, 7) + b"ok")
    assert [r.api_key for r in responses] == [1, 8]
    # A response to no request seen is passed on, its API unknown.
    assert [r.api_key for r in wire.responses(struct.pack(">ii", 4, 99))] == [UNKNOWN_API]


def test_the_hold_delays_or_drops_its_apis_only_while_active() -> None:
    hold = RequestHold()
    commit = Frame(CoordinatorApi.OffsetCommit, 2, b"")
    fetch = Frame(1, 11, b"")
    hold.api_keys = frozenset({CoordinatorApi.OffsetCommit})
    hold.delay = 2.0
    assert hold.hold(commit) == 0.0
    hold.active = True
    assert (hold.hold(commit), hold.hold(fetch)) == (2.0, 0.0)
    hold.delay = None
    assert (hold.hold(commit), hold.hold(fetch)) == (None, 0.0)
    assert (hold.delayed, hold.dropped) == (1, 1)


@asynccontextmanager
async def _member(targets: LocalTargets) -> AsyncIterator[AIOKafkaConsumer]:
    """A group member of the topic, assigned every partition, positioned at the start."""
    member = AIOKafkaConsumer(
        bootstrap_servers=targets.bootstrap_servers,
        group_id=f"members-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        # Above the 5 s the embedded broker holds a first JoinGroup.
        request_timeout_ms=15_000,
    )
    await member.start()
    try:
        assigned = asyncio.Event()

        class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: object) -> None:
                pass

            async def on_partitions_assigned(self, partitions: object) -> None:
                assigned.set()

        member.subscribe([targets.topic], listener=_Listener())
        # The embedded broker holds a group's first JoinGroup for 5 s.
        async with asyncio.timeout(30):
            await assigned.wait()
        yield member
    finally:
        await member.stop()


async def _until_read(consumer: AIOKafkaConsumer, value: bytes, within: float) -> float:
    """Seconds until ``value`` is read."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        batch = await consumer.getmany(timeout_ms=100)
        if any(r.value == value for records in batch.values() for r in records):
            return time.monotonic() - started
    pytest.fail(f"{value!r} not read in {within} s")


def _offsets(targets: LocalTargets) -> dict[TopicPartition, OffsetAndMetadata]:
    return {TopicPartition(targets.topic, 0): OffsetAndMetadata(1, "")}


def test_delayed_commits_take_the_delay_while_the_members_fetches_do_not(
    targets: LocalTargets,
) -> None:
    write_records(targets.bootstrap_servers, targets.topic, [(0, b"first")])
    fault = build_fault(
        CoordinatorRequests(kind="coordinator-requests", action="delay", delay=1.5), targets
    )

    async def scenario() -> tuple[float, float, float]:
        async with _member(targets) as member:
            await _until_read(member, b"first", 10)
            began = time.monotonic()
            await member.commit(_offsets(targets))
            healthy = time.monotonic() - began
            fault.inject()
            began = time.monotonic()
            commit = asyncio.create_task(member.commit(_offsets(targets)))
            # A record produced and fetched while the commit is held.
            await asyncio.to_thread(
                write_records, targets.bootstrap_servers, targets.topic, [(1, b"during")]
            )
            fetched = await _until_read(member, b"during", 10)
            assert not commit.done(), "the commit came back before the record was read"
            await commit
            return healthy, time.monotonic() - began, fetched

    healthy, delayed, fetched = asyncio.run(scenario())
    fault.heal()
    assert healthy < 1.0
    assert delayed >= 1.5
    assert fetched < 1.5
    assert targets.embedded_proxy().request_hold.delayed >= 1


def test_dropped_coordinator_requests_fail_commits_while_a_group_less_reader_fetches(
    targets: LocalTargets,
) -> None:
    write_records(targets.bootstrap_servers, targets.topic, [(0, b"first")])
    fault = build_fault(
        CoordinatorRequests(kind="coordinator-requests", action="drop", apis=ALL_COORDINATOR_APIS),
        targets,
    )

    async def scenario() -> None:
        reader = AIOKafkaConsumer(bootstrap_servers=targets.bootstrap_servers, fetch_max_wait_ms=50)
        await reader.start()
        try:
            reader.assign([TopicPartition(targets.topic, p) for p in (0, 1, 2)])
            await reader.seek_to_beginning()
            async with _member(targets) as member:
                await _until_read(member, b"first", 10)
                fault.inject()
                with pytest.raises((TimeoutError, KafkaError)):
                    async with asyncio.timeout(3):
                        await member.commit(_offsets(targets))
                # The partitions' leader still takes and serves records: the consumer
                # stage's kind of reader never asks the coordinator anything.
                await asyncio.to_thread(
                    write_records, targets.bootstrap_servers, targets.topic, [(2, b"during")]
                )
                assert await _until_read(reader, b"during", 10) < 5
                fault.heal()
                # Healed: the member's commits go through again once it has given up
                # on the requests it lost.
                deadline = time.monotonic() + 30
                while True:
                    try:
                        async with asyncio.timeout(3):
                            await member.commit(_offsets(targets))
                        break
                    except (TimeoutError, KafkaError):
                        assert time.monotonic() < deadline, "commits never recovered"
                        await asyncio.sleep(0.5)
        finally:
            await reader.stop()

    asyncio.run(scenario())
    assert targets.embedded_proxy().request_hold.dropped >= 1
