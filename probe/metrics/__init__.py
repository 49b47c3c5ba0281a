"""Every metric the probe exports, defined in one package; the probe's registry is
assembled here (:class:`ProbeMetrics`, :func:`service_metrics`).

The registry is passed in (tests use a fresh one each). Every series an SLO rule
reads exists at zero from the moment a (target, stage) is declared, so a rate over
a window that saw no canary yet is 0, not "no data". Latency buckets are derived
from the SLO thresholds so the latency SLI is read off a bucket boundary exactly.

Each component's series live in a module of their own, and ProbeMetrics registers
them: staleness (computed from the judges at scrape time) in
:mod:`probe.metrics.staleness`, the brokers and troubled partitions of the last
metadata refresh in :mod:`probe.metrics.replicas`, the tracer's dropped spans in
:mod:`probe.metrics.spans`, the group stage's in :mod:`probe.metrics.group`. The Spark
sink query's (:class:`SinkQueryMetrics`, which probe.spark.health builds) are in
:mod:`probe.metrics.sink`. The per-partition families render themselves at scrape
time with :mod:`probe.metrics.rendered`. The canaries' outcomes, latencies, anomalies
and the per-target and per-broker series are ProbeMetrics' own, below.

Two commands' series are here too, on registries of their own (never the run's):
`sla-probe reconcile`'s in :mod:`probe.metrics.reconcile` (:class:`ReconcileSeries`,
which probe.reconcile.metrics counts runs on) and the smoke test's push to a
Pushgateway in :mod:`probe.metrics.smoke` (:class:`SmokeSeries`, which
probe.services.smoke_push fills). No module outside this package builds a series:
tests/test_metrics_home.py fails when one does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import TypeVar, cast

from prometheus_client import (
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
)

from probe import tracing
from probe.config import ProbeConfig, StageName
from probe.config.names import GROUP_STAGES, NOT_PER_BROKER
from probe.core.errors import ConnectFailure, ProduceFailure, RejectReason, TransactionOutcome
from probe.core.judge import Anomaly, AnomalyKind, Fate, Finding, Judge, Outcome
from probe.core.reader_signals import ReaderSignals
from probe.core.replicas import TopicReplicas, replica_health
from probe.metrics.group import GroupMetrics
from probe.metrics.mirror import MirrorMetrics
from probe.metrics.reconcile import RUN_FAILED, ReconcileSeries
from probe.metrics.rendered import RenderedGauge
from probe.metrics.replicas import ReplicaCollector
from probe.metrics.sink import RESTART_REASONS, SinkQueryMetrics, good_seconds
from probe.metrics.smoke import SmokeSeries
from probe.metrics.spans import SpanDropCollector
from probe.metrics.staleness import (
    PartitionSeries,
    StageSource,
    StalenessCollector,
    StalenessSource,
    stale_after,
)
from probe.metrics.tiered import TieredMetrics
from probe.metrics.transactions import TransactionMetrics

# What other modules import from probe.metrics: the registry, and each component's
# names they use (their home is the component's module).
__all__ = [
    "RESTART_REASONS",
    "RUN_FAILED",
    "PartitionSeries",
    "ProbeMetrics",
    "ReconcileSeries",
    "RenderedGauge",
    "SinkQueryMetrics",
    "SmokeSeries",
    "StageSource",
    "good_seconds",
    "latency_buckets",
    "probe_version",
    "served_registry",
    "service_metrics",
    "stale_after",
]


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
        tiered_threshold: float = 5.0,
    ) -> None:
        """``stale_after_s``: per stage name, when a partition is stale (see
        :func:`stale_after`); stages not named: 25 s (a 20 s interval, 5 s freshness).
        ``group_commit_threshold``: the group stage's good commit (a bucket boundary)."""
        buckets = latency_buckets(*latency_thresholds)
        # The series of stages and reads that are opt-in: registered always, labelled
        # only for a target with the group stages, the transactional or the mirror stage,
        # or tiered reads on.
        self.group, self.transactions, self.mirror, self.tiered = (
            GroupMetrics(registry, commit_buckets=latency_buckets(group_commit_threshold)),
            TransactionMetrics(registry),
            MirrorMetrics(registry),
            TieredMetrics(registry, threshold=tiered_threshold),
        )
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
        self.aborted_reads = Counter(
            "synthetic_sla_aborted_reads",
            "Canaries written in a transaction that was aborted, read by a stage that "
            "reads committed records only (the transactional stage): records a "
            "read_committed consumer must never see.",
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
            "Attempts to connect to the target's brokers that failed, by reason and "
            "broker (its id where known, else its address; at start, and for a "
            "connection lost mid-run and refused, about once a round), the /readyz "
            "reason and the log say which setting to change.",
            ["target", "reason", "broker"],
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
        self.broker_eligible = Gauge(
            "synthetic_sla_broker_eligible_leader_replicas",
            "Canary partitions where the broker's replica is an eligible leader replica "
            "(KIP-966 ELR): out of the ISR, yet holding every committed record, so it "
            "can be elected leader cleanly. Counted among its replicas out of sync too.",
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
        self.under_min_isr_with_elr = Gauge(
            "synthetic_sla_partitions_under_min_isr_with_elr",
            "Canary partitions whose in-sync and eligible leader replicas (KIP-966 ELR) "
            "together are fewer than min.insync.replicas: fewer brokers than it promised "
            "hold every acknowledged record. Equal to _partitions_under_min_isr where "
            "the cluster keeps no ELR; 0 while min.insync.replicas is unknown.",
            ["target"],
            registry=registry,
        )
        self.min_insync = Gauge(
            "synthetic_sla_min_insync_replicas",
            "The canary topic's min.insync.replicas (0: unknown, the broker did not say).",
            ["target"],
            registry=registry,
        )
        self.replication_factor = Gauge(
            "synthetic_sla_replication_factor",
            "The canary topic's replication factor: the fewest replicas a partition has "
            "(0: unknown). With min.insync.replicas, what an acks=all write promises.",
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
            self.under_min_isr_with_elr,
            self.min_insync,
            self.replication_factor,
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
            self.connect_errors.labels(target, failure.value, "")

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
        if stage in GROUP_STAGES:
            self.group.declare(target, stage)
        if stage == StageName.TRANSACTIONAL:
            self.transactions.declare(target)
        threshold_s = self._stale_after_s.get(stage, stale_after(20.0, 5.0))
        self.staleness.add(StageSource(target, stage, judge, int(threshold_s * 1e9)))

    def count(self, target: str, stage: str, findings: Iterable[Finding]) -> None:
        exporting = tracing.exporting()
        for finding in findings:
            if isinstance(finding, Fate):
                outcome = finding.outcome.value
                self._fate_child(self.canaries, target, stage, outcome).inc()
                per_broker = finding.broker is not None and stage not in NOT_PER_BROKER
                broker = str(finding.broker) if per_broker else None
                if broker is not None:
                    self._fate_child(self.broker_canaries, target, stage, broker, outcome).inc()
                if finding.latency_ns is not None:
                    # The exemplar lets a dashboard jump from a slow bucket to the trace,
                    # when there is one to jump to.
                    ids = tracing.ids_of(finding.trace_context) if exporting else None
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

    def connect_failed(self, target: str, reason: ConnectFailure, broker: str = "") -> None:
        """``broker``: its id where known, else its address ("" when neither is)."""
        self.connect_errors.labels(target, reason.value, broker).inc()

    def transaction_ended(self, target: str, outcome: TransactionOutcome) -> None:
        self.transactions.ended(target, outcome)

    def aborted_written(self, target: str) -> None:
        self.transactions.aborted_written.labels(target).inc()

    def reader_signals(self, target: str, signals: ReaderSignals) -> None:
        """What a stage's reader measured beside its canaries, each signal it has."""
        if signals.unstable_records is not None:
            self.transactions.unstable_records(target, signals.unstable_records)
        if signals.mirror_heartbeat is not None:
            self.mirror.heartbeat(target, signals.mirror_heartbeat)
        if signals.checkpoint_lag is not None:
            self.mirror.checkpoints(target, signals.checkpoint_lag)

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
        self.under_min_isr_with_elr.labels(target).set(health.under_min_isr_with_elr)
        self.min_insync.labels(target).set(health.min_insync or 0)
        self.replication_factor.labels(target).set(health.replication_factor)
        self.replica_state.update(target, topic)
        known = self._brokers_of.setdefault(target, set())
        seen = health.leaders.keys() | health.out_of_sync.keys()
        for broker in sorted(seen):
            name = str(broker)
            self.broker_leaderships.labels(target, name).set(health.leaders.get(broker, 0))
            self.broker_out_of_sync.labels(target, name).set(health.out_of_sync.get(broker, 0))
            self.broker_eligible.labels(target, name).set(health.eligible.get(broker, 0))
            if broker in known:
                continue
            known.add(broker)
            for reason in ProduceFailure:
                self.broker_produce_errors.labels(target, name, reason.value)
            for stage in self._stages_of.get(target, []):
                if stage in NOT_PER_BROKER:
                    continue
                for outcome in Outcome:
                    self.broker_canaries.labels(target, stage, name, outcome.value)
                self.broker_e2e_latency.labels(target, stage, name)
        for gone in known - seen:
            self.broker_leaderships.labels(target, str(gone)).set(0)
            self.broker_out_of_sync.labels(target, str(gone)).set(0)
            self.broker_eligible.labels(target, str(gone)).set(0)

    def _anomaly_counter(self, kind: AnomalyKind) -> Counter:
        return {
            AnomalyKind.DUPLICATE: self.duplicates,
            AnomalyKind.OUT_OF_ORDER: self.out_of_order,
            AnomalyKind.RESURRECTED: self.resurrected,
            AnomalyKind.FOREIGN: self.foreign,
            AnomalyKind.SEQUENCE_JUMP: self.sequence_jumps,
            AnomalyKind.MISROUTED: self.misrouted,
            AnomalyKind.FUTURE_DATED: self.future_dated,
            AnomalyKind.ABORTED_READ: self.aborted_reads,
        }[kind]


def probe_version() -> str:
    try:
        return version("synthetic-sla-probe")
    except PackageNotFoundError:
        return "0+unknown"


def served_registry() -> CollectorRegistry:
    """A fresh registry for a service's /metrics: what every exporter has beside its own
    series, the process's (``process_resident_memory_bytes`` against the pod's memory
    limit, ``process_start_time_seconds``, CPU seconds, open file descriptors) and the
    Python platform's (``python_info``). Tests that count the probe's own series build
    a bare CollectorRegistry instead."""
    registry = CollectorRegistry()
    # The default registry's collectors read /proc and the interpreter at each scrape
    # and hold no state: one instance serves every registry.
    registry.register(PROCESS_COLLECTOR)
    registry.register(PLATFORM_COLLECTOR)
    return registry


def service_metrics(
    config: ProbeConfig, *, sink: bool | None = None
) -> tuple[CollectorRegistry, ProbeMetrics]:
    """A fresh registry with the probe's metrics; a latency bucket on every threshold.

    ``sink``: whether the Spark sink stage runs (default: whether config.stages has it).
    """
    registry = served_registry()
    thresholds: tuple[float, ...] = (config.metrics.latency_threshold, config.judge.freshness)
    if StageName.SINK in config.stages if sink is None else sink:
        thresholds += (config.sink.freshness, config.latency_threshold(StageName.SINK))
    if StageName.MIRROR in config.stages:
        thresholds += (config.latency_threshold(StageName.MIRROR),)
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
        tiered_threshold=config.tiered.threshold,
    )
