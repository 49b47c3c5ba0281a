"""Reconciliation throughput: a topic of a million records against its table on local[2].

Run: ``python benchmarks/bench_reconcile.py [--records N] [--partitions P]
[--window-offsets W] [--format raw|canary] [--command N] 2>/dev/null``
(Spark's own output goes to stderr; the figures to stdout.) ``--command N`` times the
whole ``sla-probe reconcile`` command N times instead, as a user runs it (Python's
start, the plan, Spark's start and the job), in either format.

The fixtures are written as fast as they can be, outside the timing: the records are
produced to the embedded broker with confluent-kafka in large batches (``linger.ms``
50, up to 10,000 records a batch), their offsets taken from the delivery reports, and
the table is written from those with pyarrow, as a sink would have written it
(``kafka_partition``, ``kafka_offset`` and the record's columns, in Parquet files of
100,000 rows). The embedded broker (Tansu) lists a partition's end offset as the base
offset of its last record batch plus one, so each partition ends with one record
written alone: the listed end is then exact. The table holds every record once: the
run must find them all ``matched``.

``raw`` (default) compares the value bytes with a ``value`` column; ``canary`` writes
signed canaries and a canaries/ table as the sink stage does, and the job decodes and
verifies every record on the executors (the probe's own path; slower per record).

Timed: two reconciliation runs (``ReconcileJob.run``: listing the offsets, planning,
reading the topic with the sla_kafka batch reader, reading the table, the join and
the per-window counts, the samples), in one Spark session (``local[2]``, as
``sink_session`` builds it) started before the clock; the first run also starts
Spark's Python workers, the second shows the steady rate. Printed per run: records/s
(source records reconciled per second of the run), the run's windows, and the CPU
seconds of the whole process tree (Spark's JVM and Python workers): on a shared
machine, steadier than the wall time.

**The floor**, printed beside: one confluent-kafka consumer (librdkafka) reading the
same topic from the same broker, every partition from its first offset to its end,
timed before the runs and after them (the median of the two); each run is printed as
a ratio of it and as the seconds above it. CPU seconds are the process tree's, the
embedded broker's included (it is this process's child) on both sides. The floor is
what any reader of the topic pays on this machine; the job adds the table, the join
and Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from probe.core.canary import Canary, encode
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.reconcile.job import ReconcileJob, ReconcileSettings
from probe.reconcile.outcome import WindowStatus
from probe.reconcile.windows import WindowSpec
from probe.spark.checksum import RecordFormat
from probe.spark.session import sink_session
from probe.spark.tables import TABLE_SCHEMAS

TOPIC = "reconcile-bench"
ROWS_PER_FILE = 100_000
RAW_SCHEMA = pa.schema(
    [("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), ("value", pa.binary())]
)


def _value(i: int) -> bytes:
    # About the size of a small business event.
    return f'{{"order": {i}, "customer": "c-{i % 9973:05d}", "amount": {i % 1000}.25}}'.encode()


def produce(
    broker: EmbeddedBroker, count: int, partitions: int, ring: KeyRing | None
) -> list[dict[str, object]]:
    """Write ``count`` records (canaries signed with ``ring`` when given), return one
    table row per record with its offset."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    rows: list[dict[str, object]] = []
    payloads: dict[int, tuple[bytes, dict[str, object]]] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        _, fields = payloads.pop(int(message.key()))  # type: ignore[attr-defined]
        rows.append(
            {
                "kafka_partition": message.partition(),  # type: ignore[attr-defined]
                "kafka_offset": message.offset(),  # type: ignore[attr-defined]
                **fields,
            }
        )

    def record(i: int, partition: int, seq: int) -> tuple[bytes, dict[str, object]]:
        if ring is None:
            value = _value(i)
            return value, {"value": value}
        now = time.time_ns()
        canary = Canary("bench", 1, "kafka", partition, seq, now)
        fields: dict[str, object] = {
            "probe_id": "bench", "target": "kafka", "partition": partition, "incarnation": 1,
            "seq": seq, "produced_ns": now, "judged_ns": now, "sink_commit_ns": now,
            "trace_context": None,
        }  # fmt: skip
        return encode(canary, ring), fields

    bulk = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    body = count - partitions  # the last record of each partition is written alone
    for i in range(body):
        partition, seq = i % partitions, i // partitions
        payloads[i] = record(i, partition, seq)
        while True:
            try:
                bulk.produce(
                    TOPIC, payloads[i][0], key=str(i).encode(), partition=partition,
                    on_delivery=delivered,
                )  # fmt: skip
                break
            except BufferError:
                bulk.poll(0.1)
        if i % 10_000 == 0:
            bulk.poll(0)
    assert bulk.flush(120) == 0
    single = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for partition in range(partitions):
        i = body + partition
        payloads[i] = record(i, partition, body // partitions + 1)
        single.produce(
            TOPIC, payloads[i][0], key=str(i).encode(), partition=partition, on_delivery=delivered
        )
        assert single.flush(10) == 0
    assert len(rows) == count
    return rows


def write_table(rows: list[dict[str, object]], path: Path, schema: pa.Schema) -> None:
    for n, start in enumerate(range(0, len(rows), ROWS_PER_FILE)):
        directory = path / f"batch_id={n}"
        directory.mkdir(parents=True)
        chunk = pa.Table.from_pylist(rows[start : start + ROWS_PER_FILE], schema=schema)
        pq.write_table(chunk, directory / "part-00000.parquet")


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process under it (Spark's
    JVM, its Python workers), those already reaped included."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        # utime, stime, and the children's it reaped: cutime, cstime.
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(times.get(pid, 0.0) for pid in tree)


def floor_read(broker: EmbeddedBroker) -> tuple[int, float, float]:
    """A bare confluent-kafka read of the whole topic: (records, wall s, CPU s of the
    process tree: the broker's serving included, as in the runs)."""
    wall, cpu = time.perf_counter(), tree_cpu_seconds()
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "bench-reconcile-floor",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "allow.auto.create.topics": False,
            "fetch.wait.max.ms": 20,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)
        ends = {
            tp.partition: tp.offset
            for tp in consumer.offsets_for_times(
                [TopicPartition(TOPIC, p, -1) for p in partitions], 30
            )
        }
        owed = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in owed])
        read = 0
        while owed:
            for message in consumer.consume(10_000, 0.1):
                error = message.error()
                if error is None:
                    read += 1
                    if message.offset() + 1 >= ends[message.partition()]:
                        owed.discard(message.partition())
                elif error.code() == KafkaError._PARTITION_EOF:
                    owed.discard(message.partition())
    finally:
        consumer.close()
    return read, time.perf_counter() - wall, tree_cpu_seconds() - cpu


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine: the command's JVM outlives it and is
    nobody's child here by then, so the machine is what can be counted."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def commands(
    broker: EmbeddedBroker,
    table: Path,
    window_offsets: int,
    repeats: int,
    floors: list[tuple[int, float, float]],
    *,
    ring: KeyRing | None,
) -> None:
    """The whole command, as a user runs it, ``repeats`` times: Python's start,
    the plan, Spark's start (from its class archive once one exists: the first run
    may write it, at its exit) and the job. Printed with the floor, as a ratio.
    With ``ring``, the canary format: every record verified with it."""
    sla_probe = str(Path(sys.executable).with_name("sla-probe"))
    walls = []
    for attempt in range(1, repeats + 1):
        with tempfile.TemporaryDirectory() as sink:
            if ring is None:
                record_format = ["--format", "raw"]
            else:
                keys, config = Path(sink) / "keys.json", Path(sink) / "probe.yaml"
                keys.write_text(ring.to_json())
                config.write_text("probe_id: bench\n")
                record_format = ["--format", "canary", "--signing-key-file", str(keys),
                                 "--config", str(config)]  # fmt: skip
            wall, cpu = time.perf_counter(), machine_cpu_seconds()
            result = subprocess.run(
                [sla_probe, "reconcile", "--bootstrap-servers", broker.bootstrap_servers,
                 "--topic", TOPIC, "--table", str(table), *record_format,
                 "--window-offsets", str(window_offsets), "--settle", "1s",
                 "--sink-path", sink, "--json"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            wall, cpu = time.perf_counter() - wall, machine_cpu_seconds() - cpu
        if result.returncode != 0:
            raise SystemExit(f"reconcile exited {result.returncode}: {result.stderr[-2000:]}")
        matched = sum(w["matched"] for w in json.loads(result.stdout)["windows"])
        walls.append(wall)
        print(
            f"command {attempt}: {wall:.1f}s, {cpu:.1f} CPU-s of the machine, "
            f"{matched:,} records matched"
        )
    floors.append(floor_read(broker))
    floor_s = statistics.median(f[1] for f in floors)
    median = statistics.median(walls)
    print(
        f"floor: one confluent-kafka consumer reads the {floors[0][0]:,} records in "
        f"{floor_s:.1f}s, median of {len(floors)}"
    )
    print(
        f"command, median of {len(walls)}: {median:.1f}s, {median / floor_s:.1f}x the floor, "
        f"{median - floor_s:+.1f}s above it"
    )
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Spark local[2]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--window-offsets", type=int, default=50_000)
    parser.add_argument("--format", choices=["raw", "canary"], default="raw")
    parser.add_argument(
        "--command",
        type=int,
        default=0,
        metavar="N",
        help="instead of runs in one session, time the whole `sla-probe reconcile` "
        "command N times (Spark's start included)",
    )
    args = parser.parse_args()
    canaries = args.format == "canary"
    ring = generate_key_ring("bench") if canaries else None
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        rows = produce(broker, args.records, args.partitions, ring)
        produced_s = time.monotonic() - started
        table = Path(tmp) / "table"
        write_table(rows, table, TABLE_SCHEMAS["canaries"] if canaries else RAW_SCHEMA)
        del rows
        print(
            f"fixtures: {args.records:,} records produced in {produced_s:.1f}s, "
            f"table written in {time.monotonic() - started - produced_s:.1f}s"
        )
        floors = [floor_read(broker)]
        if args.command:
            commands(broker, table, args.window_offsets, args.command, floors, ring=ring)
            return
        spark = sink_session("local[2]", app_name="bench-reconcile", streaming=False)
        settings = ReconcileSettings(
            bootstrap_servers=broker.bootstrap_servers,
            topic=TOPIC,
            table=str(table),
            window=WindowSpec(offsets=args.window_offsets),
            settle_s=1.0,
            lookback_s=None,
            record_format=RecordFormat.CANARY if canaries else RecordFormat.RAW,
            keyring_json=ring.to_json() if ring is not None else None,
        )
        # Ten seconds ahead: every record written is older than the settle delay.
        job = ReconcileJob(spark, settings, lambda: time.time_ns() // 1_000_000 + 10_000)
        # The first run in a session also starts Spark's Python workers; the second
        # shows the steady rate a `--every` service reconciles at.
        runs = []
        for attempt in ("first run", "second run"):
            cpu = tree_cpu_seconds()
            run = job.run(f"bench-{attempt.split()[0]}")
            cpu = tree_cpu_seconds() - cpu
            runs.append((attempt, run.duration_s, cpu))
            records = run.records()
            source = sum(w.tally.source for w in run.windows)
            statuses = run.windows_by_status()
            print(
                f"{attempt}: reconciled {source:,} records against "
                f"{sum(w.tally.sink for w in run.windows):,} rows in {run.duration_s:.1f}s: "
                f"{source / run.duration_s:,.0f} records/s ({len(run.windows)} windows of "
                f"{args.window_offsets:,} offsets: {statuses[WindowStatus.COMPLETE]} complete, "
                f"{statuses[WindowStatus.MISMATCH]} mismatched; matched "
                f"{records['matched']:,}, missing {records['missing']:,})"
            )
        floors.append(floor_read(broker))
        records = floors[0][0]
        floor_s = statistics.median(f[1] for f in floors)
        floor_cpu = statistics.median(f[2] for f in floors)
        print(
            f"floor: one confluent-kafka consumer reads the {records:,} records in "
            f"{floor_s:.1f}s ({floor_cpu:.1f} CPU-s), median of {len(floors)}"
        )
        for attempt, duration_s, cpu in runs:
            print(
                f"{attempt}: {duration_s / floor_s:.1f}x the floor, "
                f"{duration_s - floor_s:+.1f}s above it; {cpu:.1f} CPU-s (Spark's JVM and "
                f"Python workers included), {cpu / floor_cpu:.0f}x the floor's"
            )
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Spark local[2]")
        spark.stop()


if __name__ == "__main__":
    main()
