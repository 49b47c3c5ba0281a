"""A task's reads of its offset ranges (probe.spark.kafka_reads) with no broker: the
bookkeeping fed messages as librdkafka hands them over, and a read that hears nothing.
Reads from a broker are in test_kafka_source*.py, beside the source that plans them."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Message

from probe.core.errors import SourceReadFailed
from probe.core.offset_ranges import OffsetRange
from probe.embedded import free_loopback_port
from probe.spark.kafka_reads import RangeReads, read_ranges

MANY = 200


def test_a_read_that_makes_no_progress_times_out_naming_the_count_and_the_first_few() -> None:
    """A task that hears nothing of its ranges (no broker answers) says how many it
    still waits for and the first few, in a message whose size does not grow with
    them, and what the client last said; a TimeoutError, and the source's failure
    (SourceReadFailed, by which a failed query is named: probe.spark.health)."""
    nowhere = f"127.0.0.1:{free_loopback_port()}"
    ranges = [OffsetRange("t", p, 0, 1) for p in range(MANY)]
    started = time.monotonic()
    with pytest.raises(TimeoutError) as timeout:
        list(read_ranges({"bootstrap.servers": nowhere}, ranges, timeout=2))
    assert time.monotonic() - started < 10
    assert isinstance(timeout.value, SourceReadFailed)
    message = str(timeout.value)
    assert message.startswith("offsets of topic t not readable within 2s: ")
    assert f"{MANY} partitions, offsets 0..1 (first: 0:0..1, 1:0..1, " in message
    assert "last client error: " in message
    assert len(message) < 500


def test_a_tasks_reads_end_each_range_at_its_end_and_count_only_progress() -> None:
    """The read's bookkeeping, fed messages as librdkafka hands them over: a range
    ends at its last record, at a record past its end or at a log's end past it;
    records before a range's start are skipped; a log that ends short ends its range
    only after the grace; an error the client retries is not progress."""
    reads = RangeReads.of(
        [OffsetRange("t", 0, 5, 7), OffsetRange("t", 1, 0, 4), OffsetRange("t", 2, 0, 3)],
        now=0.0,
    )
    eof = KafkaError(KafkaError._PARTITION_EOF, "end")
    reads.take(
        [
            Message(topic="t", partition=0, offset=4, value=b"before"),
            Message(topic="t", partition=0, offset=5, value=b"a"),
            Message(topic="t", partition=0, offset=6, value=b"b"),
            Message(topic="t", partition=1, offset=9, value=b"past"),
            Message(topic="t", partition=2, offset=1, error=eof),
        ],
        now=1.0,
    )
    assert reads.batch().column("value").to_pylist() == [b"a", b"b"]
    assert sorted(reads.owed) == [2]
    assert reads.finished == [0, 1]
    retried = KafkaError(KafkaError._TRANSPORT, "broker away")
    reads.take([Message(topic="t", partition=2, offset=-1, error=retried)], now=2.0)
    assert reads.progress_at == 1.0
    assert reads.last_error == "broker away"
    reads.end_short(now=2.0, grace=3.0)
    assert sorted(reads.owed) == [2]
    reads.end_short(now=4.0, grace=3.0)
    assert not reads.owed
    assert reads.cut_short == {2: (1, 3)}
