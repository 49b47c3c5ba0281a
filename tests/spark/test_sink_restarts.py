"""The sink query's restarts inside `run`, and its starting offsets kept in the
checkpoint: real broker, real Spark local mode."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from probe.config import ProbeConfig, load
from probe.core.errors import RejectReason, TransportError
from probe.core.judge import Finding
from probe.core.keys import KeyRing, generate_key_ring
from probe.core.offset_ranges import Offsets
from probe.embedded import EmbeddedBroker
from probe.services.once import OwnCanaries
from probe.services.report import Tally
from probe.spark.kafka_source import KafkaStreamReader
from probe.spark.sink import START_FILE, SinkJob
from probe.spark.stage import SparkSinkStage, sink_settings
from probe.stages.target import TargetProbe
from tests.conftest import RunningProbe, http_status, run_args, sample, scrape, until, wait_for
from tests.spark.test_sink_service import _sink_delivered

SINK_UP = 180.0


class FailingRecorder:
    """Fails the sink's batches ``failures`` times, as a batch that cannot write would
    (the recorders run inside the batch, after its tables)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("No space left on device (a drill)")

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        pass


def _config(broker: EmbeddedBroker, topic: str, path: Path, **extra: object) -> ProbeConfig:
    return load(
        overrides={
            "probe_id": "restarts-under-test",
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "sink.path": str(path),
            "sink.master": "local[2]",  # the tests' session: getOrCreate returns it
            "sink.trigger": "1s",
            "sink.restart.initial_delay": "100ms",
            **extra,
        }
    )


@contextlib.asynccontextmanager
async def supervised(
    config: ProbeConfig, keyring: KeyRing, recorders: list[object]
) -> AsyncIterator[tuple[SparkSinkStage, TargetProbe, CollectorRegistry]]:
    target = TargetProbe(config, keyring, [])
    await target.connect(give_up_after=10)
    registry = CollectorRegistry()
    stage = SparkSinkStage(config, keyring, recorders, registry=registry)  # type: ignore[arg-type]
    stop = asyncio.Event()
    supervisor = asyncio.create_task(stage.supervise(target, stop))
    try:
        yield stage, target, registry
    finally:
        stop.set()
        await asyncio.wait_for(supervisor, 60)
        await stage.stop()
        await target.close()


def _sink_outcomes(tally: Tally) -> dict[str, int]:
    stage = tally.stages.get("sink")
    return dict(stage.outcomes) if stage else {}


def _restarts(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value(
        "synthetic_sla_spark_query_restarts_total", {"target": "kafka", "reason": reason}
    )
    return value or 0.0


async def test_a_failed_batch_restarts_the_query_from_its_checkpoint(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    tally = Tally("kafka")
    failing = FailingRecorder(failures=1)
    config = _config(broker, topic, tmp_path / "sink")
    own = OwnCanaries(tally, "restarts-under-test")  # not the warm-up's
    async with supervised(config, generate_key_ring(), [failing, own]) as (stage, target, reg):
        await until(lambda: failing.failures == 0, SINK_UP, "the first batch to fail")
        await until(lambda: _restarts(reg, "batch") == 1, 60, "a restart for the failed batch")
        await until(lambda: stage.ready, SINK_UP, "the restarted query ready")
        assert stage.readiness() == (True, "sink query running")
        assert reg.get_sample_value("synthetic_sla_spark_query_up", {"target": "kafka"}) == 1
        for _ in range(3):
            await target.produce_round()
        await until(lambda: sum(_sink_outcomes(tally).values()) >= 9, 120, "nine sink verdicts")
        assert _sink_outcomes(tally) == {"delivered": 9}
    # The replayed batch replaced its own output: every canary once, none missing.
    table = pq.read_table(tmp_path / "sink" / "canaries").to_pandas()
    own = table[table["probe_id"] == "restarts-under-test"]
    assert sorted(zip(own["partition"], own["seq"], strict=True)) == [
        (partition, seq) for partition in range(3) for seq in range(3)
    ]
    assert sum(_restarts(reg, r) for r in ("checkpoint", "source", "stopped", "start", "jvm")) == 0


async def test_a_query_that_keeps_failing_is_given_up(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The failure-rate cap: the 2nd failure within the window gives the stage up; the
    stage says so on /readyz and in synthetic_sla_spark_query_failed."""
    config = _config(broker, topic, tmp_path / "sink", **{"sink.restart.max_failures": 2})
    failing = FailingRecorder(failures=1_000)
    async with supervised(config, generate_key_ring(), [failing]) as (stage, _, registry):
        await until(lambda: stage.given_up is not None, SINK_UP, "the stage given up")
        ready, reason = stage.readiness()
        assert not ready
        assert reason.startswith("sink stage given up after 2 failures within 1h; last: ")
        assert "No space left on device" in reason
        labels = {"target": "kafka"}
        assert registry.get_sample_value("synthetic_sla_spark_query_failed", labels) == 1
        assert registry.get_sample_value("synthetic_sla_spark_query_up", labels) == 0
        assert _restarts(registry, "batch") == 1  # the failure that gave up is no restart


async def test_a_start_whose_offsets_cannot_be_listed_is_restarted(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listing the starting offsets fails once, as it does on a cluster whose new
    topic's partitions have no leader yet: the start is restarted, and the query comes
    up and judges. (It was taken for a refused warm-up canary: the stage then watched a
    query that never started, judged nothing and read as ready.)"""
    listed = KafkaStreamReader.log_start
    refused: list[str] = []

    def leaderless_once(reader: KafkaStreamReader, starting: str) -> Offsets:
        if not refused:
            refused.append(starting)
            raise TransportError(
                f"topic {topic}: list offsets: Failed to get offsets: "
                "Broker: Not leader for partition"
            )
        return listed(reader, starting)

    monkeypatch.setattr(KafkaStreamReader, "log_start", leaderless_once)
    tally = Tally("kafka")
    own = OwnCanaries(tally, "restarts-under-test")
    config = _config(broker, topic, tmp_path / "sink")
    async with supervised(config, generate_key_ring(), [own]) as (stage, target, registry):
        await until(lambda: _restarts(registry, "start") == 1, 60, "the start restarted")
        await until(lambda: stage.ready, SINK_UP, "the query started")
        assert stage.readiness() == (True, "sink query running")
        for _ in range(2):
            await target.produce_round()
        await until(lambda: sum(_sink_outcomes(tally).values()) >= 6, 120, "six sink verdicts")
        assert _sink_outcomes(tally) == {"delivered": 6}
    assert refused == ["latest"]


async def test_the_starting_offsets_are_kept_in_the_checkpoint(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A query starting at `latest` pins that position at its first start, and a query
    reads from a pinned position, not from the log's end nor from offset 0 (a restart
    before the first commit would otherwise re-read the whole topic)."""
    keyring = generate_key_ring()
    config = _config(broker, topic, tmp_path / "first")
    target = TargetProbe(config, keyring, [])
    await target.connect(give_up_after=10)
    try:
        for _ in range(2):  # seq 0 and 1 on each partition, before any query
            await target.produce_round()
        first = SinkJob(
            spark, sink_settings(config, str(tmp_path / "first")), keyring, recorders=[]
        )
        pinned = await asyncio.to_thread(first.pin_start)
        ends = json.loads(pinned)
        assert set(ends) == {"0", "1", "2"}
        assert all(offset > 0 for offset in ends.values())  # latest: after the two rounds
        await target.produce_round()
        # Asked again (as Spark does after a restart): the same answer.
        assert await asyncio.to_thread(first.pin_start) == pinned

        # A checkpoint pinned between the two rounds: only seq 1 onwards is read.
        second_path = tmp_path / "second"
        checkpoint = second_path / "_checkpoint"
        checkpoint.mkdir(parents=True)
        between = {p: offset // 2 for p, offset in ends.items()}
        (checkpoint / START_FILE).write_text(json.dumps(between))
        tally = Tally("kafka")
        job = SinkJob(spark, sink_settings(config, str(second_path)), keyring, recorders=[tally])
        await asyncio.to_thread(job.start)
        try:
            await until(
                lambda: sum(_sink_outcomes(tally).values()) >= 6, SINK_UP, "six sink verdicts"
            )
        finally:
            await asyncio.to_thread(job.stop)
        table = pq.read_table(second_path / "canaries").to_pandas()
        assert sorted(zip(table["partition"], table["seq"], strict=True)) == [
            (partition, seq) for partition in range(3) for seq in (1, 2)
        ]
    finally:
        await target.close()


def _spark_jvm(parent: int) -> int:
    """The pid of the Spark JVM a `sla-probe run` launched (its java child)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1]
            if comm == "java" and int(fields.split()[1]) == parent:
                return int(entry)
    raise AssertionError(f"no java child of {parent}")


@pytest.mark.gameday
def test_run_restarts_the_sink_when_its_jvm_dies(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    """Spark's JVM killed under `run` (the OOM killer, say): the sink stage starts a
    new one and its query goes on from the checkpoint; the consumer stage never stops."""
    sink_path = tmp_path / "sink"
    running = start_probe(
        *run_args(broker.bootstrap_servers, topic, key_file),
        "--stages", "consumer,sink", "--sink-path", str(sink_path),
    )  # fmt: skip

    wait_for(
        lambda: running.process.poll() is not None or _sink_delivered(running.port) >= 3,
        timeout=SINK_UP,
        what="canaries delivered in the sink stage",
    )
    assert running.process.poll() is None, running.log.read_text()[-3000:]
    os.kill(_spark_jvm(running.process.pid), signal.SIGKILL)
    wait_for(
        lambda: sample(scrape(running.port), "synthetic_sla_spark_query_restarts_total",
                       reason="jvm") == 1,
        timeout=60,
        what="a restart for the dead JVM",
    )  # fmt: skip
    before = _sink_delivered(running.port)
    consumer = running.canaries("delivered")
    wait_for(
        lambda: running.process.poll() is not None or _sink_delivered(running.port) >= before + 6,
        timeout=SINK_UP,
        what="the sink delivering again after the restart",
    )
    assert running.process.poll() is None, running.log.read_text()[-3000:]
    assert running.canaries("delivered") > consumer  # probing went on meanwhile
    assert sample(scrape(running.port), "synthetic_sla_spark_query_up") == 1
    wait_for(lambda: http_status(running.port, "/readyz") == 200, timeout=30, what="ready")
    assert running.stop(timeout=60) < 60
    assert running.process.returncode == 0, running.log.read_text()[-3000:]
    # Every canary of the probe once in the table, the batch the JVM died in included.
    table = pq.read_table(sink_path / "canaries").to_pandas()
    own = table[table["probe_id"] == "probe-under-test"]
    assert not own.duplicated(["partition", "incarnation", "seq"]).any()
    for _, seqs in own.groupby("partition")["seq"]:
        assert sorted(seqs) == list(range(min(seqs), max(seqs) + 1))
