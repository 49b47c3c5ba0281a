"""A member flapping in the probe's consumer group: a rebalance storm.

While the fault is on, an extra member joins the group stage's group (the probe's
``group.id``, or the ``synthetic-sla-probe.<probe_id>`` it derives) on the canary
topic, waits until the group has rebalanced and given it its share of the
partitions, and leaves again (LeaveGroup): two rebalances, one when it comes and one
when it goes, every ``period``, as a crash-looping or autoscaled consumer does to the
groups it joins. It never commits (auto-commit off, no commit call): what the probe's
member committed is all the group holds, and the flapping member's partitions go back
to the probe's member at the offsets it had handed out.

The member speaks its group's protocol: the classic one on aiokafka for the group
stage's group, the consumer protocol (KIP-848) on librdkafka for the group_consumer
stage's, where joining is a ConsumerGroupHeartbeat and the coordinator moves
partitions from the probe's member to the new one (revoked, then assigned) without
stopping the group, and back when it leaves. It goes through whatever the probe's
bootstrap servers are (the embedded broker's proxy, or Apache Kafka's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as LibrdkafkaPartition

from probe.core.errors import ProbeError

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import GroupMemberFlapping

log = logging.getLogger(__name__)

# A JoinGroup is answered only once the rebalance completes: every member must rejoin
# (the probe's after its next heartbeat, 3 s), and the embedded broker holds a group's
# first join 5 s. Above both, as the probe's own member (kafka_group.JOIN_TIMEOUT_MS).
JOIN_TIMEOUT_MS = 30_000
# How long one join may take to be assigned before the member leaves anyway (its
# join still made the group rebalance).
ASSIGNED_WITHIN = 45.0


class GroupMemberFlappingError(ProbeError):
    """The flapping member could not run (reported at heal, on the runner's thread)."""


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.event.set()


class GroupMemberFlappingFault:
    """Join the probe's group and leave it again every ``spec.period`` until healed.

    >>> fault = GroupMemberFlappingFault(
    ...     GroupMemberFlapping(kind="group-member-flapping", period=10.0), targets
    ... )
    >>> fault.inject()       # a join and a leave every 10 s, in a thread of its own
    >>> fault.heal()         # returns once the member has left for good
    """

    def __init__(self, spec: GroupMemberFlapping, targets: LocalTargets) -> None:
        self.bootstrap_servers = targets.bootstrap_servers
        self.topic = targets.topic
        self.group_id = targets.probe_group_id(spec.member_of)
        self.consumer_protocol = spec.member_of == "group_consumer"
        self.period = spec.period
        # Joins that were assigned partitions, and joins that were not within
        # ASSIGNED_WITHIN (the member left anyway).
        self.assigned = 0
        self.unassigned = 0
        self._healed = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def inject(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gameday-flap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self._flap())
        except BaseException as error:  # handed to heal(), on the runner's thread
            self._error = error

    async def _flap(self) -> None:
        while not self._healed.is_set():
            began = time.monotonic()
            await self._join_and_leave()
            # One join every period, from start to start; a join slower than the
            # period is followed by the next at once.
            rest = self.period - (time.monotonic() - began)
            if rest > 0:
                await asyncio.to_thread(self._healed.wait, rest)

    async def _join_and_leave(self) -> None:
        if self.consumer_protocol:
            await asyncio.to_thread(self._join_and_leave_consumer_protocol)
            return
        member = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            request_timeout_ms=JOIN_TIMEOUT_MS,
        )
        listener = _Assigned()
        try:
            await member.start()
            member.subscribe([self.topic], listener=listener)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ASSIGNED_WITHIN):
                    await listener.event.wait()
            self._tally(listener.event.is_set())
        except KafkaError as exc:
            # The group's broker may be faulted too: the next round tries again.
            self._tally(False, exc)
        finally:
            # Leaves the group (LeaveGroup): it rebalances at once. No commit first.
            await member.stop()

    def _join_and_leave_consumer_protocol(self) -> None:
        """The same on the consumer protocol, with librdkafka's consumer (on this
        thread: every call on it from here)."""
        assigned = threading.Event()

        def on_assign(member: Consumer, partitions: list[LibrdkafkaPartition]) -> None:
            member.incremental_assign(partitions)
            if partitions:
                assigned.set()

        member = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": self.group_id,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                "allow.auto.create.topics": False,
            }
        )
        try:
            member.subscribe([self.topic], on_assign=on_assign)
            deadline = time.monotonic() + ASSIGNED_WITHIN
            while not assigned.is_set() and time.monotonic() < deadline:
                member.poll(0.2)  # records taken and dropped: never committed
            self._tally(assigned.is_set())
        except KafkaException as exc:
            self._tally(False, exc)
        finally:
            # Leaves the group (a heartbeat with member epoch -1). No commit first.
            member.close()

    def _tally(self, assigned: bool, error: Exception | None = None) -> None:
        """One join counted: assigned partitions, or not (within ASSIGNED_WITHIN, or
        cut short by ``error``)."""
        if assigned:
            self.assigned += 1
            return
        self.unassigned += 1
        if error is None:
            log.warning("flapping member: no assignment in %gs", ASSIGNED_WITHIN)
        else:
            log.warning("flapping member: %s", error)

    def heal(self) -> None:
        """Returns once the member has left for good; raises what the flapping met."""
        self._healed.set()
        if self._thread is not None:
            limit = ASSIGNED_WITHIN + JOIN_TIMEOUT_MS / 1000 + 30
            self._thread.join(limit)
            if self._thread.is_alive():
                raise GroupMemberFlappingError(f"the flapping member did not leave in {limit:g}s")
        if self._error is not None:
            raise GroupMemberFlappingError(f"flapping member: {self._error}") from self._error
