"""Kafka transport on aiokafka: an acks=all producer and a group-less consumer.

The consumer assigns partitions itself (no consumer group): the probe must read
every partition, whatever other probes on the topic do, and a group rebalance would
be a pause the probe measured as its own latency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka.helpers import create_ssl_context

from probe.config import KafkaConfig
from probe.errors import ProduceFailed, ProduceFailure, TransportError
from probe.transport import Arrival

log = logging.getLogger(__name__)

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


def produce_failure_reason(exc: BaseException) -> ProduceFailure:
    for kind, reason in _PRODUCE_REASONS:
        if isinstance(exc, kind):
            return reason
    return ProduceFailure.OTHER


def connection_options(config: KafkaConfig) -> dict[str, Any]:
    """Client options shared by producer, consumer and admin client."""
    options: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": config.client_id,
        "request_timeout_ms": int(config.send_timeout * 1000),
    }
    security = config.security_options()
    tls = {name: security.pop(name) for name in list(security) if name.startswith("ssl_")}
    if config.tls is not None:
        context = create_ssl_context(
            cafile=tls.get("ssl_cafile"),
            certfile=tls.get("ssl_certfile"),
            keyfile=tls.get("ssl_keyfile"),
        )
        context.check_hostname = bool(tls["ssl_check_hostname"])
        options["ssl_context"] = context
    return {**options, **security}


class KafkaTransport:
    """Canaries to every partition of one topic, read back by a manual-assignment consumer."""

    messaging_system = "kafka"
    # The producer batches a whole round into a request per broker: send it all at once.
    max_in_flight: int | None = None
    # Why the last fetch failed, until fetches work again: see read_problem().
    _read_problem: str | None = None

    def __init__(self, config: KafkaConfig) -> None:
        if not config.bootstrap_servers:
            raise TransportError("kafka.bootstrap_servers is not set")
        self._config = config
        self._topic = config.topic
        options = connection_options(config)
        self._producer = AIOKafkaProducer(
            **options,
            acks="all",
            enable_idempotence=config.idempotence,
            linger_ms=0,
        )
        self._consumer = AIOKafkaConsumer(
            **options,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=int(config.fetch_max_wait * 1000),
            # Only reached when a position falls off the log: the topic was recreated
            # or the broker lost its data. Everything there is newer than our position.
            auto_offset_reset="earliest",
        )
        self._options = options
        self._assigned: set[int] = set()
        # How a log that started over is told (see _follow_restarted_logs): whether the
        # topic vanished or this probe (re)created it since the last cover(), and, for
        # a reader that never writes, each partition's log end offset at the last one.
        self._restarted = False
        self._sent = False
        self._log_ends: dict[int, int] = {}
        self._covered = asyncio.Event()
        self._started = False

    async def start(self) -> None:
        try:
            await self._producer.start()
            await self._consumer.start()
        except KafkaError as exc:
            await self.close()
            raise TransportError(
                f"cannot connect to {self._config.bootstrap_servers}: {exc}"
            ) from exc
        self._started = True

    async def partitions(self) -> list[int]:
        client = self._producer.client
        if not await client.force_metadata_update():
            raise TransportError(
                f"metadata refresh failed: no broker of {self._config.bootstrap_servers} answered"
            )
        found = client.cluster.partitions_for_topic(self._topic)
        if not found and self._assigned:
            # The topic is gone (deleted, or a broker that lost its storage): whatever
            # has this name next is a new log.
            self._restarted = True
        return sorted(found) if found else []

    async def provision(self) -> None:
        if not self._config.create_topic:
            raise TransportError(
                f"{self.describe([])}: create it, or let the probe create it "
                "(--create-topic, kafka.create_topic: true)"
            )
        await self.ensure_topic(self._config.partitions, self._config.replication_factor)

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
        topic = NewTopic(
            self._topic,
            num_partitions=partitions or max(3, brokers),
            replication_factor=replication_factor or min(3, brokers),
        )
        admin = AIOKafkaAdminClient(**self._options)
        try:
            await admin.start()
            await admin.create_topics([topic])
        except TopicAlreadyExistsError:
            return False
        except KafkaError as exc:
            raise TransportError(f"cannot create topic {self._topic}: {exc}") from exc
        finally:
            await admin.close()
        log.info("created topic %s", self._topic)
        # A topic this probe (re)created holds nothing the reader has seen: whatever
        # positions it kept belong to the old log (a broker that lost its storage).
        self._log_ends.clear()
        self._restarted = True
        return True

    async def cover(self, partitions: Sequence[int]) -> None:
        wanted = set(partitions)
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
                "topic %s: the log of partitions %s started over; reading them from the start",
                self._topic,
                [tp.partition for tp in restarted],
            )
            await self._consumer.seek_to_beginning(*restarted)
            for tp in restarted:
                await self._consumer.position(tp)

    async def _assign(self, wanted: set[int]) -> None:
        consumer = self._consumer
        first = not self._assigned
        # assign() forgets positions, so carry the current ones over by hand; the
        # position is the next record the caller will get, so nothing fetched but
        # not yet returned is lost or read twice.
        kept = {p: await consumer.position(self._tp(p)) for p in self._assigned & wanted}
        consumer.assign([self._tp(p) for p in sorted(wanted)])
        for partition, offset in kept.items():
            consumer.seek(self._tp(partition), offset)
        fresh = [self._tp(p) for p in sorted(wanted - kept.keys())]
        if fresh:
            # On the first assignment start at the end: old canaries are not judged
            # again. Partitions that appear later start at the beginning.
            if first:
                await consumer.seek_to_end(*fresh)
            else:
                await consumer.seek_to_beginning(*fresh)
        for partition in wanted:
            await consumer.position(self._tp(partition))
        self._assigned = wanted

    def destination(self, partition: int) -> str:
        return self._topic

    async def send(
        self, partition: int, payload: bytes, trace_headers: Mapping[str, str] | None = None
    ) -> int | None:
        self._sent = True
        headers = [(name, value.encode()) for name, value in (trace_headers or {}).items()]
        try:
            async with asyncio.timeout(self._config.send_timeout):
                delivery = await self._producer.send(
                    self._topic, payload, partition=partition, headers=headers or None
                )
                metadata = await delivery
        except (KafkaError, TimeoutError) as exc:
            raise ProduceFailed(produce_failure_reason(exc), str(exc)) from exc
        offset = getattr(metadata, "offset", None)
        return offset if isinstance(offset, int) and offset >= 0 else None

    async def arrivals(self) -> AsyncIterator[Arrival]:
        await self._covered.wait()
        # A failed fetch is retried within the broker's max wait (plus the pause below),
        # so a problem is over only once fetches have worked for longer than that: a
        # call that comes back clean before the retry (nothing fetched yet, or records
        # of another partition) does not clear it, and readiness does not flap.
        settle_s = self._config.fetch_max_wait + 2.0
        failed_at = 0.0
        while True:
            try:
                batch = await self._consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:
                # aiokafka fetches the same records again, so a batch it cannot decode
                # (UnsupportedCodecError) fails every time: a read problem that makes
                # the target unready. The consumer reconnects by itself; the pause
                # keeps a broker that is down from making this loop a busy one.
                failed_at = time.monotonic()
                self._note_read_problem(f"fetch failed: {exc}")
                await asyncio.sleep(1.0)
                continue
            if self._read_problem is not None and time.monotonic() - failed_at > settle_s:
                self._note_read_problem(None)
            at_ns = time.time_ns()
            for tp, records in batch.items():
                for record in records:
                    # A record without a value is still a record on the canary topic:
                    # it is judged (as malformed), not skipped.
                    yield Arrival(
                        tp.partition,
                        record.value or b"",
                        at_ns,
                        record.offset,
                        _traceparent(record.headers),
                    )

    def read_problem(self) -> str | None:
        """Why records cannot be read right now (the last fetch failed), or None."""
        return self._read_problem

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

        await asyncio.gather(stop(self._consumer), stop(self._producer))

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self._topic, partition)


def _traceparent(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """The record's traceparent header, if it has one that is text."""
    for name, value in headers or ():
        if name == "traceparent" and value is not None:
            try:
                return value.decode("ascii")
            except UnicodeDecodeError:
                return value.hex()  # still a mismatch, never a crash
    return None
