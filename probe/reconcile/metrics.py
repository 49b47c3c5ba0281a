"""`sla-probe reconcile`'s own metrics (``--every`` serves them): its runs, the records
and windows they compared, the last run's mismatch ratio and success."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from probe.reconcile.outcome import Reconciliation, RecordResult, Verdict, WindowStatus

# A reconciliation run takes seconds on a small topic, minutes on a large one.
_RUN_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# How a reconciliation run ended: the `result` of synthetic_sla_reconciliation_runs_total.
# A run's verdict (probe.reconcile.outcome.Verdict), or failed: no comparison made.
RUN_RESULTS = (*(verdict.value for verdict in Verdict), "failed")


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
            "Windows (per partition) reconciled, by status: complete, mismatch, empty "
            "(nothing in it to compare), unverifiable.",
            ["target", "status"],
            registry=registry,
        )
        self.runs = Counter(
            "synthetic_sla_reconciliation_runs",
            "Reconciliation runs by result: complete, mismatch, nothing_compared (every "
            "window empty or unverifiable: records in windows not yet closed), failed (no "
            "comparison made: broker unreachable, table unreadable).",
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
        self.runs.labels(self.target, run.verdict.value).inc()
        self.mismatch_ratio.labels(self.target).set(run.mismatch_ratio)
        self.duration.labels(self.target).observe(run.duration_s)
        self.last_success.labels(self.target).set(run.finished_ms / 1000)

    def failed(self) -> None:
        """Count a run that could not compare (the last success stays where it was)."""
        self.runs.labels(self.target, "failed").inc()
