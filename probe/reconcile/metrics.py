"""A reconciliation run counted on `sla-probe reconcile`'s series, which are defined
with the probe's others in :mod:`probe.metrics.reconcile`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from probe.metrics import RUN_FAILED, ReconcileSeries
from probe.reconcile.outcome import Reconciliation, RecordResult, Verdict, WindowStatus


class ReconcileMetrics:
    """The adapter from a run's outcome to :class:`ReconcileSeries`, which it builds
    on ``registry`` with every result, status and verdict at zero."""

    def __init__(self, registry: CollectorRegistry, target: str) -> None:
        self.target = target
        self.series = ReconcileSeries(
            registry,
            target,
            record_results=[result.value for result in RecordResult],
            window_statuses=[status.value for status in WindowStatus],
            verdicts=[verdict.value for verdict in Verdict],
        )

    def completed(self, run: Reconciliation) -> None:
        """Count a run that compared its windows."""
        series = self.series
        for result, count in run.records().items():
            series.records.labels(self.target, result.value).inc(count)
        for status, count in run.windows_by_status().items():
            series.windows.labels(self.target, status.value).inc(count)
        series.runs.labels(self.target, run.verdict.value).inc()
        series.mismatch_ratio.labels(self.target).set(run.mismatch_ratio)
        series.duration.labels(self.target).observe(run.duration_s)
        series.last_success.labels(self.target).set(run.finished_ms / 1000)

    def failed(self) -> None:
        """Count a run that could not compare (the last success stays where it was)."""
        self.series.runs.labels(self.target, RUN_FAILED).inc()
