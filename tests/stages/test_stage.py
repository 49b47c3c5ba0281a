"""The stage's intake: partitions tracked, records classified."""

from __future__ import annotations

import logging

import pytest

from probe.core.canary import Canary, classify, encode
from probe.core.errors import CanaryRejected, RejectReason
from probe.core.judge import Judge, JudgePolicy, OwnProbe, StreamKey
from probe.core.keys import generate_key_ring
from probe.services.report import Tally
from probe.stages.stage import Stage
from probe.transport import Arrival

OWN = OwnProbe("probe-a", incarnation=7)
RING = generate_key_ring("k1")


def _stage() -> Stage:
    judge = Judge(JudgePolicy(freshness_ns=5, loss_timeout_ns=10), own=OWN)
    return Stage("consumer", "kafka", judge, RING, own=OWN, recorders=[])


def test_watch_follows_the_partition_list() -> None:
    stage = _stage()
    stage.watch([0, 1, 2], now_ns=0)
    stage.watch([0, 1], now_ns=5)
    assert [key.partition for key in stage.judge.streams()] == [0, 1]
    # Staleness of a kept partition still counts from its first watch.
    assert stage.judge.staleness_ns(10)[StreamKey("probe-a", "kafka", 0)] == 10


def test_foreign_only_when_another_probe_claims_an_unknown_key() -> None:
    canary = Canary("probe-b", 1, "kafka", 0, 0, produced_ns=1)
    theirs = encode(canary, generate_key_ring("other"))
    assert classify(theirs, RING, OWN.probe_id, max_size=4096) is None
    ours_forged = encode(
        Canary("probe-a", 7, "kafka", 0, 0, produced_ns=1), generate_key_ring("other")
    )
    rejected = classify(ours_forged, RING, OWN.probe_id, max_size=4096)
    assert isinstance(rejected, CanaryRejected)
    assert rejected.reason is RejectReason.UNKNOWN_KEY
    assert rejected.claimed_probe_id == "probe-a"


def _arrival(canary: Canary, partition: int, at_ns: int = 3) -> Arrival:
    return Arrival(partition, encode(canary, RING), at_ns)


def test_a_forged_partition_is_misrouted_not_delivered() -> None:
    tally = Tally("kafka")
    stage = Stage("consumer", "kafka", _stage().judge, RING, own=OWN, recorders=[tally])
    stage.watch([0, 1, 2], now_ns=0)
    outside = Canary("probe-a", 7, "kafka", 999, 0, produced_ns=1)
    stage.on_arrival(_arrival(outside, 0))
    stage.on_arrival(_arrival(outside, 999))
    elsewhere = Canary("probe-a", 7, "kafka", 1, 0, produced_ns=1)
    stage.on_arrival(_arrival(elsewhere, 2))
    counted = tally.stages["consumer"]
    assert counted.anomalies["misrouted"] == 3
    assert sum(counted.outcomes.values()) == 0
    assert StreamKey("probe-a", "kafka", 999) not in stage.judge.streams()
    stage.on_arrival(_arrival(elsewhere, 1))
    assert counted.outcomes["delivered"] == 1


def test_a_bridge_stage_accepts_any_kafka_partition_for_a_watched_shard() -> None:
    tally = Tally("mqtt")
    judge = Judge(JudgePolicy(freshness_ns=5, loss_timeout_ns=10), own=OWN)
    stage = Stage("bridge", "mqtt", judge, RING, own=OWN, recorders=[tally], routed=False)
    stage.watch([0, 1], now_ns=0)
    stage.on_arrival(_arrival(Canary("probe-a", 7, "mqtt", 1, 0, produced_ns=1), 5))
    stage.on_arrival(_arrival(Canary("probe-a", 7, "mqtt", 7, 0, produced_ns=1), 5))
    assert tally.stages["bridge"].outcomes["delivered"] == 1
    assert tally.stages["bridge"].anomalies["misrouted"] == 1


def test_a_flood_of_invalid_records_is_logged_as_one_summary_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tally = Tally("kafka")
    judge = Judge(JudgePolicy(freshness_ns=5, loss_timeout_ns=10), own=OWN)
    stage = Stage(
        "consumer", "kafka", judge, RING, own=OWN, recorders=[tally], reject_log_period=10.0
    )
    second = 1_000_000_000
    with caplog.at_level(logging.WARNING, logger="probe.stages.stage"):
        for n in range(2_000):
            stage.on_arrival(Arrival(n % 3, b"\x00garbage" if n % 2 else b"", n * 1_000_000))
        stage.expire(3 * second)  # inside the period: nothing more yet
        stage.expire(11 * second)
        stage.expire(30 * second)  # a quiet period: nothing to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("invalid record on kafka stage consumer partition 0: malformed")
    assert "1999 more invalid records on kafka stage consumer" in lines[1]
    assert "malformed: 1999" in lines[1]
    assert sum(tally.stages["consumer"].invalid.values()) == 2_000
    # After the quiet period the next one is logged at once again.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="probe.stages.stage"):
        stage.on_arrival(Arrival(0, b"", 31 * second))
    assert len(caplog.records) == 1
