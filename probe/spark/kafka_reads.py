"""Reading a task's offset ranges on Spark's executors, into Arrow record batches.

What each task of the sla_kafka source (probe.spark.kafka_source) runs, and what
reconcile's tasks run over ranges its driver planned (:func:`planned_reads`): no Spark
here, a librdkafka consumer (probe.spark.librdkafka) and pyarrow.

**Reading a task's ranges** (:func:`read_ranges`) yields Arrow record batches, which
Spark takes without converting a row in Python. The consumer fetches only the ranges
still owed (a finished one is paused), and a range ends at its planned end whatever
the log holds: records deleted meanwhile by retention or ``DeleteRecords`` are skipped,
and a log that stays shorter than the range (the topic re-created, the broker's data
lost) ends it with a warning after a few seconds, as does a partition or topic that is
gone. The read fails only when it has made no progress at all for
``readTimeoutSeconds`` (default 60), naming the count of ranges owed and the first few.
Compressed batches (gzip, snappy, lz4, zstd) are decompressed by librdkafka; one whose
codec this librdkafka was built without fails the task at once, naming the codec.

A read fails with :class:`~probe.core.errors.SourceReadFailed` (its timeout with
:class:`~probe.core.errors.SourceReadTimedOut`, a TimeoutError too): the class names
the source in the failed query's text (probe.spark.health).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from probe.core.errors import SourceReadFailed, SourceReadTimedOut, TransportError
from probe.core.offset_ranges import OffsetRange
from probe.core.partition_summary import partitions_summary, ranges_summary
from probe.spark.librdkafka import NO_TOPIC, ClientLog, new_consumer

log = logging.getLogger(__name__)

# What read_ranges yields: the source's SCHEMA (probe.spark.kafka_source) in Arrow's terms.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)
# Rows per Arrow batch handed to Spark: large enough that the per-batch cost
# vanishes, small enough to bound a task's memory (records are up to a few MB).
ARROW_BATCH_ROWS = 4096
# One consume() call returns once it has this many messages or its wait is over
# (librdkafka does not return early with fewer): the wait is what the last records
# of a read pay, so it is short.
CONSUME_WAIT_S = 0.02
# How long a log may end before a range owed from it (or its partition, or topic, be
# gone) before the range is ended without the records. Brokers answer with their high
# watermark, and a leader just elected may lag the old one's for a moment: never a
# reason to skip records that exist. A log re-created, or a broker that lost its data,
# stays short.
SHORT_LOG_GRACE_S = 3.0
# How long a broker may hold a fetch that has nothing to answer yet (``fetchMaxWaitMs``
# overrides it; Kafka's own default). A read asks only for records that exist, so a
# fetch is answered at once and the wait is paid only at a log that ends short of its
# range. A short wait is no faster and costs the broker: two tasks reading the last
# record of 5,000 partitions each at 20 ms kept the embedded broker busy for 19 to 41
# CPU-seconds over 14 to 32 s, against 3 to 4 CPU-seconds over 3 s at 200 to 500 ms
# (the batches of a sink at 10,000 partitions took 22 s instead of 7).
FETCH_WAIT_MS = 500
# What a task's consumer buffers ahead of its reads, at most (librdkafka's default,
# 64 MiB, is sized for a consumer that has a process of its own).
PREFETCH_KIB = 16384
# Errors after which reading on cannot help: the task fails at once, naming them.
_FAILS_AT_ONCE = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
# librdkafka's decompression failure, and its codec numbers (Kafka's record batch
# attributes).
_CODEC_FAILURE = re.compile(r"Decompression \(codec 0x([0-9a-f]+)\)")
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass
class RangeReads:
    """What one task still owes of its ranges (one topic), fed the consumer's messages.

    Pure but for the records it keeps: times are passed in. A range is done at the
    first record at or past its end, or when the log's end (an end-of-partition event)
    is at or past it; records before its start (read after the consumer went back to
    the start of a log that was re-created) are skipped.
    """

    topic: str
    owed: dict[int, OffsetRange]
    progress_at: float
    # Ranges done since the consumer last paused them.
    finished: list[int] = field(default_factory=list)
    # Partitions whose log ends before their range does: since when, and where.
    short: dict[int, tuple[float, int]] = field(default_factory=dict)
    # Ranges ended without their records: {partition: (log end, range end)} for logs
    # that stayed short, and the partitions that were gone.
    cut_short: dict[int, tuple[int, int]] = field(default_factory=dict)
    gone: list[int] = field(default_factory=list)
    last_error: str | None = None
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    stamps: list[int | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)

    @classmethod
    def of(cls, ranges: Sequence[OffsetRange], now: float) -> RangeReads:
        topics = {r.topic for r in ranges}
        if len(topics) > 1:
            raise ValueError(f"one topic per read, got {', '.join(sorted(topics))}")
        owed = {r.partition: r for r in ranges if r.size > 0}
        return cls(topics.pop() if topics else "", owed, now)

    def take(self, messages: Sequence[Any], now: float) -> None:
        """One consume() call's messages: records kept, ranges finished, errors raised
        or remembered. The loop is the read's only per-record Python."""
        owed, finished, short = self.owed, self.finished, self.short
        partitions, offsets, stamps = self.partitions, self.offsets, self.stamps
        keys, values = self.keys, self.values
        # Progress is a record or a log's end heard of; errors are not.
        progressed = False
        for message in messages:
            if message.error() is not None:
                progressed |= self._error(message, now)
                continue
            progressed = True
            partition = message.partition()
            offset = message.offset()
            wanted = owed.get(partition)
            if wanted is None or offset < wanted.start:
                continue
            if short:
                short.pop(partition, None)
            if offset >= wanted.end:
                del owed[partition]
                finished.append(partition)
                continue
            kind, stamp = message.timestamp()
            partitions.append(partition)
            offsets.append(offset)
            stamps.append(stamp if kind and stamp >= 0 else None)
            keys.append(message.key())
            values.append(message.value())
            if offset + 1 >= wanted.end:
                del owed[partition]
                finished.append(partition)
        if progressed:
            self.progress_at = now

    def _error(self, message: Any, now: float) -> bool:
        """An error event: True for a log's end (progress), False for an error the
        client retries (remembered); raises for one that reading on cannot cure."""
        error = message.error()
        code = error.code()
        partition = message.partition()
        if code == KafkaError._PARTITION_EOF:
            wanted = self.owed.get(partition)
            if wanted is None:
                return True
            if message.offset() >= wanted.end:
                del self.owed[partition]
                self.finished.append(partition)
            else:
                self.short.setdefault(partition, (now, message.offset()))
            return True
        codec = _CODEC_FAILURE.search(error.str())
        if codec is not None:
            # Fetching again would fail the same way: the task (and so the query)
            # fails at once, naming the codec and what to do about it.
            number = int(codec.group(1), 16)
            raise SourceReadFailed(
                f"cannot read topic {self.topic}, {partitions_summary([partition])}: records "
                f"compressed with {CODECS.get(number, f'codec {number}')}, which this "
                f"librdkafka cannot decompress ({error.str()}); install confluent-kafka "
                "with its bundled librdkafka (synthetic-sla-probe[spark]) on the executors"
            )
        if error.fatal() or code in _FAILS_AT_ONCE:
            raise SourceReadFailed(f"cannot read topic {self.topic}: {error.str()}")
        # Brokers away, leaders moving: the client retries; the read waits, and says
        # what it last heard should it time out.
        self.last_error = error.str()
        return False

    def end_short(self, now: float, grace: float) -> None:
        """Ends the ranges whose log has ended before them for ``grace`` seconds."""
        for partition, (since, log_end) in list(self.short.items()):
            if now - since >= grace:
                del self.short[partition]
                wanted = self.owed.pop(partition, None)
                if wanted is not None:
                    self.finished.append(partition)
                    self.cut_short[partition] = (log_end, wanted.end)

    def end_gone(self, present: set[int] | None) -> None:
        """Ends the ranges of partitions the topic no longer has (all of them when the
        topic is gone, ``present`` None)."""
        gone = [p for p in self.owed if present is None or p not in present]
        for partition in gone:
            del self.owed[partition]
            self.finished.append(partition)
        self.gone += gone

    def warn_lost(self) -> None:
        """One line for the ranges ended without their records, one for those whose
        partition was gone: however many, since a re-created topic cuts them all."""
        if self.cut_short:
            log.warning(
                "topic %s: logs end before the ranges planned (log truncated or topic "
                "re-created); their records are gone: %s",
                self.topic,
                ranges_summary(self.cut_short),
            )
        if self.gone:
            log.warning(
                "topic %s: %s gone while being read; their records are gone with them",
                self.topic,
                partitions_summary(self.gone),
            )

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def batch(self) -> pa.RecordBatch:
        """The records kept so far as one Arrow batch, and a fresh start."""
        stamps_ms = pa.array(self.stamps, pa.int64())
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * self.rows, pa.string()),
                pa.array(self.partitions, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pc.multiply(stamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        self.partitions, self.offsets, self.stamps, self.keys, self.values = [], [], [], [], []
        return batch

    def timed_out(self, timeout: float, logged: str | None = None) -> SourceReadTimedOut:
        """The failure of a read that made no progress for ``timeout`` seconds, naming
        the client's last error, or else the last problem it ``logged``."""
        # Named by count and the first few: a task may owe thousands of them.
        missing = ranges_summary({p: (r.start, r.end) for p, r in self.owed.items()})
        problem = self.last_error or logged
        heard = f"; last client error: {problem}" if problem else ""
        return SourceReadTimedOut(
            f"offsets of topic {self.topic} not readable within {timeout:g}s: {missing}{heard}"
        )


def read_ranges(
    options: Mapping[str, str], ranges: Sequence[OffsetRange], timeout: float
) -> Generator[pa.RecordBatch, None, None]:
    """Every record of the ranges (one topic), each partition's in offset order, as
    Arrow record batches (:data:`ARROW_SCHEMA`), with one consumer.

    A range ends at its ``end`` whatever the log holds now (see the module docstring),
    so the read completes as soon as every range is done; it fails only after
    ``timeout`` seconds without any progress, or at once on an error reading on cannot
    cure (a codec missing, credentials refused).
    """
    reads = RangeReads.of(ranges, time.monotonic())
    if not reads.owed:
        return
    client_log = ClientLog()
    try:
        consumer = new_consumer(
            options,
            client_log,
            **{
                "enable.partition.eof": "true",
                # A range whose start the log no longer holds (retention, DeleteRecords)
                # reads from the log's first record.
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": options.get("fetchMaxWaitMs", str(FETCH_WAIT_MS)),
                "queued.max.messages.kbytes": str(PREFETCH_KIB),
            },
        )
    except TransportError as exc:  # settings the client refuses: the source's failure
        raise SourceReadFailed(str(exc)) from exc
    grace = min(SHORT_LOG_GRACE_S, timeout / 2)
    checked_at = reads.progress_at
    try:
        consumer.assign(
            [TopicPartition(reads.topic, p, r.start) for p, r in sorted(reads.owed.items())]
        )
        while reads.owed:
            messages = consumer.consume(ARROW_BATCH_ROWS, CONSUME_WAIT_S)
            now = time.monotonic()
            reads.take(messages, now)
            if reads.short:
                reads.end_short(now, grace)
            if reads.owed and now - max(reads.progress_at, checked_at) >= grace:
                # Stalled: a partition, or the topic, may be gone (librdkafka says
                # nothing of a topic deleted under an assignment).
                checked_at = now
                reads.end_gone(_present(consumer, reads.topic, reads.owed, grace))
            if reads.finished:
                # Fetch only what is still owed: at 10,000 partitions a broker that
                # answers a fetch within its max wait serves the first partitions it
                # was asked for, and would serve the finished ones again and again.
                consumer.pause([TopicPartition(reads.topic, p) for p in reads.finished])
                reads.finished.clear()
            if reads.rows >= ARROW_BATCH_ROWS:
                yield reads.batch()
            if reads.owed and now - reads.progress_at > timeout:
                raise reads.timed_out(timeout, client_log.last_problem)
        if reads.rows:
            yield reads.batch()
    finally:
        reads.warn_lost()
        consumer.close()


def planned_reads(
    options: Mapping[str, str], groups: Sequence[Sequence[OffsetRange]], timeout: float
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function over ``spark.range(len(groups), numPartitions=...)``:
    each id names a group of ranges, and a task reads the groups of its ids with one
    consumer, as :func:`read_ranges` does, yielding the source's SCHEMA
    (:data:`ARROW_SCHEMA`).

    For a job whose driver has listed the offsets already (reconcile): a batch read
    through the data source would list them again, and the Python Data Source API
    costs three more Python processes on the driver per read (looking the source up,
    creating it, planning it), seconds of a small job.
    """
    planned = [list(group) for group in groups]
    settings = dict(options)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        owed = [r for batch in ids for i in batch.column(0).to_pylist() for r in planned[i]]
        yield from read_ranges(settings, owed, timeout)

    return read


def _present(consumer: Any, topic: str, owed: Iterable[int], wait: float) -> set[int] | None:
    """The topic's partitions now (None: the topic is gone); those ``owed`` too
    while the brokers cannot say."""
    with contextlib.suppress(KafkaException):
        meta = consumer.list_topics(topic, timeout=wait).topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() in NO_TOPIC):
            return None
        if meta.error is None:
            return set(meta.partitions)
    return set(owed)
