"""Raw records on the canary topic, for the game days' faults that write what the probe
did not (hostile records, a replayed canary) and read back what is there.

A transport, as every module that speaks a client library (probe/transport/__init__);
plain aiokafka clients of their own (manual partition assignment: no consumer group,
which the embedded broker does not need), through the same proxy as the probe; where
a partition's log ends is the admin module's lookup.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from probe.core.errors import TransportError
from probe.transport.kafka_admin import log_ends

_TIMEOUT = 15.0


def write_records(bootstrap_servers: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    """Write each (partition, value); returns once the broker acknowledged all of them."""
    asyncio.run(asyncio.wait_for(_write(bootstrap_servers, topic, records), _TIMEOUT))


def read_latest(bootstrap_servers: str, topic: str, partition: int, count: int) -> list[bytes]:
    """The values of the last `count` records of one partition, oldest first."""
    return asyncio.run(
        asyncio.wait_for(_read_latest(bootstrap_servers, topic, partition, count), _TIMEOUT)
    )


async def _write(bootstrap_servers: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, enable_idempotence=False)
    try:
        await producer.start()
        sent = [await producer.send(topic, value, partition=p) for p, value in records]
        await asyncio.gather(*sent)
    except Exception as error:  # aiokafka's errors are many; they all mean "not written"
        raise TransportError(f"cannot write to {topic}: {error!r}") from error
    finally:
        await producer.stop()


async def _read_latest(
    bootstrap_servers: str, topic: str, partition: int, count: int
) -> list[bytes]:
    try:
        end = (await log_ends(bootstrap_servers, topic, [partition]))[partition]
        start = max(0, end - count)
        if start == end:
            # Nothing to read, and no consumer: aiokafka's (0.14), stopped before it
            # ever waited on the broker, raises the cancellation of its own task.
            return []
        values = await _read(bootstrap_servers, TopicPartition(topic, partition), start, end)
        return values[-count:]
    except Exception as error:
        raise TransportError(f"cannot read {topic}[{partition}]: {error!r}") from error


async def _read(bootstrap_servers: str, tp: TopicPartition, start: int, end: int) -> list[bytes]:
    """The values of the records from ``start`` on, at least up to ``end``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, start)
        values: list[bytes] = []
        while len(values) < end - start:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values.extend(r.value for r in batch.get(tp, []) if r.value is not None)
        return values
    finally:
        await consumer.stop()


class OpenTransaction:
    """Records written in a transaction of a producer of its own, left open until
    :meth:`abort`: every read_committed consumer of their partitions stops at them (the
    last stable offset is pinned) until then, or until the broker aborts it after
    ``timeout`` seconds (at most the brokers' transaction.max.timeout.ms, 15 min by
    default)::

        held = OpenTransaction("127.0.0.1:9092", "canaries", "gameday-open")
        held.open([(0, b"...")])   # written, not committed
        held.abort()
    """

    def __init__(
        self, bootstrap_servers: str, topic: str, transactional_id: str, timeout: float = 900.0
    ) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        self._topic = topic
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": round(timeout * 1000),
            }
        )

    def open(self, records: list[tuple[int, bytes]]) -> None:
        """Begin the transaction and write the records in it; returns once the broker
        acknowledged them. Raises TransportError if it cannot."""
        from confluent_kafka import KafkaException  # noqa: PLC0415

        try:
            self._producer.init_transactions(_TIMEOUT)
            self._producer.begin_transaction()
            for partition, value in records:
                self._producer.produce(self._topic, value, partition=partition)
            if self._producer.flush(_TIMEOUT):
                raise TransportError(f"records not acknowledged within {_TIMEOUT:g}s")
        except KafkaException as exc:
            raise TransportError(f"transaction not opened: {exc}") from exc

    def abort(self) -> None:
        """Abort the transaction: its records are never read by a read_committed
        consumer, which reads on past them."""
        from confluent_kafka import KafkaException  # noqa: PLC0415

        try:
            self._producer.abort_transaction(_TIMEOUT)
        except KafkaException as exc:
            raise TransportError(f"transaction not aborted: {exc}") from exc
        finally:
            # librdkafka's producer ends (its threads and connections) with its last
            # reference: not left trying to reach a cluster that is stopped next.
            del self._producer
