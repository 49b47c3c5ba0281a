"""Every metric the probe exports, defined in one place.

The registry is passed in (tests use a fresh one each). Every series an SLO rule
reads exists at zero from the moment a (target, stage) is declared, so a rate over
a window that saw no canary yet is 0, not "no data". Latency buckets are derived
from the SLO thresholds so the latency SLI is read off a bucket boundary exactly.

Staleness is not stored: it is computed from the judges at scrape time, so it keeps
rising while a partition is silent even though no event updates it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from probe import tracing
from probe.config import ProbeConfig, StageName
from probe.errors import ProduceFailure, RejectReason
from probe.judge import Anomaly, AnomalyKind, Fate, Finding, Judge, Outcome, StreamKey
from probe.reconcile.outcome import Reconciliation, RecordResult, WindowStatus

_BASE_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def latency_buckets(*thresholds: float) -> tuple[float, ...]:
    """The base buckets plus every SLO threshold, so `le="<threshold>"` exists."""
    return tuple(sorted(set(_BASE_BUCKETS) | {round(t, 6) for t in thresholds}))


class StalenessSource(Protocol):
    """Anything that knows, per stream, how old the freshest canary it has seen is:
    a judge, or the Spark sink's record of what it committed."""

    def staleness_ns(self, now_ns: int) -> dict[StreamKey, int]: ...


@dataclass(frozen=True, slots=True)
class StageSource:
    """A stage whose staleness is exported."""

    target: str
    stage: str
    judge: StalenessSource


class StalenessCollector(Collector):
    """`synthetic_sla_partition_staleness_seconds`, computed at scrape time."""

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._sources: list[StageSource] = []
        self._clock_ns = clock_ns

    def add(self, source: StageSource) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "synthetic_sla_partition_staleness_seconds",
            "Age of the freshest canary a stage has seen on a partition (now minus its "
            "produce time); rises while the partition is silent or the stage lags.",
            labels=["target", "stage", "partition"],
        )
        now_ns = self._clock_ns()
        for source in self._sources:
            for key, staleness_ns in sorted(
                source.judge.staleness_ns(now_ns).items(), key=lambda kv: kv[0].partition
            ):
                family.add_metric(
                    [source.target, source.stage, str(key.partition)], staleness_ns / 1e9
                )
        yield family


class SpanDropCollector(Collector):
    """`synthetic_sla_spans_dropped_total{reason}`: spans that never reached the
    collector (probe.tracing counts them on the exporter's thread), read at scrape time.
    Both reasons exist at zero from the start, exporting or not."""

    def __init__(self, stats: tracing.ExportStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "synthetic_sla_spans_dropped",
            "Spans dropped on their way to the OTLP collector: queue_full (the bounded "
            "export queue had no room) or export_failed (the collector did not take them).",
            labels=["reason"],
        )
        dropped = self._stats.dropped()
        for reason in tracing.DROP_REASONS:
            family.add_metric([reason], float(dropped.get(reason, 0)))
        yield family


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
            if watermark_ns:
                self._watermark_ns = watermark_ns
            if lag is not None:
                self._lag = lag

    def up(self, running: bool) -> None:
        self.query_up.labels(self.target).set(1 if running else 0)

    def restarted(self, reason: str) -> None:
        self.restarts.labels(self.target, reason).inc()

    def failed(self) -> None:
        self.given_up.labels(self.target).set(1)
        self.up(False)

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
            "Records between the source's latest and processed offsets.",
            labels=["target"],
        )
        lag_family.add_metric([self.target], float(lag or 0))
        yield lag_family


class ProbeMetrics:
    """The probe's metrics on one registry, and the adapter from findings to counters."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        latency_thresholds: Iterable[float] = (0.5,),
        version: str = "0",
        clock_ns: Callable[[], int] = time.time_ns,
        span_stats: tracing.ExportStats | None = None,
    ) -> None:
        buckets = latency_buckets(*latency_thresholds)
        self.canaries = Counter(
            "synthetic_sla_canaries",
            "Canaries by final outcome per stage: delivered, late, lost, produce_failed.",
            ["target", "stage", "outcome"],
            registry=registry,
        )
        self.e2e_latency = Histogram(
            "synthetic_sla_e2e_latency_seconds",
            "Produce-to-arrival latency of canaries that arrived (delivered or late).",
            ["target", "stage"],
            buckets=buckets,
            registry=registry,
        )
        self.produce_latency = Histogram(
            "synthetic_sla_produce_latency_seconds",
            "Time from send to the broker's acknowledgement (acks=all).",
            ["target"],
            buckets=buckets,
            registry=registry,
        )
        self.produce_errors = Counter(
            "synthetic_sla_produce_errors",
            "Canaries the broker did not acknowledge, by reason.",
            ["target", "reason"],
            registry=registry,
        )
        self.duplicates = Counter(
            "synthetic_sla_duplicates",
            "Canaries that arrived more than once.",
            ["target", "stage"],
            registry=registry,
        )
        self.out_of_order = Counter(
            "synthetic_sla_out_of_order",
            "Canaries that arrived after a later canary of the same partition.",
            ["target", "stage"],
            registry=registry,
        )
        self.resurrected = Counter(
            "synthetic_sla_resurrected",
            "Canaries that arrived after being declared lost (they stay lost).",
            ["target", "stage"],
            registry=registry,
        )
        self.foreign = Counter(
            "synthetic_sla_foreign",
            "Records of other probe instances on the same topic (ignored, not invalid).",
            ["target", "stage"],
            registry=registry,
        )
        self.sequence_jumps = Counter(
            "synthetic_sla_sequence_jumps",
            "Verified canaries whose seq jumps far past their partition's sequence "
            "(forged or corrupted; ignored so they cannot silence the partition).",
            ["target", "stage"],
            registry=registry,
        )
        self.misrouted = Counter(
            "synthetic_sla_misrouted",
            "Verified canaries read where they were not written (another partition, "
            "or one the probe does not write to).",
            ["target", "stage"],
            registry=registry,
        )
        self.invalid = Counter(
            "synthetic_sla_invalid",
            "Records on the canary topic that are not valid canaries, by reason.",
            ["target", "stage", "reason"],
            registry=registry,
        )
        self.rounds = Counter(
            "synthetic_sla_rounds",
            "Produce rounds started (one canary per partition each).",
            ["target"],
            registry=registry,
        )
        self.partitions = Gauge(
            "synthetic_sla_partitions",
            "Partitions (or shards) of the target the probe writes to.",
            ["target"],
            registry=registry,
        )
        self.ready = Gauge(
            "synthetic_sla_target_ready",
            "1 while the target is reachable and its topic known, else 0.",
            ["target"],
            registry=registry,
        )
        self.reconnects = Counter(
            "synthetic_sla_reconnects",
            "Connections to the target's broker re-established after a loss (MQTT).",
            ["target"],
            registry=registry,
        )
        self.pending = Gauge(
            "synthetic_sla_pending_canaries",
            "Canaries acknowledged whose fate is not decided yet.",
            ["target", "stage"],
            registry=registry,
        )
        self.trace_header_mismatch_counter = Counter(
            "synthetic_sla_trace_header_mismatch",
            "Canaries whose traceparent header (Kafka header, MQTT user property) "
            "disagrees with the signed copy inside them; the signed copy is followed.",
            ["target", "stage"],
            registry=registry,
        )
        registry.register(SpanDropCollector(span_stats or tracing.EXPORT_STATS))
        Info("synthetic_sla_probe", "Build of the probe.", registry=registry).info(
            {"version": version}
        )
        self.staleness = StalenessCollector(clock_ns)
        registry.register(self.staleness)

    def declare_target(self, target: str) -> None:
        self.produce_latency.labels(target)
        self.rounds.labels(target)
        self.partitions.labels(target)
        self.ready.labels(target)
        self.reconnects.labels(target)
        for reason in ProduceFailure:
            self.produce_errors.labels(target, reason.value)

    def declare_stage(self, target: str, stage: str, judge: StalenessSource) -> None:
        """Create every series the SLO reads for this stage at zero, and export its staleness.

        ``judge`` is the stage's judge, or for a stage judged elsewhere (the Spark sink)
        whatever tracks its staleness; pending canaries are exported for a judge.
        """
        for outcome in Outcome:
            self.canaries.labels(target, stage, outcome.value)
        self.e2e_latency.labels(target, stage)
        self.trace_header_mismatch_counter.labels(target, stage)
        for kind in AnomalyKind:
            self._anomaly_counter(kind).labels(target, stage)
        for reason in RejectReason:
            self.invalid.labels(target, stage, reason.value)
        if isinstance(judge, Judge):
            self.pending.labels(target, stage).set_function(judge.pending_count)
        self.staleness.add(StageSource(target, stage, judge))

    def count(self, target: str, stage: str, findings: Iterable[Finding]) -> None:
        for finding in findings:
            if isinstance(finding, Fate):
                self.canaries.labels(target, stage, finding.outcome.value).inc()
                if finding.latency_ns is not None:
                    # The exemplar lets a dashboard jump from a slow bucket to the trace.
                    ids = tracing.ids_of(finding.trace_context)
                    self.e2e_latency.labels(target, stage).observe(
                        finding.latency_ns / 1e9,
                        exemplar=None
                        if ids is None
                        else {"trace_id": ids.trace_id, "span_id": ids.span_id},
                    )
            elif isinstance(finding, Anomaly):
                self._anomaly_counter(finding.kind).labels(target, stage).inc()

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        self.invalid.labels(target, stage, reason.value).inc()

    # -- TraceRecorder -------------------------------------------------------------

    def trace_header_mismatch(self, target: str, stage: str) -> None:
        self.trace_header_mismatch_counter.labels(target, stage).inc()

    # -- TargetRecorder: what the producer and the target report -------------------

    def round_started(self, target: str) -> None:
        self.rounds.labels(target).inc()

    def acked(self, target: str, seconds: float) -> None:
        self.produce_latency.labels(target).observe(seconds)

    def produce_failed(self, target: str, reason: ProduceFailure) -> None:
        self.produce_errors.labels(target, reason.value).inc()

    def target_ready(self, target: str, ready: bool) -> None:
        self.ready.labels(target).set(1 if ready else 0)

    def target_partitions(self, target: str, count: int) -> None:
        self.partitions.labels(target).set(count)

    def reconnected(self, target: str) -> None:
        self.reconnects.labels(target).inc()

    def _anomaly_counter(self, kind: AnomalyKind) -> Counter:
        return {
            AnomalyKind.DUPLICATE: self.duplicates,
            AnomalyKind.OUT_OF_ORDER: self.out_of_order,
            AnomalyKind.RESURRECTED: self.resurrected,
            AnomalyKind.FOREIGN: self.foreign,
            AnomalyKind.SEQUENCE_JUMP: self.sequence_jumps,
            AnomalyKind.MISROUTED: self.misrouted,
        }[kind]


# A reconciliation run takes seconds on a small topic, minutes on a large one.
_RUN_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# How a reconciliation run ended: the `result` of synthetic_sla_reconciliation_runs_total.
RUN_RESULTS = ("complete", "mismatch", "failed")


class ReconcileMetrics:
    """`sla-probe reconcile`'s series, every one at zero from the start.

    Records and windows are counted each time a run compares them; runs overlap in
    what they look back on, so a rate is "records checked per second", not distinct
    records. The mismatch ratio and the last success are the last run's: an alert on
    a ratio that stays above zero run after run is a persistent mismatch, and one on
    the age of the last success is a reconciliation gone stale.
    """

    def __init__(self, registry: CollectorRegistry, target: str) -> None:
        self.target = target
        self.records = Counter(
            "synthetic_sla_reconciliation_records",
            "Records and table rows reconciled, by result: matched, missing (in the topic, "
            "not in the table), extra (in the table only), duplicated (copies beyond the "
            "first), checksum_mismatch, unverifiable (rows of windows whose source left the "
            "topic).",
            ["target", "result"],
            registry=registry,
        )
        self.windows = Counter(
            "synthetic_sla_reconciliation_windows",
            "Windows (per partition) reconciled, by status: complete, mismatch, unverifiable.",
            ["target", "status"],
            registry=registry,
        )
        self.runs = Counter(
            "synthetic_sla_reconciliation_runs",
            "Reconciliation runs by result: complete, mismatch, failed (no comparison made: "
            "broker unreachable, table unreadable).",
            ["target", "result"],
            registry=registry,
        )
        self.mismatch_ratio = Gauge(
            "synthetic_sla_reconciliation_mismatch_ratio",
            "The last run's discrepancies (missing, extra, duplicated, checksum mismatches) "
            "over the records and rows it judged; 0 when it judged none.",
            ["target"],
            registry=registry,
        )
        self.duration = Histogram(
            "synthetic_sla_reconciliation_duration_seconds",
            "Wall time of each reconciliation run that completed.",
            ["target"],
            buckets=_RUN_BUCKETS,
            registry=registry,
        )
        self.last_success = Gauge(
            "synthetic_sla_reconciliation_last_success_timestamp_seconds",
            "When the last reconciliation run completed (whatever it found); 0 before the first.",
            ["target"],
            registry=registry,
        )
        for result in RecordResult:
            self.records.labels(target, result.value)
        for status in WindowStatus:
            self.windows.labels(target, status.value)
        for outcome in RUN_RESULTS:
            self.runs.labels(target, outcome)
        self.mismatch_ratio.labels(target)
        self.duration.labels(target)
        self.last_success.labels(target)

    def completed(self, run: Reconciliation) -> None:
        """Count a run that compared its windows."""
        for result, count in run.records().items():
            self.records.labels(self.target, result.value).inc(count)
        for status, count in run.windows_by_status().items():
            self.windows.labels(self.target, status.value).inc(count)
        self.runs.labels(self.target, "complete" if run.ok else "mismatch").inc()
        self.mismatch_ratio.labels(self.target).set(run.mismatch_ratio)
        self.duration.labels(self.target).observe(run.duration_s)
        self.last_success.labels(self.target).set(run.finished_ms / 1000)

    def failed(self) -> None:
        """Count a run that could not compare (the last success stays where it was)."""
        self.runs.labels(self.target, "failed").inc()


def probe_version() -> str:
    try:
        return version("synthetic-sla-probe")
    except PackageNotFoundError:
        return "0+unknown"


def service_metrics(
    config: ProbeConfig, *, sink: bool | None = None
) -> tuple[CollectorRegistry, ProbeMetrics]:
    """A fresh registry with the probe's metrics; a latency bucket on every threshold.

    ``sink``: whether the Spark sink stage runs (default: whether config.stages has it).
    """
    registry = CollectorRegistry()
    thresholds: tuple[float, ...] = (config.metrics.latency_threshold, config.judge.freshness)
    if StageName.SINK in config.stages if sink is None else sink:
        thresholds += (config.sink.freshness, config.sink.latency_threshold)
    return registry, ProbeMetrics(registry, latency_thresholds=thresholds, version=probe_version())
