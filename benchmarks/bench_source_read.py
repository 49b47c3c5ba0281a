"""Which client the sla_kafka source reads with: kafka-python against confluent-kafka.

Run: ``python benchmarks/bench_source_read.py [--broker embedded|apache-kafka]
[--records N] [--partitions P] [--many M] [--repeats R] [--skip-kafka-python-many]``

One broker (the embedded one, or Apache Kafka's three-broker cluster), one process,
the clients side by side in rotation so machine noise hits both. Figures only;
nothing is asserted. CPU is the process's (``time.process_time``: every thread, so
librdkafka's own threads count); the broker's is not included.

1. **A large read**: N records over P partitions, read from offset 0 to the end by a
   bare client loop (assign the ranges, fetch until each is done, pause the done ones,
   keep the five source columns per record) with kafka-python (as the source read until
   now: ``poll``, CRC checks on) and with confluent-kafka (librdkafka: ``consume`` in
   chunks), and by the source's own executor read (``read_ranges``: librdkafka, Arrow
   record batches). Printed: records per CPU-second and per wall second (medians), and
   the ratios.
2. **Listing a topic of M partitions** (default 10,000), as the driver plans a batch:
   the partitions of the one topic, then every partition's first and end offsets.
   kafka-python as the source did (``topics()``, which fetches the metadata of every
   topic, then ``beginning_offsets`` and ``end_offsets``); confluent-kafka's consumer
   (``list_topics(topic)``, then ``offsets_for_times`` with the earliest and latest
   markers, which librdkafka sends as one ListOffsets per leader); confluent-kafka's
   admin client (``list_offsets``); and what the source now asks at each trigger
   (``TopicOffsets``: the topic's metadata and the end offsets). Printed: wall and CPU
   per listing (median), and the requests one listing sends, by API, counted in a
   separate, untimed run (kafka-python's at its connections, librdkafka's from its
   statistics, which cost CPU of their own).
3. **A read of M ranges of one or two records each** (every partition of that topic):
   the case that timed the source's tasks out at 10,000 partitions. Printed: wall and
   CPU per client, or how far it got within ``--many-deadline`` seconds.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from probe.apache_kafka.cluster import KafkaCluster
from probe.core.offset_ranges import OffsetRange
from probe.embedded import EmbeddedBroker
from probe.spark.kafka_reads import FETCH_WAIT_MS, read_ranges
from probe.spark.topic_offsets import TopicOffsets
from probe.transport.kafka_admin import PARTITIONS_PER_REQUEST

BULK_TOPIC = "source-read-bulk"
MANY_TOPIC = "source-read-many"


# -- fixtures ------------------------------------------------------------------------


def create_topic(servers: str, topic: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    # Apache Kafka's controller creates at most PARTITIONS_PER_REQUEST in one go; the
    # embedded broker (replication 1) creates any number, and cannot add partitions.
    first = partitions if replication == 1 else min(partitions, PARTITIONS_PER_REQUEST)
    admin.create_topics([NewTopic(topic, first, replication)])[topic].result(120)
    while first < partitions:
        first = min(partitions, first + PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, first)])[topic].result(120)
    # Until every partition has a leader, a producer's records to it wait.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=30).topics[topic]
        if len(meta.partitions) == partitions and all(
            p.leader >= 0 for p in meta.partitions.values()
        ):
            return
        time.sleep(0.5)
    raise SystemExit(f"topic {topic}: partitions without a leader after 120 s")


def _value(i: int) -> bytes:
    # About the size of a canary or a small business event.
    return f'{{"order": {i}, "customer": "c-{i % 9973:05d}", "amount": {i % 1000}.25}}'.encode()


def produce_bulk(servers: str, count: int, partitions: int) -> dict[int, int]:
    """``count`` records over the partitions, in large batches; each partition's last
    record alone in its batch (the embedded broker lists a partition's end as its last
    batch's base offset plus one). Returns the end offset of each partition."""
    bulk = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    for i in range(count - partitions):
        while True:
            try:
                bulk.produce(BULK_TOPIC, _value(i), partition=i % partitions)
                break
            except BufferError:
                bulk.poll(0.1)
    assert bulk.flush(300) == 0
    return produce_one_each(servers, BULK_TOPIC, range(partitions))


def produce_one_each(servers: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """One record to each partition, each alone in its partition's batch; returns each
    partition's end offset after it."""
    ends: dict[int, int] = {}

    def delivered(error: object, message: Any) -> None:
        assert error is None, error
        ends[message.partition()] = message.offset() + 1

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20})
    for partition in partitions:
        producer.produce(topic, _value(partition), partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(300) == 0
    return ends


# -- bare reads ----------------------------------------------------------------------


Columns = tuple[list[Any], list[Any], list[Any], list[Any], list[Any]]


def _columns() -> Columns:
    return [], [], [], [], []


def read_kafka_python(
    servers: str, topic: str, ends: dict[int, int], deadline_s: float
) -> tuple[int, bool]:
    """Every record of [0, end) per partition with kafka-python, as the source's
    executors read until now: assign, seek, ``poll`` until each range is done."""
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka import TopicPartition as KpTopicPartition  # noqa: PLC0415

    consumer = KafkaConsumer(
        bootstrap_servers=servers.split(","),
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
    )
    wanted = {KpTopicPartition(topic, p): end for p, end in ends.items() if end > 0}
    columns = _columns()
    read = 0
    try:
        consumer.assign(list(wanted))
        for tp in wanted:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + deadline_s
        while wanted and time.monotonic() < deadline:
            fetched = consumer.poll(timeout_ms=500)
            for tp, records in fetched.items():
                end = wanted.get(tp)
                if end is None:
                    continue
                for record in records:
                    if record.offset >= end:
                        break
                    columns[0].append(tp.partition)
                    columns[1].append(record.offset)
                    columns[2].append(record.timestamp)
                    columns[3].append(record.key)
                    columns[4].append(record.value)
                    read += 1
                if consumer.position(tp) >= end:
                    del wanted[tp]
                    consumer.pause(tp)
    finally:
        consumer.close()
    return read, not wanted


def read_confluent(
    servers: str, topic: str, ends: dict[int, int], deadline_s: float
) -> tuple[int, bool]:
    """Every record of [0, end) per partition with confluent-kafka: assign at the
    start offsets, ``consume`` in chunks until each range is done."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "bench-source-read",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "allow.auto.create.topics": False,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        }
    )
    wanted = {p: end for p, end in ends.items() if end > 0}
    columns = _columns()
    read = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
        deadline = time.monotonic() + deadline_s
        while wanted and time.monotonic() < deadline:
            done = []
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and message.offset() >= wanted.get(
                        partition, 0
                    ):
                        wanted.pop(partition, None)
                        done.append(partition)
                    continue
                offset = message.offset()
                end = wanted.get(partition)
                if end is None or offset >= end:
                    continue
                columns[0].append(partition)
                columns[1].append(offset)
                columns[2].append(message.timestamp()[1])
                columns[3].append(message.key())
                columns[4].append(message.value())
                read += 1
                if offset + 1 >= end:
                    del wanted[partition]
                    done.append(partition)
            if done:
                # Fetch only what is still owed.
                consumer.pause([TopicPartition(topic, p) for p in done])
    finally:
        consumer.close()
    return read, not wanted


def read_source(
    servers: str, topic: str, ends: dict[int, int], deadline_s: float
) -> tuple[int, bool]:
    """The source's own executor read of the same ranges (one task's worth)."""
    ranges = [OffsetRange(topic, p, 0, end) for p, end in sorted(ends.items()) if end > 0]
    read = 0
    try:
        for batch in read_ranges({"bootstrap.servers": servers}, ranges, deadline_s):
            read += len(batch)
    except TimeoutError:
        return read, False
    return read, True


READERS: dict[str, Callable[[str, str, dict[int, int], float], tuple[int, bool]]] = {
    "kafka-python": read_kafka_python,
    "confluent-kafka": read_confluent,
    "sla_kafka read_ranges": read_source,
}


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of the whole process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


# -- listing -------------------------------------------------------------------------


class KafkaPythonRequests:
    """Requests kafka-python sends, by API, counted at its connections."""

    def __init__(self) -> None:
        from kafka.net.connection import KafkaConnection  # noqa: PLC0415

        self.counts: collections.Counter[str] = collections.Counter()
        self._original = KafkaConnection.send_request
        original = self._original
        counts = self.counts

        def counting(connection: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            counts[type(request).__name__.removesuffix("Request").split("_")[0]] += 1
            return original(connection, request, *args, **kwargs)

        KafkaConnection.send_request = counting

    def close(self) -> None:
        from kafka.net.connection import KafkaConnection  # noqa: PLC0415

        KafkaConnection.send_request = self._original


class RdkafkaRequests:
    """Requests a librdkafka client sent, by API, from its statistics."""

    def __init__(self) -> None:
        self._latest: dict[str, Any] = {}
        self._fresh = threading.Event()

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": 50, "stats_cb": self._stats}

    def _stats(self, text: str) -> None:
        self._latest = json.loads(text)
        self._fresh.set()

    def snapshot(self, poll: Callable[[float], Any]) -> collections.Counter[str]:
        self._fresh.clear()
        deadline = time.monotonic() + 5
        while not self._fresh.is_set() and time.monotonic() < deadline:
            poll(0.05)
        counts: collections.Counter[str] = collections.Counter()
        for broker in self._latest.get("brokers", {}).values():
            if broker.get("nodeid", -1) < 0:
                continue  # the bootstrap entries: their requests are the brokers' too
            for api, sent in broker.get("req", {}).items():
                counts[api] += sent
        return counts


def _listed(counts: collections.Counter[str]) -> str:
    shown = {api: n for api, n in counts.items() if n and api in {"Metadata", "ListOffsets"}}
    return ", ".join(f"{n} {api}" for api, n in sorted(shown.items())) or "none"


def list_kafka_python(servers: str, topic: str, count: bool) -> tuple[int, str]:
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka import TopicPartition as KpTopicPartition  # noqa: PLC0415

    counter = KafkaPythonRequests() if count else None
    client = KafkaConsumer(bootstrap_servers=servers.split(","), enable_auto_commit=False)
    try:
        client.topics()  # connected and bootstrapped, outside the count
        if counter is not None:
            counter.counts.clear()
        client.topics()
        tps = [KpTopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic))]
        begin = client.beginning_offsets(tps)
        end = client.end_offsets(tps)
        assert len(begin) == len(end) == len(tps)
        return len(tps), _listed(counter.counts) if counter is not None else ""
    finally:
        client.close()
        if counter is not None:
            counter.close()


def list_confluent(servers: str, topic: str, count: bool) -> tuple[int, str]:
    # librdkafka's statistics cost CPU of their own (a JSON of every partition every
    # 50 ms): only in the run that counts requests, never in the timed ones.
    counter = RdkafkaRequests() if count else None
    client = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "bench-source-read",
            "enable.auto.commit": False,
            "allow.auto.create.topics": False,
            **(counter.config() if counter is not None else {}),
        }
    )
    try:
        client.list_topics(topic, timeout=30)  # connected and bootstrapped
        before = counter.snapshot(client.poll) if counter is not None else None
        meta = client.list_topics(topic, timeout=30).topics[topic]
        partitions = sorted(meta.partitions)
        begin = client.offsets_for_times([TopicPartition(topic, p, -2) for p in partitions], 60)
        end = client.offsets_for_times([TopicPartition(topic, p, -1) for p in partitions], 60)
        assert len(begin) == len(end) == len(partitions)
        if counter is None or before is None:
            return len(partitions), ""
        return len(partitions), _listed(counter.snapshot(client.poll) - before)
    finally:
        client.close()


def list_confluent_admin(servers: str, topic: str, count: bool) -> tuple[int, str]:
    counter = RdkafkaRequests() if count else None
    admin = AdminClient(
        {
            "bootstrap.servers": servers,
            "allow.auto.create.topics": False,
            **(counter.config() if counter is not None else {}),
        }
    )
    admin.list_topics(topic, timeout=30)
    before = counter.snapshot(admin.poll) if counter is not None else None
    meta = admin.list_topics(topic, timeout=30).topics[topic]
    partitions = sorted(meta.partitions)
    sides = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = admin.list_offsets({TopicPartition(topic, p): spec for p in partitions})
        sides.append({tp.partition: f.result().offset for tp, f in futures.items()})
    assert all(len(side) == len(partitions) for side in sides)
    if counter is None or before is None:
        return len(partitions), ""
    return len(partitions), _listed(counter.snapshot(admin.poll) - before)


def list_source_trigger(servers: str, topic: str, count: bool) -> tuple[int, str]:
    """What the source asks at each trigger: the topic's partitions, their ends."""
    offsets = TopicOffsets({"bootstrap.servers": servers, "topic": topic})
    try:
        offsets.partitions()  # connected and bootstrapped
        partitions = offsets.partitions() or []
        ends = offsets.ends(partitions)
        assert len(ends) == len(partitions)
        return len(partitions), "as the consumer's, latest side only" if count else ""
    finally:
        offsets.close()


LISTINGS: dict[str, Callable[[str, str, bool], tuple[int, str]]] = {
    "kafka-python (topics, beginning/end_offsets)": list_kafka_python,
    "confluent-kafka consumer (offsets_for_times)": list_confluent,
    "confluent-kafka admin (list_offsets)": list_confluent_admin,
    "sla_kafka at a trigger (metadata, ends)": list_source_trigger,
}


# -- the run -------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bulk_section(servers: str, args: argparse.Namespace, replication: int) -> None:
    create_topic(servers, BULK_TOPIC, args.partitions, replication)
    ends = produce_bulk(servers, args.records, args.partitions)
    total = sum(ends.values())
    print(f"\n1. read {total:,} records over {args.partitions} partitions, {args.repeats}x each")
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in READERS}
    for _ in range(args.repeats):
        for name, reader in READERS.items():
            (read, done), wall, cpu = timed(lambda r=reader: r(servers, BULK_TOPIC, ends, 600))
            assert done, f"{name}: read {read} of {total}, not done"
            assert read == total, f"{name}: read {read} of {total}"
            rates[name].append((read / cpu, read / wall))
    for name, pairs in rates.items():
        print(
            f"   {name:24} {_median([c for c, _ in pairs]):>11,.0f} records/CPU-s "
            f"{_median([w for _, w in pairs]):>11,.0f} records/s"
        )
    base = _median([c for c, _ in rates["kafka-python"]])
    for name in list(READERS)[1:]:
        print(
            f"   {name} / kafka-python: {_median([c for c, _ in rates[name]]) / base:.1f}x "
            "records per CPU-second"
        )


def many_section(servers: str, args: argparse.Namespace, replication: int) -> None:
    started = time.monotonic()
    create_topic(servers, MANY_TOPIC, args.many, replication)
    ends = produce_one_each(servers, MANY_TOPIC, range(args.many))
    # A second record on every other partition: ranges of one and of two records.
    ends.update(produce_one_each(servers, MANY_TOPIC, range(0, args.many, 2)))
    total = sum(ends.values())
    print(
        f"\n2. list a topic of {args.many:,} partitions ({total:,} records, fixtures "
        f"{time.monotonic() - started:.0f} s), {args.repeats}x each"
    )
    for name, listing in LISTINGS.items():
        walls, cpus = [], []
        for _ in range(args.repeats):
            (count, _), wall, cpu = timed(lambda f=listing: f(servers, MANY_TOPIC, False))
            assert count == args.many, f"{name}: {count} partitions"
            walls.append(wall)
            cpus.append(cpu)
        _, requests = listing(servers, MANY_TOPIC, True)
        print(
            f"   {name:46} {_median(walls) * 1000:>7.0f} ms wall {_median(cpus) * 1000:>7.0f} "
            f"ms CPU; requests: {requests}"
        )
    print(f"\n3. read {args.many:,} ranges of one or two records ({total:,} records), one task")
    results: dict[str, tuple[float, float]] = {}
    for name, reader in READERS.items():
        if name == "kafka-python" and args.skip_kafka_python_many:
            continue
        (read, done), wall, cpu = timed(
            lambda r=reader: r(servers, MANY_TOPIC, ends, args.many_deadline)
        )
        status = "done" if done else f"NOT done within {args.many_deadline:g} s"
        print(f"   {name:24} {read:>7,} records {wall:>6.1f} s wall {cpu:>6.1f} s CPU ({status})")
        if done:
            results[name] = (wall, cpu)
    if "kafka-python" in results:
        for name in list(READERS)[1:]:
            if name in results:
                base_wall, base_cpu = results["kafka-python"]
                wall, cpu = results[name]
                print(
                    f"   kafka-python / {name}: {base_wall / wall:.1f}x wall, "
                    f"{base_cpu / cpu:.1f}x CPU"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=["embedded", "apache-kafka"], default="embedded")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--many", type=int, default=10_000, help="partitions of the listing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--many-deadline", type=float, default=120.0)
    parser.add_argument("--skip-kafka-python-many", action="store_true")
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.broker} broker"
    )
    with contextlib.ExitStack() as stack:
        if args.broker == "embedded":
            broker: EmbeddedBroker | KafkaCluster = stack.enter_context(EmbeddedBroker())
            replication = 1
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            broker = stack.enter_context(KafkaCluster(workdir=workdir, quick_start=False))
            replication = 3
        servers = broker.bootstrap_servers
        if args.records:
            bulk_section(servers, args, replication)
        if args.many:
            many_section(servers, args, replication)


if __name__ == "__main__":
    main()
