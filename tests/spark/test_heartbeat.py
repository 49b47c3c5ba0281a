"""The sink query's heartbeat (probe.spark.heartbeat): while the topic is silent a batch
runs once a heartbeat, not once a trigger, and the judge's loss timers still fire in
it; a checkpoint keeps the sources it was written with."""

from __future__ import annotations

import socket
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from probe.config import StageName
from probe.core.canary import Canary, encode
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.spark.health import parse_spark_time
from probe.spark.heartbeat import HEARTBEAT_S, HeartbeatReader
from probe.spark.lag import checkpoint_sources
from probe.spark.sink import SinkJob, SinkSettings
from tests.conftest import FakeClock, wait_for

FIRST_BATCH_TIMEOUT = 180
INCARNATION = 1_796_000_000_000_000_000
HEARTBEAT = 2.0


def test_the_offset_moves_on_once_a_period_has_passed_since_the_last_batch() -> None:
    clock = FakeClock()
    reader = HeartbeatReader(10.0, clock)
    start = reader.initialOffset()
    assert reader.latestOffset(start, None) == start
    clock.now += 9.9
    assert reader.latestOffset(start, None) == start
    clock.now += 0.1
    beat = reader.latestOffset(start, None)
    assert beat == {"beat": 1}
    # Asked again before the batch ran: the same end, not one more.
    assert reader.latestOffset(start, None) == beat
    # A batch (records or a beat) resets the period.
    reader.commit(beat)
    assert reader.latestOffset(beat, None) == beat
    clock.now += 10.0
    assert reader.latestOffset(beat, None) == {"beat": 2}
    # A query resumed from its checkpoint goes on from the checkpoint's beat.
    assert reader.latestOffset({"beat": 41}, None) == {"beat": 42}
    assert list(reader.partitions(beat, {"beat": 2})) == []


def test_checkpoint_sources_reads_the_newest_offset_entry(tmp_path: Path) -> None:
    assert checkpoint_sources(str(tmp_path / "none")) is None
    offsets = tmp_path / "ck" / "offsets"
    offsets.mkdir(parents=True)
    assert checkpoint_sources(str(tmp_path / "ck")) is None
    (offsets / "9").write_text('v1\n{"batchWatermarkMs":0}\n{"0":3}\n{"beat":1}')
    (offsets / "10").write_text('v1\n{"batchWatermarkMs":0}\n{"0":4}')
    (offsets / ".10.crc").write_text("")
    assert checkpoint_sources(str(tmp_path / "ck")) == 1


def _settings(
    broker: EmbeddedBroker, topic: str, path: Path, heartbeat: float | None
) -> SinkSettings:
    return SinkSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topic=topic,
        path=str(path),
        target="kafka",
        probe_id=socket.gethostname(),
        freshness_s=5.0,
        loss_timeout_s=5.0,
        allowed_lateness_s=1.0,
        trigger_s=0.5,
        heartbeat_s=heartbeat,
    )


class _Topic:
    """Canaries of one probe to a topic of two partitions, and the sink's fates."""

    def __init__(self, broker: EmbeddedBroker, topic: str) -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
        self.topic = topic
        self.ring: KeyRing = generate_key_ring()
        self.producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        self.tally = Tally("kafka")

    def write(self, partition: int, seq: int) -> None:
        canary = Canary(socket.gethostname(), INCARNATION, "kafka", partition, seq, time.time_ns())
        self.producer.produce(self.topic, encode(canary, self.ring), partition=partition)
        assert self.producer.flush(30) == 0

    def outcomes(self) -> dict[str, int]:
        stage = self.tally.stages.get(StageName.SINK)
        counted = {k: v for k, v in stage.outcomes.items() if v} if stage else {}
        arrived = counted.pop("delivered", 0) + counted.pop("late", 0)
        return {"arrived": arrived, **counted} if arrived else counted


def _batches(job: SinkJob) -> list[dict[str, Any]]:
    """The batches the query ran (not its idle progress reports), oldest first."""
    assert job.query is not None
    ran = {p["batchId"]: p for p in job.query.recentProgress if "addBatch" in p["durationMs"]}
    return [ran[batch] for batch in sorted(ran)]


def _started_s(progress: dict[str, Any]) -> float:
    started = parse_spark_time(progress["timestamp"])
    assert started is not None
    return started / 1e9


def test_a_silent_topic_gets_a_batch_a_heartbeat_and_its_implied_loss_declared(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    canaries = _Topic(broker, topic)
    job = SinkJob(spark, _settings(broker, topic, tmp_path / "sink", HEARTBEAT),
                  canaries.ring, recorders=[canaries.tally])  # fmt: skip
    job.start()
    try:
        canaries.write(0, 0)
        canaries.write(1, 0)
        wait_for(lambda: canaries.outcomes().get("arrived", 0) >= 2,
                 timeout=FIRST_BATCH_TIMEOUT, what="the first canaries")  # fmt: skip
        # Seq 2 implies seq 1, pending for the loss timeout; then the topic is silent.
        canaries.write(0, 2)
        wait_for(lambda: canaries.outcomes().get("lost", 0) >= 1, timeout=60,
                 what="the implied loss, with no record after it")  # fmt: skip
        assert canaries.outcomes() == {"arrived": 3, "lost": 1}
        silent = len(_batches(job))
        wait_for(lambda: len(_batches(job)) >= silent + 3, timeout=60,
                 what="three batches of a silent topic")  # fmt: skip
        ran = _batches(job)[silent - 1 :]
    finally:
        job.stop()
    assert all(p["numInputRows"] == 0 for p in ran[1:])
    # Each batch of the silent topic starts a heartbeat or more after the one before
    # (a batch every 0.5 s trigger without the heartbeat); a busy machine only widens it.
    gaps = [_started_s(b) - _started_s(a) for a, b in pairwise(ran)]
    assert min(gaps) >= HEARTBEAT, gaps


@pytest.mark.parametrize("settings", [(None, HEARTBEAT), (HEARTBEAT, None)])
def test_a_checkpoint_keeps_the_sources_it_was_written_with(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    settings: tuple[float | None, float | None],
) -> None:
    """``settings``: sink.heartbeat of the run that starts the checkpoint, then of the
    run that resumes it."""
    canaries = _Topic(broker, topic)
    path = tmp_path / "sink"
    first = settings[0]
    for seq, heartbeat in enumerate(settings):
        job = SinkJob(spark, _settings(broker, topic, path, heartbeat), canaries.ring,
                      recorders=[canaries.tally])  # fmt: skip
        # The first run's setting starts the checkpoint; the second run's gives way.
        assert job.heartbeat() == (first if seq == 0 else first and HEARTBEAT_S)
        job.start()
        try:
            canaries.write(0, seq)
            wait_for(lambda n=seq + 1: canaries.outcomes().get("arrived", 0) >= n,
                     timeout=FIRST_BATCH_TIMEOUT, what=f"canary {seq} in the sink")  # fmt: skip
        finally:
            job.stop()
        assert job.query is not None
        assert job.query.exception() is None
    assert canaries.outcomes() == {"arrived": 2}
    assert checkpoint_sources(str(path / "_checkpoint")) == (1 if first is None else 2)
