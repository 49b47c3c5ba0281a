"""The group stage's reader: a consumer-group member of the canary topic, on aiokafka.

The consumer stage assigns partitions itself and never meets the group coordinator.
Most real consumers are group members: they find the coordinator, join and sync,
fetch their committed offsets, commit as they go and stall while the group
rebalances. This reader goes through all of it, so a coordinator that is down or
moving, an ``__consumer_offsets`` partition without a leader, commits that time out
and rebalance storms show up as they do for those consumers: canaries late or lost
at ``stage="group"``, and the group's own series (probe.metrics.group).

**Positions.** The member joins a group of its own (``group.id``, by default one per
probe), so it is assigned every partition. On its first assignment a partition
without a committed offset starts at the log's end (``auto_offset_reset=latest``),
and the rounds wait for that (:meth:`cover`) before producing, so the first canaries
are read; a partition added to the topic later starts at its beginning, since
anything in it is new. Offsets are committed in the background at most once a second
(COMMIT_EVERY_S) while records are handed out, one commit in flight at a time, each
timed. After a rebalance the member
fetches from the group's committed offsets: records it had handed out already (their
commit was lost) are counted as redelivered and not handed out again, as the
consumer stage never reads a record twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
    IllegalGenerationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorForGroupError,
    RebalanceInProgressError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownMemberIdError,
)
from aiokafka.structs import OffsetAndMetadata

from probe.config import KafkaConfig
from probe.core.errors import CommitFailure, ProduceFailure, TransportError
from probe.core.leadership import LeaderPlan
from probe.core.partition_summary import partitions_summary
from probe.core.reader_signals import NO_SIGNALS, ReaderSignals
from probe.core.replicas import TopicReplicas
from probe.transport import Arrival
from probe.transport.kafka_client import (
    CredentialFiles,
    connection_options,
    give_credentials,
    never_auto_create,
    reason_for,
)
from probe.transport.kafka_connect_errors import start_or_say_why
from probe.transport.kafka_denials import denial

log = logging.getLogger(__name__)

# How long start() waits for the member's first assignment before rounds begin: a
# join takes a few seconds (the embedded broker holds the first JoinGroup for 5 s,
# Apache Kafka for group.initial.rebalance.delay.ms), and canaries sent before the
# member has its positions would be skipped by the reset to the log's end. A group
# that cannot be joined at all must not hold the target's other stages back.
FIRST_JOIN_WAIT_S = 30.0
# The member's request timeout, at least (see __init__): Kafka's own consumers wait
# 30 s for a request, and longer for a JoinGroup.
JOIN_TIMEOUT_MS = 30_000
# A member out of its group for longer than this (rebalancing, no coordinator) makes
# the target unready: a rebalance of a few seconds is the group's normal life.
UNSTABLE_AFTER_S = 15.0
# Commits start at most this often (a commit in flight delays the next further): what
# a round hands out is committed within a second, as Kafka's own consumers commit on
# an interval. Committing after every fetch instead cost the probe 2.8x the CPU of the
# consumer stage alone at 1,000 partitions (one commit of up to 1,000 offsets every
# fetch while a round arrived: bench_group_stage).
COMMIT_EVERY_S = 1.0

_COMMIT_REASONS: tuple[tuple[type[BaseException], CommitFailure], ...] = (
    (TimeoutError, CommitFailure.TIMEOUT),
    (KafkaTimeoutError, CommitFailure.TIMEOUT),
    (RequestTimedOutError, CommitFailure.TIMEOUT),
    (NotCoordinatorForGroupError, CommitFailure.COORDINATOR_MOVED),
    (GroupCoordinatorNotAvailableError, CommitFailure.COORDINATOR_MOVED),
    (KafkaConnectionError, CommitFailure.COORDINATOR_MOVED),
    (CommitFailedError, CommitFailure.REBALANCE),
    (RebalanceInProgressError, CommitFailure.REBALANCE),
    (IllegalGenerationError, CommitFailure.REBALANCE),
    (UnknownMemberIdError, CommitFailure.REBALANCE),
    (GroupAuthorizationFailedError, CommitFailure.NOT_AUTHORIZED),
    (TopicAuthorizationFailedError, CommitFailure.NOT_AUTHORIZED),
)


def commit_failure_reason(exc: BaseException) -> CommitFailure:
    """The ``reason`` label of a failed commit.

    >>> commit_failure_reason(CommitFailedError("rebalanced"))
    <CommitFailure.REBALANCE: 'rebalance'>
    >>> commit_failure_reason(ValueError())
    <CommitFailure.ERROR: 'error'>
    """
    return reason_for(exc, _COMMIT_REASONS, CommitFailure.ERROR)


def member_error_name(name: str) -> str:
    """An error's name as the member series label it: Kafka's or librdkafka's name
    (``KafkaError.name()``), lower case, without librdkafka's leading underscore.

    >>> member_error_name("_ASSIGNMENT_LOST"), member_error_name("FENCED_MEMBER_EPOCH")
    ('assignment_lost', 'fenced_member_epoch')
    """
    return name.lstrip("_").lower()


class GroupRecorder(Protocol):
    """Where the member's own events go (probe.metrics.group.GroupMetrics)."""

    def committed(self, target: str, seconds: float) -> None: ...

    def commit_failed(self, target: str, reason: CommitFailure) -> None: ...

    def rebalanced(self, target: str, seconds: float, partitions: int) -> None: ...

    def set_stable(self, target: str, stable: bool) -> None: ...

    def coordinated_by(self, target: str, broker: int | None) -> None: ...

    def first_record_after(self, target: str, seconds: float) -> None: ...

    def refetched(self, target: str, records: int) -> None: ...

    def delivered(self, target: str, delivery_count: int) -> None:
        """A share group's record read, with the broker's delivery count."""

    def member_error(self, target: str, error: str) -> None:
        """An error the member's client reported, by its name (member_error_name)."""


class Unrecorded:
    """The recorder of a reader nobody measures (tests of the reader alone)."""

    def committed(self, target: str, seconds: float) -> None:
        pass

    def commit_failed(self, target: str, reason: CommitFailure) -> None:
        pass

    def rebalanced(self, target: str, seconds: float, partitions: int) -> None:
        pass

    def set_stable(self, target: str, stable: bool) -> None:
        pass

    def coordinated_by(self, target: str, broker: int | None) -> None:
        pass

    def first_record_after(self, target: str, seconds: float) -> None:
        pass

    def refetched(self, target: str, records: int) -> None:
        pass

    def delivered(self, target: str, delivery_count: int) -> None:
        pass

    def member_error(self, target: str, error: str) -> None:
        pass


class MemberNotes:
    """What a group member says once per change, not once a round: partitions the
    probe writes to held by another member, and commits failing. Both group stages'
    readers keep one."""

    def __init__(self, group_id: str, *, moving: str) -> None:
        self._group_id = group_id
        self._moving = moving  # how the protocol moves partitions, in words
        self._held_elsewhere = False
        self.commit_problem: str | None = None

    def held_elsewhere(self, missing: list[int]) -> None:
        """One line when partitions the probe writes to are not the member's, one when
        they all are again."""
        if missing and not self._held_elsewhere:
            log.warning(
                "group %s: %s not assigned to the probe's member (%s, or another member in "
                "its group): their canaries wait for it",
                self._group_id,
                partitions_summary(missing),
                self._moving,
            )
        elif not missing and self._held_elsewhere:
            log.info(
                "group %s: every partition assigned to the probe's member again", self._group_id
            )
        self._held_elsewhere = bool(missing)

    def commits(self, problem: str | None) -> None:
        """Commits failing (``problem``), or working (None): a line at each change."""
        if problem is not None and self.commit_problem is None:
            log.warning("group %s: %s", self._group_id, problem)
        elif problem is None and self.commit_problem is not None:
            log.info("group %s: commits work again (was: %s)", self._group_id, self.commit_problem)
        self.commit_problem = problem


class ReadsOnly:
    """The write side of a Transport whose reader never writes (both group stages'):
    the target's own transport writes, provisions and moves leaders."""

    _topic: str
    stage_name: ClassVar[str]

    async def provision(self) -> None:
        """The target's own transport creates the topic; the member only subscribes."""

    def destination(self, partition: int) -> str:
        return self._topic

    def refused(self, partition: int, since: float) -> ProduceFailure | None:
        return None

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        raise TransportError(f"the {self.stage_name} stage's reader never writes")

    def signals(self) -> ReaderSignals:
        return NO_SIGNALS  # it reads uncommitted records, on the source cluster

    def replicas(self) -> TopicReplicas | None:
        return None

    async def spread_leaders(self, plan: LeaderPlan) -> list[str]:
        return []


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's callbacks, to the reader."""

    def __init__(self, reader: KafkaGroupReader) -> None:
        self._reader = reader

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._reader._revoked()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._reader._assigned_now({tp.partition for tp in assigned})


class KafkaGroupReader(ReadsOnly):
    """Reads the canary topic as a member of consumer group ``group_id``; never writes.

    ``target``: the label its recorder's series carry; ``fetch_max_wait`` (seconds):
    group.fetch_max_wait.
    """

    messaging_system = "kafka"
    max_in_flight: int | None = None
    stage_name = "group"

    def __init__(
        self,
        config: KafkaConfig,
        group_id: str,
        *,
        target: str,
        recorder: GroupRecorder | None = None,
        fetch_max_wait: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not config.bootstrap_servers:
            raise TransportError("kafka.bootstrap_servers is not set")
        self._config = config
        self._topic = config.topic
        self._group_id = group_id
        self._target = target
        self._recorder: GroupRecorder = recorder or Unrecorded()
        self._clock = clock
        # A JoinGroup is answered only once the group's rebalance completes: the
        # embedded broker holds a first one 5 s, Apache Kafka for
        # group.initial.rebalance.delay.ms (3 s) or until every member rejoined. A
        # request timeout of the send timeout (seconds) would time every join out,
        # forever; commits keep the send timeout as their own deadline (_commit).
        self._credentials = CredentialFiles(config)
        options = connection_options(config)
        options["request_timeout_ms"] = max(options["request_timeout_ms"], JOIN_TIMEOUT_MS)
        self._options = options
        self._fetch_max_wait = fetch_max_wait
        self._consumer = AIOKafkaConsumer(
            **self._options,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=int(fetch_max_wait * 1000),
        )
        never_auto_create(self._consumer._client)
        # The offset after the last record handed out, per partition: a record below
        # it came again after a rebalance (its commit was lost).
        self._positions: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._assignment: frozenset[int] = frozenset()
        self._ever_assigned: set[int] = set()
        self._first_assignment_done = False
        # When the member left its last stable state (None: stable), and when it was
        # last assigned, until its first record after that.
        self._unstable_since: float | None = clock()
        self._awaiting_first_record_since: float | None = None
        self._to_commit = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._assigned_event = asyncio.Event()
        self._problem: str | None = None
        self._notes = MemberNotes(group_id, moving="a rebalance")

    # -- the group's life ------------------------------------------------------------

    async def _revoked(self) -> None:
        if self._unstable_since is None:
            self._unstable_since = self._clock()
        self._assigned_event.clear()
        self._recorder.set_stable(self._target, False)
        # What was handed out is committed before the partitions go, as Kafka's own
        # consumers do in onPartitionsRevoked: whoever gets them next starts there.
        if offsets := self._uncommitted():
            await self._commit(offsets)

    async def _assigned_now(self, partitions: set[int]) -> None:
        now = self._clock()
        began = self._unstable_since if self._unstable_since is not None else now
        self._unstable_since = None
        if self._first_assignment_done:
            await self._start_new_partitions(partitions - self._ever_assigned)
        self._first_assignment_done = True
        self._ever_assigned |= partitions
        # A partition taken away keeps its position: should it come back from a
        # committed offset behind it (a commit lost in the rebalance), the records
        # between were handed out already and are not handed out again. Its last
        # commit is forgotten, since another member may have committed since.
        for gone in self._assignment - partitions:
            self._committed.pop(gone, None)
        self._assignment = frozenset(partitions)
        self._awaiting_first_record_since = now
        self._assigned_event.set()
        log.info(
            "group %s: assigned %s of topic %s after %.2fs",
            self._group_id,
            partitions_summary(sorted(partitions)),
            self._topic,
            now - began,
        )
        self._recorder.rebalanced(self._target, now - began, len(partitions))
        self._recorder.set_stable(self._target, True)
        self._recorder.coordinated_by(self._target, self._coordinator())

    async def _start_new_partitions(self, new: set[int]) -> None:
        """Partitions first assigned after the first assignment and never committed
        were added to the topic since (or the topic was created since, the first
        assignment then being empty): anything in them is new, and the reset to their
        end would skip the first canaries. Read them from their beginning."""
        fresh = []
        for partition in sorted(new):
            tp = TopicPartition(self._topic, partition)
            try:
                if await self._consumer.committed(tp) is None:
                    fresh.append(tp)
            except KafkaError as exc:
                log.debug("group %s: committed offset of %s unknown: %s", self._group_id, tp, exc)
        if fresh:
            await self._consumer.seek_to_beginning(*fresh)

    def _coordinator(self) -> int | None:
        # aiokafka keeps the coordinator's node id on its (private) group coordinator.
        coordinator = getattr(self._consumer, "_coordinator", None)
        node = getattr(coordinator, "coordinator_id", None)
        return node if isinstance(node, int) else None

    # -- Transport -------------------------------------------------------------------

    async def start(self) -> None:
        await start_or_say_why(self._consumer.start, self.close, self._config, self._options)
        self._unstable_since = self._clock()
        self._consumer.subscribe([self._topic], listener=_Rebalances(self))
        self._committer = asyncio.create_task(self._commit_forever(), name="group commits")
        try:
            async with asyncio.timeout(FIRST_JOIN_WAIT_S):
                await self._assigned_event.wait()
        except TimeoutError:
            log.warning(
                "group %s: not joined within %gs; probing goes on, the group stage "
                "judges what the member reads once it joins",
                self._group_id,
                FIRST_JOIN_WAIT_S,
            )

    async def partitions(self) -> list[int]:
        # Once a round: a rotated password or certificate reaches the member's client
        # for its next connections (kafka_client's module doc).
        if (renewed := self._credentials.renewed()) is not None:
            what, options = renewed
            give_credentials([self._consumer._client], options, what)
        # aiokafka's (private) client: the member's metadata, refreshed every round.
        # Its own refresh comes every five minutes (metadata_max_age_ms), and until then
        # it fetches a partition whose leader moved back to a returning broker from the
        # former leader, now a follower, which serves it one replica fetch late (500 ms:
        # over the latency threshold; the consumer stage's reader follows moved leaders
        # for the same reason). Found by kafka-group-coordinator-stop: the group stage's
        # latency burnt for as long as the game day ran after the broker came back.
        client = self._consumer._client
        if not await client.force_metadata_update():
            raise TransportError(
                f"metadata refresh failed: no broker of {self._config.bootstrap_servers} answered"
            )
        return sorted(self._consumer.partitions_for_topic(self._topic) or ())

    def describe(self, partitions: Sequence[int]) -> str:
        if not partitions:
            return f"topic {self._topic} not found"
        return f"topic {self._topic}: {len(partitions)} partitions, group {self._group_id}"

    async def cover(self, partitions: Sequence[int]) -> None:
        """Return once the member is assigned every partition and knows where it reads
        each (committed offset, or the reset), so a canary sent now is read; or once it
        is clear that the group gave some of them to another member.

        Waits at most half the send timeout, and never fails the round: a group that
        rebalances, has no coordinator, or hands partitions to a member that does not
        read them is the group path as real consumers live it, and the round's canaries
        are judged as it serves them (late, lost; the rebalance alerts). A member out of
        its group for long is a read problem (:meth:`read_problem`).
        """
        within = self._config.send_timeout / 2
        wanted = set(partitions)
        try:
            async with asyncio.timeout(within):
                await self._assigned_event.wait()
                while not wanted <= self._assignment:
                    known = set(self._consumer.partitions_for_topic(self._topic) or ())
                    if wanted <= known:
                        break  # known to the group, assigned to another member
                    # The topic grew: the group rebalances once the member's metadata
                    # shows the new partitions (aiokafka's private client refreshes it).
                    await self._consumer._client.force_metadata_update()
                    await asyncio.sleep(0.2)
                    await self._assigned_event.wait()
                for partition in sorted(wanted & self._assignment):
                    await self._consumer.position(TopicPartition(self._topic, partition))
        except (TimeoutError, KafkaError) as exc:
            log.debug("group %s: cover: %r", self._group_id, exc)
        self._notes.held_elsewhere(sorted(wanted - self._assignment))

    async def arrivals(self) -> AsyncIterator[Arrival]:
        failed_at = 0.0
        settle_s = self._fetch_max_wait + 2.0
        while True:
            try:
                batch = await self._consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:
                failed_at = self._clock()
                self._problem = denial(exc, "Read", self._config) or f"fetch failed: {exc}"
                await asyncio.sleep(1.0)
                continue
            if self._problem is not None and self._clock() - failed_at > settle_s:
                self._problem = None
            at_ns = time.time_ns()
            if batch and self._awaiting_first_record_since is not None:
                waited = self._clock() - self._awaiting_first_record_since
                self._awaiting_first_record_since = None
                self._recorder.first_record_after(self._target, waited)
            for tp, records in batch.items():
                partition = tp.partition
                position = self._positions.get(partition, -1)
                for record in records:
                    if record.offset < position:
                        self._recorder.refetched(self._target, 1)  # rare: after a lost commit
                        continue
                    self._positions[partition] = position = record.offset + 1
                    # Committed once handed out: the committer runs when the stage
                    # has judged it and waits for the next arrival.
                    self._to_commit.set()
                    yield Arrival(partition, record.value or b"", at_ns, record.offset, None)

    async def _commit_forever(self) -> None:
        """Commit what was handed out, one commit at a time, at most every COMMIT_EVERY_S."""
        while True:
            await self._to_commit.wait()
            await asyncio.sleep(COMMIT_EVERY_S)  # pacing: whatever arrives meanwhile joins
            self._to_commit.clear()
            if offsets := self._uncommitted():
                await self._commit(offsets)

    async def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """One commit, timed; a failure is counted with its reason, and the next commit
        carries every offset still uncommitted."""
        began = self._clock()
        try:
            async with asyncio.timeout(self._config.send_timeout):
                await self._consumer.commit(offsets)
        except (KafkaError, TimeoutError) as exc:
            reason = commit_failure_reason(exc)
            self._recorder.commit_failed(self._target, reason)
            self._notes.commits(f"commits failing ({reason}): {exc or 'timeout'}")
            return
        self._recorder.committed(self._target, self._clock() - began)
        self._notes.commits(None)
        for tp, meta in offsets.items():
            self._committed[tp.partition] = meta.offset
        self._recorder.coordinated_by(self._target, self._coordinator())

    def _uncommitted(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The positions of assigned partitions that moved since their last commit."""
        return {
            TopicPartition(self._topic, p): OffsetAndMetadata(at, "")
            for p, at in self._positions.items()
            if p in self._assignment and self._committed.get(p) != at
        }

    def read_problem(self) -> str | None:
        """Why the member cannot read right now: a fetch failing, or the member out of
        its group for longer than UNSTABLE_AFTER_S. Failing commits are measured (and
        alerted on), not a reason to be unready: the member still reads."""
        if self._problem is not None:
            return self._problem
        since = self._unstable_since
        if since is not None and self._clock() - since > UNSTABLE_AFTER_S:
            return f"group {self._group_id}: no assignment for {self._clock() - since:.0f}s"
        return None

    async def close(self) -> None:
        if self._committer is not None:
            self._committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._committer
        try:
            async with asyncio.timeout(1.0):
                # Leaving the group (LeaveGroup) rebalances at once instead of after the
                # session timeout; what was read is committed first, for the next run.
                if offsets := self._uncommitted():
                    await self._consumer.commit(offsets)
        except (KafkaError, TimeoutError) as exc:
            log.debug("close: final commit: %s", exc)
        try:
            async with asyncio.timeout(1.0):
                await self._consumer.stop()
        except (KafkaError, TimeoutError) as exc:
            log.debug("close: %s", exc)
