"""The probe on Apache Kafka's three-broker cluster, every broker running (shared
cluster): topic management, per-broker attribution, replica health, idempotence."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from probe.apache_kafka.cluster import KafkaCluster
from probe.config import KafkaConfig
from probe.transport import kafka_admin
from probe.transport.kafka import KafkaTransport
from tests.apache_kafka.kafka_admin import (
    create_topic,
    delete_topic,
    describe,
    end_offsets,
    leaders,
    under_replicated,
)
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, target_report, wait_for


def once(cluster: KafkaCluster, topic: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", cluster.bootstrap_servers, "--topic", topic,
         "--json", "--create-topic", "--move-leaders", *flags],
        check=False, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_once_creates_the_topic_with_rf3_and_every_broker_leading_a_partition(
    any_kafka_cluster: KafkaCluster, topic: str
) -> None:
    kafka_cluster = any_kafka_cluster
    done = once(kafka_cluster, topic)

    assert done.returncode == 0, done.stdout + done.stderr
    described = describe(kafka_cluster.bootstrap_servers, topic)
    assert len(described) >= len(kafka_cluster.nodes)
    assert {len(d.replicas) for d in described.values()} == {3}
    assert leaders(described) == set(kafka_cluster.nodes), described
    outcomes = target_report(done.stdout)["stages"]["consumer"]["outcomes"]
    assert outcomes["delivered"] > 0
    assert outcomes["delivered"] % len(described) == 0, "every partition, every round"
    assert outcomes["lost"] == outcomes["late"] == outcomes["produce_failed"] == 0


def producer_ids(cluster: KafkaCluster, topic: str) -> set[int]:
    """The producer id of every record batch of the topic, read from the brokers' own
    log segments (v2 batch header: producerId is the int64 at byte 43)."""
    ids: set[int] = set()
    for node in cluster.nodes.values():
        for segment in (node.directory / "data").glob(f"{topic}-*/*.log"):
            data = segment.read_bytes()
            at = 0
            while at + 61 <= len(data):
                (length,) = struct.unpack_from(">i", data, at + 8)
                (producer,) = struct.unpack_from(">q", data, at + 43)
                ids.add(producer)
                at += 12 + length
    return ids


@pytest.mark.parametrize(
    ("flags", "idempotent"),
    [((), False), (("--idempotence",), True)],
    ids=["default", "required"],
)
def test_canaries_are_produced_idempotently_when_told_to(
    any_kafka_cluster: KafkaCluster, topic: str, flags: tuple[str, ...], idempotent: bool
) -> None:
    kafka_cluster = any_kafka_cluster
    done = once(kafka_cluster, topic, *flags)

    assert done.returncode == 0, done.stdout + done.stderr
    ids = wait_for(lambda: producer_ids(kafka_cluster, topic), timeout=10, what="batches")
    if idempotent:
        assert min(ids) >= 0, f"a batch without a producer id: {ids}"
    else:
        assert ids == {-1}


def test_run_attributes_every_canary_to_the_broker_that_led_its_partition(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    probe = start_probe(*run_args(kafka_cluster.bootstrap_servers, topic, key_file))
    brokers = [str(b) for b in kafka_cluster.nodes]

    def every_broker_delivered() -> bool:
        samples = probe.metrics()
        return all(
            sample(samples, "synthetic_sla_broker_canaries_total", broker=b, outcome="delivered")
            > 0
            for b in brokers
        )

    wait_for(every_broker_delivered, timeout=60, what="delivered canaries from every broker")
    samples = probe.metrics()
    described = describe(kafka_cluster.bootstrap_servers, topic)
    assert sample(samples, "synthetic_sla_brokers") == len(brokers)
    assert sample(samples, "synthetic_sla_brokers_without_canary_leader") == 0
    assert sample(samples, "synthetic_sla_min_insync_replicas") == 2
    assert sample(samples, "synthetic_sla_replication_factor") == 3
    assert sample(samples, "synthetic_sla_partitions_under_replicated") == under_replicated(
        described
    )
    for broker in brokers:
        led = sum(1 for d in described.values() if str(d.leader) == broker)
        assert sample(samples, "synthetic_sla_broker_leader_partitions", broker=broker) == led
    for outcome in ("lost", "late", "produce_failed"):
        assert probe.canaries(outcome) == 0, outcome


def test_a_topic_deleted_and_recreated_by_someone_else_is_read_from_its_new_beginning(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    """Someone else owns the topic (--no-create-topic) and re-creates it at once: the
    reader's positions (past offset 8) lie beyond the new logs' ends, whether or not a
    refresh saw the topic gone, and every partition must be read again from offset 0:
    no canary of the new logs skipped, none judged lost, no partition left stale."""
    servers = kafka_cluster.bootstrap_servers
    create_topic(servers, topic, 3)
    args = [a for a in run_args(servers, topic, key_file) if a != "--create-topic"]
    probe = start_probe(*args, "--no-create-topic")

    def stale() -> float:
        return sample(probe.metrics(), "synthetic_sla_stale_partitions", stage="consumer")

    # Positions well past where the new logs will be when the reader next fetches.
    wait_for(lambda: probe.canaries("delivered") >= 3 * 8, timeout=60, what="8 rounds")
    delete_topic(servers, topic)
    create_topic(servers, topic, 3)
    recreated_at = probe.canaries("delivered")
    wait_for(
        lambda: probe.canaries("delivered") >= recreated_at + 3 * 5 and stale() == 0,
        timeout=60,
        what="five rounds delivered from the new topic, no partition stale",
    )
    assert probe.canaries("lost") == 0
    assert min(end_offsets(servers, topic).values()) >= 5


async def test_a_topic_larger_than_one_request_allows_is_created_in_steps(
    kafka_cluster: KafkaCluster, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kafka's controller refuses to create 10,000 partitions in one request; here the
    # step is made small so that a few partitions take several requests.
    monkeypatch.setattr(kafka_admin, "PARTITIONS_PER_REQUEST", 4)
    config = KafkaConfig(bootstrap_servers=kafka_cluster.bootstrap_servers, topic=topic)
    transport = KafkaTransport(config)
    await transport.start()
    try:
        assert await transport.ensure_topic(10, 3)
    finally:
        await transport.close()

    def all_ten() -> dict[int, Any]:
        # The brokers learn of partitions a moment after the controller committed them.
        found = describe(kafka_cluster.bootstrap_servers, topic)
        return found if len(found) == 10 else {}

    described = wait_for(all_ten, timeout=30, what="ten partitions described")
    assert sorted(described) == list(range(10))
    assert {len(d.replicas) for d in described.values()} == {3}

    # DescribeTopicPartitions (the eligible leader replicas) goes page by page too:
    # ten partitions four at a time are three requests, each from the cursor the last
    # answer gave, and none after the last page. All in sync: none is eligible.
    monkeypatch.setattr(kafka_admin, "DESCRIBE_PARTITIONS_PAGE", 4)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers)
    await admin.start()
    sent: list[object] = []
    send = admin._send_request

    async def counted(request: object, node_id: int | None = None) -> object:
        sent.append(request)
        return await send(request, node_id)

    monkeypatch.setattr(admin, "_send_request", counted)
    try:
        found = await asyncio.wait_for(kafka_admin.eligible_leaders(admin, topic), 30)
    finally:
        await admin.close()
    assert (found, len(sent)) == ({}, 3)


def test_a_topic_kafka_refuses_to_create_is_named_not_taken_for_created(
    kafka_cluster: KafkaCluster, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(json.dumps({"kafka": {"replication_factor": 4}}))  # 3 brokers

    done = once(kafka_cluster, topic, "--config", str(config), "--create-topic")

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot create topic {topic}" in done.stdout + done.stderr
    assert "InvalidReplicationFactor" in done.stdout + done.stderr


def test_the_reader_waits_long_on_fetches_because_the_brokers_answer_as_records_arrive(
    kafka_cluster: KafkaCluster, topic: str
) -> None:
    # kafka.fetch_max_wait auto (the default): Apache Kafka answers a held fetch when a
    # record arrives, so the probe's own canaries come back within milliseconds of their
    # acknowledgement at the short wait, and the reader takes the long one.
    # (once logs at warning when told info: its decisions are logged at info.)
    done = once(
        kafka_cluster, topic, "--rounds", "40", "--interval", "100ms", "--log-level", "debug"
    )

    assert done.returncode == 0, done.stdout + done.stderr
    decided = [
        json.loads(line)["msg"]
        for line in done.stderr.splitlines()
        if line.startswith("{") and "fetch max wait" in line
    ]
    assert any(
        "the brokers answer fetches as records arrive" in msg and msg.endswith("fetch max wait 1s")
        for msg in decided
    ), done.stderr[-3000:]
    outcomes = target_report(done.stdout)["stages"]["consumer"]["outcomes"]
    assert outcomes["lost"] == outcomes["late"] == outcomes["produce_failed"] == 0
