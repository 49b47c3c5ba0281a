"""The sink's source lag counts the records not judged yet, whether or not the query
makes batches: from the log ends the probe lists itself and the offsets the query last
committed (its progress, its checkpoint, or its pinned start)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.spark import stage as stage_module
from probe.spark.health import SparkHealth
from probe.spark.lag import START_FILE, SourceLag, last_committed, owed
from tests.conftest import until
from tests.spark.test_kafka_source import _create, _drain, _produce
from tests.spark.test_sink_restarts import SINK_UP, FailingRecorder, _config, _restarts, supervised


def _offset_log(checkpoint: Path, batch: int, offsets: dict[str, int], committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(
        f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}'
    )
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_checkpoint_tells_the_offsets_of_its_last_committed_batch(tmp_path: Path) -> None:
    """The newest commit's offset log entry, not a batch planned and never committed;
    the pinned start before any commit; nothing before the query ever started."""
    checkpoint = tmp_path / "ck"
    assert last_committed(str(checkpoint), "t") is None
    checkpoint.mkdir()
    (checkpoint / START_FILE).write_text('{"0": 4, "1": 0}')
    assert last_committed(str(checkpoint), "t") == {"0": 4, "1": 0}
    _offset_log(checkpoint, 9, {"0": 5, "1": 2}, committed=True)
    _offset_log(checkpoint, 10, {"0": 7, "1": 3}, committed=True)
    _offset_log(checkpoint, 11, {"0": 9, "1": 9}, committed=False)  # planned, failed
    assert last_committed(str(checkpoint), "t") == {"0": 7, "1": 3}
    # Spark's own connector keeps them by topic.
    _offset_log(checkpoint, 12, {"t": {"0": 8, "1": 3}}, committed=True)
    assert last_committed(str(checkpoint), "t") == {"0": 8, "1": 3}


def test_a_log_that_started_over_or_a_new_partition_is_owed_whole() -> None:
    assert owed({"0": 10, "1": 2, "2": 5}, {"0": 4, "1": 7}) == 6 + 2 + 5


async def test_the_lag_rises_while_no_batch_completes(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """A query ran and committed; then it stopped making batches (failing, restarting,
    stuck): records written meanwhile are counted as they come, by the probe's own
    listing against the checkpoint, where progress would have stood still at 0."""
    await _create(broker, topic, 2)
    _produce(broker, topic, {0: 3, 1: 2}, "judged")
    checkpoint = tmp_path / "ck"
    _drain(spark, broker, topic, checkpoint)  # every record committed
    reports: list[int] = []
    lag = SourceLag(
        {"bootstrap.servers": broker.bootstrap_servers, "topic": topic},
        str(checkpoint),
        reports.append,
        every=0.0,
    )
    try:
        assert lag.refresh() == 0
        _produce(broker, topic, {0: 2, 1: 1}, "waiting")
        assert lag.refresh() == 3
        _produce(broker, topic, {1: 4}, "waiting-more")
        assert lag.refresh() == 7
    finally:
        lag.close()
    assert reports == [0, 3, 7]


def test_progress_events_set_the_lag_between_listings() -> None:
    """While batches flow, the source's own listing (in each progress event) is used:
    no listing of the probe's own within ``every`` seconds of one."""
    registry = CollectorRegistry()
    health = SparkHealth(registry, "kafka", trigger_s=2.0)
    now = [100.0]
    health.lag = SourceLag(
        # No broker here: a listing would fail and report nothing.
        {"bootstrap.servers": "127.0.0.1:1", "topic": "t"},
        "/nonexistent",
        health.metrics.source_lag,
        every=10.0,
        clock=lambda: now[0],
    )
    source = SimpleNamespace(latestOffset='{"0": 12, "1": 5}', endOffset='{"0": 10, "1": 5}')
    health.on_progress(
        SimpleNamespace(
            durationMs={"triggerExecution": 500},
            sources=[source],
            stateOperators=[],
            eventTime={},
        )
    )
    assert (
        registry.get_sample_value("synthetic_sla_spark_source_lag_records", {"target": "kafka"})
        == 2
    )
    now[0] += 5.0
    assert health.lag.refresh() == 2  # the progress' ends, 5 s old, still stand


async def test_the_lag_counts_the_canaries_a_failing_query_does_not_judge(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every batch fails and the query restarts, again and again: no progress event
    comes, yet the lag counts every canary written meanwhile."""
    monkeypatch.setattr(stage_module, "LAG_INTERVAL", 0.5)
    config = _config(broker, topic, tmp_path / "sink", **{"sink.restart.max_failures": 1000})
    failing = FailingRecorder(failures=1_000_000)
    async with supervised(config, generate_key_ring(), [failing]) as (_, target, registry):
        await until(lambda: _restarts(registry, "batch") >= 1, SINK_UP, "a failed batch")

        def lag() -> float:
            labels = {"target": "kafka"}
            return registry.get_sample_value("synthetic_sla_spark_source_lag_records", labels) or 0

        before = lag()
        for _ in range(3):
            await target.produce_round()  # a canary to each of the 3 partitions
        await until(lambda: lag() >= before + 9, 60, "the lag to count 9 canaries more")
