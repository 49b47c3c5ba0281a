"""The transactional stage on Apache Kafka's newest release: canaries written in
transactions, some rounds aborted on purpose, read by a read_committed stage; held
against what an independent client (confluent-kafka) reads with either isolation
level; and a transaction left open, which holds the transactional stage alone."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml
from confluent_kafka import Consumer, TopicPartition

from probe.apache_kafka.cluster import KafkaCluster
from probe.core.canary import decode
from probe.gameday.faults.transaction import aborted_canaries, open_transaction
from probe.keyfile import read_key_file
from tests.apache_kafka.kafka_admin import describe, end_offsets
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, target_report, wait_for

STAGE = "transactional"


def read_all(servers: str, topic: str, isolation: str) -> list[bytes]:
    """Every record of the topic a consumer of this isolation level reads."""
    ends = end_offsets(servers, topic)
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"check-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    values: list[bytes] = []
    try:
        for _ in range(100):
            values += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            # read_committed: the end it can reach is the last stable offset, which
            # after the last transaction's markers is past the last record.
            if all(tp.offset >= ends[tp.partition] - 1 for tp in positions):
                break
    finally:
        consumer.close()
    return values


def test_once_judges_committed_canaries_and_no_aborted_one_is_read_committed(
    kafka_cluster: KafkaCluster, topic: str, key_file: Path, tmp_path: Path
) -> None:
    servers = kafka_cluster.bootstrap_servers
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"transactions": {"abort_every": 2}}))
    done = subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", servers, "--topic", topic, "--json",
         "--create-topic", "--stages", "consumer,transactional", "--rounds", "6",
         "--interval", "1s", "--signing-key-file", str(key_file), "--config", str(config)],
        check=False, capture_output=True, text=True, timeout=180,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    partitions = len(describe(servers, topic))
    # Six rounds, every second one aborted: three rounds of canaries to judge.
    assert stages["consumer"]["outcomes"]["delivered"] == 3 * partitions
    assert stages[STAGE]["outcomes"] == stages["consumer"]["outcomes"]
    assert stages[STAGE]["aborted_read"] == 0
    # What Kafka holds, read by another client: the aborted rounds' canaries are there
    # for a read_uncommitted consumer, and not for a read_committed one.
    ring = read_key_file(key_file)
    uncommitted = [decode(value, ring) for value in read_all(servers, topic, "read_uncommitted")]
    committed = [decode(value, ring) for value in read_all(servers, topic, "read_committed")]
    assert sum(c.aborted for c in uncommitted) == 3 * partitions
    assert len(committed) == 3 * partitions
    assert not any(c.aborted for c in committed)


def test_run_exports_its_transactions_and_the_last_stable_offsets(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    servers = kafka_cluster.bootstrap_servers
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"transactions": {"abort_every": 3}}))
    probe = start_probe(*run_args(servers, topic, key_file), "--config", str(config),
                        "--stages", f"consumer,{STAGE}")  # fmt: skip
    partitions = len(describe(servers, topic))

    def transactions(outcome: str) -> float:
        return sample(probe.metrics(), "synthetic_sla_transactions_total", outcome=outcome)

    wait_for(lambda: transactions("aborted") >= 2, timeout=60, what="two aborted rounds")
    samples = probe.metrics()
    assert transactions("committed") >= 4
    assert transactions("failed") == 0
    assert sample(samples, "synthetic_sla_aborted_canaries_total") >= 2 * partitions
    # No transaction of the probe's is open long: each partition's last stable offset
    # is at its high watermark whenever the stage's reader looks, once a round.
    unstable = {
        dict(labels)["partition"]: value
        for (name, labels), value in samples.items()
        if name == "synthetic_sla_partition_unstable_records"
    }
    assert unstable == {str(p): 0 for p in range(partitions)}
    assert sample(samples, "synthetic_sla_aborted_reads_total") == 0
    assert probe.canaries("lost", STAGE) == probe.canaries("late", STAGE) == 0
    assert probe.canaries("delivered", STAGE) > 0


def test_a_transaction_left_open_holds_the_transactional_stage_and_no_other(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    servers = kafka_cluster.bootstrap_servers
    config = tmp_path / "probe.yaml"
    judge = {"freshness": "1s", "loss_timeout": "60s"}
    config.write_text(yaml.safe_dump({"kafka": {"partitions": 3}, "judge": judge}))
    probe = start_probe(*run_args(servers, topic, key_file), "--config", str(config),
                        "--stages", f"consumer,{STAGE}")  # fmt: skip
    wait_for(lambda: probe.canaries("delivered", STAGE) >= 6, timeout=60,
             what="canaries at the transactional stage")  # fmt: skip
    held = open_transaction(servers, topic)
    held.open(aborted_canaries(key_file, "probe-under-test", 3))
    try:
        # The last stable offsets stay at the open transaction's records, and the
        # stage's reader says so, while canaries pile up behind them.
        def pinned() -> bool:
            gaps = [
                value
                for (name, _), value in probe.metrics().items()
                if name == "synthetic_sla_partition_unstable_records"
            ]
            return len(gaps) == 3 and min(gaps) >= 3

        wait_for(pinned, timeout=60, what="the last stable offsets pinned")

        def staleness(stage: str) -> float:
            return sample(probe.metrics(), "synthetic_sla_staleness_max_seconds", stage=stage)

        # The stage goes stale; the consumer stage reads on, fresh.
        wait_for(lambda: staleness(STAGE) > 5, timeout=30, what="the transactional stage stale")
        consumer_delivered = probe.canaries("delivered")
        wait_for(lambda: probe.canaries("delivered") >= consumer_delivered + 6, timeout=30,
                 what="the consumer stage reading on")  # fmt: skip
        assert staleness("consumer") < 5
    finally:
        held.abort()
    # What the open transaction held back comes through at once, late.
    wait_for(lambda: probe.canaries("late", STAGE) >= 3, timeout=30,
             what="the held canaries read, late")  # fmt: skip
    wait_for(
        lambda: all(
            value == 0
            for (name, _), value in probe.metrics().items()
            if name == "synthetic_sla_partition_unstable_records"
        ),
        timeout=30,
        what="the last stable offsets released",
    )
    # Held, then read, late, not lost; the consumer stage never noticed.
    assert probe.canaries("lost", STAGE) == 0
    assert probe.canaries("lost") == probe.canaries("late") == 0
    assert sample(probe.metrics(), "synthetic_sla_aborted_reads_total") == 0
