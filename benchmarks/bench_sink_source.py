"""The sink's two Kafka sources side by side: the probe's ``sla_kafka`` against Spark's
own connector (``sink.source: kafka``), on the same broker, in one run.

Run: ``python benchmarks/bench_sink_source.py [--broker embedded|apache-kafka]
[--partitions 1000,10000] [--rounds R] [--interval S] [--records N]
[--reconcile-partitions P] [--repeats K] [--part sink|reconcile|all] 2>/dev/null``
(Spark's own output goes to stderr; the figures to stdout.) Needs the connector's jars
(`make spark-kafka`) and, for ``--broker apache-kafka``, Apache Kafka's (`make kafka`).

One broker and one Spark session (``local[2]``, as ``sink_session`` builds it with
``source="kafka"``: the connector's jars on its classpath, which costs ``sla_kafka``
nothing) for the whole run, started before the clock. Figures only; nothing asserted.

``sink``
    For each partition count, a topic of that many partitions, and for each source in
    turn a fresh sink query on it (``SinkJob`` as the sink stage builds it: decode,
    the stateful judge, the tables; trigger ``--trigger``, 2 s), started from
    ``latest``. A warm-up round first (one signed canary per partition: it starts the
    Python workers and is not counted), then ``--rounds`` rounds ``--interval`` s apart,
    each one signed canary per partition written as the probe writes them (one record
    per partition, confluent-kafka). Printed per source: produce→commit latency p50
    and p99 of the measured canaries, their count judged (all must be delivered), the
    batches with records (median duration and records), and the CPU-seconds of the
    process tree (this process, Spark's JVM, its Python workers; the broker apart)
    from the first measured round to the last verdict, per round. Then the ratios.
``reconcile``
    ``--records`` raw records over ``--reconcile-partitions`` partitions (written in
    large batches, the last record of each partition alone: the embedded broker
    lists a partition's end right only after a batch of one) and their Parquet table
    (every record once), then ``ReconcileJob.run`` with each source in rotation,
    ``--repeats`` times each (the first run of each pays its Python workers' start):
    wall seconds and CPU-seconds per run, the medians, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from probe.apache_kafka.cluster import KafkaCluster
from probe.config import StageName
from probe.core.canary import Canary, encode
from probe.core.judge import Finding, Outcome
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.reconcile.job import ReconcileJob, ReconcileSettings
from probe.reconcile.outcome import WindowStatus
from probe.reconcile.windows import WindowSpec
from probe.services.report import Tally, percentile
from probe.spark.checksum import RecordFormat
from probe.spark.heartbeat import HEARTBEAT_S
from probe.spark.session import sink_session
from probe.spark.sink import SinkJob, SinkSettings
from probe.transport.kafka_admin import PARTITIONS_PER_REQUEST

SOURCES = ("sla_kafka", "kafka")
MASTER = "local[2]"
PROBE_ID = "bench"
RAW_SCHEMA = pa.schema(
    [("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()), ("value", pa.binary())]
)
ROWS_PER_FILE = 100_000


# --- CPU of the process tree ---------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found.extend(int(child) for child in listed.read().split())
        except OSError:
            continue
    return found


def _cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU-seconds of a process (every thread), or of one of its threads."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime: fields 14 and 15 of stat(5), counted from the state (field 3).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(exclude: set[int]) -> float:
    """CPU-seconds of this process and its descendants but ``exclude`` (the broker)."""
    total, stack = 0.0, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid in exclude:
            continue
        total += _cpu_seconds(pid)
        stack.extend(_children(pid))
    return total


# --- brokers and topics --------------------------------------------------------------


@contextmanager
def brokers(
    kind: str, workdir: Path, settings: Mapping[str, str] | None = None
) -> Iterator[tuple[str, set[int]]]:
    """The bootstrap servers and the broker's pids (kept out of the CPU figures);
    ``settings``: Apache Kafka broker settings beyond the cluster's own."""
    if kind == "embedded":
        with EmbeddedBroker(log_file=workdir / "tansu.log") as broker:
            yield broker.bootstrap_servers, _descendants(broker)
    else:
        with KafkaCluster(
            workdir=workdir / "kafka", quick_start=False, settings=settings or {}
        ) as cluster:
            yield (
                cluster.bootstrap_servers,
                set().union(*(_descendants(node) for node in cluster.nodes.values())),
            )


def _descendants(server: Any) -> set[int]:
    process = getattr(server, "_process", None) or getattr(server, "process", None)
    if process is None:
        return set()
    pids, stack = set(), [process.pid]
    while stack:
        pid = stack.pop()
        pids.add(pid)
        stack.extend(_children(pid))
    return pids


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    apache_kafka: bool,
    replication: int | None = None,
) -> None:
    """Created at once on the embedded broker (it has no CreatePartitions); on Apache
    Kafka's cluster with replication factor 3 (its min.insync.replicas is 2) unless
    ``replication`` says otherwise, in steps of the partitions its controller takes per
    request."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    first = min(partitions, PARTITIONS_PER_REQUEST) if apache_kafka else partitions
    replicas = replication or (3 if apache_kafka else 1)
    # The cluster's min.insync.replicas (2) would refuse every write to fewer replicas.
    config = {"min.insync.replicas": str(min(2, replicas))} if apache_kafka else {}
    admin.create_topics([NewTopic(topic, first, replicas, config=config)])[topic].result(120)
    grown = first
    while grown < partitions:
        from confluent_kafka.admin import NewPartitions  # noqa: PLC0415

        grown = min(partitions, grown + PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, grown)])[topic].result(120)
    deadline = time.monotonic() + 120
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) < partitions:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: not {partitions} partitions after 120 s")
        time.sleep(0.5)


# --- the sink ------------------------------------------------------------------------


class _Verdicts(Tally):
    """A Tally that can be waited on for a count of sink fates."""

    def __init__(self) -> None:
        super().__init__("kafka")
        self._changed = threading.Condition()

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        with self._changed:
            super().count(target, stage, findings)
            self._changed.notify_all()

    def fates(self) -> int:
        tally = self.stages.get(StageName.SINK)
        return sum(tally.outcomes.values()) if tally else 0

    def wait_for(self, fates: int, timeout: float, job: SinkJob) -> bool:
        """Until ``fates`` sink fates, ``timeout`` s, or the query ended (its error raised)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._changed:
                if self._changed.wait_for(lambda: self.fates() >= fates, 2.0):
                    return True
            if job.query is not None and not job.query.isActive:
                failure = job.query.exception()
                raise RuntimeError(
                    "the query ended: " + (str(failure).splitlines()[0] if failure else "stopped")
                )
        return False


def produce_round(producer: Producer, topic: str, ring: KeyRing, partitions: int, seq: int) -> None:
    incarnation = 1
    for partition in range(partitions):
        canary = Canary(PROBE_ID, incarnation, "kafka", partition, seq, time.time_ns())
        while True:
            try:
                producer.produce(topic, encode(canary, ring), partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0


@dataclass
class SinkFigures:
    p50_ms: float
    p99_ms: float
    judged: int
    expected: int
    outcomes: dict[str, int]
    batch_ms: float
    batch_records: float
    batches: int
    batches_run: int  # with records or without
    cpu_per_round: float


def run_sink(  # noqa: PLR0917 - one case of the benchmark
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    partitions: int,
    source: str,
    args: argparse.Namespace,
    workdir: Path,
    broker_pids: set[int],
) -> SinkFigures:
    ring = generate_key_ring()
    tally = _Verdicts()
    settings = SinkSettings(
        bootstrap_servers=bootstrap,
        topic=topic,
        path=str(workdir / f"sink-{source}-{partitions}"),
        target="kafka",
        probe_id=PROBE_ID,
        freshness_s=3600.0,
        loss_timeout_s=3600.0,
        allowed_lateness_s=60.0,
        trigger_s=args.trigger,
        heartbeat_s=args.heartbeat,
        source=source,
    )
    job = SinkJob(spark, settings, ring, recorders=[tally])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    job.start()
    try:
        produce_round(producer, topic, ring, partitions, 0)  # the warm-up round
        if not tally.wait_for(partitions, args.judged_within, job):
            raise TimeoutError(f"{source}: warm-up round not judged in {args.judged_within:.0f}s")
        sink = tally.stages[StageName.SINK]
        sink.latencies_ms.clear()
        query = job.query
        assert query is not None
        # A batch's progress is posted after its commit: wait for the warm-up's.
        deadline = time.monotonic() + 60
        while sum(p.numInputRows for p in query.recentProgress) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{source}: no progress of the warm-up batches")
            time.sleep(0.1)
        warm_batch = max(p.batchId for p in query.recentProgress)
        cpu_before = tree_cpu(broker_pids)
        started = time.monotonic()
        for seq in range(1, args.rounds + 1):
            due = started + (seq - 1) * args.interval
            time.sleep(max(0.0, due - time.monotonic()))
            produce_round(producer, topic, ring, partitions, seq)
        expected = partitions * (args.rounds + 1)
        tally.wait_for(expected, args.judged_within, job)
        cpu = tree_cpu(broker_pids) - cpu_before
        time.sleep(args.trigger)  # the last batch's progress
        progress = [p for p in query.recentProgress if p.batchId > warm_batch]
    finally:
        job.stop()
    with_records = [p for p in progress if p.numInputRows]
    latencies = sink.latencies_ms
    return SinkFigures(
        p50_ms=percentile(latencies, 50) or float("nan"),
        p99_ms=percentile(latencies, 99) or float("nan"),
        judged=len(latencies),
        expected=partitions * args.rounds,
        outcomes={o.value: sink.outcomes[o.value] for o in Outcome if sink.outcomes[o.value]},
        batch_ms=statistics.median([p.durationMs["triggerExecution"] for p in with_records])
        if with_records
        else float("nan"),
        batch_records=statistics.median([p.numInputRows for p in with_records])
        if with_records
        else float("nan"),
        batches=len(with_records),
        batches_run=len({p.batchId for p in progress if "addBatch" in p.durationMs}),
        cpu_per_round=cpu / args.rounds,
    )


def sink_part(
    spark: SparkSession,
    bootstrap: str,
    broker_pids: set[int],
    args: argparse.Namespace,
    workdir: Path,
) -> None:
    for partitions in args.partitions:
        topic = f"sink-source-{partitions}"
        began = time.monotonic()
        create_topic(bootstrap, topic, partitions, apache_kafka=args.broker != "embedded")
        print(f"\n== sink at {partitions:,} partitions (topic created in "
              f"{time.monotonic() - began:.0f}s), {args.rounds} rounds {args.interval:g}s apart, "
              f"trigger {args.trigger:g}s, heartbeat {args.heartbeat or 'none'}")  # fmt: skip
        figures: dict[str, SinkFigures] = {}
        for source in args.sources:
            try:
                figures[source] = run_sink(
                    spark, bootstrap, topic, partitions, source, args, workdir, broker_pids
                )
            except Exception as exc:  # a source that cannot keep up: say so, go on
                print(f"  {source:9}  FAILED: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            f = figures[source]
            print(
                f"  {source:9}  p50 {f.p50_ms / 1000:6.2f}s  p99 {f.p99_ms / 1000:6.2f}s  "
                f"judged {f.judged:,}/{f.expected:,} {f.outcomes}  "
                f"batches {f.batches} (median {f.batch_ms / 1000:.2f}s, "
                f"{f.batch_records:,.0f} records; {f.batches_run} run in all)  "
                f"CPU {f.cpu_per_round:.1f}s per round"
            )
        if len(figures) == len(SOURCES):
            a, b = figures["sla_kafka"], figures["kafka"]
            print(
                f"  kafka / sla_kafka: p50 {b.p50_ms / a.p50_ms:.2f}x  "
                f"p99 {b.p99_ms / a.p99_ms:.2f}x  batch {b.batch_ms / a.batch_ms:.2f}x  "
                f"CPU {b.cpu_per_round / a.cpu_per_round:.2f}x"
            )


# --- reconcile -----------------------------------------------------------------------


def _value(i: int) -> bytes:
    return f'{{"order": {i}, "customer": "c-{i % 9973:05d}", "amount": {i % 1000}.25}}'.encode()


def produce_raw(bootstrap: str, topic: str, count: int, partitions: int) -> list[dict[str, Any]]:
    """``count`` records, the table rows with their offsets (from delivery reports)."""
    rows: list[dict[str, Any]] = []

    def delivered(error: object, message: Any) -> None:
        assert error is None, error
        rows.append(
            {
                "kafka_partition": message.partition(),
                "kafka_offset": message.offset(),
                "value": message.value(),
            }
        )

    bulk = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    body = count - partitions
    for i in range(body):
        while True:
            try:
                bulk.produce(topic, _value(i), partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                bulk.poll(0.1)
        if i % 10_000 == 0:
            bulk.poll(0)
    assert bulk.flush(300) == 0
    single = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(partitions):
        single.produce(topic, _value(body + partition), partition=partition, on_delivery=delivered)
        assert single.flush(10) == 0
    assert len(rows) == count
    return rows


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    for n, start in enumerate(range(0, len(rows), ROWS_PER_FILE)):
        directory = path / f"batch_id={n}"
        directory.mkdir(parents=True)
        chunk = pa.Table.from_pylist(rows[start : start + ROWS_PER_FILE], schema=RAW_SCHEMA)
        pq.write_table(chunk, directory / "part-00000.parquet")


def reconcile_part(
    spark: SparkSession,
    bootstrap: str,
    broker_pids: set[int],
    args: argparse.Namespace,
    workdir: Path,
) -> None:
    topic = "sink-source-reconcile"
    began = time.monotonic()
    create_topic(
        bootstrap, topic, args.reconcile_partitions, apache_kafka=args.broker != "embedded"
    )
    rows = produce_raw(bootstrap, topic, args.records, args.reconcile_partitions)
    table = workdir / "raw-table"
    write_table(rows, table)
    del rows
    print(
        f"\n== reconcile {args.records:,} raw records on {args.reconcile_partitions} partitions "
        f"(fixtures in {time.monotonic() - began:.0f}s), windows of {args.window_offsets:,} "
        f"offsets, {args.repeats} runs per source in rotation"
    )
    walls: dict[str, list[float]] = {s: [] for s in SOURCES}
    cpus: dict[str, list[float]] = {s: [] for s in SOURCES}
    for repeat in range(args.repeats):
        for source in SOURCES:
            settings = ReconcileSettings(
                bootstrap_servers=bootstrap,
                topic=topic,
                table=str(table),
                window=WindowSpec(offsets=args.window_offsets),
                settle_s=1.0,
                lookback_s=None,
                record_format=RecordFormat.RAW,
                source=source,
            )
            job = ReconcileJob(spark, settings, lambda: int(time.time() * 1000) + 10_000)
            cpu_before, started = tree_cpu(broker_pids), time.monotonic()
            result = job.run(f"{source}-{repeat}")
            wall, cpu = time.monotonic() - started, tree_cpu(broker_pids) - cpu_before
            matched = result.records()["matched"]
            complete = all(w.status is WindowStatus.COMPLETE for w in result.windows)
            walls[source].append(wall)
            cpus[source].append(cpu)
            print(
                f"  run {repeat + 1} {source:9}  {wall:6.1f}s wall  {cpu:6.1f} CPU-s  "
                f"{args.records / wall:>9,.0f} records/s  matched {matched:,}"
                f"{'' if complete else '  NOT COMPLETE'}"
            )
    medians = {s: (statistics.median(walls[s]), statistics.median(cpus[s])) for s in SOURCES}
    for source, (wall, cpu) in medians.items():
        print(f"  median {source:9}  {wall:6.1f}s wall  {cpu:6.1f} CPU-s")
    (aw, ac), (bw, bc) = medians["sla_kafka"], medians["kafka"]
    print(f"  kafka / sla_kafka: wall {bw / aw:.2f}x  CPU {bc / ac:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded")
    parser.add_argument("--part", choices=("sink", "reconcile", "all"), default="all")
    parser.add_argument(
        "--partitions", type=lambda text: [int(p) for p in text.split(",")], default=[1000]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=20.0)
    parser.add_argument("--trigger", type=float, default=2.0)
    parser.add_argument(
        "--heartbeat",
        type=lambda text: None if text == "none" else float(text),
        default=HEARTBEAT_S,
        help="sink.heartbeat in seconds, or none: a batch every trigger, records or not",
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--reconcile-partitions", type=int, default=8)
    parser.add_argument("--window-offsets", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--sources", type=lambda text: text.split(","), default=list(SOURCES), help="sink part"
    )
    parser.add_argument(
        "--judged-within",
        type=float,
        default=300.0,
        help="seconds a round may take to be judged before the case is given up",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="K=V", help="a Spark setting (repeatable)"
    )
    args = parser.parse_args()
    print(
        f"bench_sink_source: {platform.node()}, {os.cpu_count()} cores, {MASTER}, "
        f"broker {args.broker}, sources {' and '.join(args.sources)}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-sink-source-") as tmp:
        workdir = Path(tmp)
        with brokers(args.broker, workdir) as (bootstrap, broker_pids):
            spark = sink_session(
                MASTER,
                app_name="bench-sink-source",
                spark_conf=dict(setting.split("=", 1) for setting in args.conf),
                source="kafka",
            )
            try:
                if args.part in ("sink", "all"):
                    sink_part(spark, bootstrap, broker_pids, args, workdir)
                if args.part in ("reconcile", "all"):
                    reconcile_part(spark, bootstrap, broker_pids, args, workdir)
            finally:
                spark.stop()


if __name__ == "__main__":
    main()
