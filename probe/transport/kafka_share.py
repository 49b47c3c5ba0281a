"""The share stage's reader: a member of a share group (KIP-932, "queues for Kafka") of
the probe's own, on librdkafka's share consumer (confluent-kafka, a preview there).

A share group hands each record to one member under an acquisition lock; the member
acknowledges it (accepts it here), and a record whose lock runs out before that (its
member stalled or gone) is delivered again, to whichever member fetches next, with a
delivery count one higher. A broker whose share-partition state stalls, a share
coordinator that cannot persist it, or a member that holds locks it never
acknowledges stops a share group's consumers while plain consumers and consumer
groups stay green: this stage reads the canary topic as such a consumer does.

**Its series** are the group stages' (probe.metrics.group), under ``stage="share"``:
an acknowledgement counts as a commit (the time from a record's acquisition, when
``poll`` returned it, to the broker confirming its acceptance; refusals by reason, a
lock that had run out among them), the coordinator and the assignment come from
librdkafka's statistics (a share consumer has no assignment callbacks), and every
record's delivery count goes to ``synthetic_sla_group_deliveries``.

**Threads**, as the group_consumer stage's reader: one thread of its own makes every
call on the share consumer (which is not thread-safe): it polls, acknowledges, and
the acknowledgement results come back in its polls. The event loop takes the records
it hands over.

**Where a new share group starts.** Kafka starts a share partition no member has read
at its end (``share.auto.offset.reset``: ``latest``), when a member first fetches it,
which may be after the first canaries were written: the probe sets its own group's
reset to the last minute (``by_duration``), so a canary written before the member's
first fetch is read too. The broker keeps each share partition's state from then on.
The member is covered once its statistics show it assigned: like the group stages,
it starts only then to be judged on time.
A cluster that refuses the setting (no ALTER_CONFIGS on the group) is told once in
the log; the stage then misses what was written before its first fetch.

Records are all accepted, hostile ones too: the stage judges and counts them, and a
rejected record would be archived where no other consumer of the group could see it.
A record the broker delivers again after this member handed it out (its
acknowledgement was lost) is counted as refetched and not handed out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError as AIOKafkaError
from confluent_kafka import KafkaError, KafkaException, Message, ShareConsumer, TopicPartition

from probe.config import KafkaConfig
from probe.core.errors import CommitFailure, TransportError
from probe.transport import Arrival
from probe.transport.kafka_admin import GROUP, Config, set_configs, topic_partitions
from probe.transport.kafka_client import (
    CredentialFiles,
    connection_options,
    give_credentials,
    never_auto_create,
)
from probe.transport.kafka_group import (
    FIRST_JOIN_WAIT_S,
    UNSTABLE_AFTER_S,
    GroupRecorder,
    ReadsOnly,
    Unrecorded,
    member_error_name,
)
from probe.transport.kafka_group_consumer import commit_failure_reason, coordinator_of
from probe.transport.kafka_settings import librdkafka_member

log = logging.getLogger(__name__)

# How long the polling thread waits for records before it looks at what the event
# loop asked and whether it should stop.
POLL_S = 0.1
# librdkafka's statistics (the assignment and the coordinator): a share consumer has
# no assignment callbacks, so a change of its assignment is seen at most this late.
STATISTICS_EVERY_MS = 2_000
# Where a share partition starts when the probe's group first reads it: this far back
# (see the module's doc), longer than the rounds' interval.
START_BACK = "by_duration:PT1M"
# A record handed out whose acceptance never came back is forgotten after this long:
# it went to another member (its lock ran out), and only that member can settle it.
FORGET_AFTER_S = 600.0

# What a member never assigned is most likely up against: a broker without share
# groups answers nothing librdkafka passes on, the member only never gets partitions.
NEVER_ASSIGNED = (
    " (never assigned since it subscribed: the brokers may not have share groups, "
    "KIP-932, which need Apache Kafka 4.2 or newer, or share.version=1 on 4.0 and 4.1; "
    "the group and group_consumer stages read on consumer groups)"
)


def acknowledgement_failure_reason(error: KafkaError | None) -> CommitFailure:
    """The ``reason`` label of an acknowledgement the broker refused: a record whose
    lock had run out (it is no longer this member's) is ``lock_expired``; the rest as
    a commit's.

    >>> acknowledgement_failure_reason(KafkaError(KafkaError.INVALID_RECORD_STATE))
    <CommitFailure.LOCK_EXPIRED: 'lock_expired'>
    >>> acknowledgement_failure_reason(KafkaError(KafkaError.REQUEST_TIMED_OUT))
    <CommitFailure.TIMEOUT: 'timeout'>
    """
    if error is not None and error.code() == KafkaError.INVALID_RECORD_STATE:
        return CommitFailure.LOCK_EXPIRED
    return commit_failure_reason(error)


def share_assignment(statistics: Mapping[str, Any]) -> tuple[int, int | None]:
    """From librdkafka's statistics: the partitions assigned to the member while its
    group is steady (0 otherwise), and how many rebalances it has been through.

    >>> share_assignment({"cgrp": {"join_state": "steady", "assignment_size": 3,
    ...                            "rebalance_cnt": 1}})
    (3, 1)
    >>> share_assignment({"cgrp": {"join_state": "wait-join", "assignment_size": 3}})
    (0, None)
    """
    group = statistics.get("cgrp") or {}
    size = group.get("assignment_size")
    count = group.get("rebalance_cnt")
    steady = group.get("join_state") == "steady"
    assigned = size if steady and isinstance(size, int) else 0
    return assigned, (count if isinstance(count, int) else None)


class KafkaShareReader(ReadsOnly):
    """Reads the canary topic as a member of share group ``group_id``, accepting every
    record; never writes.

    ``target``: the label its recorder's series carry; ``fetch_max_wait`` (seconds):
    group.fetch_max_wait, librdkafka's ``fetch.wait.max.ms``.
    """

    messaging_system = "kafka"
    max_in_flight: int | None = None
    stage_name = "share"

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
            "share.acknowledgement.mode": "explicit",
            "stats_cb": self._statistics,
            "error_cb": self._client_error,
            # librdkafka says once, on stderr, that its share consumer is a preview:
            # into the probe's log instead, where the rest of its lines go.
            "logger": log,
        }
        self._consumer: ShareConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._arrived: asyncio.Queue[list[Arrival]] = asyncio.Queue()
        # Kept by the polling thread. Records handed out and not yet confirmed
        # accepted, by (partition, offset): when each was acquired.
        self._handed_out: dict[tuple[int, int], float] = {}
        self._last_forgetting = clock()
        # From the statistics (the polling thread runs stats_cb in its polls).
        self._assigned_partitions = 0
        self._rebalances_seen: int | None = None
        self._ever_assigned = False
        self._unsettled_since: float | None = clock()
        self._awaiting_first_record_since: float | None = None
        self._assigned = asyncio.Event()  # set once: the first assignment seen
        self._problem: str | None = None
        self._failed_at = 0.0
        # A rotated SASL login the polling thread gives the consumer (see partitions()).
        self._new_login: tuple[str, str] | None = None

    # -- the polling thread ----------------------------------------------------------

    def _poll_forever(self) -> None:
        consumer, loop = self._consumer, self._loop
        assert consumer is not None
        assert loop is not None
        while not self._stopping.is_set():
            try:
                # Also sends the acceptances of the last poll's records, and runs
                # the callbacks: statistics, acknowledgement results.
                messages = consumer.poll(POLL_S)
            except KafkaException as exc:
                self._note_fetch_problem(f"fetch failed: {exc}")
                continue
            acquired, at_ns = self._clock(), time.time_ns()
            arrivals = [
                arrival
                for message in messages
                if (arrival := self._accept(consumer, message, acquired, at_ns)) is not None
            ]
            if arrivals:
                if self._awaiting_first_record_since is not None:
                    waited = acquired - self._awaiting_first_record_since
                    self._awaiting_first_record_since = None
                    self._recorder.first_record_after(self._target, waited)
                loop.call_soon_threadsafe(self._arrived.put_nowait, arrivals)
            if acquired - self._last_forgetting > FORGET_AFTER_S:
                self._forget_older_than(acquired - FORGET_AFTER_S)
            if (login := self._new_login) is not None:
                self._new_login = None
                consumer.set_sasl_credentials(*login)

    def _accept(
        self, consumer: ShareConsumer, message: Message, acquired: float, at_ns: int
    ) -> Arrival | None:
        """Accept the record (sent with the next poll) and hand it out, unless this
        member already did."""
        if (error := message.error()) is not None:
            self._note_fetch_problem(f"fetch failed: {error.str()}")
            self._recorder.member_error(self._target, member_error_name(error.name()))
            return None
        partition, offset = message.partition(), message.offset()
        if partition is None or offset is None:
            return None
        if self._problem is not None and acquired - self._failed_at > 2.0:
            self._problem = None
        consumer.acknowledge(message)
        self._recorder.delivered(self._target, message.delivery_count() or 1)
        key = (partition, offset)
        if key in self._handed_out:
            self._recorder.refetched(self._target, 1)  # its acceptance was lost
            return None
        self._handed_out[key] = acquired
        return Arrival(partition, message.value() or b"", at_ns, offset, None)

    def _acknowledged(
        self, offsets: Mapping[TopicPartition, set[int]], error: KafkaException | None
    ) -> None:
        """The broker's answer to acceptances (on the polling thread)."""
        now = self._clock()
        if error is not None:
            code = error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None
            reason = acknowledgement_failure_reason(code)
            self._recorder.commit_failed(self._target, reason)
            log.debug("share group %s: acceptances refused (%s): %s", self._group_id, reason, error)
            return
        for tp, accepted in offsets.items():
            for offset in accepted:
                acquired = self._handed_out.pop((tp.partition, offset), None)
                if acquired is not None:
                    self._recorder.committed(self._target, now - acquired)

    def _forget_older_than(self, when: float) -> None:
        self._last_forgetting = self._clock()
        self._handed_out = {key: at for key, at in self._handed_out.items() if at >= when}

    def _note_fetch_problem(self, problem: str) -> None:
        self._failed_at = self._clock()
        self._problem = problem

    def _statistics(self, text: str) -> None:
        try:
            statistics = json.loads(text)
        except ValueError:
            return
        self._recorder.coordinated_by(self._target, coordinator_of(statistics))
        assigned, rebalances = share_assignment(statistics)
        now = self._clock()
        if not assigned:
            if self._unsettled_since is None:
                self._unsettled_since = now
            self._recorder.set_stable(self._target, False)
            return
        if rebalances != self._rebalances_seen or assigned != self._assigned_partitions:
            # Since the subscription, or since the statistics first saw the member
            # without an assignment (to their interval); 0 when they never did.
            began = self._unsettled_since if self._unsettled_since is not None else now
            group = statistics.get("cgrp") or {}
            done = now - (group.get("rebalance_age") or 0) / 1000
            self._recorder.rebalanced(self._target, max(0.0, done - began), assigned)
            log.info(
                "share group %s: assigned %d partitions of topic %s",
                self._group_id,
                assigned,
                self._topic,
            )
            self._rebalances_seen = rebalances
            self._awaiting_first_record_since = now
        self._assigned_partitions = assigned
        if not self._ever_assigned and self._loop is not None:
            self._loop.call_soon_threadsafe(self._assigned.set)
        self._ever_assigned = True
        self._unsettled_since = None
        self._recorder.set_stable(self._target, True)

    def _client_error(self, error: KafkaError) -> None:
        log.debug("share group %s: %s", self._group_id, error)
        self._recorder.member_error(self._target, member_error_name(error.name()))

    # -- Transport -------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        admin = AIOKafkaAdminClient(**connection_options(self._config))
        never_auto_create(admin._client)
        try:
            await admin.start()
        except (AIOKafkaError, OSError) as exc:
            await admin.close()
            raise TransportError(
                f"kafka: no broker of {self._config.bootstrap_servers} answered the share "
                f"stage's member ({exc}): check kafka.bootstrap_servers and the tls and "
                "sasl settings"
            ) from exc
        self._admin = admin
        refused = await set_configs(
            admin, [Config(GROUP, self._group_id, "share.auto.offset.reset", START_BACK)]
        )
        if refused:
            log.warning(
                "share group %s: its start could not be set to the last minute (%s): "
                "canaries written before its first fetch of a partition are not read",
                self._group_id,
                "; ".join(refused),
            )
        consumer = ShareConsumer(self._settings)
        consumer.set_acknowledgement_commit_callback(self._acknowledged)
        consumer.subscribe([self._topic])
        self._consumer = consumer
        self._unsettled_since = self._clock()
        self._thread = threading.Thread(
            target=self._poll_forever, name=f"share {self._group_id}", daemon=True
        )
        self._thread.start()
        try:
            async with asyncio.timeout(FIRST_JOIN_WAIT_S):
                await self._assigned.wait()
        except TimeoutError:
            log.warning(
                "share group %s: not assigned within %gs%s; probing goes on, the share "
                "stage judges what the member reads once it is",
                self._group_id,
                FIRST_JOIN_WAIT_S,
                NEVER_ASSIGNED,
            )

    async def partitions(self) -> list[int]:
        # Once a round: a rotated password reaches the member's next connections
        # (librdkafka keeps it for each login) and the admin client's.
        admin = self._admin
        assert admin is not None, "start() first"
        if (renewed := self._credentials.renewed()) is not None:
            what, options = renewed
            give_credentials([admin._client], options, what)
            sasl = self._config.sasl
            if what.password and sasl is not None:
                # Given by the polling thread between two polls: a share consumer
                # refuses a call while another thread's is under way.
                self._new_login = (sasl.username, sasl.password_value())
        try:
            return await topic_partitions(admin, self._topic)
        except AIOKafkaError as exc:
            raise TransportError(
                f"metadata refresh failed: no broker of {self._config.bootstrap_servers} "
                f"answered ({exc})"
            ) from exc

    def describe(self, partitions: Sequence[int]) -> str:
        if not partitions:
            return f"topic {self._topic} not found"
        return f"topic {self._topic}: {len(partitions)} partitions, share group {self._group_id}"

    async def cover(self, partitions: Sequence[int]) -> None:
        """Once the member has been assigned partitions (as its statistics say), waiting
        at most half the send timeout and never failing the round. Its canaries are
        read from then on; what was written before it fetches is taken in by the
        group's start (the last minute, see the module's doc), and a share group hands
        out partitions new to the topic as they come."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._config.send_timeout / 2):
                await self._assigned.wait()

    async def arrivals(self) -> AsyncIterator[Arrival]:
        while True:
            for arrival in await self._arrived.get():
                yield arrival

    def read_problem(self) -> str | None:
        """A fetch failing, or the member without an assignment for longer than
        UNSTABLE_AFTER_S (as the statistics see it)."""
        if self._problem is not None:
            return self._problem
        since = self._unsettled_since
        if since is not None and self._clock() - since > UNSTABLE_AFTER_S:
            waited = f"share group {self._group_id}: no assignment for {self._clock() - since:.0f}s"
            return waited if self._ever_assigned else f"{waited}{NEVER_ASSIGNED}"
        return None

    async def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        if self._consumer is not None:
            # Sends the last acceptances and leaves the group, whose other members
            # (none but the probe's, usually) get the partitions at once.
            with contextlib.suppress(KafkaException, RuntimeError):
                await asyncio.to_thread(self._consumer.close)
        if self._admin is not None:
            await self._admin.close()
