"""The group stage on Apache Kafka: a consumer-group member that finds its
coordinator, joins, commits what it read and follows the group to a new coordinator,
held against what Kafka's own admin API (confluent-kafka) says of the group."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from probe.apache_kafka.cluster import KafkaCluster
from tests.apache_kafka.kafka_admin import (
    committed_offsets,
    describe,
    describe_group,
    end_offsets,
    under_replicated,
)
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, target_report, wait_for

# run_args' probe id: the group stage's group is synthetic-sla-probe.<probe id>.
GROUP = "synthetic-sla-probe.probe-under-test"


def coordinator_series(probe: RunningProbe, stage: str = "group") -> set[int]:
    """The brokers the probe names as the coordinator of a group stage's group."""
    return {
        int(dict(labels)["broker"])
        for (name, labels), value in probe.metrics().items()
        if name == "synthetic_sla_group_coordinator"
        and dict(labels)["stage"] == stage
        and value == 1
    }


def test_once_judges_the_group_stages_and_commits_every_offset_they_read(
    any_kafka_cluster: KafkaCluster, topic: str
) -> None:
    servers = any_kafka_cluster.bootstrap_servers
    done = subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", servers, "--topic", topic, "--json",
         "--create-topic", "--stages", "consumer,group,group_consumer",
         "--group-id", f"{topic}-smoke"],
        check=False, capture_output=True, text=True, timeout=180,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    delivered = stages["consumer"]["outcomes"]["delivered"]
    assert delivered > 0
    ends = end_offsets(servers, topic)
    # Each on its own protocol: the classic one, and the consumer protocol (KIP-848).
    groups = {"group": (f"{topic}-smoke", "CLASSIC"),
              "group_consumer": (f"{topic}-smoke.consumer-protocol", "CONSUMER")}  # fmt: skip
    for stage, (group, protocol) in groups.items():
        outcomes = stages[stage]["outcomes"]
        assert outcomes["delivered"] == delivered, json.dumps(stages)
        assert outcomes["lost"] == outcomes["late"] == 0
        # Read to the end, and committed to the end: the group's next member starts there.
        assert committed_offsets(servers, group, topic) == ends, stage
        assert describe_group(servers, group).protocol == protocol


# Each group stage's group, and the protocol Kafka says it is on.
MEMBERS = {
    "group": (GROUP, "CLASSIC"),
    "group_consumer": (f"{GROUP}.consumer-protocol", "CONSUMER"),
}


@pytest.mark.parametrize("stage", sorted(MEMBERS))
def test_run_exports_what_the_member_lives_through_as_kafka_describes_it(
    kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    stage: str,
) -> None:
    group, protocol = MEMBERS[stage]
    servers = kafka_cluster.bootstrap_servers
    probe = start_probe(*run_args(servers, topic, key_file), "--stages", f"consumer,{stage}")
    wait_for(lambda: probe.canaries("delivered", stage) >= 3, timeout=60,
             what=f"canaries delivered at the {stage} stage")  # fmt: skip
    partitions = len(describe(servers, topic))
    delivered = probe.canaries("delivered", stage)
    wait_for(lambda: probe.canaries("delivered", stage) >= delivered + 2 * partitions,
             timeout=60, what=f"two more rounds at the {stage} stage")  # fmt: skip

    def agrees_with_kafka() -> bool:
        described = describe_group(servers, group)
        samples = probe.metrics()
        return (
            described.state == "STABLE"
            and described.members == 1
            and described.protocol == protocol
            and coordinator_series(probe, stage) == {described.coordinator}
            and sample(samples, "synthetic_sla_group_stable", stage=stage) == 1
            and sample(samples, "synthetic_sla_group_assigned_partitions", stage=stage)
            == partitions
        )

    wait_for(agrees_with_kafka, timeout=30, what="the group as Kafka describes it")
    samples = probe.metrics()
    assert sample(samples, "synthetic_sla_group_rebalances_total", stage=stage) >= 1
    assert sample(samples, "synthetic_sla_group_rebalance_seconds_count", stage=stage) >= 1
    assert sample(samples, "synthetic_sla_group_commit_latency_seconds_count", stage=stage) >= 1
    assert sample(samples, "synthetic_sla_group_commit_failures_total", stage=stage) == 0
    assert 0 < sample(samples, "synthetic_sla_group_first_record_seconds", stage=stage) < 10
    assert probe.canaries("lost", stage) == probe.canaries("late", stage) == 0
    # Commits follow the reads: within a few rounds every committed offset is one the
    # topic has reached (nothing committed beyond what was written).
    committed = committed_offsets(servers, group, topic)
    ends = end_offsets(servers, topic)
    assert set(committed) == set(ends)
    assert all(0 < committed[p] <= ends[p] for p in ends), (committed, ends)


def test_the_member_follows_its_group_to_a_new_coordinator_losing_nothing(
    own_kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    cluster, servers = own_kafka_cluster, own_kafka_cluster.bootstrap_servers
    probe = start_probe(*run_args(servers, topic, key_file), "--stages", "consumer,group")
    wait_for(lambda: probe.canaries("delivered", "group") >= 9, timeout=60,
             what="rounds delivered at the group stage")  # fmt: skip
    wait_for(lambda: coordinator_series(probe), timeout=30, what="a coordinator series")
    (before,) = coordinator_series(probe)
    assert describe_group(servers, GROUP).coordinator == before

    commits = sample(probe.metrics(), "synthetic_sla_group_commit_latency_seconds_count")
    stopped_at = time.monotonic()
    cluster.node(before).stop()  # a controlled shutdown: the group moves, nothing is lost

    def moved() -> bool:
        samples = probe.metrics()
        now = coordinator_series(probe)
        return (
            bool(now)
            and before not in now
            and now == {describe_group(servers, GROUP).coordinator}
            and sample(samples, "synthetic_sla_group_commit_latency_seconds_count") > commits
        )

    wait_for(moved, timeout=90, what="the group's new coordinator, committing again")
    recovered_s = time.monotonic() - stopped_at
    delivered = probe.canaries("delivered", "group")
    wait_for(lambda: probe.canaries("delivered", "group") >= delivered + 9, timeout=60,
             what="rounds delivered at the group stage after the move")  # fmt: skip
    # The offsets topic lost a replica too: the group commits on with two in sync.
    offsets = describe(servers, "__consumer_offsets")
    assert under_replicated(offsets) == len(offsets)
    commits = sample(probe.metrics(), "synthetic_sla_group_commit_latency_seconds_count")
    wait_for(
        lambda: (
            sample(probe.metrics(), "synthetic_sla_group_commit_latency_seconds_count")
            > commits + 3
        ),
        timeout=30,
        what="commits with __consumer_offsets under-replicated",
    )
    print(f"coordinator {before} stopped: committing through the new one after {recovered_s:.1f}s")
    assert probe.canaries("lost", "group") == 0
    assert sample(probe.metrics(), "synthetic_sla_group_stable") == 1


def test_two_probes_keep_a_group_each_and_ride_out_a_rebalance_losing_nothing(
    kafka_cluster: KafkaCluster,
    topic: str,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    """Two probes on one topic, each in a group of its own (the default): a member that
    joins one probe's group and leaves without committing makes that group rebalance
    twice; the probe reads on from its committed offsets, nothing lost, nothing judged
    twice, and the other probe's group never notices."""
    servers = kafka_cluster.bootstrap_servers

    def probe_args(probe_id: str) -> list[str]:
        args = run_args(servers, topic, None)
        at = args.index("--probe-id")
        args[at + 1] = probe_id
        return [*args, "--allow-ephemeral-key", "--stages", "consumer,group"]

    first, second = start_probe(*probe_args("probe-a")), start_probe(*probe_args("probe-b"))
    for probe in (first, second):
        wait_for(lambda p=probe: p.canaries("delivered", "group") >= 9, timeout=60,
                 what="rounds delivered at each probe's group stage")  # fmt: skip
    assert describe_group(servers, "synthetic-sla-probe.probe-a").members == 1
    assert describe_group(servers, "synthetic-sla-probe.probe-b").members == 1

    def rebalances(probe: RunningProbe) -> float:
        return sample(probe.metrics(), "synthetic_sla_group_rebalances_total")

    before_first, before_second = rebalances(first), rebalances(second)
    intruder = Consumer({
        "bootstrap.servers": servers, "group.id": "synthetic-sla-probe.probe-a",
        "enable.auto.commit": False, "session.timeout.ms": 6000,
    })  # fmt: skip
    intruder.subscribe([topic])
    deadline = time.monotonic() + 60
    while not intruder.assignment() and time.monotonic() < deadline:
        intruder.poll(0.2)  # joins the group: the probe's member gives up partitions
    assert intruder.assignment(), "the intruder joined probe-a's group"
    intruder.close()  # leaves without a commit: the partitions go back to the probe

    wait_for(lambda: rebalances(first) >= before_first + 2, timeout=60,
             what="probe-a's member rebalanced as the intruder came and went")  # fmt: skip
    wait_for(lambda: sample(first.metrics(), "synthetic_sla_group_stable") == 1, timeout=60,
             what="probe-a's group stable again")  # fmt: skip
    delivered = first.canaries("delivered", "group")
    wait_for(lambda: first.canaries("delivered", "group") >= delivered + 9, timeout=60,
             what="probe-a's group stage delivering again")  # fmt: skip
    for probe in (first, second):
        assert probe.canaries("lost", "group") == 0
        assert sample(probe.metrics(), "synthetic_sla_duplicates_total", stage="group") == 0
    assert rebalances(second) == before_second  # the other probe's group never noticed
