"""`sla-probe reconcile`'s own series (``--every`` serves them): its runs, the records
and windows they compared, the last run's mismatch ratio and success.

Their label values are the reconciliation's results, statuses and verdicts
(probe.reconcile.outcome), which sit in a layer above this package: so the
reconciliation's adapter, :class:`probe.reconcile.metrics.ReconcileMetrics`, names
them when it builds these series and counts each run on them.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# A reconciliation run takes seconds on a small topic, minutes on a large one.
RUN_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# The `result` of synthetic_sla_reconciliation_runs_total beside a run's verdicts: the
# run made no comparison.
RUN_FAILED = "failed"


class ReconcileSeries:
    """`sla-probe reconcile`'s series, every one at zero from the start.

    Records and windows are counted each time a run compares them; runs overlap in
    what they look back on, so a rate is "records checked per second", not distinct
    records. The mismatch ratio and the last success are the last run's: an alert on
    a ratio that stays above zero run after run is a persistent mismatch, and one on
    the age of the last success is a reconciliation gone stale.

    ``record_results``, ``window_statuses`` and ``verdicts``: every value of the
    ``result`` and ``status`` labels, created at zero (the runs' ``result`` also
    takes :data:`RUN_FAILED`).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        target: str,
        *,
        record_results: Iterable[str],
        window_statuses: Iterable[str],
        verdicts: Iterable[str],
    ) -> None:
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
            buckets=RUN_BUCKETS,
            registry=registry,
        )
        self.last_success = Gauge(
            "synthetic_sla_reconciliation_last_success_timestamp_seconds",
            "When the last reconciliation run completed (whatever it found); 0 before the first.",
            ["target"],
            registry=registry,
        )
        for result in record_results:
            self.records.labels(target, result)
        for status in window_statuses:
            self.windows.labels(target, status)
        for outcome in (*verdicts, RUN_FAILED):
            self.runs.labels(target, outcome)
        self.mismatch_ratio.labels(target)
        self.duration.labels(target)
        self.last_success.labels(target)
