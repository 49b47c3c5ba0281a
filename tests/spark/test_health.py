"""The sink query's progress, read by SparkHealth: where a batch's time went."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from probe.spark.health import SparkHealth


def _progress(rows: int) -> SimpleNamespace:
    judge = SimpleNamespace(
        allUpdatesTimeMs=310, commitTimeMs=40, memoryUsedBytes=9_000, numRowsDroppedByWatermark=0
    )
    return SimpleNamespace(
        batchId=7,
        numInputRows=rows,
        durationMs={"addBatch": 1200, "latestOffset": 90, "triggerExecution": 1400},
        sources=[],
        stateOperators=[judge],
        eventTime={},
    )


def test_a_batch_with_records_says_at_debug_where_its_time_went(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = SparkHealth(CollectorRegistry(), "kafka", trigger_s=2.0)
    with caplog.at_level(logging.DEBUG, logger="probe.spark.health"):
        health.on_progress(_progress(rows=0))  # an empty trigger: nothing to say
        health.on_progress(_progress(rows=10_000))
    assert [r.getMessage() for r in caplog.records] == [
        "sink batch 7: 10000 records in 1400 ms (addBatch 1200, latestOffset 90, "
        "triggerExecution 1400; judge state: updates 310 ms, commit 40 ms, 9000 bytes)"
    ]
