"""The sink stage end to end: real broker, real Spark local mode, real Parquet tables."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from confluent_kafka import Producer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CollectorRegistry, generate_latest
from pyspark.sql import DataFrame, Row, SparkSession

from probe import tracing
from probe.config import StageName, load
from probe.core.canary import Canary, encode
from probe.core.judge import Anomaly, AnomalyKind, Fate, Outcome, StreamKey
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.spark import sink as sink_module
from probe.spark.health import SparkHealth, source_lag
from probe.spark.rows import at_commit, finding_of, finding_row
from probe.spark.sink import SinkJob, SinkSettings, exact_frame
from probe.stages.target import TargetProbe
from tests.conftest import KafkaBrokers, parse_samples, sample, until
from tests.otlp_receiver import OtlpReceiver

FIRST_BATCH_TIMEOUT = 180


@dataclass
class Pipeline:
    probe: TargetProbe
    job: SinkJob
    tally: Tally
    settings: SinkSettings
    keyring: KeyRing
    registry: CollectorRegistry
    health: SparkHealth

    def sink_outcomes(self) -> dict[str, int]:
        stage = self.tally.stages.get(StageName.SINK)
        return dict(stage.outcomes) if stage else {}

    def sink_fates(self) -> int:
        return sum(self.sink_outcomes().values())


def _settings(broker: KafkaBrokers, topic: str, path: Path, **extra: object) -> SinkSettings:
    values: dict[str, object] = {
        "bootstrap_servers": broker.bootstrap_servers,
        "topic": topic,
        "path": str(path),
        "target": "kafka",
        "probe_id": socket.gethostname(),
        "freshness_s": 120.0,
        "loss_timeout_s": 120.0,
        "allowed_lateness_s": 1.0,
        "trigger_s": 1.0,
    }
    values.update(extra)
    return SinkSettings(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def pipeline(
    spark: SparkSession, broker: KafkaBrokers, topic: str, path: Path, **settings: object
) -> AsyncIterator[Pipeline]:
    """A producing probe (consumer stage) and the sink query, both positioned;
    ``settings``: the sink's own, over the tests' (``source="kafka"``, say)."""
    keyring = generate_key_ring()
    tally = Tally("kafka")
    config = load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.fetch_max_wait": "20ms",
            "judge.freshness": "2m",
            "judge.loss_timeout": "2m",
        }
    )
    probe = TargetProbe(config, keyring, [tally])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    registry = CollectorRegistry()
    sink_settings = _settings(broker, topic, path, **settings)
    health = SparkHealth(registry, "kafka", sink_settings.trigger_s)
    job = SinkJob(spark, sink_settings, keyring, recorders=[tally], health=health)
    # The source's start offsets are pinned when the query starts: produce right away.
    await asyncio.to_thread(job.start)
    try:
        yield Pipeline(probe, job, tally, sink_settings, keyring, registry, health)
    finally:
        await asyncio.to_thread(job.stop)
        consumer.cancel()
        await probe.close()


async def test_canaries_land_in_the_table_judged_delivered(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    async with pipeline(spark, broker, topic, tmp_path / "sink") as p:
        for _ in range(2):
            await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 6, within=120, what="six sink verdicts")
        assert p.sink_outcomes() == {Outcome.DELIVERED.value: 6}
        table = spark.read.parquet(p.settings.table("canaries")).collect()
        assert sorted((r.partition, r.seq) for r in table) == [
            (partition, seq) for partition in range(3) for seq in range(2)
        ]
        assert all(r.sink_commit_ns >= r.produced_ns for r in table)
        # Produce to sink commit: at least one trigger's worth of waiting, never zero.
        assert min(p.tally.stages[StageName.SINK].latencies_ms) > 0


async def test_one_canarys_produce_arrival_and_sink_commit_spans_are_one_trace(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As `sla-probe run --stages consumer,sink` runs them: one process, one provider."""
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        # The process's provider may come from an earlier test, installed without an
        # exporter (it can be installed once): the exporter joins it, and leaves after.
        tracing.install_tracer_provider()
        assert isinstance(trace.get_tracer_provider(), TracerProvider)
        exporting = BatchSpanProcessor(tracing.otlp_exporter(os.environ), schedule_delay_millis=100)
        tracing.export_to(exporting)
        try:
            async with pipeline(spark, broker, topic, tmp_path / "sink") as p:
                await p.probe.produce_round()
                await until(lambda: p.sink_fates() >= 3, within=120, what="three sink verdicts")
                table = spark.read.parquet(p.settings.table("canaries")).collect()
            exporting.force_flush(10_000)
        finally:
            tracing.shutdown()
        traces = receiver.traces()
    assert len(table) == 3
    for row in table:
        ids = tracing.ids_of(row.trace_context)
        assert ids is not None
        spans = {
            (span.name, span.attributes.get("sla.stage")): span for span in traces[ids.trace_id]
        }
        produce = spans[(f"send {topic}", None)]
        arrival = spans[(f"receive {topic}", "consumer")]
        commit = spans[(f"commit {topic}", "sink")]
        assert produce.span_id == ids.span_id
        assert arrival.parent_span_id == commit.parent_span_id == produce.span_id
        assert commit.attributes["sla.outcome"] == "delivered"
        assert commit.attributes["messaging.destination.partition.id"] == str(row.partition)
        assert commit.attributes["messaging.kafka.offset"] == row.kafka_offset
        # Ended at the commit the table records, which its latency is measured to.
        assert commit.end_ns == row.sink_commit_ns
        assert commit.attributes["sla.latency_s"] == pytest.approx(
            (row.sink_commit_ns - row.produced_ns) / 1e9
        )
        assert produce.end_ns <= commit.start_ns <= commit.end_ns


async def test_hostile_records_go_to_quarantine_never_to_the_table(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    async with pipeline(spark, broker, topic, tmp_path / "sink") as p:
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 3, within=120, what="first round in the sink")
        landed = _canary(spark.read.parquet(p.settings.table("canaries")).collect()[0])
        genuine = encode(landed, p.keyring)
        # One field changed, the genuine signature kept.
        forged = encode(replace(landed, seq=landed.seq + 500), p.keyring)[:-32] + genuine[-32:]
        hostile = [forged, b"\x00not a canary", encode(landed, generate_key_ring("intruder"))]
        # Another probe sharing the topic with its own key: foreign, as the consumer says.
        theirs = encode(replace(landed, probe_id="another-probe"), generate_key_ring("theirs"))
        # Genuinely signed, but written elsewhere than the partition they name.
        misrouted = [
            encode(replace(landed, partition=999, seq=1), p.keyring),
            encode(replace(landed, partition=(landed.partition + 1) % 3, seq=1), p.keyring),
        ]
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        writes = [(payload, 0) for payload in [*hostile, theirs]]
        writes += [(payload, (landed.partition + 2) % 3) for payload in misrouted]
        for payload, partition in writes:
            producer.produce(topic, payload, partition=partition)
            # One record per batch: the embedded broker counts batches, not records,
            # in the log end offset it reports, and the source reads up to that.
            assert producer.flush(10) == 0
        sink = p.tally.stages[StageName.SINK]
        await until(
            lambda: (
                sum(sink.invalid.values()) >= 3
                and sink.anomalies["foreign"] >= 1
                and sink.anomalies["misrouted"] >= 2
            ),
            within=120,
            what="three quarantined records, one foreign, two misrouted",
        )
        quarantine = spark.read.parquet(p.settings.table("quarantine")).collect()
        assert sorted(r.reason for r in quarantine) == ["bad_signature", "malformed", "unknown_key"]
        assert {r.claimed_probe_id for r in quarantine if r.reason == "unknown_key"} == {
            landed.probe_id
        }
        assert sink.invalid["unknown_key"] == 1
        table = spark.read.parquet(p.settings.table("canaries")).collect()
        assert sorted((r.partition, r.seq) for r in table) == [(0, 0), (1, 0), (2, 0)]
        assert p.sink_outcomes() == {Outcome.DELIVERED.value: 3}
        verdicts = spark.read.parquet(p.settings.table("verdicts")).collect()
        assert sorted(r.outcome for r in verdicts if r.kind == "anomaly") == [
            "misrouted",
            "misrouted",
        ]


def _canary(row: Row) -> Canary:
    return Canary(
        probe_id=row.probe_id,
        incarnation=row.incarnation,
        target=row.target,
        partition=row.partition,
        seq=row.seq,
        produced_ns=row.produced_ns,
        trace_context=row.trace_context,
    )


async def test_restart_from_checkpoint_judges_each_canary_once(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    path = tmp_path / "sink"
    async with pipeline(spark, broker, topic, path) as p:
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 3, within=120, what="first round in the sink")
        # The query stops between batches; canaries produced meanwhile wait in Kafka.
        await asyncio.to_thread(p.job.stop)
        for _ in range(2):
            await p.probe.produce_round()
        restarted = SinkJob(spark, p.settings, p.keyring, recorders=[p.tally])
        await asyncio.to_thread(restarted.start)
        try:
            await until(lambda: p.sink_fates() >= 9, within=FIRST_BATCH_TIMEOUT, what="9 fates")
        finally:
            await asyncio.to_thread(restarted.stop)
    verdicts = spark.read.parquet(str(path / "verdicts")).filter("kind = 'fate'").collect()
    judged = sorted((r.partition, r.seq, r.outcome) for r in verdicts)
    assert judged == [(partition, seq, "delivered") for partition in range(3) for seq in range(3)]


async def test_a_batch_cut_short_by_the_stop_is_taken_for_the_stop_and_replayed(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    *,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch whose Spark job runs after the stop interrupted the query's thread (a
    stop past its grace, or one made as a batch starts) fails with StoppedMidBatch,
    which Spark takes for the stop: the query ends without an exception, py4j logs
    nothing, and the next start replays the batch from the checkpoint: every canary
    judged once. The batch is made to start its job only once the stop is under way."""
    path = tmp_path / "sink"
    checkpoint = path / "_checkpoint"
    began, go_on = threading.Event(), threading.Event()

    def late_frame(batch: DataFrame) -> pd.DataFrame:
        began.set()
        go_on.wait(60)
        # Spark's stop marks the query stopped before it interrupts the query's thread
        # (this call's, as pyspark pins it): the job must start once the interrupt is
        # pending, or it may finish first and the batch commit.
        thread = spark.sparkContext._jvm.java.lang.Thread
        deadline = time.monotonic() + 30
        while not thread.currentThread().isInterrupted() and time.monotonic() < deadline:
            time.sleep(0.01)  # polled: the interrupt has nothing to wait on
        # A job run and awaited on the query's own thread meets the pending interrupt
        # for sure. toArrow's job runs on a serving thread of its own, and the interrupt
        # reaches it only if its result is awaited before it is complete: a race the
        # batch may win, committing (which is as correct, but not this test's case).
        batch.count()
        return exact_frame(batch)

    async with pipeline(spark, broker, topic, path) as p:
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 3, within=120, what="first round in the sink")
        query = p.job.query
        assert query is not None
        monkeypatch.setattr(sink_module, "exact_frame", late_frame)
        await p.probe.produce_round()
        await until(began.is_set, within=60, what="a batch started")
        with caplog.at_level(logging.WARNING, logger="py4j"):
            stopping = asyncio.create_task(asyncio.to_thread(p.job.stop, 0.0))
            await until(lambda: not query.isActive, within=30, what="the query marked stopped")
            go_on.set()
            await stopping
        monkeypatch.undo()
        assert query.exception() is None  # Spark took the failed batch for the stop
        assert not [r for r in caplog.records if r.name.startswith("py4j")]
        assert _last_batch(checkpoint / "offsets") > _last_batch(checkpoint / "commits")
        restarted = SinkJob(spark, p.settings, p.keyring, recorders=[p.tally])
        await asyncio.to_thread(restarted.start)
        try:
            await until(lambda: p.sink_fates() >= 6, within=FIRST_BATCH_TIMEOUT, what="6 fates")
        finally:
            await asyncio.to_thread(restarted.stop)
    verdicts = spark.read.parquet(str(path / "verdicts")).filter("kind = 'fate'").collect()
    judged = sorted((r.partition, r.seq, r.outcome) for r in verdicts)
    assert judged == [(partition, seq, "delivered") for partition in range(3) for seq in range(2)]


def _last_batch(log: Path) -> int:
    """The last batch id of a checkpoint's offsets/ or commits/ log."""
    return max(int(entry.name) for entry in log.iterdir() if entry.name.isdigit())


async def test_a_stalled_sink_shows_in_skew_and_staleness_not_in_the_consumer(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    async with pipeline(spark, broker, topic, tmp_path / "sink") as p:

        def skew() -> float:
            return sample(_samples(p.registry), "synthetic_sla_watermark_skew_seconds")

        def sink_staleness() -> int:
            return max(p.job.freshness.staleness_ns(time.time_ns()).values(), default=0)

        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 3, within=120, what="first round in the sink")
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 6, within=60, what="second round in the sink")
        steady_skew, steady_staleness = skew(), sink_staleness()

        p.job.hold()
        consumer_before = p.tally.stages[StageName.CONSUMER].outcomes[Outcome.DELIVERED.value]
        for _ in range(3):
            await p.probe.produce_round()
            await asyncio.sleep(1.0)  # rounds a second apart, as the service would
        await until(lambda: skew() > steady_skew + 3, within=30, what="watermark skew rising")
        await until(
            lambda: sink_staleness() > steady_staleness + 3e9, within=30, what="sink staleness"
        )
        consumer = p.tally.stages[StageName.CONSUMER]
        assert consumer.outcomes[Outcome.DELIVERED.value] >= consumer_before + 9
        assert consumer.ok
        held_skew = skew()

        p.job.resume()
        await until(lambda: p.sink_fates() >= 15, within=60, what="the held canaries judged")
        await p.probe.produce_round()
        await until(lambda: p.sink_fates() >= 18, within=60, what="a fresh round judged")
        await until(lambda: skew() < held_skew, within=30, what="watermark skew falling")
        assert sink_staleness() < 5e9


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse_samples(generate_latest(registry).decode())


def test_delivered_or_late_is_decided_at_commit() -> None:
    """The judge decides at the batch's start; what counts is produce to commit."""
    second = 1_000_000_000
    rows = pd.DataFrame(
        {
            "kind": ["fate", "fate", "fate", "canary"],
            "outcome": ["delivered", "delivered", "lost", None],
            "produced_ns": [96 * second, 94 * second, None, 94 * second],
        }
    )
    judged = at_commit(rows, commit_ns=100 * second, freshness_ns=5 * second)
    assert list(judged["outcome"]) == ["delivered", "late", "lost", None]
    assert [None if pd.isna(ns) else ns for ns in judged["latency_ns"]] == [
        4 * second,
        6 * second,
        None,
        None,
    ]


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_judged_rows_stand_for_the_findings_they_were_built_from() -> None:
    """A fate keeps its canary's trace context across the rows (the sink's span)."""
    key = StreamKey("probe-a", "kafka", 2)
    arrival = SimpleNamespace(kafka_partition=2, kafka_offset=41)
    findings = [
        Fate(key, 7, Outcome.DELIVERED, 3 * 10**9, trace_context=TRACEPARENT),
        Fate(key, 8, Outcome.LOST, None),
        Anomaly(key, 7, AnomalyKind.DUPLICATE),
        # Judged at 99 s, produced at 129 s by the producer's clock: 30 s ahead.
        Anomaly(key, 9, AnomalyKind.FUTURE_DATED, 30 * 10**9),
    ]
    produced = [97 * 10**9, None, None, 129 * 10**9]
    rows = pd.DataFrame(
        [
            finding_row(f, 1, 99 * 10**9, arrival, ns)
            for f, ns in zip(findings, produced, strict=True)
        ]
    )
    committed = at_commit(rows, commit_ns=100 * 10**9, freshness_ns=5 * 10**9)
    assert [finding_of(row, "kafka") for row in committed.itertuples(index=False)] == findings


@pytest.mark.parametrize(
    ("latest", "processed", "lag"),
    [
        ('{"0": 10, "1": 4}', '{"0": 7, "1": 4}', 3),
        ('{"0": 10, "1": 4}', None, 14),  # nothing processed yet
        ('{"0": 3}', '{"0": 5}', 0),  # re-created topic: never negative
        # Spark's connector (sink.source: kafka) keys its offsets by topic first.
        ('{"t": {"0": 10, "1": 4}}', '{"t": {"0": 7, "1": 4}}', 3),
        ('{"t": {"0": 10, "1": 4}}', None, 14),
        # Unknown latest offsets (broker away, topic not created yet): no figure, and
        # no exception, which would stop the listener feeding every Spark metric.
        (None, '{"0": 5}', None),
        ("", None, None),
        ("None", None, None),
        ("null", None, None),
        ("[1, 2]", None, None),
    ],
)
def test_source_lag(latest: str | None, processed: str | None, lag: int | None) -> None:
    assert source_lag(latest, processed) == lag
