"""What a leader election during a deploy does to `once`'s verdict: a broker's
controlled shutdown (what a rolling deploy of the brokers does) and its return move
leaders under a smoke test; the producer retries NOT_LEADER within send_timeout and
the reader follows the new leaders, so a healthy cluster still passes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from probe.apache_kafka.cluster import KafkaCluster
from tests.apache_kafka.kafka_admin import create_topic, describe, leaders
from tests.conftest import SLA_PROBE, target_report, wait_for


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    with KafkaCluster(workdir=tmp_path / "kafka") as running:
        yield running


def test_once_passes_while_a_broker_stops_and_returns(cluster: KafkaCluster, topic: str) -> None:
    servers = cluster.bootstrap_servers
    create_topic(servers, topic, 6)
    wait_for(lambda: leaders(describe(servers, topic)) == {1, 2, 3}, timeout=60,
             what="every broker leading")  # fmt: skip
    smoke = subprocess.Popen(
        [SLA_PROBE, "once", "--bootstrap-servers", servers, "--topic", topic,
         "--no-create-topic", "--rounds", "12", "--interval", "1s", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Once its rounds are under way (the canaries are on the topic), broker 2 goes
        # down the way a deploy takes it down, and comes back.
        def produced() -> bool:
            ends = cluster_ends(servers, topic)
            return smoke.poll() is not None or sum(ends.values()) >= 6

        wait_for(produced, timeout=60, what="the first round on the topic")
        cluster.node(2).stop()
        wait_for(lambda: 2 not in leaders(describe(servers, topic)), timeout=60,
                 what="broker 2's leaderships moved away")  # fmt: skip
        cluster.start_nodes(2)
        out, err = smoke.communicate(timeout=180)
    finally:
        if smoke.poll() is None:
            smoke.kill()
    report = target_report(out)
    print(json.dumps(report["stages"]["consumer"]["outcomes"]))
    assert smoke.returncode == 0, out + err[-3000:]
    assert report["stages"]["consumer"]["outcomes"]["delivered"] == 12 * 6


def cluster_ends(servers: str, topic: str) -> dict[int, int]:
    """Each partition's end offset; 0 where the leader cannot say yet."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "ends"})
    ends = {}
    try:
        for partition in range(6):
            try:
                ends[partition] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), 10
                )[1]
            except KafkaException:
                ends[partition] = 0
    finally:
        consumer.close()
    return ends
