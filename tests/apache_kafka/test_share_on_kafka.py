"""The share stage on Apache Kafka's newest release: a member of a share group
(KIP-932) of the probe's own that accepts every canary, judged like every stage, held
against what Kafka says of the group; and a member of the same group that stops
acknowledging (frozen with records acquired), whose records come back to the probe's
member, delivered again, none lost."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from probe.apache_kafka.cluster import KafkaCluster
from probe.gameday.faults.share_member import StalledShareMember
from probe.transport.kafka_admin import group_coordinator
from tests.apache_kafka.kafka_admin import describe
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, target_report, wait_for

STAGE = "share"


def share_series(probe: RunningProbe, name: str, **labels: str) -> float:
    return sample(probe.metrics(), name, stage=STAGE, **labels)


def test_once_judges_the_share_stage_beside_the_consumer_stage(
    kafka_cluster: KafkaCluster, topic: str
) -> None:
    done = subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
         "--topic", topic, "--json", "--create-topic", "--stages", "consumer,share",
         "--group-id", f"{topic}-smoke"],
        check=False, capture_output=True, text=True, timeout=180,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    delivered = stages["consumer"]["outcomes"]["delivered"]
    assert delivered > 0
    assert stages[STAGE]["outcomes"] == stages["consumer"]["outcomes"]
    # librdkafka's share consumer says it is a preview: in the probe's log, once.
    assert done.stderr.count("Preview") == 1, done.stderr


def test_run_exports_what_the_share_member_lives_through_as_kafka_describes_it(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    servers = kafka_cluster.bootstrap_servers
    group = f"{topic}-g.share"
    probe = start_probe(
        *run_args(servers, topic, key_file), "--stages", f"consumer,{STAGE}",
        "--group-id", f"{topic}-g",
    )  # fmt: skip
    wait_for(lambda: probe.canaries("delivered", STAGE) >= 1, timeout=60,
             what="a canary at the share stage")  # fmt: skip
    partitions = len(describe(servers, topic))  # the probe created the topic by now
    wait_for(lambda: probe.canaries("delivered", STAGE) >= 3 * partitions, timeout=60,
             what="three rounds at the share stage")  # fmt: skip

    def agrees_with_kafka() -> bool:
        coordinators = {
            int(dict(labels)["broker"])
            for (name, labels), value in probe.metrics().items()
            if name == "synthetic_sla_group_coordinator"
            and dict(labels)["stage"] == STAGE
            and value == 1
        }
        return (
            coordinators == {group_coordinator(servers, group)}
            and share_series(probe, "synthetic_sla_group_stable") == 1
            and share_series(probe, "synthetic_sla_group_assigned_partitions") == partitions
        )

    wait_for(agrees_with_kafka, timeout=30, what="the share group as Kafka describes it")
    assert share_series(probe, "synthetic_sla_group_rebalances_total") >= 1
    # Every record handed out was accepted, and the broker said so: one acknowledgement
    # latency per canary read (and no more: none was handed out twice).
    read = probe.canaries("delivered", STAGE)
    acknowledged = share_series(probe, "synthetic_sla_group_commit_latency_seconds_count")
    assert acknowledged >= read - partitions  # the last round's may be on their way
    assert share_series(probe, "synthetic_sla_group_commit_failures_total") == 0
    # Alone in its group, the member is given each record once.
    deliveries = share_series(probe, "synthetic_sla_group_deliveries_count")
    assert deliveries >= read
    assert share_series(probe, "synthetic_sla_group_deliveries_bucket", le="1.0") == deliveries
    assert share_series(probe, "synthetic_sla_group_redelivered_total") == 0
    assert probe.canaries("lost", STAGE) == probe.canaries("late", STAGE) == 0


def test_a_member_that_stops_acknowledging_has_its_records_delivered_again_none_lost(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    servers = kafka_cluster.bootstrap_servers
    config = tmp_path / "probe.yaml"
    # Kafka's own timeouts are not compressed: the frozen member's records wait for
    # their locks (30 s) and its partitions for its session to end (45 s). The
    # judge waits longer than that before it calls a canary lost.
    judge = {"freshness": "5s", "loss_timeout": "120s"}
    config.write_text(yaml.safe_dump({"kafka": {"partitions": 3}, "judge": judge}))
    probe = start_probe(
        *run_args(servers, topic, key_file), "--config", str(config),
        "--stages", f"consumer,{STAGE}", "--group-id", f"{topic}-g",
    )  # fmt: skip
    wait_for(lambda: probe.canaries("delivered", STAGE) >= 6, timeout=60,
             what="canaries at the share stage")  # fmt: skip

    stall = StalledShareMember(servers, topic, f"{topic}-g.share")
    stall.start()
    try:
        assert stall.acquired > 0
        # Its records come back, each with a delivery count of 2 or more, to the
        # probe's member, which has the frozen member's partitions again.
        wait_for(
            lambda: (
                share_series(probe, "synthetic_sla_group_deliveries_count")
                > share_series(probe, "synthetic_sla_group_deliveries_bucket", le="1.0")
            ),
            timeout=120,
            what="records delivered again",
        )
        sent = probe.canaries("delivered")
        wait_for(lambda: probe.canaries("delivered", STAGE) >= sent, timeout=60,
                 what="the share stage caught up with the consumer stage")  # fmt: skip
    finally:
        stall.stop()
    assert probe.canaries("lost", STAGE) == probe.canaries("lost") == 0
    # What the frozen member held was late at the share stage, and only there.
    assert probe.canaries("late", STAGE) >= 1
    assert probe.canaries("late") == 0
