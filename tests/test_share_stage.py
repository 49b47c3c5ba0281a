"""The share stage where it cannot run (the embedded broker has no share groups), its
config, and the reader's pure parts; on Apache Kafka: tests/apache_kafka/test_share_on_kafka.py."""

from __future__ import annotations

import doctest
import subprocess

from confluent_kafka import KafkaError

from probe.config import GroupConfig, StageName, load
from probe.core.errors import CommitFailure
from probe.transport import TRANSPORTS, kafka_share
from tests.conftest import SLA_PROBE, target_report


def test_the_share_stage_on_a_broker_without_share_groups_says_what_it_needs() -> None:
    # The embedded broker answers no ShareGroupHeartbeat: the member is never assigned,
    # and the report says why that may be.
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--json", "--stages", "consumer,share",
         "--rounds", "1"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    stages = target_report(done.stdout)["stages"]
    assert stages["consumer"]["outcomes"]["delivered"] > 0
    assert stages["share"]["outcomes"]["delivered"] == 0
    assert "share groups, KIP-932, which need Apache Kafka 4.2 or newer" in done.stdout


def test_the_share_stage_is_a_group_stage_in_a_group_of_its_own() -> None:
    config = load(overrides={"stages": "consumer,share", "probe_id": "p1"})
    layout = TRANSPORTS[config.targets[0]].layout(config)
    assert layout.stages == (StageName.CONSUMER, StageName.SHARE)
    assert layout.routed(StageName.SHARE)  # it reads the canary topic itself
    group = GroupConfig(id="orders-probe")
    assert group.share_group_id("p1") == "orders-probe.share"
    assert group.share_group_id("p1") not in {
        group.group_id("p1"),
        group.consumer_protocol_group_id("p1"),
    }


def test_the_share_readers_pure_parts() -> None:
    assert doctest.testmod(kafka_share).failed == 0
    # Statistics without a group, or before the first rebalance, say nothing assigned.
    assert kafka_share.share_assignment({}) == (0, None)
    steady_empty = {"cgrp": {"join_state": "steady", "assignment_size": 0, "rebalance_cnt": 2}}
    assert kafka_share.share_assignment(steady_empty) == (0, 2)
    # A refusal without a code is an error; a coordinator that moved is one.
    assert kafka_share.acknowledgement_failure_reason(None) is CommitFailure.ERROR
    moved = KafkaError(KafkaError.NOT_COORDINATOR)
    assert kafka_share.acknowledgement_failure_reason(moved) is CommitFailure.COORDINATOR_MOVED
