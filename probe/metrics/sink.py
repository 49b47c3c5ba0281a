"""The Spark sink query's own series: its micro-batches, restarts, watermark skew (and
the skew SLO's seconds) and source lag. probe.spark.health feeds them from Spark's
progress events; they are declared here, with no Spark import, so that importing the
metrics never imports pyspark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from probe.status_page import SinkBatchProgress

_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


# Why a sink query had to be restarted (probe.spark.health.failure_reason).
RESTART_REASONS = ("checkpoint", "source", "batch", "stopped", "start", "jvm")


def good_seconds(since_s: float, until_s: float, watermark_s: float, threshold_s: float) -> float:
    """Seconds of [since, until] during which the skew (now - watermark) was below the
    threshold, the watermark fixed over the span (it moves only at a batch).

    The skew rises one second per second, so the good part is the start of the span
    up to ``watermark + threshold``.

    >>> good_seconds(100.0, 110.0, watermark_s=0.0, threshold_s=105.0)
    5.0
    """
    return max(0.0, min(until_s, watermark_s + threshold_s) - since_s)


class SinkQueryMetrics(Collector):
    """The Spark sink query's own series (see probe.spark.health for what each means).

    Fed once per micro-batch from Spark's progress events, on Spark's listener thread,
    and by the restart supervisor. Watermark skew, the skew budget, source lag and the
    time since the last batch are computed at scrape time from the last values seen,
    so they keep moving while the query is stalled or down and no event arrives.

    The skew SLO counts seconds, not batches: good seconds (skew below
    ``skew_threshold_s``) and observed seconds advance exactly at every scrape and
    batch, so a stream that stalls burns its budget with no record arriving.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        target: str,
        clock_ns: Callable[[], int] = time.time_ns,
        skew_threshold_s: float = 120.0,
    ) -> None:
        self.target = target
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._started_ns = clock_ns()
        self._watermark_ns: int | None = None
        self._lag: int | None = None
        self._last_batch_ns: int | None = None
        self._skew_threshold_s = skew_threshold_s
        self._evaluated_ns = self._started_ns
        self._good_s = 0.0
        self._observed_s = 0.0
        # For the status page (progress()): batches seen, restarts, given up.
        self._batches = 0
        self._restarts = 0
        self._running = False
        self._given_up = False
        self.batch_duration = Histogram(
            "synthetic_sla_spark_batch_duration_seconds",
            "Wall time of each micro-batch of the sink query.",
            ["target"],
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )
        self.commit_duration = Histogram(
            "synthetic_sla_spark_commit_duration_seconds",
            "Time to write the offset WAL and the commit log of each micro-batch.",
            ["target"],
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )
        self.overruns = Counter(
            "synthetic_sla_spark_trigger_overruns",
            "Micro-batches that took longer than the trigger interval.",
            ["target"],
            registry=registry,
        )
        self.dropped = Counter(
            "synthetic_sla_spark_rows_dropped_by_watermark",
            "Rows older than the watermark, dropped before the judge.",
            ["target"],
            registry=registry,
        )
        self.query_up = Gauge(
            "synthetic_sla_spark_query_up",
            "1 while the sink query runs; 0 while it is starting, down, restarting or given up.",
            ["target"],
            registry=registry,
        )
        self.restarts = Counter(
            "synthetic_sla_spark_query_restarts",
            "Restarts of the sink query by why it ended: checkpoint (its offset or commit "
            "log, or its state), source (reading Kafka), batch (the batch itself, e.g. "
            "writing tables), stopped (ended without an error), start (a start failed or made "
            "no first batch in time), jvm (Spark's JVM went away).",
            ["target", "reason"],
            registry=registry,
        )
        self.given_up = Gauge(
            "synthetic_sla_spark_query_failed",
            "1 once the sink query failed too often to restart (the restart strategy's "
            "failure-rate cap): the stage is given up until the probe restarts.",
            ["target"],
            registry=registry,
        )
        for metric in (
            self.batch_duration,
            self.commit_duration,
            self.overruns,
            self.dropped,
            self.query_up,
            self.given_up,
        ):
            metric.labels(target)
        for reason in RESTART_REASONS:
            self.restarts.labels(target, reason)
        registry.register(self)

    def batch(
        self,
        *,
        duration_s: float | None,
        trigger_s: float,
        commit_s: float,
        dropped: int,
        watermark_ns: int | None,
        lag: int | None,
    ) -> None:
        """One micro-batch's figures; None for what it did not report."""
        if duration_s is not None:
            self.batch_duration.labels(self.target).observe(duration_s)
            if duration_s > trigger_s:
                self.overruns.labels(self.target).inc()
        self.commit_duration.labels(self.target).observe(commit_s)
        if dropped:
            self.dropped.labels(self.target).inc(dropped)
        now_ns = self._clock_ns()
        with self._lock:
            # The span up to now was under the old watermark.
            self._advance(now_ns)
            self._last_batch_ns = now_ns
            self._batches += 1
            if watermark_ns:
                self._watermark_ns = watermark_ns
            if lag is not None:
                self._lag = lag

    def source_lag(self, records: int) -> None:
        """The records of the topic the sink has not judged yet, measured now
        (probe.spark.lag), whether or not a batch ran."""
        with self._lock:
            self._lag = records

    def up(self, running: bool) -> None:
        self._running = running
        self.query_up.labels(self.target).set(1 if running else 0)

    def restarted(self, reason: str) -> None:
        self._restarts += 1
        self.restarts.labels(self.target, reason).inc()

    def failed(self) -> None:
        self._given_up = True
        self.given_up.labels(self.target).set(1)
        self.up(False)

    def progress(self) -> SinkBatchProgress:
        """The query's progress for the status page, from the same figures as the series."""
        now_ns = self._clock_ns()
        with self._lock:
            watermark, lag, last_batch = self._watermark_ns, self._lag, self._last_batch_ns
            batches = self._batches
        return SinkBatchProgress(
            running=self._running,
            batches=batches,
            last_batch_age_s=None if last_batch is None else max(0, now_ns - last_batch) / 1e9,
            watermark_skew_s=max(0, now_ns - (watermark or self._started_ns)) / 1e9,
            lag_records=lag,
            restarts=self._restarts,
            given_up=self._given_up,
        )

    def _advance(self, now_ns: int) -> None:
        """Move the skew budget to now (the lock held)."""
        if now_ns <= self._evaluated_ns:
            return
        watermark_s = (self._watermark_ns or self._started_ns) / 1e9
        since_s, until_s = self._evaluated_ns / 1e9, now_ns / 1e9
        self._good_s += good_seconds(since_s, until_s, watermark_s, self._skew_threshold_s)
        self._observed_s += until_s - since_s
        self._evaluated_ns = now_ns

    def collect(self) -> Iterator[Metric]:
        now_ns = self._clock_ns()
        with self._lock:
            self._advance(now_ns)
            watermark, lag, last_batch = self._watermark_ns, self._lag, self._last_batch_ns
            good_s, observed_s = self._good_s, self._observed_s
        skew = GaugeMetricFamily(
            "synthetic_sla_watermark_skew_seconds",
            "Now minus the sink query's event-time watermark (since start until the first).",
            labels=["target"],
        )
        skew.add_metric([self.target], max(0, now_ns - (watermark or self._started_ns)) / 1e9)
        yield skew
        good = CounterMetricFamily(
            "synthetic_sla_watermark_skew_good_seconds",
            f"Seconds the watermark skew spent below its SLO threshold "
            f"({self._skew_threshold_s:g}s, sink.skew_threshold).",
            labels=["target"],
        )
        good.add_metric([self.target], good_s)
        yield good
        observed = CounterMetricFamily(
            "synthetic_sla_watermark_skew_observed_seconds",
            "Seconds the watermark skew was observed (the skew SLO's total).",
            labels=["target"],
        )
        observed.add_metric([self.target], observed_s)
        yield observed
        since_batch = GaugeMetricFamily(
            "synthetic_sla_spark_seconds_since_last_batch",
            "Now minus the end of the sink query's last micro-batch (since start until the first).",
            labels=["target"],
        )
        since_batch.add_metric(
            [self.target], max(0, now_ns - (last_batch or self._started_ns)) / 1e9
        )
        yield since_batch
        lag_family = GaugeMetricFamily(
            "synthetic_sla_spark_source_lag_records",
            "Records in the topic the sink query has not judged yet: the log ends minus "
            "the offsets it last committed, kept up to date while it fails or restarts.",
            labels=["target"],
        )
        lag_family.add_metric([self.target], float(lag or 0))
        yield lag_family
