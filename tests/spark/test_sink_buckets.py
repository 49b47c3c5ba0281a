"""The sink's stateful judge keeps many streams in one group (judge_operator: a bucket of
partitions per group): the streams of one bucket are judged apart, a silent stream's
loss is declared by the group's timer while its neighbours keep delivering, and every
stream's state survives a restart from the checkpoint."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from probe.config import StageName
from probe.core.canary import Canary, encode
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.spark.judge_operator import JUDGE_BUCKETS
from probe.spark.sink import SinkJob, SinkSettings
from tests.conftest import wait_for

FIRST_BATCH_TIMEOUT = 180
# Three partitions of one bucket, and one of another.
SHARED = (0, JUDGE_BUCKETS, 2 * JUDGE_BUCKETS)
OTHER = 1
INCARNATION = 1_795_000_000_000_000_000


def test_streams_sharing_a_group_are_judged_apart_and_a_silent_ones_loss_is_declared(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    servers = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 2 * JUDGE_BUCKETS + 1, 1)])[topic].result(60)
    ring, probe_id = generate_key_ring(), socket.gethostname()
    settings = SinkSettings(
        bootstrap_servers=servers,
        topic=topic,
        path=str(tmp_path / "sink"),
        target="kafka",
        probe_id=probe_id,
        # A short loss timeout; the freshness no longer (the first batch, which starts
        # Spark's Python workers, may take longer: late or delivered, both arrived).
        freshness_s=5.0,
        loss_timeout_s=5.0,
        allowed_lateness_s=1.0,
        trigger_s=1.0,
    )
    producer = Producer({"bootstrap.servers": servers})

    written: dict[tuple[int, int], bytes] = {}

    def write(partition: int, seq: int) -> None:
        """A canary, or the same record again if it was written before."""
        if (partition, seq) not in written:
            canary = Canary(probe_id, INCARNATION, "kafka", partition, seq, time.time_ns())
            written[partition, seq] = encode(canary, ring)
        producer.produce(topic, written[partition, seq], partition=partition)
        assert producer.flush(30) == 0

    tally = Tally("kafka")

    def outcomes() -> dict[str, int]:
        """Fates of the sink stage, delivered and late as one: "arrived"."""
        stage = tally.stages.get(StageName.SINK)
        counted = {k: v for k, v in stage.outcomes.items() if v} if stage else {}
        arrived = counted.pop("delivered", 0) + counted.pop("late", 0)
        return {"arrived": arrived, **counted} if arrived else counted

    def anomalies() -> dict[str, int]:
        stage = tally.stages.get(StageName.SINK)
        return {str(k): v for k, v in stage.anomalies.items() if v} if stage else {}

    job = SinkJob(spark, settings, ring, recorders=[tally])
    job.start()
    try:
        for partition in (*SHARED, OTHER):
            write(partition, 0)
        wait_for(lambda: outcomes().get("arrived", 0) >= 4, timeout=FIRST_BATCH_TIMEOUT,
                 what="the first canary of each stream")  # fmt: skip
        # Seq 1 of the middle stream never comes: seq 2 implies it, and from then on
        # that stream is silent while its bucket's neighbours go on.
        write(SHARED[1], 2)
        for seq in (1, 2):
            write(SHARED[0], seq)
            write(SHARED[2], seq)
        wait_for(lambda: outcomes().get("lost", 0) >= 1, timeout=60, what="the implied loss")
        assert outcomes() == {"arrived": 9, "lost": 1}
    finally:
        job.stop()
    verdicts = spark.read.parquet(settings.path + "/verdicts").filter("kind = 'fate'").collect()
    assert sorted((r.partition, r.seq) for r in verdicts if r.outcome == "lost") == [(SHARED[1], 1)]

    # Every stream's memory is in the checkpoint: a record written twice is a
    # duplicate, the silent stream's next canary arrives, no loss is added.
    restarted = SinkJob(spark, settings, ring, recorders=[tally])
    restarted.start()
    try:
        write(SHARED[2], 2)
        write(SHARED[1], 3)
        write(OTHER, 1)
        wait_for(lambda: outcomes().get("arrived", 0) >= 11 and anomalies(),
                 timeout=FIRST_BATCH_TIMEOUT, what="the restarted sink's verdicts")  # fmt: skip
    finally:
        restarted.stop()
    assert outcomes() == {"arrived": 11, "lost": 1}
    assert anomalies() == {"duplicate": 1}
