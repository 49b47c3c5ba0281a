"""The sink judging a topic of thousands of partitions, each holding a canary or two:
the shape of a canary topic at scale, where every batch owes a record on every
partition. Real broker, real Spark local mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from probe.config import StageName, load
from probe.core.judge import Outcome
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.spark.health import SparkHealth
from probe.spark.sink import SinkJob
from probe.stages.target import TargetProbe
from tests.conftest import until
from tests.spark.test_sink import _settings

PARTITIONS = 2_000
ROUNDS = 2


def _sink_outcomes(tally: Tally) -> dict[str, int]:
    stage = tally.stages.get(StageName.SINK)
    return dict(stage.outcomes) if stage else {}


async def test_every_canary_of_thousands_of_partitions_is_judged_delivered(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    keyring = generate_key_ring()
    tally = Tally("kafka")
    config = load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.partitions": PARTITIONS,
            "kafka.max_send_rate": 0,  # a round at once
            "judge.freshness": "5m",
            "judge.loss_timeout": "5m",
        }
    )
    probe = TargetProbe(config, keyring, [])
    await probe.connect(give_up_after=30)
    settings = _settings(broker, topic, tmp_path / "sink", freshness_s=300.0, loss_timeout_s=300.0)
    health = SparkHealth(CollectorRegistry(), "kafka", settings.trigger_s)
    job = SinkJob(spark, settings, keyring, recorders=[tally], health=health)
    await asyncio.to_thread(job.start)  # pins the start: the rounds below are read
    try:
        for _ in range(ROUNDS):  # a canary to every partition, alone in its batch
            await probe.produce_round()
        expected = PARTITIONS * ROUNDS
        await until(
            lambda: (
                sum(_sink_outcomes(tally).values()) >= expected
                or (job.query is not None and job.query.exception() is not None)
            ),
            within=300,
            what=f"{expected} sink verdicts",
        )
        assert job.query is not None
        assert job.query.exception() is None  # no batch failed
        assert job.query.isActive
        assert _sink_outcomes(tally) == {Outcome.DELIVERED.value: expected}
        canaries = spark.read.parquet(settings.table("canaries"))
        assert canaries.count() == expected
        assert canaries.select("partition", "seq").distinct().count() == expected
    finally:
        await asyncio.to_thread(job.stop)
        await probe.close()
