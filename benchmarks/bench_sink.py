"""Sink stage: latency at a steady canary rate, and the rate it drains a backlog at.

Run: ``python benchmarks/bench_sink.py [--part steady|backlog|all] [--seconds S]
[--partitions P] [--backlog N] [--max-records-per-batch M] 2>/dev/null``
(Spark's progress bars and worker chatter go to stderr; the figures to stdout.)

One embedded broker and one Spark session (``local[2]``, as ``sink_session`` builds it)
for the whole run, started before either part, so neither part pays Spark's start-up.

``steady``
    The sink as `run --stages consumer,sink` runs it: a ``TargetProbe`` writes one signed
    canary to each of ``--partitions`` (20) partitions every second (20 canaries/s) for
    ``--seconds``, while its consumer stage judges them in the same process and the sink
    query (trigger ``--trigger`` s, ``startingOffsets`` latest) judges them after Spark.
    The stage starts as the probe starts it: production begins only after the sink's
    first batch (which fixes the source's start offsets) and after its warm-up canaries
    came through (which start the Python workers of the source, the decoder and the
    judge). The sink's latency is produce to sink commit (the ``sink`` stage's latency
    as the probe records it); a micro-batch sink cannot do better than about half a
    trigger on average, so it is also given in trigger intervals, with the target p99 <=
    2 trigger intervals. It is given for all canaries, and for those produced after the
    first batch with data committed ("warm": anything that batch still had to start
    delays what is produced meanwhile). The consumer stage's latency is printed beside
    it for comparison. Where a batch's time goes is printed from Spark's ``durationMs``.
``backlog``
    ``--backlog`` signed canaries are written to a 4-partition topic before the query
    starts (seqs 0..N-1 per partition, one probe id and incarnation, stamped when
    written, written round-robin as a probe's rounds are), then the query reads them
    from ``earliest`` with ``maxRecordsPerBatch`` admission control. The time until every
    canary has a sink fate is measured from the query's start, from the start of its
    first non-empty batch, and from the start of its second one (the first batch of a
    query pays for Python workers and plan set-up): records/s the source, decoder and
    judge sustain. Freshness is an hour so that every fate is ``delivered``.

Records per batch are computed from the source's offsets, the Kafka records a batch
covered, rather than from Spark's ``numInputRows``, which counts rows per scan of the
source and so depends on the plan.

The embedded broker (Tansu) lists a partition's end offset correctly only when records
were written one per record batch, so the backlog is written one record per produce
request (confluent-kafka, ``linger.ms`` 0, flushed after each: ~5k records/s here), and
the end offsets are checked before the query starts. Figures only; speed is not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from probe import tracing
from probe.config import StageName, load
from probe.core.canary import Canary, encode
from probe.core.judge import Fate, Finding, Outcome
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.once import OwnCanaries
from probe.services.report import StageTally, Tally, percentile
from probe.spark.health import SparkHealth, parse_spark_time
from probe.spark.session import sink_session
from probe.spark.sink import SinkJob
from probe.spark.stage import SparkSinkStage, sink_settings
from probe.stages.target import TargetProbe

MASTER = "local[2]"
BACKLOG_PARTITIONS = 4
TARGET_TRIGGERS = 2.0  # steady: sink p99 within this many trigger intervals
DRAIN_TIMEOUT = 120.0  # steady: canaries produced but without a sink fate by then: broken
BACKLOG_TIMEOUT = 300.0


class _Signalling(Tally):
    """A Tally that notes when a stage's fates reach a count (Spark's batch thread),
    and keeps each latency with its canary's seq (steady: the seq is the round)."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self._lock = threading.Lock()
        self.latency_by_seq: dict[str, list[tuple[int, float]]] = {}
        self._goal: tuple[str, int] | None = None
        self.reached = threading.Event()
        self.reached_ns = 0

    def expect(self, stage: str, fates: int) -> None:
        with self._lock:
            self._goal = (stage, fates)
            self._check()

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        with self._lock:
            super().count(target, stage, findings)
            self.latency_by_seq.setdefault(stage, []).extend(
                (f.seq, f.latency_ns / 1e6)
                for f in findings
                if isinstance(f, Fate) and f.latency_ns is not None
            )
            self._check()

    def fates(self, stage: str) -> int:
        tally = self.stages.get(stage)
        return sum(tally.outcomes.values()) if tally else 0

    def _check(self) -> None:
        if self._goal and not self.reached.is_set() and self.fates(self._goal[0]) >= self._goal[1]:
            self.reached_ns = time.time_ns()
            self.reached.set()


def _ms(values: Sequence[float], q: float) -> float:
    value = percentile(values, q)
    return float("nan") if value is None else value


def _outcomes(tally: StageTally | None) -> str:
    if tally is None:
        return "none"
    counts = {o.value: tally.outcomes[o.value] for o in Outcome if tally.outcomes[o.value]}
    odd = {k: n for k, n in tally.anomalies.items() if n} | {
        f"invalid:{k}": n for k, n in tally.invalid.items() if n
    }
    return f"{counts or 'none'}" + (f", anomalies {odd}" if odd else ", no anomalies")


def _progress(job: SinkJob) -> list[Any]:
    assert job.query is not None
    return [p for p in job.query.recentProgress if p is not None]


def _records(progress: Any) -> int:
    """Kafka records a batch read, from the source's offsets (see the module docstring)."""
    source = progress.sources[0]
    # A query's first batch has no start ("null"): it began at the initial offsets.
    start = json.loads(source.startOffset or "null") or {}
    end = json.loads(source.endOffset or "null") or {}
    return sum(int(offset) - int(start.get(p, 0)) for p, offset in end.items())


def _settled_progress(job: SinkJob, first_batch: int, records: int) -> list[Any]:
    """Progress of batches from `first_batch` on, once they cover `records` records.

    A batch's progress is posted just after its foreachBatch (which counts the fates)
    returns, so the last one may still be on its way when every fate is in.
    """
    deadline = time.monotonic() + 30
    while True:
        batches = [p for p in _progress(job) if p.batchId >= first_batch]
        if sum(map(_records, batches)) >= records or time.monotonic() > deadline:
            return batches
        time.sleep(0.2)


def _phases(batches: Sequence[Any]) -> str:
    """Median time per phase of Spark's batch (``durationMs``): where a batch's time goes."""
    names = sorted({name for p in batches for name in p.durationMs}, key=str)
    return ", ".join(
        f"{name} {statistics.median(p.durationMs.get(name, 0) for p in batches):.0f}"
        for name in names
    )


def _started_ns(progress: Any) -> int:
    """A batch's trigger start: the progress timestamp (ISO 8601, UTC, ms)."""
    started = parse_spark_time(progress.timestamp)
    assert started is not None
    return started


# -- steady ------------------------------------------------------------------------------


async def steady(servers: str, options: argparse.Namespace) -> None:
    """The stage builds its session with getOrCreate: the one main() started."""
    trigger_s = options.trigger
    topic = f"bench-sink-steady-{time.time_ns()}"
    config = load(
        overrides={
            "kafka.bootstrap_servers": servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.partitions": options.partitions,
            "kafka.fetch_max_wait": f"{options.fetch_wait_ms}ms",
            "sink.trigger": f"{trigger_s}s",
            "sink.starting_offsets": "latest",
            "sink.master": MASTER,
        }
    )
    keyring = generate_key_ring()
    tally = _Signalling(config.target)
    probe = TargetProbe(config, keyring, [tally])
    await probe.connect(give_up_after=30)  # creates the topic and covers its partitions
    assert probe.transport is not None
    consumer = asyncio.create_task(probe.consume())
    expiry = asyncio.create_task(probe.expire_forever())
    # The stage as `run --stages consumer,sink` starts it (the session is the one
    # already up): query started at pinned offsets, warm-up canaries through, then canaries.
    stage = SparkSinkStage(config, keyring, [OwnCanaries(tally, config.probe_id)])
    settings = stage.settings
    began = time.monotonic()
    try:
        await stage.start()
        print(f"  sink query started (offsets pinned) after {time.monotonic() - began:.1f} s")
        await stage.warm_up(probe.transport.send, probe.partitions, config.probe_id)
        print(f"  warm-up canary through the sink after {time.monotonic() - began:.1f} s")
        job = stage.job
        assert job is not None
        rounds = round(options.seconds)
        first_batch = job.batches_committed
        start = time.monotonic()
        round_ns: list[int] = []
        for i in range(rounds):
            await asyncio.sleep(max(0.0, start + i - time.monotonic()))
            round_ns.append(time.time_ns())
            await probe.produce_round()
        produced_s = time.monotonic() - start
        consumer_tally = tally.stages.get(StageName.CONSUMER, StageTally())
        produced = rounds * options.partitions - consumer_tally.outcomes[Outcome.PRODUCE_FAILED]
        tally.expect(StageName.SINK, produced)
        if not await asyncio.to_thread(tally.reached.wait, DRAIN_TIMEOUT):
            print(f"  ! sink fates {tally.fates(StageName.SINK)} of {produced} after drain")
        batches = await asyncio.to_thread(_settled_progress, job, first_batch, produced)
    finally:
        await stage.stop()
        consumer.cancel()
        expiry.cancel()
        await probe.close()
    print(
        f"  produced {rounds} rounds x {options.partitions} partitions in {produced_s:.1f} s "
        f"({produced / produced_s:.1f} canaries/s), {produced} acknowledged"
    )
    print(
        f"  freshness: consumer {config.judge.freshness:g} s, sink {settings.freshness_s:g} s "
        "(the probe's defaults)"
    )
    _report_steady(
        tally,
        produced,
        rate=produced / produced_s,
        batches=batches,
        round_ns=round_ns,
        options=options,
    )


def _report_steady(
    tally: _Signalling,
    produced: int,
    *,
    rate: float,
    batches: list[Any],
    round_ns: list[int],
    options: argparse.Namespace,
) -> None:
    trigger_ms = options.trigger * 1000
    consumer = tally.stages.get(StageName.CONSUMER, StageTally())
    sink = tally.stages.get(StageName.SINK, StageTally())
    loaded = [p for p in batches if _records(p) > 0]
    if loaded:
        took = [p.durationMs.get("triggerExecution", 0) / 1000 for p in loaded]
        print(
            f"  sink batches with data: {len(loaded)}, records per batch median "
            f"{statistics.median(map(_records, loaded)):g}, duration median "
            f"{statistics.median(took):.1f} s (first {took[0]:.1f} s, later median "
            f"{statistics.median(took[1:] or took):.1f} s, max {max(took[1:] or took):.1f} s)"
        )
        print(f"  batch durations, s: {' '.join(f'{t:.1f}' for t in took)}")
        print(f"  later batches, median ms by phase: {_phases(loaded[1:] or loaded)}")
    print(f"  consumer stage: {_outcomes(consumer)}")
    print(f"  sink stage:     {_outcomes(sink)}")
    all_delivered = (
        sink.outcomes[Outcome.DELIVERED.value] == produced == sum(sink.outcomes.values())
    )
    print(f"  every sink fate delivered: {'yes' if all_delivered else 'NO'}")
    print(
        f"  consumer latency       p50 {_ms(consumer.latencies_ms, 50):8.1f} ms  "
        f"p99 {_ms(consumer.latencies_ms, 99):8.1f} ms  (n={len(consumer.latencies_ms)}, "
        f"fetch wait {options.fetch_wait_ms} ms)"
    )
    # The first batch with data pays for starting the Python workers of the source and
    # the decoder (the positioning batch reads nothing), and what is produced meanwhile
    # queues behind it. "warm": canaries produced after that batch committed. A canary's
    # seq is its round (seqs advance once per round; a failed produce would shift them).
    warm_from = len(round_ns)
    if loaded:
        first_end_ns = _started_ns(loaded[0]) + loaded[0].durationMs["triggerExecution"] * 10**6
        warm_from = next((i for i, ns in enumerate(round_ns) if ns >= first_end_ns), warm_from)
    warm = [ms for seq, ms in tally.latency_by_seq.get(StageName.SINK, []) if seq >= warm_from]
    figures = {"all": sink.latencies_ms, "warm": warm}
    for name, values in figures.items():
        label = "sink latency" if name == "all" else f"sink, rounds {warm_from}+"
        print(
            f"  {label:<22} p50 {_ms(values, 50):8.1f} ms  p99 {_ms(values, 99):8.1f} ms  "
            f"(n={len(values)}; {_ms(values, 50) / trigger_ms:.2f} and "
            f"{_ms(values, 99) / trigger_ms:.2f} x trigger)"
        )
    for name, values in figures.items():
        p50, p99 = _ms(values, 50), _ms(values, 99)
        verdict = "met" if p99 <= TARGET_TRIGGERS * trigger_ms else "MISSED"
        if not values:
            verdict = "no canaries"
        print(
            f"steady {rate:.0f} canaries/s, trigger {options.trigger:g} s, {name} canaries: "
            f"sink p50 {p50 / trigger_ms:.2f} x trigger, p99 {p99 / trigger_ms:.2f} x trigger "
            f"(target p99 <= {TARGET_TRIGGERS:g} x trigger: {verdict})"
        )


# -- backlog -----------------------------------------------------------------------------


def _create_topic(servers: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=servers.split(","))
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _end_offsets(servers: str, topic: str, partitions: int) -> list[int]:
    """End offsets as the sink's source lists them (kafka-python)."""
    client = KafkaConsumer(bootstrap_servers=servers.split(","))
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = client.end_offsets(tps)
        return [int(ends[tp]) for tp in tps]
    finally:
        client.close()


def write_backlog(servers: str, topic: str, count: int, target: str) -> tuple[KeyRing, float]:
    """Write `count` signed canaries round-robin, one record per produce request."""
    keyring = generate_key_ring()
    incarnation = time.time_ns()
    pad_to = load().canary.size
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 0, "acks": "all"})
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    start = time.monotonic()
    for i in range(count):
        partition = i % BACKLOG_PARTITIONS
        canary = Canary(
            probe_id="bench-sink-backlog",
            incarnation=incarnation,
            target=target,
            partition=partition,
            seq=i // BACKLOG_PARTITIONS,
            produced_ns=time.time_ns(),
        )
        producer.produce(
            topic,
            encode(canary, keyring, pad_to=pad_to),
            partition=partition,
            on_delivery=delivered,
        )
        if producer.flush(10) != 0:
            raise SystemExit(f"backlog: record {i} not acknowledged within 10 s")
    elapsed = time.monotonic() - start
    if failures:
        raise SystemExit(f"backlog: {len(failures)} produce failures, first: {failures[0]}")
    return keyring, elapsed


def backlog(spark: SparkSession, servers: str, options: argparse.Namespace) -> None:
    count = options.backlog - options.backlog % BACKLOG_PARTITIONS
    topic = f"bench-sink-backlog-{time.time_ns()}"
    target = "kafka"
    try:
        _create_topic(servers, topic, BACKLOG_PARTITIONS)
    except KafkaError as exc:
        raise SystemExit(f"backlog: cannot create {topic}: {exc}") from exc
    keyring, written_s = write_backlog(servers, topic, count, target)
    ends = _end_offsets(servers, topic, BACKLOG_PARTITIONS)
    print(
        f"  wrote {count} canaries to {BACKLOG_PARTITIONS} partitions in {written_s:.1f} s "
        f"({count / written_s:.0f} records/s, one per request); end offsets {ends}"
    )
    if ends != [count // BACKLOG_PARTITIONS] * BACKLOG_PARTITIONS:
        raise SystemExit("backlog: the broker lists other end offsets than were written")

    config = load(
        overrides={
            "kafka.bootstrap_servers": servers,
            "kafka.topic": topic,
            "target": target,
            "judge.loss_timeout": "1h",
            "sink.freshness": "1h",  # every canary is old by now: all count as delivered
            "sink.trigger": f"{options.trigger}s",
            "sink.max_records_per_batch": options.max_records_per_batch,
            "sink.starting_offsets": "earliest",
        }
    )
    tally = _Signalling(target)
    tally.expect(StageName.SINK, count)
    with tempfile.TemporaryDirectory(prefix="bench-sink-backlog-") as path:
        settings = sink_settings(config, path)
        health = SparkHealth(CollectorRegistry(), target, options.trigger)
        job = SinkJob(spark, settings, keyring, recorders=[tally], health=health)
        started_ns = time.time_ns()
        job.start()
        try:
            if not tally.reached.wait(BACKLOG_TIMEOUT):
                raise SystemExit(
                    f"backlog: {tally.fates(StageName.SINK)} of {count} sink fates "
                    f"after {BACKLOG_TIMEOUT:g} s: {_outcomes(tally.stages.get(StageName.SINK))}"
                )
            batches = _settled_progress(job, 0, count)
        finally:
            job.stop()

    done_ns = tally.reached_ns
    loaded = [p for p in batches if _records(p) > 0]
    print(f"  sink stage: {_outcomes(tally.stages.get(StageName.SINK))}")
    for p in loaded:
        took = p.durationMs
        total = took.get("triggerExecution", 0)
        print(
            f"    batch {p.batchId}: {_records(p):6d} records in {total:6d} ms "
            f"({_records(p) / max(total, 1) * 1000:6.0f} records/s; addBatch "
            f"{took.get('addBatch', 0)} ms, latestOffset {took.get('latestOffset', 0)} ms, "
            f"queryPlanning {took.get('queryPlanning', 0)} ms)"
        )
    since_start = (done_ns - started_ns) / 1e9
    print(
        f"  query start -> all fates:            {since_start:6.1f} s, "
        f"{count / since_start:6.0f} records/s"
    )
    if loaded:
        since_first = (done_ns - _started_ns(loaded[0])) / 1e9
        print(
            f"  first loaded batch start -> all fates: {since_first:6.1f} s, "
            f"{count / since_first:6.0f} records/s"
        )
    if len(loaded) > 1:
        rest = sum(_records(p) for p in loaded[1:])
        since_second = (done_ns - _started_ns(loaded[1])) / 1e9
        print(
            f"  second loaded batch start -> all fates: {since_second:6.1f} s, "
            f"{rest / since_second:6.0f} records/s ({rest} records, warm)"
        )
        sustained = rest / since_second
    else:
        sustained = count / since_start
    print(
        f"backlog {count} canaries, maxRecordsPerBatch {options.max_records_per_batch}: "
        f"drained at {sustained:.0f} records/s sustained on {MASTER} "
        f"({count / since_start:.0f} records/s counting query start-up)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["steady", "backlog", "all"], default="all")
    parser.add_argument("--seconds", type=float, default=60.0, help="steady: produce this long")
    parser.add_argument(
        "--partitions", type=int, default=20, help="steady: partitions = canaries per second"
    )
    parser.add_argument("--trigger", type=float, default=2.0, help="sink trigger interval, s")
    parser.add_argument(
        "--fetch-wait-ms", type=int, default=100, help="steady: consumer stage fetch max wait"
    )
    parser.add_argument("--backlog", type=int, default=20_000, help="backlog: canaries")
    parser.add_argument("--max-records-per-batch", type=int, default=5000)
    options = parser.parse_args()

    tracing.install_tracer_provider()  # as `sla-probe` does: real spans, real cost
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"embedded broker, Spark {MASTER}"
    )
    with EmbeddedBroker() as broker:
        began = time.monotonic()
        spark = sink_session(MASTER, app_name="bench-sink")
        print(f"Spark {spark.version} session up in {time.monotonic() - began:.1f} s")
        try:
            if options.part in ("steady", "all"):
                print(
                    f"steady: {options.partitions} canaries/s for {options.seconds:g} s, "
                    f"trigger {options.trigger:g} s"
                )
                asyncio.run(steady(broker.bootstrap_servers, options))
            if options.part in ("backlog", "all"):
                print(
                    f"backlog: {options.backlog} canaries, {BACKLOG_PARTITIONS} partitions, "
                    f"maxRecordsPerBatch {options.max_records_per_batch}"
                )
                backlog(spark, broker.bootstrap_servers, options)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
