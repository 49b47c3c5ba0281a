"""The mirror stage on real MirrorMaker 2 (connect-mirror from Maven Central's jars):
the shared three-broker cluster is the source, a one-broker cluster of the test's own
the target, and MirrorMaker 2 in dedicated mode replicates the canary topic between
them under its default policy (``source.<topic>``) or its identity policy."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from probe.apache_kafka.cluster import KafkaCluster
from probe.apache_kafka.mirror import MirrorMaker2
from tests.apache_kafka.kafka_admin import describe
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, target_report, wait_for

STAGE = "mirror"


@pytest.fixture
def target_cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    """The cluster MirrorMaker 2 replicates to: one broker, not started (each test
    starts it when its story says)."""
    cluster = KafkaCluster(1, workdir=tmp_path / "target")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def probe_yaml(tmp_path: Path) -> Path:
    return tmp_path / "probe.yaml"


def mirror_config(
    path: Path, target: KafkaCluster, judge: dict[str, str] | None = None, **mirror: object
) -> Path:
    mirrored = {"bootstrap_servers": target.bootstrap_servers, **mirror}
    path.write_text(yaml.safe_dump({"mirror": mirrored, "judge": judge or {}}))
    return path


def test_once_judges_every_canary_where_the_mirror_delivers_it(
    kafka_cluster: KafkaCluster,
    target_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    probe_yaml: Path,
) -> None:
    source = kafka_cluster.bootstrap_servers
    target_cluster.start()
    config = mirror_config(probe_yaml, target_cluster)
    with MirrorMaker2(source, target_cluster.bootstrap_servers,
                      workdir=probe_yaml.with_name("mm2"),
                      topics=topic):  # fmt: skip
        done = subprocess.run(
            [SLA_PROBE, "once", "--bootstrap-servers", source, "--topic", topic, "--json",
             "--create-topic", "--stages", f"consumer,{STAGE}", "--rounds", "3",
             "--interval", "1s", "--signing-key-file", str(key_file), "--config", str(config)],
            check=False, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    partitions = len(describe(source, topic))
    assert stages["consumer"]["outcomes"]["delivered"] == 3 * partitions
    # Every canary judged on the target cluster's source.<topic>, by its partition
    # there (MirrorMaker 2 keeps it), and in time.
    assert stages[STAGE]["outcomes"] == stages["consumer"]["outcomes"]
    assert len(describe(target_cluster.bootstrap_servers, f"source.{topic}")) == partitions


def test_the_mirror_stage_waits_for_its_cluster_and_alone_loses_what_a_stopped_mirror_does_not_copy(
    kafka_cluster: KafkaCluster,
    target_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    source = kafka_cluster.bootstrap_servers
    judge = {"freshness": "2s", "loss_timeout": "8s"}
    config = mirror_config(
        key_file.with_name("probe.yaml"), target_cluster, judge, replication_policy="identity"
    )
    # The target cluster is down when the probe starts: the source's stage judges
    # from the start all the same, the mirror stage's canaries are lost.
    probe = start_probe(*run_args(source, topic, key_file), "--config", str(config),
                        "--stages", f"consumer,{STAGE}")  # fmt: skip
    wait_for(lambda: probe.canaries("delivered") >= 9, timeout=60, what="the consumer stage")
    wait_for(lambda: probe.canaries("lost", STAGE) > 0, timeout=30,
             what="the mirror stage's canaries lost while its cluster is down")  # fmt: skip
    assert probe.canaries("delivered", STAGE) == 0

    target_cluster.start()
    mirror = MirrorMaker2(source, target_cluster.bootstrap_servers,
                          workdir=key_file.with_name("mm2"),
                          topics=topic, policy="identity")  # fmt: skip

    def heartbeat() -> float:
        return sample(probe.metrics(), "synthetic_sla_mirror_heartbeat_timestamp_seconds")

    with mirror:
        delivered = wait_for(lambda: probe.canaries("delivered", STAGE) >= 9, timeout=90,
                             what="canaries through the mirror")  # fmt: skip
        assert delivered
        # MirrorMaker 2's heartbeats on the target cluster are followed as they come.
        wait_for(lambda: heartbeat() > time.time() - 10, timeout=30,
                 what="a recent heartbeat of MirrorMaker 2's")  # fmt: skip
        # The mirror stopped: the mirror stage alone loses its canaries.
        mirror.stop()
        stopped_at = time.time()
        before = probe.canaries("lost", STAGE)
        consumer_lost = probe.canaries("lost")
        wait_for(lambda: probe.canaries("lost", STAGE) >= before + 3, timeout=60,
                 what="canaries lost at the mirror stage")  # fmt: skip
        assert probe.canaries("lost") == consumer_lost == 0
        # And its heartbeats stopped with it: none stamped after the stop.
        assert 0 < heartbeat() <= stopped_at
        # Started again, it copies on from its committed offsets.
        mirror.start()
        resumed = probe.canaries("delivered", STAGE) + probe.canaries("late", STAGE)
        wait_for(
            lambda: probe.canaries("delivered", STAGE) >= resumed + 6,
            timeout=90,
            what="canaries through the mirror once it is back",
        )
    assert probe.canaries("lost") == 0
    assert sample(probe.metrics(), "synthetic_sla_canaries_total", stage=STAGE) > 0


def checkpoint_lag_on_the_cluster(target: str, topic: str, group: str) -> dict[int, int]:
    """What the target cluster holds, read by an independent client (confluent-kafka):
    per partition of the mirrored topic, its end less the translated offset of the
    group's newest checkpoint there."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    from probe.core.mirror_records import checkpoints_topic, read_checkpoint  # noqa: PLC0415

    reader = Consumer({"bootstrap.servers": target, "group.id": "test-reader",
                       "enable.auto.commit": False})  # fmt: skip
    try:
        internal = checkpoints_topic("source")
        partitions = reader.list_topics(internal, timeout=10).topics[internal].partitions
        reader.assign([TopicPartition(internal, p, 0) for p in partitions])
        ends = {p: reader.get_watermark_offsets(TopicPartition(internal, p))[1] for p in partitions}
        translated: dict[int, int] = {}
        read = dict.fromkeys(partitions, 0)
        while any(read[p] < ends[p] for p in partitions):
            for message in reader.consume(100, timeout=5):
                if message.error() is None:
                    read[message.partition()] = message.offset() + 1
                    found = read_checkpoint(message.key(), message.value())
                    if found is not None and found.group == group and found.topic == topic:
                        translated[found.partition] = found.downstream_offset
        return {
            p: reader.get_watermark_offsets(TopicPartition(topic, p))[1] - offset
            for p, offset in translated.items()
        }
    finally:
        reader.close()


def test_checkpoint_lag_is_the_mirrored_topics_end_less_the_groups_translated_offset(
    kafka_cluster: KafkaCluster,
    target_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    source = kafka_cluster.bootstrap_servers
    target_cluster.start()
    config = mirror_config(key_file.with_name("probe.yaml"), target_cluster)
    mirrored = f"source.{topic}"
    group = "synthetic-sla-probe.probe-under-test"  # the group stage's, of its probe id

    def lag() -> dict[str, float]:
        return {
            dict(labels)["partition"]: value
            for (name, labels), value in probe.metrics().items()
            if name == "synthetic_sla_mirror_checkpoint_lag_records"
        }

    with MirrorMaker2(source, target_cluster.bootstrap_servers, topics=topic,
                      workdir=key_file.with_name("mm2")):  # fmt: skip
        probe = start_probe(*run_args(source, topic, key_file), "--config", str(config),
                            "--stages", f"consumer,group,{STAGE}")  # fmt: skip
        partitions = len(describe(source, topic))
        # MirrorMaker 2 checkpoints the probe's group once it has committed offsets of
        # a replicated topic: the group stage commits every round.
        wait_for(lambda: len(lag()) == partitions, timeout=90,
                 what="a checkpoint lag for every partition")  # fmt: skip
    # The mirror stopped, something else writes to its topic on the target (as a
    # producer pointed at the wrong cluster would): the topic's end moves past the
    # group's last translated offset, which no checkpoint follows.
    from confluent_kafka import Producer  # noqa: PLC0415

    writer = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    for partition in range(partitions):
        for _ in range(4):
            writer.produce(mirrored, b"not a canary", partition=partition)
    assert writer.flush(30) == 0
    # The mirror stopped, the topic's end and the checkpoints stand still: once the
    # probe has read to the end, its lag is what the cluster holds, exactly.
    expected = checkpoint_lag_on_the_cluster(target_cluster.bootstrap_servers, mirrored, group)
    assert sorted(expected) == list(range(partitions))
    assert all(records > 0 for records in expected.values()), expected
    wait_for(lambda: lag() == {str(p): float(n) for p, n in expected.items()}, timeout=30,
             what=f"the probe's checkpoint lag at {expected}")  # fmt: skip
