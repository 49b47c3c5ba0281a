"""The group_consumer stage's reader: a member of a consumer group on the consumer
protocol (KIP-848), on librdkafka (confluent-kafka; aiokafka speaks only the classic
protocol).

On the consumer protocol the group coordinator computes the assignment and hands it
to each member through its heartbeats, partition by partition, with no stop-the-world
rebalance: a coordinator that stalls that reconciliation, or a member that never gets
its partitions, stops these consumers while a classic member (the group stage) stays
green, and the other way round. This reader lives through it as librdkafka's
consumers do, and reports it in the group series under ``stage="group_consumer"``
(probe.metrics.group): each reconciled assignment (a new member epoch) as a
rebalance with the time it took from the subscription or the last revocation, the
coordinator (from librdkafka's statistics), commits timed and failures by reason.

**Threads.** librdkafka's consumer is driven by ``poll``, which also runs its
callbacks (assignment, revocation, commit results, statistics). One thread of the
reader's own makes every call on the consumer: it polls, commits, keeps the
positions, and between two polls runs what the event loop asks of the consumer
(metadata, new credentials: :meth:`_on_poll_thread`). confluent-kafka serialises a
consumer's calls, and a call from another thread waited behind the polls for ever.
The event loop takes the records the thread hands over (``call_soon_threadsafe``).

**Positions**, as the group stage's: a partition first assigned with no committed
offset starts at its end on the first assignment (its high watermark, asked for in
the assignment callback, so :meth:`cover` returns only once a canary sent now will
be read: librdkafka's own ``latest`` reset resolves it later, and a canary sent in
between would be skipped), at its beginning on a later one (the partition is new).
Offsets are committed at most once a second while records are handed out, one commit
in flight at a time; records read again after a lost commit are counted as
redelivered and not handed out twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from probe.config import KafkaConfig
from probe.core.errors import CommitFailure, TransportError
from probe.core.partition_summary import partitions_summary
from probe.transport import Arrival
from probe.transport.kafka_client import CredentialFiles
from probe.transport.kafka_group import (
    COMMIT_EVERY_S,
    FIRST_JOIN_WAIT_S,
    UNSTABLE_AFTER_S,
    GroupRecorder,
    MemberNotes,
    ReadsOnly,
    Unrecorded,
    member_error_name,
)
from probe.transport.kafka_settings import librdkafka_member

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long the polling thread waits for a record before it looks at its commits, what
# the event loop asked of the consumer, and whether it should stop.
POLL_S = 0.1
# Records taken from librdkafka's queue at once.
BATCH = 500
# librdkafka's statistics (the coordinator's broker) this often: the JSON names every
# partition, so not more often than a coordinator move needs to be seen.
STATISTICS_EVERY_MS = 5_000

# What a member never assigned at all is most likely up against: librdkafka says
# nothing of a broker that does not answer ConsumerGroupHeartbeat (the embedded one,
# Apache Kafka before 4.0 unless told), it only never gets an assignment.
NEVER_ASSIGNED = (
    " (never assigned since it subscribed: the brokers may not speak the consumer group "
    "protocol, KIP-848, which needs Apache Kafka 4.0 or newer; the group stage reads on "
    "the classic one)"
)

# librdkafka's error codes as commit-failure reasons.
_COMMIT_REASONS: Mapping[int, CommitFailure] = {
    KafkaError._TIMED_OUT: CommitFailure.TIMEOUT,
    KafkaError.REQUEST_TIMED_OUT: CommitFailure.TIMEOUT,
    KafkaError.NOT_COORDINATOR: CommitFailure.COORDINATOR_MOVED,
    KafkaError.COORDINATOR_NOT_AVAILABLE: CommitFailure.COORDINATOR_MOVED,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: CommitFailure.COORDINATOR_MOVED,
    KafkaError._TRANSPORT: CommitFailure.COORDINATOR_MOVED,
    KafkaError.REBALANCE_IN_PROGRESS: CommitFailure.REBALANCE,
    KafkaError.ILLEGAL_GENERATION: CommitFailure.REBALANCE,
    KafkaError.UNKNOWN_MEMBER_ID: CommitFailure.REBALANCE,
    KafkaError.STALE_MEMBER_EPOCH: CommitFailure.REBALANCE,
    KafkaError.FENCED_MEMBER_EPOCH: CommitFailure.REBALANCE,
    KafkaError.UNKNOWN_TOPIC_OR_PART: CommitFailure.REBALANCE,
    KafkaError.GROUP_AUTHORIZATION_FAILED: CommitFailure.NOT_AUTHORIZED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: CommitFailure.NOT_AUTHORIZED,
}


def commit_failure_reason(error: KafkaError | None) -> CommitFailure:
    """The ``reason`` label of a commit librdkafka failed with ``error``.

    >>> commit_failure_reason(KafkaError(KafkaError.NOT_COORDINATOR))
    <CommitFailure.COORDINATOR_MOVED: 'coordinator_moved'>
    >>> commit_failure_reason(None)
    <CommitFailure.ERROR: 'error'>
    """
    if error is None:
        return CommitFailure.ERROR
    return _COMMIT_REASONS.get(error.code(), CommitFailure.ERROR)


def coordinator_of(statistics: Mapping[str, Any]) -> int | None:
    """The group coordinator's broker id in librdkafka's statistics: its logical
    ``GroupCoordinator`` broker names the address of a learned broker, which has the id.

    >>> coordinator_of({"brokers": {
    ...     "GroupCoordinator": {"nodeid": -1, "nodename": "h:2", "source": "logical"},
    ...     "h:2/2": {"nodeid": 2, "nodename": "h:2", "source": "learned"}}})
    2
    """
    brokers = statistics.get("brokers") or {}
    logical = brokers.get("GroupCoordinator") or {}
    address = logical.get("nodename")
    if not address:
        return None
    for broker in brokers.values():
        if broker.get("source") != "logical" and broker.get("nodename") == address:
            node = broker.get("nodeid")
            return node if isinstance(node, int) and node >= 0 else None
    return None


class KafkaConsumerProtocolReader(ReadsOnly):
    """Reads the canary topic as a member of consumer group ``group_id`` on the
    consumer protocol (KIP-848); never writes.

    ``target``: the label its recorder's series carry; ``fetch_max_wait`` (seconds):
    group.fetch_max_wait, librdkafka's ``fetch.wait.max.ms``.
    """

    messaging_system = "kafka"
    max_in_flight: int | None = None
    stage_name = "group_consumer"

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
        self._credentials = CredentialFiles(config)
        self._settings: dict[str, Any] = {
            **librdkafka_member(
                config,
                group_id,
                target=target,
                fetch_max_wait=fetch_max_wait,
                statistics_every_ms=STATISTICS_EVERY_MS,
            ),
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            # Only partitions the assignment callback did not place (none, unless
            # librdkafka assigns without it) start here.
            "auto.offset.reset": "latest",
            # No topic made by asking about it (kafka_client's module doc).
            "allow.auto.create.topics": False,
            "stats_cb": self._statistics,
            "on_commit": self._commit_done,
            "error_cb": self._client_error,
        }
        self._consumer: Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._asked: queue.SimpleQueue[
            tuple[Callable[[Consumer], Any], concurrent.futures.Future[Any]]
        ] = queue.SimpleQueue()
        self._arrived: asyncio.Queue[list[Arrival]] = asyncio.Queue()
        # Kept by the polling thread; read by the event loop's cover() and
        # read_problem() (whole objects swapped, never changed in place).
        self._positions: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._assignment: frozenset[int] = frozenset()
        self._ever_assigned: set[int] = set()
        self._first_assignment_done = False
        self._unstable_since: float | None = clock()
        self._awaiting_first_record_since: float | None = None
        self._moved = False  # records handed out since the last commit began
        self._commits: deque[tuple[float, bool]] = deque()  # began, still counted
        self._last_commit_began = 0.0
        self._committing_now = False  # a synchronous commit is under way
        self._assigned = asyncio.Event()  # set once: the first assignment
        self._reassigned = asyncio.Event()  # set at every assignment
        self._problem: str | None = None
        self._failed_at = 0.0
        self._notes = MemberNotes(group_id, moving="reconciling")

    # -- the polling thread ----------------------------------------------------------

    def _poll_forever(self) -> None:
        consumer, loop = self._consumer, self._loop
        assert consumer is not None
        assert loop is not None
        while not self._stopping.is_set():
            try:
                # consume() returns when it has BATCH records or its timeout ran out,
                # which held every canary up to POLL_S: poll() returns with the first
                # record, and what else is queued comes at once, without waiting.
                first = consumer.poll(POLL_S)
                messages = [] if first is None else [first, *consumer.consume(BATCH, 0)]
            except KafkaException as exc:
                self._note_fetch_problem(f"fetch failed: {exc}")
                continue
            at_ns = time.time_ns()
            arrivals = [a for m in messages if (a := self._arrival(m, at_ns)) is not None]
            if arrivals:
                if self._awaiting_first_record_since is not None:
                    waited = self._clock() - self._awaiting_first_record_since
                    self._awaiting_first_record_since = None
                    self._recorder.first_record_after(self._target, waited)
                loop.call_soon_threadsafe(self._arrived.put_nowait, arrivals)
            self._maybe_commit(consumer)
            self._run_asked(consumer)

    def _run_asked(self, consumer: Consumer) -> None:
        """What the event loop asked of the consumer since the last poll."""
        while True:
            try:
                ask, answer = self._asked.get_nowait()
            except queue.Empty:
                return
            if not answer.set_running_or_notify_cancel():
                continue
            try:
                answer.set_result(ask(consumer))
            except Exception as exc:  # handed to the caller, who raises it
                answer.set_exception(exc)

    async def _on_poll_thread(self, ask: Callable[[Consumer], T]) -> T:
        """``ask(consumer)``, run by the polling thread between two polls."""
        answer: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._asked.put((ask, answer))
        return await asyncio.wrap_future(answer)

    def _arrival(self, message: Message, at_ns: int) -> Arrival | None:
        if (error := message.error()) is not None:
            self._note_fetch_problem(f"fetch failed: {error.str()}")
            self._recorder.member_error(self._target, member_error_name(error.name()))
            return None
        if self._problem is not None and self._clock() - self._failed_at > 2.0:
            self._problem = None
        partition, offset = message.partition(), message.offset()
        if partition is None or offset is None:
            return None
        if offset < self._positions.get(partition, -1):
            self._recorder.refetched(self._target, 1)  # rare: after a lost commit
            return None
        self._positions = {**self._positions, partition: offset + 1}
        self._moved = True
        return Arrival(partition, message.value() or b"", at_ns, offset, None)

    def _note_fetch_problem(self, problem: str) -> None:
        self._failed_at = self._clock()
        self._problem = problem

    def _maybe_commit(self, consumer: Consumer) -> None:
        """One commit in flight at a time, at most every COMMIT_EVERY_S; a commit not
        answered within the send timeout counts as timed out (its late answer then
        counts nothing)."""
        now = self._clock()
        if self._commits:
            began, counted = self._commits[-1]
            if counted and now - began > self._config.send_timeout:
                self._commits[-1] = (began, False)
                self._recorder.commit_failed(self._target, CommitFailure.TIMEOUT)
                self._notes.commits("commits failing (timeout): no answer")
            return
        if not self._moved or now - self._last_commit_began < COMMIT_EVERY_S:
            return
        if not (offsets := self._uncommitted()):
            self._moved = False
            return
        self._moved = False
        self._last_commit_began = now
        self._commits.append((now, True))
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._commits.pop()
            self._commit_failed(exc.args[0] if exc.args else None)

    def _uncommitted(self) -> list[TopicPartition]:
        return [
            TopicPartition(self._topic, p, at)
            for p, at in self._positions.items()
            if p in self._assignment and self._committed.get(p) != at
        ]

    def _commit_done(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to an asynchronous commit (on the polling thread)."""
        if self._committing_now or not self._commits:
            return  # a commit of a revocation or of close(), answered where it was made
        began, counted = self._commits.popleft()
        if not counted:
            return
        if error is not None:
            self._commit_failed(error)
            return
        self._recorder.committed(self._target, self._clock() - began)
        self._notes.commits(None)
        self._committed = {**self._committed, **{tp.partition: tp.offset for tp in partitions}}

    def _commit_failed(self, error: KafkaError | None) -> None:
        reason = commit_failure_reason(error)
        self._recorder.commit_failed(self._target, reason)
        self._notes.commits(f"commits failing ({reason}): {error}")

    def _statistics(self, text: str) -> None:
        with contextlib.suppress(ValueError):
            self._recorder.coordinated_by(self._target, coordinator_of(json.loads(text)))

    def _client_error(self, error: KafkaError) -> None:
        log.debug("group %s: %s", self._group_id, error)
        self._recorder.member_error(self._target, member_error_name(error.name()))

    # -- the group's life (callbacks, on the polling thread) ---------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        now = self._clock()
        began = self._unstable_since if self._unstable_since is not None else now
        self._unstable_since = None
        if partitions:
            self._place(consumer, partitions)
        consumer.incremental_assign(partitions)
        added = {tp.partition for tp in partitions}
        self._first_assignment_done = True
        self._ever_assigned |= added
        self._assignment = self._assignment | added
        self._awaiting_first_record_since = now
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._assigned.set)
            self._loop.call_soon_threadsafe(self._reassigned.set)
        if added:
            log.info(
                "group %s: assigned %s of topic %s after %.2fs",
                self._group_id,
                partitions_summary(sorted(added)),
                self._topic,
                now - began,
            )
            self._recorder.rebalanced(self._target, now - began, len(self._assignment))
        self._recorder.set_stable(self._target, True)

    def _place(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Where each newly assigned partition starts: its committed offset; with none,
        its end on the first assignment, its beginning after it (see the module doc)."""
        timeout = self._config.send_timeout
        first = not self._first_assignment_done
        try:
            committed = consumer.committed(partitions, timeout=timeout)
        except KafkaException as exc:
            log.debug("group %s: committed offsets unknown: %s", self._group_id, exc)
            return
        for tp, known in zip(partitions, committed, strict=True):
            if known.offset >= 0:
                tp.offset = known.offset
            elif first:
                try:
                    _, tp.offset = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
                except KafkaException as exc:
                    log.debug("group %s: end of %s unknown: %s", self._group_id, tp, exc)
            else:
                tp.offset = OFFSET_BEGINNING

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._revoked(consumer, partitions, lost=False)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The coordinator fenced the member (its heartbeats failed or its session ran
        # out): librdkafka's own name for it, as if it had said so in an error.
        self._recorder.member_error(self._target, member_error_name("_ASSIGNMENT_LOST"))
        self._revoked(consumer, partitions, lost=True)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition], lost: bool) -> None:
        gone = {tp.partition for tp in partitions}
        if self._unstable_since is None:
            self._unstable_since = self._clock()
        self._recorder.set_stable(self._target, False)
        # What was handed out is committed before the partitions go, as Kafka's own
        # consumers do; partitions lost (the member fenced) are no longer its to commit.
        if not lost and (offsets := [tp for tp in self._uncommitted() if tp.partition in gone]):
            self._committing_now = True
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                self._committed = {
                    **self._committed,
                    **{tp.partition: tp.offset for tp in offsets},
                }
            except KafkaException as exc:
                log.debug("group %s: commit on revocation: %s", self._group_id, exc)
            finally:
                self._committing_now = False
        consumer.incremental_unassign(partitions)
        self._committed = {p: at for p, at in self._committed.items() if p not in gone}
        self._assignment = self._assignment - gone
        if self._assignment:
            # Partitions only taken away: the member still reads the rest.
            self._unstable_since = None
            self._recorder.set_stable(self._target, True)

    # -- Transport -------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        consumer = Consumer(self._settings)
        self._consumer = consumer
        try:
            # librdkafka connects lazily: a metadata request says now whether the
            # brokers answer (and this one names the topic, which it does not create).
            await asyncio.to_thread(consumer.list_topics, self._topic, self._config.send_timeout)
        except KafkaException as exc:
            await asyncio.to_thread(consumer.close)
            raise TransportError(
                f"kafka: no broker of {self._config.bootstrap_servers} answered the "
                f"group_consumer stage's member ({exc.args[0] if exc.args else exc}): "
                "check kafka.bootstrap_servers and the tls and sasl settings"
            ) from exc
        self._unstable_since = self._clock()
        consumer.subscribe(
            [self._topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._thread = threading.Thread(
            target=self._poll_forever, name=f"group {self._group_id}", daemon=True
        )
        self._thread.start()
        try:
            async with asyncio.timeout(FIRST_JOIN_WAIT_S):
                await self._assigned.wait()
        except TimeoutError:
            log.warning(
                "group %s: not joined within %gs%s; probing goes on, the group_consumer "
                "stage judges what the member reads once it joins",
                self._group_id,
                FIRST_JOIN_WAIT_S,
                NEVER_ASSIGNED,
            )

    async def partitions(self) -> list[int]:
        # Once a round: a rotated password reaches the member's next connections
        # (librdkafka keeps it for each login); its TLS files it read when built.
        if (renewed := self._credentials.renewed()) is not None and renewed[0].password:
            sasl = self._config.sasl
            if sasl is not None:
                username, password = sasl.username, sasl.password_value()
                await self._on_poll_thread(
                    lambda consumer: consumer.set_sasl_credentials(username, password)
                )
        try:
            metadata = await self._on_poll_thread(
                lambda consumer: consumer.list_topics(self._topic, self._config.send_timeout)
            )
        except KafkaException as exc:
            raise TransportError(
                f"metadata refresh failed: no broker of {self._config.bootstrap_servers} "
                f"answered ({exc.args[0] if exc.args else exc})"
            ) from exc
        topic = metadata.topics.get(self._topic)
        if topic is None or topic.error is not None:
            return []
        return sorted(topic.partitions)

    def describe(self, partitions: Sequence[int]) -> str:
        if not partitions:
            return f"topic {self._topic} not found"
        return (
            f"topic {self._topic}: {len(partitions)} partitions, group {self._group_id} "
            "(consumer protocol)"
        )

    async def cover(self, partitions: Sequence[int]) -> None:
        """As the group stage's (probe.transport.kafka_group): once the member holds
        every partition, placed by the assignment callback; or once it is clear that
        the coordinator gave some to another member. Waits at most half the send
        timeout and never fails the round."""
        wanted = set(partitions)
        deadline = self._clock() + self._config.send_timeout / 2
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._config.send_timeout / 2):
                await self._assigned.wait()
        # The coordinator adds partitions new to the topic at the member's next
        # heartbeat (or metadata refresh): wait for them, not past the deadline.
        while True:
            self._reassigned.clear()
            remaining = deadline - self._clock()
            if wanted <= self._assignment or remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._reassigned.wait()
        self._notes.held_elsewhere(sorted(wanted - self._assignment))

    async def arrivals(self) -> AsyncIterator[Arrival]:
        while True:
            for arrival in await self._arrived.get():
                yield arrival

    def read_problem(self) -> str | None:
        """As the group stage's: a fetch failing, or the member without an assignment
        for longer than UNSTABLE_AFTER_S."""
        if self._problem is not None:
            return self._problem
        since = self._unstable_since
        if since is not None and self._clock() - since > UNSTABLE_AFTER_S:
            waited = f"group {self._group_id}: no assignment for {self._clock() - since:.0f}s"
            return waited if self._first_assignment_done else f"{waited}{NEVER_ASSIGNED}"
        return None

    async def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        while not self._asked.empty():  # asked after the last poll: nobody runs it now
            self._asked.get_nowait()[1].cancel()
        if self._consumer is not None:
            await asyncio.to_thread(self._close_consumer, self._consumer)

    def _close_consumer(self, consumer: Consumer) -> None:
        """What was read is committed (for the next run), then the member leaves its
        group, which reassigns at once instead of after the session timeout."""
        self._committing_now = True
        if offsets := self._uncommitted():
            with contextlib.suppress(KafkaException):
                consumer.commit(offsets=offsets, asynchronous=False)
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()
