"""The sink query's own series: skew budget in seconds, time since the last batch,
restarts (pure: a fake clock, no Spark)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from probe.metrics import RESTART_REASONS, SinkQueryMetrics, good_seconds

S = 1_000_000_000


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now_ns = int(now_s * S)

    def __call__(self) -> int:
        return self.now_ns

    def at(self, now_s: float) -> None:
        self.now_ns = int(now_s * S)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, {"target": "kafka", **labels})
    assert value is not None, name
    return value


def _batch(metrics: SinkQueryMetrics, watermark_s: float | None) -> None:
    metrics.batch(
        duration_s=1.0,
        trigger_s=2.0,
        commit_s=0.1,
        dropped=0,
        watermark_ns=None if watermark_s is None else int(watermark_s * S),
        lag=0,
    )


@pytest.mark.parametrize(
    ("since", "until", "watermark", "good"),
    [
        (100.0, 110.0, 0.0, 5.0),  # crosses the threshold (105) mid-span
        (100.0, 110.0, 50.0, 10.0),  # under it all along
        (100.0, 110.0, -100.0, 0.0),  # over it all along
        (100.0, 110.0, -5.0, 0.0),  # reaches it exactly at the start
    ],
)
def test_good_seconds_are_the_part_of_a_span_under_the_threshold(
    since: float, until: float, watermark: float, good: float
) -> None:
    assert good_seconds(since, until, watermark, threshold_s=105.0) == good


def test_a_healthy_query_spends_every_second_in_budget() -> None:
    clock, registry = Clock(1000.0), CollectorRegistry()
    metrics = SinkQueryMetrics(registry, "kafka", clock, skew_threshold_s=120.0)
    for t in range(1002, 1600, 2):  # a batch every 2 s, watermark 70 s behind
        clock.at(t)
        _batch(metrics, watermark_s=t - 70)
    clock.at(1600.0)
    assert _value(registry, "synthetic_sla_watermark_skew_observed_seconds_total") == 600.0
    assert _value(registry, "synthetic_sla_watermark_skew_good_seconds_total") == 600.0


def test_a_stalled_query_burns_budget_without_any_batch() -> None:
    clock, registry = Clock(1000.0), CollectorRegistry()
    metrics = SinkQueryMetrics(registry, "kafka", clock, skew_threshold_s=120.0)
    clock.at(1010.0)
    _batch(metrics, watermark_s=940.0)  # skew 70 s
    # No batch for 10 minutes: the skew passes 120 s at 1060, scraped only at the end.
    clock.at(1610.0)
    assert _value(registry, "synthetic_sla_watermark_skew_observed_seconds_total") == 610.0
    assert _value(registry, "synthetic_sla_watermark_skew_good_seconds_total") == 60.0
    assert _value(registry, "synthetic_sla_spark_seconds_since_last_batch") == 600.0
    assert _value(registry, "synthetic_sla_watermark_skew_seconds") == 670.0


def test_scrapes_in_between_do_not_change_the_budget() -> None:
    def run(scrape_every: int) -> tuple[float, float]:
        clock, registry = Clock(0.0), CollectorRegistry()
        metrics = SinkQueryMetrics(registry, "kafka", clock, skew_threshold_s=30.0)
        for t in range(1, 301):
            clock.at(t)
            if t % 50 == 0:  # a batch every 50 s moves the watermark to 10 s ago
                _batch(metrics, watermark_s=t - 10)
            if t % scrape_every == 0:
                registry.get_sample_value("synthetic_sla_watermark_skew_good_seconds_total")
        return (
            _value(registry, "synthetic_sla_watermark_skew_good_seconds_total"),
            _value(registry, "synthetic_sla_watermark_skew_observed_seconds_total"),
        )

    assert run(1) == run(7) == run(1000)
    good, observed = run(1)
    # Before the first batch the skew counts from the start: good until 30 s; after
    # each batch 20 s good of 50.
    assert (good, observed) == (30.0 + 5 * 20.0, 300.0)


def test_restarts_by_reason_and_the_query_state() -> None:
    clock, registry = Clock(0.0), CollectorRegistry()
    metrics = SinkQueryMetrics(registry, "kafka", clock)
    for reason in RESTART_REASONS:
        assert _value(registry, "synthetic_sla_spark_query_restarts_total", reason=reason) == 0
    assert _value(registry, "synthetic_sla_spark_query_up") == 0
    assert _value(registry, "synthetic_sla_spark_query_failed") == 0
    metrics.up(True)
    metrics.restarted("checkpoint")
    metrics.restarted("checkpoint")
    assert _value(registry, "synthetic_sla_spark_query_restarts_total", reason="checkpoint") == 2
    assert _value(registry, "synthetic_sla_spark_query_up") == 1
    metrics.failed()
    assert _value(registry, "synthetic_sla_spark_query_up") == 0
    assert _value(registry, "synthetic_sla_spark_query_failed") == 1
