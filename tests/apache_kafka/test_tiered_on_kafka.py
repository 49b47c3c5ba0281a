"""Tiered reads on real tiered storage: a one-broker Apache Kafka cluster with KIP-405 on
and Apache Kafka's own test remote storage manager, LocalTieredStorage (a directory as
the remote store, from kafka-storage's test jar), the canary topic's segments leaving
the broker's disk five seconds after their writing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from probe.apache_kafka.cluster import TIERED, KafkaCluster
from probe.apache_kafka.tiered import TOPIC_SETTINGS, RemoteStore
from tests.apache_kafka.kafka_admin import create_topic
from tests.conftest import RunningProbe, run_args, sample, wait_for

PARTITIONS = 3
# Canaries this old have left the broker's disk (local.retention.ms 5 s, segments
# rolled every second, copied and deleted within a second or two more).
AGE_S = 15.0


@pytest.fixture
def store(tmp_path: Path) -> RemoteStore:
    return RemoteStore(tmp_path / "remote")


@pytest.fixture
def tiered_cluster(tmp_path: Path, store: RemoteStore) -> Iterator[KafkaCluster]:
    with KafkaCluster(
        1, workdir=tmp_path / "kafka", settings=store.broker_settings(), release=TIERED
    ) as cluster:
        yield cluster


def tiered_config(path: Path) -> Path:
    reads = {"enabled": True, "age": f"{AGE_S}s", "every": "2s", "timeout": "1500ms",
             "partitions": PARTITIONS}  # fmt: skip
    path.write_text(yaml.safe_dump({"tiered": reads}))
    return path


def reads(probe: RunningProbe, outcome: str) -> float:
    return sample(probe.metrics(), "synthetic_sla_tiered_reads_total", outcome=outcome)


def failures(probe: RunningProbe, reason: str) -> float:
    return sample(probe.metrics(), "synthetic_sla_tiered_read_failures_total", reason=reason)


def test_tiered_reads_serve_old_canaries_from_the_remote_store_and_fail_without_it(
    tiered_cluster: KafkaCluster,
    store: RemoteStore,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    servers = tiered_cluster.bootstrap_servers
    create_topic(servers, topic, PARTITIONS, 1, config=TOPIC_SETTINGS)
    config = tiered_config(key_file.with_name("probe.yaml"))
    probe = start_probe(*run_args(servers, topic, key_file), "--config", str(config))

    # Until canaries are AGE_S old, a read finds only younger ones: not counted.
    wait_for(lambda: reads(probe, "read") >= 2 * PARTITIONS, timeout=90,
             what="tiered reads served")  # fmt: skip
    assert reads(probe, "failed") == reads(probe, "invalid") == 0
    # What they served was written about AGE_S ago, long gone from the broker's disk.
    age = sample(probe.metrics(), "synthetic_sla_tiered_canary_age_seconds")
    assert AGE_S - 2 <= age <= AGE_S + 5, age
    first = sample(probe.metrics(), "synthetic_sla_tiered_first_record_seconds_count")
    assert first == reads(probe, "read")

    # The remote store gone: the broker answers each remote read with
    # UNKNOWN_SERVER_ERROR, and the tiered reads count it; the consumer stage, which
    # reads the local log's tail, loses nothing. (Once the outage is older than AGE_S,
    # the canaries asked for were never copied and are read locally: not waited for.)
    store.make_unreadable()
    served = reads(probe, "read")
    wait_for(lambda: failures(probe, "UNKNOWN_SERVER_ERROR") >= PARTITIONS, timeout=30,
             what="remote reads failing")  # fmt: skip
    assert reads(probe, "read") <= served + PARTITIONS  # reads under way at the fault

    # Back: the reads serve again.
    store.restore()
    failed = reads(probe, "failed")
    wait_for(lambda: reads(probe, "read") >= served + 2 * PARTITIONS, timeout=30,
             what="tiered reads served once the store is back")  # fmt: skip
    assert reads(probe, "failed") <= failed + PARTITIONS
    assert probe.canaries("lost") == 0
    assert probe.canaries("delivered") > 0
