"""The `once` report: strict verdict, percentiles, both renderings."""

from __future__ import annotations

import json

import pytest

from probe.errors import RejectReason
from probe.judge import Anomaly, AnomalyKind, Fate, Outcome, StreamKey
from probe.report import Tally, percentile

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
