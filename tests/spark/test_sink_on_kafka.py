"""The Spark sink and reconciliation on Apache Kafka's three-broker cluster: the
executors read replicated partitions led by three brokers, whose fetches are answered
as soon as data arrives (the embedded broker waits out every fetch)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from pyspark.sql import SparkSession

from probe.apache_kafka.cluster import KafkaCluster
from probe.cli import main
from probe.core.judge import Outcome
from tests.apache_kafka.kafka_admin import describe, leaders
from tests.conftest import until, wait_for
from tests.spark.test_sink import pipeline

ROUNDS = 3


async def test_the_sink_judges_every_canary_through_kafka_and_reconcile_proves_the_table(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic: str, tmp_path: Path
) -> None:
    sink_path = tmp_path / "sink"
    async with pipeline(spark, kafka_cluster, topic, sink_path) as p:
        partitions = len(p.probe.partitions)
        assert leaders(describe(kafka_cluster.bootstrap_servers, topic)) == {1, 2, 3}
        for _ in range(ROUNDS):
            await p.probe.produce_round()
        canaries = ROUNDS * partitions
        await until(lambda: p.sink_fates() >= canaries, within=180, what="every sink verdict")
        assert p.sink_outcomes() == {Outcome.DELIVERED.value: canaries}
        key_file = tmp_path / "keys.json"
        key_file.write_text(p.keyring.to_json())

    newest_ms = time.time_ns() // 1_000_000
    wait_for(
        lambda: time.time_ns() // 1_000_000 > newest_ms + 1100,
        timeout=5,
        what="every record older than the settle delay",
    )
    result = CliRunner().invoke(
        main,
        [
            "reconcile", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
            "--topic", topic, "--sink-path", str(sink_path),
            "--signing-key-file", str(key_file), "--window-offsets", "100",
            "--settle", "1s", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["records"]["matched"] == canaries
    assert report["discrepancies"] == 0
    assert {w["partition"] for w in report["windows"]} == set(range(partitions))
