"""The `once` report: strict verdict, percentiles, both renderings."""

from __future__ import annotations

import json

import pytest

from probe.core.errors import RejectReason
from probe.core.judge import Anomaly, AnomalyKind, Fate, Outcome, StreamKey
from probe.services.report import Report, Tally, percentile
from tests.conftest import once_report

KEY = StreamKey("p", "kafka", 0)


def _delivered(seq: int, ms: float) -> Fate:
    return Fate(KEY, seq, Outcome.DELIVERED, int(ms * 1e6))


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 50, None), ([5.0], 99, 5.0), ([1, 2, 3, 4], 50, 2), ([*range(1, 101)], 99, 99)],
)
def test_percentile_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_all_delivered_is_ok() -> None:
    tally = Tally("kafka")
    tally.count("kafka", "consumer", [_delivered(0, 3.0), _delivered(1, 5.0)])
    assert tally.ok
    report = json.loads(tally.to_json())
    assert report["stages"]["consumer"]["latency_ms"] == {"p50": 3.0, "p99": 5.0}
    assert "PASS" in tally.to_table()


@pytest.mark.parametrize(
    "spoiler",
    [
        Fate(KEY, 9, Outcome.LATE, 9_000_000_000),
        Fate(KEY, 9, Outcome.LOST, None),
        Fate(KEY, 9, Outcome.PRODUCE_FAILED, None),
        Anomaly(KEY, 0, AnomalyKind.DUPLICATE),
        Anomaly(KEY, 0, AnomalyKind.OUT_OF_ORDER),
        Anomaly(KEY, 0, AnomalyKind.RESURRECTED),
        Anomaly(KEY, 0, AnomalyKind.FUTURE_DATED, 30_000_000_000),
    ],
)
def test_anything_but_delivered_fails(spoiler: Fate | Anomaly) -> None:
    tally = Tally("kafka")
    tally.count("kafka", "consumer", [_delivered(0, 3.0), spoiler])
    assert not tally.ok
    assert "FAIL" in tally.to_table()


def test_a_stage_failed_by_an_anomaly_without_a_column_says_which() -> None:
    tally = Tally("kafka")
    ahead = Anomaly(KEY, 0, AnomalyKind.FUTURE_DATED, 30_000_000_000)
    tally.count("kafka", "sink", [_delivered(0, 0.0), ahead, ahead])
    table = tally.to_table()
    assert "sink: 2 future_dated (produced after they arrived: the producer's clock is ahead)" in (
        table
    )
    assert json.loads(tally.to_json())["stages"]["sink"]["future_dated"] == 2


def test_invalid_records_fail_but_foreign_do_not() -> None:
    tally = Tally("kafka")
    tally.count("kafka", "consumer", [_delivered(0, 1.0), Anomaly(KEY, 0, AnomalyKind.FOREIGN)])
    assert tally.ok
    tally.count_invalid("kafka", "consumer", RejectReason.MALFORMED)
    assert not tally.ok
    assert json.loads(tally.to_json())["stages"]["consumer"]["invalid_by_reason"]["malformed"] == 1


def test_nothing_delivered_is_not_ok() -> None:
    tally = Tally("kafka")
    tally.declare_stage("consumer")
    assert not tally.ok


def test_failing_partitions_are_named_with_their_leader_brokers() -> None:
    tally = Tally("kafka")
    on = {p: StreamKey("p", "kafka", p) for p in range(3)}
    tally.count(
        "kafka",
        "consumer",
        [
            Fate(on[0], 0, Outcome.DELIVERED, 1_000_000, broker=1),
            Fate(on[1], 0, Outcome.LOST, None, broker=2),
            Fate(on[1], 1, Outcome.LOST, None, broker=2),
            Fate(on[2], 0, Outcome.LATE, 9_000_000_000, broker=3),
            Anomaly(on[2], 0, AnomalyKind.DUPLICATE),
            Anomaly(on[0], 0, AnomalyKind.FOREIGN),  # not this probe's: fails nothing
        ],
    )
    stage = json.loads(tally.to_json())["stages"]["consumer"]
    assert stage["failing_partition_count"] == 2
    assert stage["failing_partitions"] == [
        {"partition": 1, "broker": 2, "findings": {"lost": 2}},
        {"partition": 2, "broker": 3, "findings": {"late": 1, "duplicate": 1}},
    ]
    assert (
        "consumer: failing partitions 1 (broker 2): 2 lost; 2 (broker 3): 1 late, 1 duplicate"
        in tally.to_table()
    )


def test_failing_partitions_stay_a_few_on_a_large_topic() -> None:
    """A broker down under 10,000 partitions: the worst few named, the rest counted."""
    tally = Tally("kafka")
    lost = [Fate(StreamKey("p", "kafka", p), 0, Outcome.LOST, None) for p in range(10_000)]
    tally.count("kafka", "consumer", lost)
    stage = json.loads(tally.to_json())["stages"]["consumer"]
    assert stage["failing_partition_count"] == 10_000
    assert len(stage["failing_partitions"]) == 20
    assert stage["failing_partitions"][0] == {
        "partition": 0,
        "broker": None,
        "findings": {"lost": 1},
    }
    line = next(line for line in tally.to_table().splitlines() if "failing" in line)
    assert (
        line == "consumer: failing partitions 0: 1 lost; 1: 1 lost; 2: 1 lost; 3: 1 lost; "
        "4: 1 lost; and 9995 more"
    )


def test_a_passing_stage_names_no_partition() -> None:
    tally = Tally("kafka")
    tally.count("kafka", "consumer", [_delivered(0, 1.0)])
    stage = json.loads(tally.to_json())["stages"]["consumer"]
    assert stage["failing_partitions"] == []
    assert stage["failing_partition_count"] == 0
    assert "failing" not in tally.to_table()


def test_the_json_is_versioned_and_the_same_shape_for_one_target_or_many() -> None:
    kafka, mqtt = Tally("kafka"), Tally("mqtt", error="cannot connect to mqtt:8883: refused")
    kafka.count("kafka", "consumer", [_delivered(0, 3.0)])
    one = once_report(Report([kafka]).to_json())
    many = once_report(Report([kafka, mqtt]).to_json())
    assert one == {"version": 1, "ok": True, "targets": [json.loads(kafka.to_json())]}
    assert many["version"] == 1
    assert many["ok"] is False
    assert [t["target"] for t in many["targets"]] == ["kafka", "mqtt"]
    assert many["targets"][0] == one["targets"][0]
