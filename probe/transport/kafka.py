"""Kafka transport on aiokafka: an acks=all producer and a group-less consumer.

The consumer assigns partitions itself (no consumer group): the probe must read
every partition, whatever other probes on the topic do, and a group rebalance would
be a pause the probe measured as its own latency.

**The reader follows the writer.** A fetch without a fetch session (aiokafka has
none) names every assigned partition in its request and its response, so its cost
grows with the partitions read, not with the records: at 10,000 partitions an idle
consumer fetching every 100 ms used 0.42 core (0.65 with librdkafka) before a single
canary. The transport writes every canary itself, so it knows which partitions have
one on its way: a transport that writes reads only the partitions whose canaries
have not all come back yet (until the loss timeout), once the topic has more than
``FOLLOW_ABOVE`` partitions. Every partition gets a canary every interval, so
anything else written to it (a foreign probe's canary, a hostile record, a
duplicate) is still read, at most one interval later. Smaller topics, and a
transport that never writes (the bridge stage's reader), are read whole all the
time: anything written there is read within a fetch. Positions are the
transport's own (the offset after the last record handed out), so a partition
leaves and rejoins the assignment where it was, nothing read twice, nothing
skipped.

**A lane per broker.** A reader that follows the writer splits its partitions by the
broker that leads them, each share read by a consumer of its own (``kafka_lanes``), so
that changing what one broker's partitions are read throws away no other broker's
fetch. A reader of the whole topic keeps one consumer (see _open_lanes()).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumber,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownProducerId,
    UnknownTopicOrPartitionError,
)

from probe.config import KafkaConfig
from probe.core.errors import (
    ConnectFailed,
    ProduceFailed,
    ProduceFailure,
    TransactionOutcome,
    TransportError,
)
from probe.core.fetch_wait import FetchWait
from probe.core.leadership import LeaderPlan
from probe.core.partition_summary import partitions_summary, ranges_summary
from probe.core.reader_signals import NO_SIGNALS, ReaderSignals
from probe.core.replicas import TopicReplicas, broker_address, topic_replicas
from probe.transport import Arrival, kafka_refusals
from probe.transport.connect_errors import shown
from probe.transport.kafka_admin import (
    ReassignmentInFlight,
    create_topic,
    eligible_leaders,
    min_insync_replicas,
    reassignments,
)
from probe.transport.kafka_client import (
    CredentialFiles,
    connection_options,
    fetch_max_wait_ms,
    give_credentials,
    known_to_every_broker,
    never_auto_create,
    reason_for,
    set_fetch_max_wait,
)
from probe.transport.kafka_connect_errors import (
    DIAGNOSE_EVERY,
    ConnectionWatch,
    first_address,
    start_or_say_why,
)
from probe.transport.kafka_denials import denial
from probe.transport.kafka_lanes import LANES_AT_MOST, Lane, lane_target
from probe.transport.kafka_leaders import carry_out
from probe.transport.kafka_transactions import Transactions, transactional_options

log = logging.getLogger(__name__)

T = TypeVar("T")

_PRODUCE_REASONS: tuple[tuple[type[BaseException], ProduceFailure], ...] = (
    (KafkaTimeoutError, ProduceFailure.TIMEOUT),
    (asyncio.TimeoutError, ProduceFailure.TIMEOUT),
    (KafkaConnectionError, ProduceFailure.BROKER_UNAVAILABLE),
    (NotLeaderForPartitionError, ProduceFailure.NOT_LEADER),
    (NotEnoughReplicasError, ProduceFailure.NOT_ENOUGH_REPLICAS),
    (UnknownTopicOrPartitionError, ProduceFailure.UNKNOWN_PARTITION),
    (TopicAuthorizationFailedError, ProduceFailure.NOT_AUTHORIZED),
    (MessageSizeTooLargeError, ProduceFailure.TOO_LARGE),
)


# Writes that failed this way may have lost their leader's connection: diagnosed.
_CONNECTION_LOST = frozenset({ProduceFailure.TIMEOUT, ProduceFailure.BROKER_UNAVAILABLE})


def produce_failure_reason(exc: BaseException) -> ProduceFailure:
    return reason_for(exc, _PRODUCE_REASONS, ProduceFailure.OTHER)


# An idempotent producer whose state the partition's leader no longer has: a leader
# elected uncleanly, or a log truncated under it, answers every later write with
# OUT_OF_ORDER_SEQUENCE_NUMBER (or UNKNOWN_PRODUCER_ID) for as long as the producer
# lives. Kafka's own producer bumps its epoch and starts its sequences over (KIP-360);
# aiokafka's does not, so the transport starts a new producer at the next round.
_PRODUCER_STATE_LOST = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch)


# Above this many partitions a reader that writes reads only where a canary is on
# its way; up to it, a whole topic costs little to fetch (256 partitions fetched
# every 100 ms: about 1 % of a core; 10,000: 42 %).
FOLLOW_ABOVE = 256


# How long a lane's assignment may wait for a partition that has not come back in a
# fetch since the last change before it changes anyway, at first and at most (see
# _read_lane()).
FETCH_PATIENCE = 1.0
FETCH_PATIENCE_AT_MOST = 8.0

# How long a lane has had nothing on its way before it pauses its partitions (rounds
# are at least a second apart; within one, bursts are 20 ms apart).
PAUSE_IDLE_AFTER = 0.5

# How often a lane with nothing to read looks for partitions to take on, at least (it
# looks whenever a canary is written).
IDLE_LANE_LOOKS_EVERY = 1.0

# Batches of records read and not yet handed out, at most: a reader that stops taking
# them stops the lanes' fetching too.
INBOX_BATCHES = 64

# How often the topic's min.insync.replicas is asked for (an admin request; a topic's
# config rarely changes).
TOPIC_CONFIG_EVERY = 300.0

# How long a refresh waits on its admin lookups (min.insync.replicas, reassignments)
# before going on with what the last ones found, as a share of the send timeout. They
# only refine replica health; the refresh also moves the reader to new leaders and
# covers new partitions, which must not wait on a controller that is gone.
ADMIN_LOOKUP_SHARE = 0.1


@dataclass(slots=True)
class _Awaited:
    """Canaries written to one partition and not read back yet."""

    payloads: list[bytes] = field(default_factory=list)
    until: float = 0.0  # monotonic time after which they are given up on
    # The offsets the broker acknowledged them at, once it has (see _out_of_range).
    offsets: dict[bytes, int] = field(default_factory=dict)
    # When the acknowledgement came (monotonic), while the fetch wait is being decided.
    acked_at: dict[bytes, float] = field(default_factory=dict)


@dataclass
class OptionalLookup:
    """An admin lookup the probe can do without (an ACL not granted, a broker without
    the request): asked only while needed; refused, it is said once in the log (what
    cannot be asked, and what the probe does without it) and asked again after
    TOPIC_CONFIG_EVERY. Never fails the metadata refresh it serves."""

    topic: str
    cannot: str
    without: str
    refused_at: float | None = None

    async def ask(self, needed: bool, request: Callable[[], Awaitable[T]]) -> T | None:
        """The answer; None when not needed, refused, or refused lately."""
        if not needed:
            return None
        now = time.monotonic()
        if self.refused_at is not None and now - self.refused_at < TOPIC_CONFIG_EVERY:
            return None
        try:
            answer = await request()
        except (KafkaError, NotImplementedError, TimeoutError, TypeError, ValueError) as exc:
            if isinstance(exc, TimeoutError) or (isinstance(exc, KafkaError) and exc.retriable):
                # A broker down or slow, not a refusal: asked again at the next refresh.
                log.debug("topic %s: %s (%r); asked again", self.topic, self.cannot, exc)
                return None
            if self.refused_at is None:
                log.info("topic %s: %s (%r): %s", self.topic, self.cannot, exc, self.without)
            self.refused_at = now
            return None
        self.refused_at = None
        return answer


class KafkaTransport:
    """Canaries to every partition of one topic, read back by a manual-assignment consumer.

    ``hold``: how long a partition is read after a canary was written to it, if the
    canary does not come back (the loss timeout: a canary later than that is lost).
    ``writes``: whether this transport writes the canaries it reads (the probe's own
    topic), so that it reads only where a canary is on its way; a reader of a topic
    someone else fills (the bridge stage's) reads every partition all the time, as
    does one of a topic of at most ``follow_above`` partitions.

    ``transactional_id``: the producer writes in transactions (kafka_transactions;
    ``send(aborting=True)`` in one that is aborted), each aborted by the broker if
    left open ``transaction_timeout`` seconds; ``on_transaction`` hears how each
    ended. ``read_committed``: the reader reads committed records only (the
    transactional stage's), and says how far each partition's last stable offset
    trails its high watermark (:meth:`unstable_records`).

    Connections lost mid-run and refused are diagnosed about once every
    ``diagnose_every`` seconds and each cause found goes to ``on_connect_failed``
    (kafka_connect_errors.ConnectionWatch); rotated credential files reach the
    running clients at the next round (kafka_client.CredentialFiles).
    """

    messaging_system = "kafka"
    # The producer batches a whole round into a request per broker: send it all at once.
    max_in_flight: int | None = None
    # Why the last fetch failed, until fetches work again: see read_problem().
    _read_problem: str | None = None

    def __init__(
        self,
        config: KafkaConfig,
        *,
        hold: float = 60.0,
        writes: bool = True,
        follow_above: int | None = None,
        diagnose_every: float = DIAGNOSE_EVERY,
        on_connect_failed: Callable[[ConnectFailed], None] = lambda _: None,
        transactional_id: str | None = None,
        transaction_timeout: float = 60.0,
        on_transaction: Callable[[TransactionOutcome], None] = lambda _: None,
        read_committed: bool = False,
    ) -> None:
        if not config.bootstrap_servers:
            raise TransportError(f"{config.setting('bootstrap_servers')} is not set")
        self._config = config
        self._topic = config.topic
        self._credentials = CredentialFiles(config)
        options = connection_options(config)
        self._options = options
        # kafka.fetch_max_wait, or (auto) decided from the brokers' read delays.
        self._fetch_wait = FetchWait(config.fetch_max_wait)
        self._watch = ConnectionWatch(
            config, lambda: self._options, every=diagnose_every, on_failed=on_connect_failed
        )
        # A transactional producer (the transactional stage's writes) groups its sends
        # into transactions (kafka_transactions); a read_committed reader (that stage's)
        # reads only what they committed.
        self._producer_options: dict[str, Any] = {}
        self._transactions: Transactions | None = None
        if transactional_id is not None:
            self._producer_options = transactional_options(transactional_id, transaction_timeout)
            self._transactions = Transactions(
                lambda: self._producer,
                end_within=config.send_timeout,
                renew=self._renew_after_transaction,
                on_ended=on_transaction,
            )
        self._read_committed = read_committed
        self._producer = self._new_producer(
            {**options, **self._producer_options}, idempotent=config.idempotence
        )
        # The first lane's consumer, which also looks offsets up for the others.
        self._consumer = self._new_consumer()
        self._refusals = kafka_refusals.install(produce_failure_reason)
        self._renew_producer = False
        self._hold = hold
        self._writes = writes
        self._follow_above = FOLLOW_ABOVE if follow_above is None else follow_above
        # Every partition the reader is responsible for, with the offset it reads next;
        # the consumer is assigned only those it must read now (see the module doc).
        self._assigned: set[int] = set()
        self._positions: dict[int, int] = {}
        # The lanes by broker (see kafka_lanes), which lane reads each partition read
        # now, and what they read that is not handed out yet.
        self._lanes: dict[int, Lane] = {}
        self._held: dict[int, int] = {}
        self._leaders: dict[int, int] = {}  # as the producer's metadata said at cover()
        self._opening: asyncio.Task[None] | None = None
        self._inbox: asyncio.Queue[list[Arrival] | Exception] = asyncio.Queue(INBOX_BATCHES)
        self._failed_at = 0.0
        self._awaited: dict[int, _Awaited] = {}
        self._known: frozenset[int] = frozenset()
        # How a log that started over is told (see _follow_restarted_logs): whether the
        # topic vanished or this probe (re)created it since the last cover(), and, for
        # a reader that never writes, each partition's log end offset at the last one.
        self._restarted = False
        self._sent = False
        self._log_ends: dict[int, int] = {}
        self._covered = asyncio.Event()
        # Set when a canary is written: lanes with nothing to read wait for it.
        self._written = asyncio.Event()
        self._started = False
        # The topic's min.insync.replicas (None: the broker did not say), and when it
        # was last asked for; the admin client that asks, kept open once it has.
        self._min_insync: int | None = None
        self._config_read_at: float | None = None
        self._admin: AIOKafkaAdminClient | None = None
        # Replicas a reassignment in flight adds, per partition.
        self._adding: dict[int, tuple[int, ...]] = {}
        self._reassignments = OptionalLookup(
            config.topic,
            "cannot list partition reassignments",
            "replicas a reassignment adds count as out of sync; grant Describe on the cluster",
        )
        # Eligible leader replicas (KIP-966) per partition (none outside trouble).
        self._eligible: dict[int, tuple[int, ...]] = {}
        self._eligible_replicas = OptionalLookup(
            config.topic,
            "cannot describe its partitions' eligible leader replicas",
            "under min ISR counts the ISR alone",
        )
        # Both lookups run in one task that outlives a refresh when the controller is
        # slow; at most one at a time.
        self._admin_lookup: asyncio.Task[None] | None = None

    def _new_consumer(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self._options,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed" if self._read_committed else "read_uncommitted",
            fetch_max_wait_ms=fetch_max_wait_ms(self._fetch_wait.seconds),
            # A position that falls off the log is moved by the transport itself
            # (_out_of_range): the consumer raises OFFSET_OUT_OF_RANGE instead.
            auto_offset_reset="none",
        )
        never_auto_create(consumer._client)
        return consumer

    @staticmethod
    def _new_producer(options: Mapping[str, Any], *, idempotent: bool) -> AIOKafkaProducer:
        # A transactional producer (transactional_id in the options) is idempotent.
        idempotent = idempotent or "transactional_id" in options
        producer = AIOKafkaProducer(
            **options, acks="all", enable_idempotence=idempotent, linger_ms=0
        )
        never_auto_create(producer.client)
        return producer

    async def _start_producer(self) -> None:
        try:
            # aiokafka asks for a producer id until it gets one: a cluster that cannot
            # grant it (its controller quorum lost) would hold the start forever.
            async with asyncio.timeout(self._config.send_timeout):
                await self._producer.start()
        except TimeoutError:
            await self._producer.stop()
            if self._transactions is not None:
                answer = f"no answer within {self._config.send_timeout:g}s"
                raise TransportError(self._no_transactions(answer)) from None
            raise TransportError(
                f"{self._config.bootstrap_servers}: no producer id granted within "
                f"{self._config.send_timeout:g}s (an idempotent producer waits for the "
                "controller quorum; kafka.idempotence: false produces without one)"
            ) from None
        except KafkaError as exc:
            if self._transactions is None:
                raise
            await self._producer.stop()
            raise TransportError(self._no_transactions(str(exc))) from exc

    def _no_transactions(self, answer: str) -> str:
        transactional_id = self._producer_options.get("transactional_id")
        return (
            f"{self._config.bootstrap_servers}: no producer id granted for transactional id "
            f"{transactional_id} ({answer}): the transactional stage needs brokers with "
            "transactions (Apache Kafka; the embedded broker has none) and, where ACLs are "
            "on, Write on the transactional id; drop transactional from stages otherwise"
        )

    async def start(self) -> None:
        async def clients() -> None:
            await self._start_producer()
            await self._consumer.start()

        await start_or_say_why(clients, self.close, self._config, self._options)
        self._started = True

    async def _renewed_producer(self) -> None:
        """A new producer, and with it a new producer id, for one whose id the brokers
        no longer know (see _PRODUCER_STATE_LOST)."""
        self._renew_producer = False
        old = self._producer
        log.warning(
            "topic %s: the brokers lost this producer's state (an unclean leader "
            "election, a truncated log); starting a new producer",
            self._topic,
        )
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(1.0):
                await old.stop()
        self._producer = self._new_producer(
            {**self._options, **self._producer_options}, idempotent=self._config.idempotence
        )
        await self._start_producer()

    def _renew_after_transaction(self) -> None:
        """A producer that could neither commit nor abort a transaction is replaced at
        the next round (its successor, with the same transactional id, fences it)."""
        self._renew_producer = True

    async def partitions(self) -> list[int]:
        self._renew_credentials()
        if self._renew_producer:
            await self._renewed_producer()
        client = self._producer.client
        refreshed = await _refreshed(client)
        if not refreshed:
            host, port = first_address(self._config.bootstrap_servers or "")
            failure = TransportError(
                f"metadata refresh failed: no broker of {self._config.bootstrap_servers} answered"
            )
            self._watch.suspect(_broker_at(client.cluster, host, port), (host, port), failure)
        self._watch.look()
        if not refreshed:
            raise self._watch.problem or failure
        found = client.cluster.partitions_for_topic(self._topic)
        self._known = frozenset(found or ())
        if found:
            await self._follow_leaders(client.cluster)
            await self._look_up_topic_state(client.cluster)
        if not found:
            # The topic is gone (deleted, or a broker that lost its storage), or not
            # there yet (a mirror's, which MirrorMaker 2 creates, then fills from the
            # source's start): whatever has this name next is a new log, read whole.
            self._restarted = True
        return sorted(found) if found else []

    def _renew_credentials(self) -> None:
        """Give every client the rotated credentials, if a file changed (see
        kafka_client's module doc)."""
        renewed = self._credentials.renewed()
        if renewed is None:
            return
        what, self._options = renewed
        give_credentials(self._clients(), self._options, what)

    def _clients(self) -> Iterator[Any]:
        """aiokafka's clients under every producer, consumer and admin client running."""
        yield self._producer.client
        consumers = {id(lane.consumer): lane.consumer for lane in self._lanes.values()}
        consumers[id(self._consumer)] = self._consumer
        for consumer in consumers.values():
            yield consumer._client
        if self._admin is not None:
            yield self._admin._client

    def _lost(self, partition: int, failure: BaseException) -> None:
        """A write failed for want of its leader: a connection to suspect."""
        cluster = self._producer.client.cluster
        leader = cluster.leader_for_partition(self._tp(partition))
        broker = None if leader is None or leader < 0 else cluster.broker_metadata(leader)
        if broker is not None:
            self._watch.suspect(str(leader), (broker.host, broker.port), failure)

    async def _follow_leaders(self, fresh: Any) -> None:
        """Bring the reader's metadata up to date when a leader it reads from moved.

        The reader's client refreshes its own metadata only every five minutes or when
        a fetch says so; an offset lookup (after OFFSET_OUT_OF_RANGE, as a log
        truncated by an unclean election gives) that a former leader refuses with
        NOT_LEADER is retried against that same broker until then: the partition
        stalls. The producer's metadata, refreshed every round, tells it first.
        """
        # All lanes at once: each refresh may wait behind a fetch its broker holds.
        stale = [
            lane.consumer._client  # aiokafka's own client of the consumer
            for lane in self._lanes.values()
            if any(
                lane.consumer._client.cluster.leader_for_partition(tp)
                != fresh.leader_for_partition(tp)
                for tp in map(self._tp, lane.reading)
            )
        ]
        await asyncio.gather(*map(_refreshed, stale))

    async def provision(self) -> None:
        if not self._config.create_topic:
            # The flag, not a setting: it is once.create_topic for `once` (off unless
            # asked) and kafka.create_topic for `run`, and this does not know which.
            raise TransportError(
                f"{self.describe([])}: create it, or let the probe create it (--create-topic)"
            )
        await self.ensure_topic(self._config.partitions, self._config.replication_factor)

    async def _look_up_topic_state(self, cluster: Any) -> None:
        """Ask the admin API what the metadata does not say (min.insync.replicas, the
        replicas a reassignment adds), waiting at most ADMIN_LOOKUP_SHARE of the send
        timeout; a lookup still under way then finishes in the background, and the
        refresh goes on with what the last one found.

        A lookup that times out drops the admin client: aiokafka's keeps sending to
        the controller its last metadata named, and after an unclean election or a
        controller lost that broker may be gone for good. The next lookup bootstraps
        anew. Held inside the refresh, such a lookup once kept the reader from ever
        following its partitions' new leaders (the refresh timed out every round).
        """
        if self._admin_lookup is None or self._admin_lookup.done():
            records = getattr(cluster, "_partitions", {}).get(self._topic) or {}
            outside = sorted(p for p, r in records.items() if len(r.isr) < len(r.replicas))
            # Under min ISR (every replica out counts while min ISR is unknown) or
            # offline: where eligible leader replicas may be.
            short = any(
                r.leader < 0 or len(r.isr) < (self._min_insync or len(r.replicas))
                for r in records.values()
            )
            # Asked of a broker that leads a canary partition now, up at this refresh:
            # the admin client's own metadata may still list brokers that are down.
            leading = sorted({r.leader for r in records.values() if r.leader >= 0})
            self._admin_lookup = asyncio.create_task(
                self._look_up(outside, short, leading[0] if leading else None),
                name=f"admin lookup {self._topic}",
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ADMIN_LOOKUP_SHARE * self._config.send_timeout):
                await asyncio.shield(self._admin_lookup)

    async def _look_up(self, outside: list[int], short: bool, live: int | None) -> None:
        try:
            async with asyncio.timeout(self._config.send_timeout):
                await self._read_topic_config()
                # Apart: a controller slow to list reassignments must not keep the
                # eligible replicas from being asked, nor the other way round.
                await asyncio.gather(
                    self._read_reassignments(outside), self._read_eligible(short, live)
                )
        except TimeoutError:
            log.debug("topic %s: admin lookup timed out; a new admin client next", self._topic)
            await self._drop_admin()

    async def _drop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                async with asyncio.timeout(1.0):
                    await admin.close()
            except (KafkaError, TimeoutError) as exc:
                log.debug("close: %s", exc)

    async def _read_topic_config(self) -> None:
        """Ask for the topic's min.insync.replicas, at most every TOPIC_CONFIG_EVERY.

        Not every broker answers DescribeConfigs (and a probe may lack the
        DescribeConfigs ACL): then it stays unknown, and no partition is counted under
        min ISR. Never fails the refresh.
        """
        now = time.monotonic()
        if self._config_read_at is not None and now - self._config_read_at < TOPIC_CONFIG_EVERY:
            return
        self._config_read_at = now
        try:
            admin = await self._admin_client()
            self._min_insync = await min_insync_replicas(admin, self._topic)
        except (KafkaError, TypeError, ValueError) as exc:
            log.debug("topic %s: min.insync.replicas unknown: %r", self._topic, exc)

    async def _read_reassignments(self, outside: list[int]) -> None:
        """Which replicas out of an ISR a reassignment is adding, asked only while
        some replica is out of one (the rest of the time nothing is asked). Without the
        answer (no Describe ACL on the cluster, a broker without the API) a
        reassignment's new replicas count as out of sync, as lagging ones do."""

        async def ask() -> dict[int, ReassignmentInFlight]:
            return await reassignments(await self._admin_client(), self._topic, outside)

        moving = await self._reassignments.ask(bool(outside), ask) or {}
        self._adding = {p: moved.adding for p, moved in moving.items() if moved.adding}

    async def _read_eligible(self, short: bool, live: int | None) -> None:
        """Each partition's eligible leader replicas (KIP-966), asked only while
        ``short`` (some partition under min ISR or offline; the rest of the time there
        are none, and nothing is asked). A broker before Kafka 3.8 has no
        DescribeTopicPartitions: then none are known, and the ISR alone is counted, as
        on a cluster without ELR. ``live``: a broker up at the last refresh, to ask."""

        async def ask() -> dict[int, tuple[int, ...]]:
            return await eligible_leaders(await self._admin_client(), self._topic, live)

        self._eligible = await self._eligible_replicas.ask(short, ask) or {}

    async def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(**self._options)
            await admin.start()
            self._admin = admin
        return self._admin

    def replicas(self) -> TopicReplicas | None:
        """From the producer's metadata, which partitions() just refreshed.

        aiokafka keeps each partition's leader, replicas and ISR in its cluster
        metadata but offers only the leader through its API: the rest is read from
        the same records (``ClusterMetadata._partitions``), behind this one method.
        """
        cluster = self._producer.client.cluster
        records = getattr(cluster, "_partitions", {}).get(self._topic)
        if not records:
            return None
        # Before the first metadata answer aiokafka lists its bootstrap servers, with
        # ids like "bootstrap-0": they are no brokers of the cluster.
        brokers = [b for b in cluster.brokers() if isinstance(b.nodeId, int)]
        return topic_replicas(
            records.values(),
            [b.nodeId for b in brokers],
            self._min_insync,
            addresses={b.nodeId: broker_address(b.host, b.port) for b in brokers},
            adding=self._adding,
            eligible=self._eligible,
        )

    async def spread_leaders(self, plan: LeaderPlan) -> list[str]:
        try:
            admin = await self._admin_client()
        except KafkaError as exc:
            return [f"no admin connection: {exc}"]
        return await carry_out(admin, self._topic, plan)

    def describe(self, partitions: Sequence[int]) -> str:
        if not partitions:
            return f"topic {self._topic} not found"
        return f"topic {self._topic}: {len(partitions)} partitions"

    async def broker_count(self) -> int:
        return len(self._producer.client.cluster.brokers())

    async def ensure_topic(self, partitions: int | None, replication_factor: int | None) -> bool:
        """Create the topic if it is missing. Returns True if this call created it.

        Defaults: at least 3 partitions and at least one per broker, so every broker
        leads some canary partition; replication factor min(3, brokers).
        """
        if await self.partitions():
            return False
        brokers = max(1, await self.broker_count())
        wanted = partitions or max(3, brokers)
        admin = AIOKafkaAdminClient(**self._options)
        try:
            await admin.start()
            await create_topic(admin, self._topic, wanted, replication_factor or min(3, brokers))
        except TopicAlreadyExistsError:
            return False
        except KafkaError as exc:
            raise TransportError(f"cannot create topic {self._topic}: {exc}") from exc
        finally:
            await admin.close()
        log.info("created topic %s", self._topic)
        await self._until_known()
        # A topic this probe (re)created holds nothing the reader has seen: whatever
        # positions it kept belong to the old log (a broker that lost its storage).
        self._log_ends.clear()
        self._restarted = True
        return True

    async def _until_known(self) -> None:
        """Until every broker's metadata lists the topic just created. Apache Kafka's
        controller answers CreateTopics once the topic is committed; the brokers learn
        of it a moment apart, and a metadata request to one that has not finds no such
        topic (the next refresh may ask any of them)."""
        deadline = time.monotonic() + self._config.send_timeout
        client = self._producer.client
        # Polled: the broker's metadata has nothing to wait on.
        while time.monotonic() < deadline:
            if await self.partitions() and await known_to_every_broker(client, self._topic):
                return
            await asyncio.sleep(0.05)

    async def cover(self, partitions: Sequence[int]) -> None:
        wanted = set(partitions)
        self._open_lanes(wanted)
        try:
            if not wanted <= self._assigned:
                await self._assign(wanted)
            await self._follow_restarted_logs(wanted)
        except KafkaError as exc:
            raise TransportError(f"cannot position the reader: {exc}") from exc
        self._covered.set()

    async def _follow_restarted_logs(self, partitions: set[int]) -> None:
        """Read a partition whose log started over from its beginning, at once.

        A log starts over when the topic is re-created (by this probe after the broker
        lost its storage, or by someone else) or truncated. Apache Kafka then answers
        the old position with OFFSET_OUT_OF_RANGE and the consumer resets by itself;
        brokers that do not (the embedded one) would leave the reader waiting at its
        old position until the new log reached it, every canary meanwhile lost.

        The signs: the topic vanished from the metadata, or this probe created it,
        since the last cover (both exact); and, for a reader that never writes (the
        bridge stage, whose topic someone else re-creates), a log end offset lower
        than the last one seen. That last sign is exact on Apache Kafka, but offsets
        are not to be compared with positions on every broker: the embedded one
        numbers record batches, not records, in its end offsets and acknowledgements,
        so a batch of several records makes them run behind the positions a reader
        reaches (and its end offsets can even go back). A reader that writes relies on
        the exact signs only.
        """
        tps = [self._tp(p) for p in sorted(partitions)]
        if self._sent:
            restarted = tps if self._restarted else []
        else:
            ends = await self._consumer.end_offsets(tps)
            restarted = [
                tp
                for tp in tps
                if self._restarted or ends[tp] < self._log_ends.get(tp.partition, ends[tp])
            ]
            self._log_ends = {tp.partition: ends[tp] for tp in tps}
        self._restarted = False
        if restarted:
            log.info(
                "topic %s: the log of %s started over; reading them from the start",
                self._topic,
                partitions_summary(tp.partition for tp in restarted),
            )
            beginnings = await self._consumer.beginning_offsets(restarted)
            self._reposition({tp.partition: beginnings[tp] for tp in restarted})

    async def _assign(self, wanted: set[int]) -> None:
        """Take on these partitions: those already read keep their positions; on the
        first assignment the others start at the end (old canaries are not judged
        again), later ones at the beginning (anything in a new partition is new)."""
        first = not self._assigned
        fresh = [self._tp(p) for p in sorted(wanted - self._positions.keys())]
        if fresh:
            if first:
                offsets = await self._consumer.end_offsets(fresh)
            else:
                offsets = await self._consumer.beginning_offsets(fresh)
            self._positions.update({tp.partition: offsets[tp] for tp in fresh})
        for gone in self._positions.keys() - wanted:
            del self._positions[gone]
            self._awaited.pop(gone, None)
        self._assigned = wanted
        if self._following() and self._fetch_wait.reset() is not None:
            self._fetch_wait_changed("the reader follows the writer from now on")
        self._reposition({})

    def _reposition(self, positions: Mapping[int, int]) -> None:
        """Move these partitions' positions, and read what must be read from there."""
        self._positions.update(positions)
        wanted = self._to_read()
        for lane in list(self._lanes.values()):  # rare: the partitions or their logs changed
            self._read(lane, wanted, force=True)

    def _open_lanes(self, partitions: set[int]) -> None:
        """A lane for each broker leading some of these partitions (see kafka_lanes):
        the first at once, on the consumer already started; the others in the
        background (a consumer starts in a round trip or more), their partitions read
        by the first lane meanwhile. Only a reader that follows the writer has more
        than one: one that reads every partition all the time changes its assignment
        only when the partitions or their logs change, and a consumer kept idle would
        refresh the metadata of every topic of the cluster."""
        cluster = self._producer.client.cluster
        leaders = {p: cluster.leader_for_partition(self._tp(p)) for p in partitions}
        self._leaders = {p: b for p, b in leaders.items() if isinstance(b, int) and b >= 0}
        brokers = sorted(set(self._leaders.values()))
        if not self._lanes:
            self._add_lane(Lane(brokers[0] if brokers else -1, self._consumer))
        if not self._writes or len(partitions) <= self._follow_above:
            return
        missing = [b for b in brokers if b not in self._lanes]
        if missing and (self._opening is None or self._opening.done()):
            self._opening = asyncio.create_task(
                self._start_lanes(missing), name=f"kafka lanes {self._topic}"
            )

    async def _start_lanes(self, brokers: list[int]) -> None:
        for broker in brokers:
            if len(self._lanes) >= LANES_AT_MOST:
                return
            consumer = self._new_consumer()
            try:
                async with asyncio.timeout(self._config.send_timeout):
                    await consumer.start()
            except (KafkaError, OSError, TimeoutError, asyncio.CancelledError) as exc:
                # Tried again at the next round; the first lane reads its partitions.
                # Cancelled (the transport closes): the consumer is stopped all the same.
                log.debug("topic %s: no lane for broker %d yet: %r", self._topic, broker, exc)
                with contextlib.suppress(KafkaError, OSError, TimeoutError):
                    async with asyncio.timeout(1.0):
                        await consumer.stop()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            self._add_lane(Lane(broker, consumer))

    def _add_lane(self, lane: Lane) -> None:
        lane.changed_at = time.monotonic()
        self._lanes[lane.broker] = lane
        lane.pump = asyncio.create_task(self._pump(lane), name=f"kafka lane {lane.broker}")

    def _home(self, partition: int) -> int:
        """The lane a partition no lane reads joins: its leader's, else the first."""
        leader = self._leaders.get(partition, -1)
        return leader if leader in self._lanes else next(iter(self._lanes))

    def _to_read(self) -> frozenset[int]:
        """The partitions to fetch now: all of them for a reader that never writes or
        a small topic; else those with a canary on its way (see the module doc)."""
        # Canaries never read back are given up on after the loss timeout, whatever
        # is read: a reader of the whole topic kept each one of them for good.
        now = time.monotonic()
        for partition in [p for p, awaited in self._awaited.items() if awaited.until < now]:
            del self._awaited[partition]
        if not self._writes or len(self._assigned) <= self._follow_above:
            return frozenset(self._assigned)
        return frozenset(self._awaited.keys() & self._assigned)

    def _read(self, lane: Lane, wanted: frozenset[int], *, force: bool = False) -> bool:
        """Assign the lane's consumer its share of the ``wanted`` partitions at the
        transport's positions; whether its assignment changed.

        Synchronous on purpose: called between two of the lane's ``getmany`` calls,
        before its fetcher runs again (see _pump() for when no fetch is thrown away).
        The assignment changes when partitions must be added (those done are dropped
        at the same time), when it is more than twice as large as needed, or when
        ``force``d (positions moved); not for every canary that came back: a partition
        read for nothing costs less than a fetch thrown away. Once assigned, it is
        never empty: a consumer with nothing assigned refreshes the metadata of every
        topic, so with nothing on its way the lane keeps its lowest partition.
        """
        partitions = lane_target(lane.broker, lane.reading, wanted, self._held, self._home)
        if not partitions:
            kept = lane.reading & self._assigned
            if not force or not kept:
                self._pause_idle(lane, idle=True)
                return False
            partitions = frozenset({min(kept)})
        grow = not partitions <= lane.reading
        shrink = len(lane.reading) > 2 * len(partitions) + 64
        if not (force or grow or shrink):
            self._pause_idle(lane, idle=False)
            return False
        tps = [self._tp(p) for p in sorted(partitions)]
        lane.consumer.assign(tps)  # a new assignment: nothing paused
        lane.paused = False
        for tp in tps:
            lane.consumer.seek(tp, self._positions[tp.partition])
        for partition in lane.reading - partitions:
            del self._held[partition]
        self._held.update(dict.fromkeys(partitions, lane.broker))
        lane.reading = partitions
        lane.all_fetched = False
        lane.changed_at = time.monotonic()
        return True

    def _pause_idle(self, lane: Lane, *, idle: bool) -> None:
        """Stop fetching a lane's partitions while nothing is on its way to them, and
        fetch them again when something is.

        Only a reader that follows the writer has idle lanes. Kept fetching, a lane read
        its last round's partitions (a third of a 300-partition topic, say) every short
        fetch wait until the next round: 200 empty fetches between two rounds 20 s
        apart. A paused partition keeps its place in the assignment and its position,
        and pausing or resuming throws away no fetch in flight (changing the
        assignment does); anything else written to it is read when its next canary is.
        A lane pauses only after PAUSE_IDLE_AFTER with nothing on its way: within a
        round, pausing between two bursts and resuming at the next one churned the
        lane's fetches (300 partitions on Apache Kafka's three brokers: a p99 of 375 ms
        in one run of three, against 236 to 246 ms without pausing or with the delay).
        """
        now = time.monotonic()
        if not idle:
            lane.idle_since = None
        elif lane.idle_since is None:
            lane.idle_since = now
        if lane.idle_since is not None and now - lane.idle_since < PAUSE_IDLE_AFTER:
            return  # a gap between two bursts of a round, not between rounds
        if idle == lane.paused or not lane.reading:
            return
        tps = [self._tp(p) for p in sorted(lane.reading)]
        if idle:
            lane.consumer.pause(*tps)
        else:
            lane.consumer.resume(*tps)
        lane.paused = idle

    def refused(self, partition: int, since: float) -> ProduceFailure | None:
        return self._refusals.since(self._topic, partition, since)

    def destination(self, partition: int) -> str:
        return self._topic

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        self._sent = True
        self._written.set()  # idle lanes look for it (see _read_lane)
        headers = [(name, value.encode()) for name, value in (trace_headers or {}).items()]
        awaited = self._awaited.setdefault(partition, _Awaited())
        awaited.payloads.append(payload)
        awaited.until = time.monotonic() + self._config.send_timeout + self._hold
        # No deadline of its own: the producer bounds every send (its round's deadline),
        # and cancels it then; a second timer per canary was a twentieth of the CPU at
        # 10,000 partitions. Queuing waits at most send_timeout for room (_enqueue).
        try:
            if self._transactions is None:
                metadata = await self._delivered(partition, payload, headers)
            else:
                metadata = await self._transactions.within(
                    aborting, lambda: self._delivered(partition, payload, headers)
                )
        except (KafkaError, TimeoutError) as exc:
            # Not acknowledged: nothing to wait for (should the client write it after
            # all, the next round's canary brings the reader back to this partition).
            # Waiting would grow the reader's assignment with every failure, and with
            # it the cost of every fetch, just when the probe is struggling.
            self._came_back(partition, payload)
            if isinstance(exc, _PRODUCER_STATE_LOST):
                self._renew_producer = True
            reason = produce_failure_reason(exc)
            if reason in _CONNECTION_LOST:
                self._lost(partition, exc)
            raise ProduceFailed(reason, denial(exc, "Write", self._config) or str(exc)) from exc
        except asyncio.CancelledError as exc:
            self._came_back(partition, payload)  # the producer's deadline passed, as above
            self._lost(partition, exc)
            raise
        read_back = payload not in awaited.payloads  # before its acknowledgement came
        if self._deciding_wait():
            if read_back:
                self._read_after(0.0)
            else:
                awaited.acked_at[payload] = time.monotonic()
        offset = getattr(metadata, "offset", None)
        if not (isinstance(offset, int) and offset >= 0):
            return None
        if not read_back:
            awaited.offsets[payload] = offset
        return offset

    def _deciding_wait(self) -> bool:
        """Whether read delays decide the fetch wait now: not when pinned, and not for a
        reader that follows the writer, which keeps the short wait (its assignment
        changes every round, and the fetch that a change throws away is still held by
        the broker, delaying the next one on that connection for what is left of it)."""
        return self._fetch_wait.adapts and not self._following()

    def _following(self) -> bool:
        return self._writes and len(self._assigned) > self._follow_above

    def _read_after(self, delay: float) -> None:
        changed = self._fetch_wait.read_after(delay)
        if changed is None:
            return
        p90 = self._fetch_wait.last_p90 or 0.0
        within = f"90 % of canaries read back within {p90 * 1e3:.0f} ms of their acknowledgement"
        if changed > self._fetch_wait.short:
            self._fetch_wait_changed(f"the brokers answer fetches as records arrive ({within})")
        else:
            self._fetch_wait_changed(f"records are read late at the long wait ({within})")

    def _fetch_wait_changed(self, why: str) -> None:
        """Give every consumer the fetch wait just decided."""
        seconds = self._fetch_wait.seconds
        log.info("topic %s: %s: fetch max wait %gs", self._topic, why, seconds)
        consumers = {id(lane.consumer): lane.consumer for lane in self._lanes.values()}
        consumers[id(self._consumer)] = self._consumer
        for consumer in consumers.values():
            set_fetch_max_wait(consumer, seconds)

    async def _delivered(
        self, partition: int, payload: bytes, headers: list[tuple[str, bytes]]
    ) -> Any:
        """Queue one record and wait for its acknowledgement (its RecordMetadata)."""
        delivery = await self._enqueue(partition, payload, headers)
        return await delivery

    async def _enqueue(
        self, partition: int, payload: bytes, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[Any]:
        """Queue one record for its partition; the future of its acknowledgement.

        ``AIOKafkaProducer.send`` checks the partition against a set of every partition
        of the topic that it builds anew for each record (twice): at 10,000 partitions
        that was 0.74 ms of CPU per canary, against 0.15 ms for queuing the record
        directly in the producer's accumulator, which is what ``send`` ends with. The
        partition is checked here against the metadata of the last refresh instead.
        A producer without that accumulator (another aiokafka) takes the slow path, as
        does a transactional one: ``send`` adds the partition to the transaction.
        """
        accumulator = getattr(self._producer, "_message_accumulator", None)
        if accumulator is None or partition not in self._known or self._transactions:
            return await self._producer.send(  # type: ignore[no-any-return]
                self._topic, payload, partition=partition, headers=headers or None
            )
        return await accumulator.add_message(  # type: ignore[no-any-return]
            self._tp(partition),
            None,
            payload,
            self._config.send_timeout,
            timestamp_ms=None,
            headers=headers,
        )

    async def arrivals(self) -> AsyncIterator[Arrival]:
        """What the lanes read, in the order each lane read it (see _pump())."""
        while True:
            batch = await self._inbox.get()
            if isinstance(batch, Exception):
                raise batch
            for arrival in batch:
                yield arrival

    async def _pump(self, lane: Lane) -> None:
        """Read one lane, for as long as the transport lives; what fails it unforeseen
        goes to the reader, which raises it, as a reader of a single consumer did."""
        try:
            await self._covered.wait()
            await self._read_lane(lane)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed on to the reader, not swallowed
            await self._inbox.put(exc)

    async def _read_lane(self, lane: Lane) -> None:
        # A failed fetch is retried within the broker's max wait (plus the pause below),
        # so a problem is over only once fetches have worked for longer than that: a
        # call that comes back clean before the retry (nothing fetched yet, or records
        # of another partition) does not clear it, and readiness does not flap.
        # A reader that follows the writer looks for newly written partitions about once
        # a short fetch wait; one that reads every partition has nothing to look for
        # (its assignment changes only with the partitions or their logs: _reposition).
        wait_s = self._fetch_wait.short
        # The lane's assignment changes only once every partition it reads has come
        # back in a fetch since the last change: a change throws away every fetch the
        # lane's consumer has in flight, and changing it at every turn would throw them
        # all away (a broker that holds a fetch for its whole max wait, as the embedded
        # one does, or that takes long to answer many partitions, would never get to
        # answer). Records just taken do not make a change safe: they say the broker
        # that sent them has no fetch in flight, not that others have none.
        # A partition that keeps failing its fetches must not freeze the lane: after
        # the lane's patience it changes anyway (throwing away no other lane's fetch).
        # The patience follows the broker: twice what its fetches took the last time
        # they all came back, doubled after a change that cut one short, between
        # FETCH_PATIENCE and FETCH_PATIENCE_AT_MOST. A broker slower to answer than a
        # fixed patience would have every fetch cut short, its canaries judged lost
        # while it kept them (1.5 s per fetch: 4,933 of them in a minute).
        least = max(FETCH_PATIENCE, 10 * wait_s)
        most = max(least, FETCH_PATIENCE_AT_MOST)
        lane.patience = least
        while True:
            now = time.monotonic()
            was_fetched = lane.all_fetched
            fetched = self._fetched(lane)
            if fetched and not was_fetched:
                lane.patience = min(most, max(least, 2 * (now - lane.changed_at)))
            safe = fetched or now - lane.changed_at > lane.patience
            wanted = self._to_read()
            if safe:
                if self._read(lane, wanted) and not fetched:
                    lane.patience = min(most, 2 * lane.patience)
            elif lane.paused and lane.reading & wanted:
                # Resuming throws no fetch away: it need not wait for a safe moment.
                self._pause_idle(lane, idle=False)
            if not lane.reading or lane.paused:
                # Nothing for this lane: a lane just opened, before its broker's
                # partitions have a canary on its way, or one whose partitions have
                # all come back. It looks again when a canary is written (or after
                # IDLE_LANE_LOOKS_EVERY), not every fetch wait: 30 wake-ups a second
                # for nothing on three brokers between rounds.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_LANE_LOOKS_EVERY):
                        await self._written.wait()
                self._written.clear()
                continue
            try:
                poll_ms = max(10, round(wait_s * 1000)) if self._following() else 1000
                batch = await lane.consumer.getmany(timeout_ms=poll_ms)
            except OffsetOutOfRangeError as exc:
                await self._out_of_range(exc.args[0] if exc.args else {})
                continue
            except KafkaError as exc:
                # aiokafka fetches the same records again, so a batch it cannot decode
                # (UnsupportedCodecError) fails every time: a read problem that makes
                # the target unready. The consumer reconnects by itself; the pause
                # keeps a broker that is down from making this loop a busy one.
                self._failed_at = time.monotonic()
                self._note_read_problem(denial(exc, "Read", self._config) or f"fetch failed: {exc}")
                await asyncio.sleep(1.0)
                continue
            settle_s = self._fetch_wait.seconds + 2.0
            if self._read_problem is not None and time.monotonic() - self._failed_at > settle_s:
                self._note_read_problem(None)
            if batch:
                await self._inbox.put(self._taken(batch))

    def _taken(self, batch: Mapping[TopicPartition, Sequence[Any]]) -> list[Arrival]:
        """The arrivals of one getmany, the positions moved past them: a lane that
        changes its assignment next seeks from there, whether or not the reader has
        taken them yet."""
        at_ns = time.time_ns()
        arrivals = []
        for tp, records in batch.items():
            partition = tp.partition
            for record in records:
                self._positions[partition] = record.offset + 1
                self._came_back(partition, record.value)
                # A record without a value is still a record on the canary topic: it
                # is judged (as malformed), not skipped.
                arrivals.append(
                    Arrival(
                        partition,
                        record.value or b"",
                        at_ns,
                        record.offset,
                        _traceparent(record.headers),
                    )
                )
        return arrivals

    async def _out_of_range(self, fetched: Mapping[TopicPartition, int]) -> None:
        """Move positions the log no longer has (OFFSET_OUT_OF_RANGE) to where reading
        must go on.

        Below the log's start (retention, deleted records): the oldest record kept.
        Beyond its end, the log was truncated (an unclean leader election: the new
        leader never had the last records) or the topic was re-created unseen: the
        records from the end of the common history on are new, and the reader has not
        seen them. Kafka's own consumers find that point through leader epochs
        (KIP-320), which aiokafka does not ask for; the probe knows better still where
        its own canaries went: the lowest offset of a canary acknowledged and not read
        back yet, else the log's end. Reading from the start instead would hand out
        every canary read before again (false duplicates), and from the end would skip
        canaries written since the truncation (false losses). Records of other writers
        between the common history and the first such canary are not read.
        """
        tps = [tp for tp in fetched if tp.partition in self._assigned]
        if not tps:
            return
        try:
            starts = await self._consumer.beginning_offsets(tps)
            ends = await self._consumer.end_offsets(tps)
        except KafkaError as exc:
            self._note_read_problem(f"offset out of range, log bounds unknown: {exc}")
            await asyncio.sleep(1.0)
            return
        moved: dict[int, int] = {}
        for tp in tps:
            start, end, position = starts[tp], ends[tp], fetched[tp]
            if position < start:
                moved[tp.partition] = start
                continue
            awaited = self._awaited.get(tp.partition)
            acked = awaited.offsets.values() if awaited is not None else ()
            moved[tp.partition] = min((o for o in acked if start <= o < end), default=end)
        log.warning(
            "topic %s: positions out of range (log truncated, re-created, or past "
            "retention), positions moved: %s",
            self._topic,
            ranges_summary(
                {tp.partition: (fetched[tp], moved[tp.partition]) for tp in tps}, joined_by="->"
            ),
        )
        self._reposition(moved)

    def _fetched(self, lane: Lane) -> bool:
        """Whether every partition the lane reads has come back in a fetch since it was
        assigned (remembered until the next change: asked between any two getmany
        calls, it would otherwise visit thousands of partitions each time)."""
        if not lane.all_fetched:
            consumer = lane.consumer
            cluster = consumer._client.cluster  # aiokafka's own client of the consumer
            # A partition without a leader is not fetched at all: nothing to wait for.
            lane.all_fetched = all(
                consumer.last_poll_timestamp(tp) is not None
                or cluster.leader_for_partition(tp) in (None, -1)
                for tp in map(self._tp, lane.reading)
            )
        return lane.all_fetched

    def _came_back(self, partition: int, value: bytes | None) -> None:
        awaited = self._awaited.get(partition)
        if awaited is None or value is None:
            return
        try:
            awaited.payloads.remove(value)
        except ValueError:
            return
        awaited.offsets.pop(value, None)
        acked_at = awaited.acked_at.pop(value, None)
        if acked_at is not None and self._deciding_wait():
            self._read_after(time.monotonic() - acked_at)
        if not awaited.payloads:
            del self._awaited[partition]

    def signals(self) -> ReaderSignals:
        """A read_committed reader's unstable records (kafka_mirror.MirrorReader adds
        the mirror's signals)."""
        if not self._read_committed:
            return NO_SIGNALS
        return ReaderSignals(unstable_records=self._unstable_records())

    def _unstable_records(self) -> Mapping[int, int]:
        """From what each lane's consumer last fetched: partitions whose last stable
        offset is not yet known are left out."""
        return {
            partition: high - stable
            for partition, (high, stable) in self._fetched_offsets().items()
            if stable is not None and 0 <= stable <= high
        }

    def _fetched_offsets(self) -> dict[int, tuple[int, int | None]]:
        """Each partition's high watermark and last stable offset (None: not known), as
        its lane's consumer last fetched them; a partition not fetched yet is left out."""
        found: dict[int, tuple[int, int | None]] = {}
        for lane in self._lanes.values():
            consumer = lane.consumer
            for tp in consumer.assignment():
                high, stable = consumer.highwater(tp), consumer.last_stable_offset(tp)
                if isinstance(high, int) and high >= 0:
                    found[tp.partition] = (high, stable if isinstance(stable, int) else None)
        return found

    def read_problem(self) -> str | None:
        """Why records cannot be read right now (the last fetch failed, a broker
        refuses the clients' connections), or None."""
        problems = [p for p in (self._read_problem, self._watch.problem) if p is not None]
        return "; ".join(map(str, problems)) or None

    def _note_read_problem(self, problem: str | None) -> None:
        # One line when reading starts failing and one when it works again, not one
        # per fetch.
        if problem is not None and self._read_problem is None:
            log.warning("topic %s: %s", self._topic, problem)
        elif problem is None and self._read_problem is not None:
            log.info("topic %s: fetching again (was: %s)", self._topic, self._read_problem)
        self._read_problem = problem

    async def close(self) -> None:
        # Closing must not hang on a broker that is gone: the service has 5 s to stop,
        # so both clients close at once, each for at most a second.
        async def stop(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
            try:
                async with asyncio.timeout(1.0):
                    await client.stop()
            except (KafkaError, TimeoutError) as exc:
                log.debug("close: %s", exc)
            except asyncio.CancelledError:
                # A client cancels its own tasks when it stops; one that was waiting
                # on a broker that is gone re-raises that cancellation out of stop().
                # Only a cancellation of this task itself must go on.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                log.debug("close: a client task was cancelled while stopping")

        if self._admin_lookup is not None:
            self._admin_lookup.cancel()
        await self._watch.close()
        tasks = [lane.pump for lane in self._lanes.values() if lane.pump is not None]
        if self._opening is not None:
            tasks.append(self._opening)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._transactions is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._transactions.close()
        consumers = {id(lane.consumer): lane.consumer for lane in self._lanes.values()}
        consumers[id(self._consumer)] = self._consumer
        await asyncio.gather(
            *(stop(consumer) for consumer in consumers.values()),
            stop(self._producer),
            self._drop_admin(),
        )

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self._topic, partition)


async def _refreshed(client: Any) -> bool:
    """Refresh an aiokafka client's metadata; whether a broker answered.

    aiokafka asks only the brokers its last metadata listed. When those are all gone
    (the last refresh came while one broker was left, and that one failed since), it
    would never ask the others again, though they are back and leading. Kafka's own
    clients bootstrap again then (KIP-899); so does the probe, from the configured
    list.
    """
    if await client.force_metadata_update():
        return True
    try:
        await client.bootstrap()
    except (KafkaError, OSError, TimeoutError):
        return False
    return bool(await client.force_metadata_update())


def _broker_at(cluster: Any, host: str, port: int) -> str:
    """The id of the broker the metadata lists at this address, else the address: the
    ``broker`` label of a connection failure (a few values, never one per attempt)."""
    for broker in cluster.brokers():
        if (broker.host, broker.port) == (host, port):
            return str(broker.nodeId)
    return shown(host, port)


def _traceparent(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """The record's traceparent header, if it has one that is text."""
    for name, value in headers or ():
        if name == "traceparent" and value is not None:
            try:
                return value.decode("ascii")
            except UnicodeDecodeError:
                return value.hex()  # still a mismatch, never a crash
    return None
