"""Every metric the probe exports, defined in one place.

The registry is passed in (tests use a fresh one each). Every series an SLO rule
reads exists at zero from the moment a (target, stage) is declared, so a rate over
a window that saw no canary yet is 0, not "no data". Latency buckets are derived
from the SLO thresholds so the latency SLI is read off a bucket boundary exactly.

Staleness is not stored: it is computed from the judges at scrape time, so it keeps
rising while a partition is silent even though no event updates it. Per-partition
staleness is one series per partition (10,000 at 10,000 partitions): the
``metrics.partition_series`` setting exports it for every partition, only for those
currently stale, or for none; the per-stage aggregates (the largest staleness, the
number of stale partitions) are always exported, and the rules and dashboard work
from them in every mode.

Which broker leads each partition and which partitions are in replica trouble are
rendered at scrape time too, from the last metadata refresh (:class:`ReplicaCollector`),
so a broker or a problem that is gone from the metadata is gone from the next scrape.
The per-partition ones follow the same setting: in ``stale`` mode a partition has a
leader series while it is stale or in trouble, which is when a join needs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from probe import tracing
from probe.config import ProbeConfig, StageName
from probe.core.errors import ConnectFailure, ProduceFailure, RejectReason
from probe.core.judge import Anomaly, AnomalyKind, Fate, Finding, Judge, Outcome, StreamKey
from probe.core.replicas import TopicReplicas, partition_problems, replica_health
from probe.group_metrics import GroupMetrics
from probe.status_page import SinkBatchProgress

# The metrics a canary's fate counts on (see ProbeMetrics._fate_child).
_Fated = TypeVar("_Fated", Counter, Histogram)

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
    """A stage whose staleness is exported; a partition is stale past ``stale_after_ns``."""

    target: str
    stage: str
    judge: StalenessSource
    stale_after_ns: int

    def is_stale(self, staleness_ns: int) -> bool:
        return staleness_ns > self.stale_after_ns


class PartitionSeries(StrEnum):
    """Which partitions get a `synthetic_sla_partition_staleness_seconds` series."""

    ALL = "all"
    STALE = "stale"  # only those stale now (it missed a round: see stale_after)
    NONE = "none"


def stale_after(interval: float, freshness: float) -> float:
    """When a partition is stale: its freshest canary is older than one interval plus
    the stage's freshness deadline, so the canary of its last round is overdue (a
    healthy partition peaks at one interval plus its latency).

    >>> stale_after(20.0, 5.0)
    25.0
    """
    return interval + freshness


def _label_value(text: str) -> str:
    """A label value as the text exposition formats escape it."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class RenderedGauge(GaugeMetricFamily):
    """A gauge family that also writes its own exposition lines, fast.

    prometheus_client formats every sample anew at every scrape (label escaping,
    ordering): 0.15 s for 10,000 per-partition series, 0.28 s as OpenMetrics. A family
    of many series whose labels rarely change keeps each series' line prefix and only
    formats its value; /metrics (probe.endpoints) writes it with :meth:`lines`. For any
    other reader of the registry it is an ordinary family: its samples are built when
    first asked for.
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self._rows: list[tuple[str, Sequence[str], float]] = []
        self._built: list[Sample] = []
        super().__init__(name, documentation, labels=labels)

    @property
    def samples(self) -> list[Sample]:
        if len(self._built) < len(self._rows):
            self._built.extend(
                Sample(self.name, dict(zip(self._labelnames, labels, strict=True)), value)
                for _, labels, value in self._rows[len(self._built) :]
            )
        return self._built

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:
        self._built = samples

    def add_rendered(self, prefix: str, labels: Sequence[str], value: float) -> None:
        """One series; ``prefix`` is its line up to the value (see :meth:`prefix`)."""
        self._rows.append((prefix, labels, value))

    def series(self) -> int:
        return len(self._rows)

    def prefix(self, labels: Sequence[str]) -> str:
        pairs = ",".join(
            f'{name}="{_label_value(value)}"'
            for name, value in zip(self._labelnames, labels, strict=True)
        )
        return f"{self.name}{{{pairs}}} "

    def lines(self) -> str:
        header = f"# HELP {self.name} {self.documentation}\n# TYPE {self.name} gauge\n"
        return header + "".join(f"{prefix}{_go_float(value)}\n" for prefix, _, value in self._rows)


class LinePrefixes:
    """Each series' line prefix (see :class:`RenderedGauge`), kept across scrapes by a
    collector that renders the same series scrape after scrape; forgotten at once when
    there are more than twice as many as the last scrape wrote (series went away)."""

    def __init__(self) -> None:
        self._known: dict[tuple[object, ...], str] = {}

    def add(
        self, family: RenderedGauge, ident: tuple[object, ...], labels: Sequence[str], value: float
    ) -> None:
        prefix = self._known.get(ident)
        if prefix is None:
            prefix = self._known[ident] = family.prefix(labels)
        family.add_rendered(prefix, labels, value)

    def trim(self, written: int) -> None:
        if len(self._known) > 2 * max(1, written):
            self._known.clear()


def _go_float(value: float) -> str:
    """A sample value as prometheus_client writes it (1e+06, +Inf, NaN)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


class StalenessCollector(Collector):
    """Staleness, computed at scrape time: per partition (as ``partition_series`` says),
    and per stage its largest value and the number of stale partitions (always)."""

    def __init__(
        self,
        clock_ns: Callable[[], int] = time.time_ns,
        partition_series: PartitionSeries = PartitionSeries.ALL,
    ) -> None:
        self._sources: list[StageSource] = []
        self._clock_ns = clock_ns
        self._partition_series = partition_series
        self._prefixes = LinePrefixes()

    def add(self, source: StageSource) -> None:
        self._sources.append(source)

    def sources(self) -> list[StageSource]:
        return list(self._sources)

    def stale_partitions(self, target: str) -> set[int]:
        """The target's partitions stale now in at least one of its stages: those that
        have a staleness series in ``stale`` mode."""
        now_ns = self._clock_ns()
        return {
            key.partition
            for source in self._sources
            if source.target == target
            for key, value in source.judge.staleness_ns(now_ns).items()
            if source.is_stale(value)
        }

    def collect(self) -> Iterator[Metric]:
        family = RenderedGauge(
            "synthetic_sla_partition_staleness_seconds",
            "Age of the freshest canary a stage has seen on a partition (now minus its "
            "produce time); rises while the partition is silent or the stage lags. Which "
            "partitions have a series: metrics.partition_series (all, stale, none).",
            labels=["target", "stage", "partition"],
        )
        largest = GaugeMetricFamily(
            "synthetic_sla_staleness_max_seconds",
            "The largest staleness of any partition of the stage (0 with none).",
            labels=["target", "stage"],
        )
        stale = GaugeMetricFamily(
            "synthetic_sla_stale_partitions",
            "Partitions of the stage whose freshest canary is older than one interval plus "
            "the stage's freshness deadline: they missed at least their last round.",
            labels=["target", "stage"],
        )
        now_ns = self._clock_ns()
        prefixes = self._prefixes
        mode = self._partition_series
        for source in self._sources:
            staleness = source.judge.staleness_ns(now_ns)
            largest.add_metric(
                [source.target, source.stage], max(staleness.values(), default=0) / 1e9
            )
            stale.add_metric(
                [source.target, source.stage],
                sum(1 for value in staleness.values() if source.is_stale(value)),
            )
            if mode is PartitionSeries.NONE:
                continue
            for key in sorted(staleness, key=lambda key: key.partition):
                value = staleness[key]
                if mode is PartitionSeries.STALE and not source.is_stale(value):
                    continue
                labels = [source.target, source.stage, str(key.partition)]
                ident = (source.target, source.stage, key.partition)
                prefixes.add(family, ident, labels, value / 1e9)
        prefixes.trim(family.series())  # partitions went away or are fresh again
        yield family
        yield largest
        yield stale


class ReplicaCollector(Collector):
    """The canary topic's brokers and troubled partitions, rendered at scrape time from
    the last metadata refresh of each target (see the module doc).

    ``synthetic_sla_broker_info``: every broker the metadata lists, with its address.
    ``synthetic_sla_partition_leader``: each partition's leader (none while offline), so
    that a per-partition series finds its broker in one join. As ``partition_series``
    says: every partition (all), those in replica trouble or stale in some stage now
    (stale: as the staleness collector says), or none.
    ``synthetic_sla_partition_replica_problem``: each troubled partition, once, under
    its worst problem (see probe.core.replicas.partition_problems); none with ``none``.
    """

    def __init__(self, staleness: StalenessCollector, partition_series: PartitionSeries) -> None:
        self._staleness = staleness
        self._partition_series = partition_series
        # Each target's entry is replaced whole at a refresh: a scrape, on whatever
        # thread, reads one refresh or the next, never a mix (a TopicReplicas is never
        # changed once made).
        self._topics: dict[str, TopicReplicas] = {}
        self._prefixes = LinePrefixes()

    def update(self, target: str, topic: TopicReplicas) -> None:
        self._topics[target] = topic

    def leader_of(self, target: str, partition: int) -> int | None:
        """The partition's leader at the target's last refresh (None: unknown, offline)."""
        topic = self._topics.get(target)
        return None if topic is None else topic.leader_of(partition)

    def collect(self) -> Iterator[Metric]:
        brokers = InfoMetricFamily(
            "synthetic_sla_broker",
            "Every broker the last metadata refresh listed, with its address (host:port). "
            "A broker that is down is not listed.",
            labels=["target", "broker"],
        )
        leaders = RenderedGauge(
            "synthetic_sla_partition_leader",
            "1 for the broker leading the partition now (an offline partition has none), "
            "to join per-partition series to their broker. Which partitions have a "
            "series: metrics.partition_series (all; stale: stale or in replica trouble; "
            "none).",
            labels=["target", "partition", "broker"],
        )
        problems = RenderedGauge(
            "synthetic_sla_partition_replica_problem",
            "1 for each canary partition in replica trouble, under its worst problem: "
            "offline (no leader; leader none), under_min_isr, under_replicated. None with "
            "metrics.partition_series none.",
            labels=["target", "partition", "leader", "problem"],
        )
        mode = self._partition_series
        for target, topic in sorted(self._topics.items()):
            for broker in sorted(topic.brokers):
                brokers.add_metric(
                    [target, str(broker)], {"address": topic.addresses.get(broker, "")}
                )
            if mode is PartitionSeries.NONE:
                continue
            troubled = partition_problems(topic)
            for trouble in troubled:
                leader = "none" if trouble.leader is None else str(trouble.leader)
                self._add(problems, target, str(trouble.partition), leader, trouble.problem.value)
            shown: set[int] | None = None  # every partition
            if mode is PartitionSeries.STALE:
                shown = {t.partition for t in troubled} | self._staleness.stale_partitions(target)
            for number in sorted(topic.partitions if shown is None else shown):
                leader_id = topic.leader_of(number)
                if leader_id is not None:
                    self._add(leaders, target, str(number), str(leader_id))
        self._prefixes.trim(leaders.series() + problems.series())  # gone, or recovered
        yield brokers
        yield leaders
        yield problems

    def _add(self, family: RenderedGauge, *labels: str) -> None:
        self._prefixes.add(family, (family.name, *labels), labels, 1.0)


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
        partition_series: PartitionSeries = PartitionSeries.ALL,
        stale_after_s: Mapping[str, float] | None = None,
        group_commit_threshold: float = 0.5,
    ) -> None:
        """``stale_after_s``: per stage name, when a partition is stale (see
        :func:`stale_after`); stages not named: 25 s (a 20 s interval, 5 s freshness).
        ``group_commit_threshold``: the group stage's good commit (a bucket boundary)."""
        buckets = latency_buckets(*latency_thresholds)
        # Registered always, labelled only for a target with the group stage.
        self.group = GroupMetrics(registry, commit_buckets=latency_buckets(group_commit_threshold))
        self._stale_after_s = dict(stale_after_s or {})
        self._fate_children: dict[tuple[object, ...], Counter | Histogram] = {}
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
        self.broker_produce_errors = Counter(
            "synthetic_sla_broker_produce_errors",
            "Canaries the broker did not acknowledge, by the broker that led their "
            "partition when they were sent and by reason.",
            ["target", "broker", "reason"],
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
        self.future_dated = Counter(
            "synthetic_sla_future_dated",
            "Canaries produced, by their signed stamp, more than 1 s after this stage's "
            "clock saw them arrive: the producer's clock is ahead of the stage's, and "
            "the stage's latencies and staleness read low by as much.",
            ["target", "stage"],
            registry=registry,
        )
        self.clock_lead = Gauge(
            "synthetic_sla_clock_lead_seconds",
            "How far ahead of this stage's clock the latest future-dated canary was "
            "produced (0 until one arrives): about how far the producer's clock is ahead.",
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
        self.connect_errors = Counter(
            "synthetic_sla_connect_errors",
            "Attempts to connect to the target's broker that failed, by reason (the "
            "/readyz reason and the log say which setting to change).",
            ["target", "reason"],
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
        # Per broker: the broker that led the canary's partition when it was produced.
        # Brokers are few where partitions are many: these stay small at any topic size.
        self.broker_canaries = Counter(
            "synthetic_sla_broker_canaries",
            "Canaries by final outcome per stage and by the broker that led their "
            "partition when they were produced.",
            ["target", "stage", "broker", "outcome"],
            registry=registry,
        )
        self.broker_e2e_latency = Histogram(
            "synthetic_sla_broker_e2e_latency_seconds",
            "Produce-to-arrival latency of canaries that arrived, by the broker that led "
            "their partition when they were produced.",
            ["target", "stage", "broker"],
            buckets=buckets,
            registry=registry,
        )
        self.brokers = Gauge(
            "synthetic_sla_brokers",
            "Brokers in the cluster metadata of the target.",
            ["target"],
            registry=registry,
        )
        self.broker_leaderships = Gauge(
            "synthetic_sla_broker_leader_partitions",
            "Canary partitions each broker leads.",
            ["target", "broker"],
            registry=registry,
        )
        self.broker_out_of_sync = Gauge(
            "synthetic_sla_broker_replicas_out_of_sync",
            "Canary partitions where the broker holds a replica that is not in the ISR "
            "(a broker that is down: every replica it holds).",
            ["target", "broker"],
            registry=registry,
        )
        self.brokers_leading_nothing = Gauge(
            "synthetic_sla_brokers_without_canary_leader",
            "Brokers that lead no canary partition: the probe does not measure them.",
            ["target"],
            registry=registry,
        )
        self.under_replicated = Gauge(
            "synthetic_sla_partitions_under_replicated",
            "Canary partitions with fewer in-sync replicas than replicas.",
            ["target"],
            registry=registry,
        )
        self.offline = Gauge(
            "synthetic_sla_partitions_offline",
            "Canary partitions without a leader.",
            ["target"],
            registry=registry,
        )
        self.under_min_isr = Gauge(
            "synthetic_sla_partitions_under_min_isr",
            "Canary partitions with fewer in-sync replicas than the topic's "
            "min.insync.replicas (acks=all produces are refused); 0 while it is unknown.",
            ["target"],
            registry=registry,
        )
        self.min_insync = Gauge(
            "synthetic_sla_min_insync_replicas",
            "The canary topic's min.insync.replicas (0: unknown, the broker did not say).",
            ["target"],
            registry=registry,
        )
        self._stages_of: dict[str, list[str]] = {}
        self._brokers_of: dict[str, set[int]] = {}
        registry.register(SpanDropCollector(span_stats or tracing.EXPORT_STATS))
        Info("synthetic_sla_probe", "Build of the probe.", registry=registry).info(
            {"version": version}
        )
        self.staleness = StalenessCollector(clock_ns, partition_series)
        registry.register(self.staleness)
        self.replica_state = ReplicaCollector(self.staleness, partition_series)
        registry.register(self.replica_state)

    def declare_target(self, target: str) -> None:
        for gauge in (
            self.brokers,
            self.brokers_leading_nothing,
            self.under_replicated,
            self.offline,
            self.under_min_isr,
            self.min_insync,
        ):
            gauge.labels(target)
        self.produce_latency.labels(target)
        self.rounds.labels(target)
        self.partitions.labels(target)
        self.ready.labels(target)
        self.reconnects.labels(target)
        for reason in ProduceFailure:
            self.produce_errors.labels(target, reason.value)
        for failure in ConnectFailure:
            self.connect_errors.labels(target, failure.value)

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
        self.clock_lead.labels(target, stage)
        for reason in RejectReason:
            self.invalid.labels(target, stage, reason.value)
        if isinstance(judge, Judge):
            self.pending.labels(target, stage).set_function(judge.pending_count)
        self._stages_of.setdefault(target, []).append(stage)
        if stage == StageName.GROUP:
            self.group.declare(target)
        threshold_s = self._stale_after_s.get(stage, stale_after(20.0, 5.0))
        self.staleness.add(StageSource(target, stage, judge, int(threshold_s * 1e9)))

    def count(self, target: str, stage: str, findings: Iterable[Finding]) -> None:
        for finding in findings:
            if isinstance(finding, Fate):
                outcome = finding.outcome.value
                self._fate_child(self.canaries, target, stage, outcome).inc()
                broker = None if finding.broker is None else str(finding.broker)
                if broker is not None:
                    self._fate_child(self.broker_canaries, target, stage, broker, outcome).inc()
                if finding.latency_ns is not None:
                    # The exemplar lets a dashboard jump from a slow bucket to the trace.
                    ids = tracing.ids_of(finding.trace_context)
                    exemplar = (
                        None if ids is None else {"trace_id": ids.trace_id, "span_id": ids.span_id}
                    )
                    seconds = finding.latency_ns / 1e9
                    latency = self._fate_child(self.e2e_latency, target, stage)
                    latency.observe(seconds, exemplar=exemplar)
                    if broker is not None:
                        self._fate_child(self.broker_e2e_latency, target, stage, broker).observe(
                            seconds
                        )
            elif isinstance(finding, Anomaly):
                self._anomaly_counter(finding.kind).labels(target, stage).inc()
                if finding.lead_ns is not None:
                    self.clock_lead.labels(target, stage).set(finding.lead_ns / 1e9)

    def _fate_child(self, metric: _Fated, *labels: str) -> _Fated:
        """``metric.labels(*labels)``, looked up once: every canary's fate counts on
        two to four of them, and ``labels`` validates and locks at every call (a tenth
        of the probe's CPU at 10,000 partitions). These series are never removed, so a
        child found once is the child for good."""
        key = (id(metric), *labels)
        child = self._fate_children.get(key)
        if child is None:
            child = self._fate_children[key] = metric.labels(*labels)
        return cast(_Fated, child)

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

    def produce_failed(
        self, target: str, reason: ProduceFailure, broker: int | None = None
    ) -> None:
        self.produce_errors.labels(target, reason.value).inc()
        if broker is not None:
            self.broker_produce_errors.labels(target, str(broker), reason.value).inc()

    def target_ready(self, target: str, ready: bool) -> None:
        self.ready.labels(target).set(1 if ready else 0)

    def target_partitions(self, target: str, count: int) -> None:
        self.partitions.labels(target).set(count)

    def reconnected(self, target: str) -> None:
        self.reconnects.labels(target).inc()

    def connect_failed(self, target: str, reason: ConnectFailure) -> None:
        self.connect_errors.labels(target, reason.value).inc()

    def target_replicas(self, target: str, topic: TopicReplicas) -> None:
        """The topic's replica state after a metadata refresh. Every broker listed, or
        holding a replica, gets its per-broker series at zero the first time it is seen
        (a broker that left keeps its counters: they only ever grow; its gauges drop to
        0). The per-partition and per-address series are rendered from ``topic`` at
        each scrape (:class:`ReplicaCollector`)."""
        health = replica_health(topic)
        self.brokers.labels(target).set(len(health.leaders))
        self.brokers_leading_nothing.labels(target).set(len(health.leaderless_brokers))
        self.under_replicated.labels(target).set(health.under_replicated)
        self.offline.labels(target).set(health.offline)
        self.under_min_isr.labels(target).set(health.under_min_isr)
        self.min_insync.labels(target).set(health.min_insync or 0)
        self.replica_state.update(target, topic)
        known = self._brokers_of.setdefault(target, set())
        seen = health.leaders.keys() | health.out_of_sync.keys()
        for broker in sorted(seen):
            name = str(broker)
            self.broker_leaderships.labels(target, name).set(health.leaders.get(broker, 0))
            self.broker_out_of_sync.labels(target, name).set(health.out_of_sync.get(broker, 0))
            if broker in known:
                continue
            known.add(broker)
            for reason in ProduceFailure:
                self.broker_produce_errors.labels(target, name, reason.value)
            for stage in self._stages_of.get(target, []):
                for outcome in Outcome:
                    self.broker_canaries.labels(target, stage, name, outcome.value)
                self.broker_e2e_latency.labels(target, stage, name)
        for gone in known - seen:
            self.broker_leaderships.labels(target, str(gone)).set(0)
            self.broker_out_of_sync.labels(target, str(gone)).set(0)

    def _anomaly_counter(self, kind: AnomalyKind) -> Counter:
        return {
            AnomalyKind.DUPLICATE: self.duplicates,
            AnomalyKind.OUT_OF_ORDER: self.out_of_order,
            AnomalyKind.RESURRECTED: self.resurrected,
            AnomalyKind.FOREIGN: self.foreign,
            AnomalyKind.SEQUENCE_JUMP: self.sequence_jumps,
            AnomalyKind.MISROUTED: self.misrouted,
            AnomalyKind.FUTURE_DATED: self.future_dated,
        }[kind]


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
    judged_here = stale_after(config.interval, config.judge.freshness)
    stale_after_s = {str(stage): judged_here for stage in StageName}
    stale_after_s[StageName.SINK] = stale_after(config.interval, config.sink.freshness)
    return registry, ProbeMetrics(
        registry,
        latency_thresholds=thresholds,
        version=probe_version(),
        partition_series=PartitionSeries(config.metrics.partition_series),
        stale_after_s=stale_after_s,
        group_commit_threshold=config.group.commit_latency_threshold,
    )
