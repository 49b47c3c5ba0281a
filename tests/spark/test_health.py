"""The sink query's progress, read by SparkHealth: where a batch's time went."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from probe.spark.health import (
    HealthListener,
    SparkHealth,
    _ProgressAsJson,
    parse_spark_time,
    source_lag,
)


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


def _skew_after(
    health: SparkHealth, registry: CollectorRegistry, event_time: dict[str, str]
) -> float:
    health.on_progress(SimpleNamespace(**{**vars(_progress(rows=3)), "eventTime": event_time}))
    skew = registry.get_sample_value("synthetic_sla_watermark_skew_seconds", {"target": "kafka"})
    assert skew is not None
    return skew


@pytest.mark.parametrize(
    ("lateness", "skews"), [(60.0, [65.0, 65.0, 45.0]), (None, [90.0, 65.0, 45.0])]
)
def test_the_watermark_counts_from_the_batch_that_saw_the_newest_event_time(
    lateness: float | None, skews: list[float]
) -> None:
    """Spark moves its watermark at the end of a batch and reports it at the next, which
    with batches that follow records may be a heartbeat later: the skew is read from the
    newest event time seen, less the allowed lateness, when the health knows it."""
    now = parse_spark_time("2026-11-27T20:01:00.000Z")
    registry = CollectorRegistry()
    health = SparkHealth(registry, "kafka", 2.0, lambda: now, allowed_lateness_s=lateness)
    # Records produced up to 20:00:55; Spark still reports the watermark of before.
    records = {"watermark": "2026-11-27T19:59:30.000Z", "max": "2026-11-27T20:00:55.000Z"}
    # The next batch (a heartbeat: no event times) reports what the one before set.
    beat = {"watermark": "2026-11-27T19:59:55.000Z"}
    # A later report than the newest event time allows wins (a restarted query's).
    restarted = {"watermark": "2026-11-27T20:00:15.000Z", "max": "2026-11-27T20:00:50.000Z"}
    assert [_skew_after(health, registry, t) for t in (records, beat, restarted)] == skews


# A progress event's JSON as Spark 4 writes it (QueryProgressEvent.json) for the sink:
# the source's offsets are JSON objects in it, the judge's state operator beside.
_EVENT = {
    "progress": {
        "id": "0439df5a-ca7e-4d51-ad91-68c2c8581de6",
        "runId": "12e8bb99-24ba-4502-a16c-4be1a2dd81c8",
        "name": "synthetic_sla_sink",
        "timestamp": "2026-11-27T20:00:46.897Z",
        "batchId": 12,
        "batchDuration": 1355,
        "numInputRows": 3,
        "inputRowsPerSecond": 1.5,
        "processedRowsPerSecond": 2.2,
        "durationMs": {"addBatch": 1202, "latestOffset": 40, "triggerExecution": 1354},
        "eventTime": {"watermark": "2026-11-27T20:00:40.000Z"},
        "stateOperators": [
            {
                "operatorName": "transformWithStateInPySparkExec",
                "numRowsTotal": 3,
                "numRowsUpdated": 3,
                "allUpdatesTimeMs": 310,
                "numRowsRemoved": 0,
                "allRemovalsTimeMs": 0,
                "commitTimeMs": 40,
                "memoryUsedBytes": 9000,
                "numRowsDroppedByWatermark": 0,
                "numShufflePartitions": 2,
                "numStateStoreInstances": 2,
                "customMetrics": {},
            }
        ],
        "sources": [
            {
                "description": "sla_kafka",
                "startOffset": {"0": 4, "1": 7},
                "endOffset": {"0": 5, "1": 9},
                "latestOffset": {"0": 6, "1": 9},
                "numInputRows": 3,
                "inputRowsPerSecond": 1.5,
                "processedRowsPerSecond": 2.2,
            }
        ],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    }
}


def test_progress_events_are_read_from_their_json_in_one_call() -> None:
    class Listener(HealthListener):
        def onQueryProgress(self, event: Any) -> None:
            heard.append(event.progress)

    heard: list[Any] = []
    calls: list[str] = []

    class Event:
        def json(self) -> str:
            calls.append("json")
            return json.dumps(_EVENT)

    listener = Listener(SparkHealth(CollectorRegistry(), "kafka", trigger_s=2.0), "q")
    _ProgressAsJson(listener).onQueryProgress(Event())

    assert calls == ["json"]
    (progress,) = heard
    assert progress.batchId == 12
    assert progress.numInputRows == 3
    assert progress.durationMs["triggerExecution"] == 1354
    assert progress.stateOperators[0].allUpdatesTimeMs == 310
    assert source_lag(progress.sources[0].latestOffset, progress.sources[0].endOffset) == 1
