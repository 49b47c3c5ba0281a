"""The reconciliation's series: every one at zero from the start, counted per run."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from probe.reconcile.metrics import ReconcileMetrics
from probe.reconcile.outcome import Reconciliation, Samples, Tally, WindowResult
from probe.reconcile.windows import Window
from tests.conftest import parse_samples, sample


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse_samples(generate_latest(registry).decode())


def test_every_series_exists_at_zero_before_the_first_run() -> None:
    registry = CollectorRegistry()
    ReconcileMetrics(registry, "orders")
    samples = _samples(registry)
    for result in (
        "matched",
        "missing",
        "extra",
        "duplicated",
        "checksum_mismatch",
        "unverifiable",
    ):
        key = (
            "synthetic_sla_reconciliation_records_total",
            (("result", result), ("target", "orders")),
        )
        assert samples[key] == 0
    for status in ("complete", "mismatch", "empty", "unverifiable"):
        assert sample(samples, "synthetic_sla_reconciliation_windows_total", status=status) == 0
    for result in ("complete", "mismatch", "nothing_compared", "failed"):
        assert sample(samples, "synthetic_sla_reconciliation_runs_total", result=result) == 0
    assert sample(samples, "synthetic_sla_reconciliation_mismatch_ratio") == 0
    assert sample(samples, "synthetic_sla_reconciliation_last_success_timestamp_seconds") == 0
    assert sample(samples, "synthetic_sla_reconciliation_duration_seconds_count") == 0


def test_a_run_is_counted_by_result_and_status() -> None:
    registry = CollectorRegistry()
    metrics = ReconcileMetrics(registry, "orders")
    run = Reconciliation(
        "r1",
        "orders",
        "/t",
        started_ms=1_700_000_000_000,
        finished_ms=1_700_000_012_500,
        windows=[
            WindowResult(Window(0, 0, 10), Tally(source=10, sink=10, matched=10)),
            WindowResult(
                Window(1, 0, 10),
                Tally(source=10, sink=9, matched=8, missing=1, mismatched=1, samples=Samples()),
            ),
            WindowResult(Window(2, 0, 10, verifiable=False), Tally(source=3, sink=7, matched=3)),
        ],
    )
    metrics.completed(run)
    metrics.failed()
    samples = _samples(registry)
    assert sample(samples, "synthetic_sla_reconciliation_records_total", result="matched") == 18
    assert sample(samples, "synthetic_sla_reconciliation_records_total", result="missing") == 1
    assert (
        sample(samples, "synthetic_sla_reconciliation_records_total", result="checksum_mismatch")
        == 1
    )
    assert sample(samples, "synthetic_sla_reconciliation_records_total", result="unverifiable") == 7
    assert sample(samples, "synthetic_sla_reconciliation_windows_total", status="mismatch") == 1
    assert sample(samples, "synthetic_sla_reconciliation_windows_total", status="unverifiable") == 1
    assert sample(samples, "synthetic_sla_reconciliation_runs_total", result="mismatch") == 1
    assert sample(samples, "synthetic_sla_reconciliation_runs_total", result="failed") == 1
    assert sample(samples, "synthetic_sla_reconciliation_mismatch_ratio") == 2 / 20
    assert (
        sample(samples, "synthetic_sla_reconciliation_last_success_timestamp_seconds")
        == 1_700_000_012.5
    )
    assert sample(samples, "synthetic_sla_reconciliation_duration_seconds_sum") == 12.5


def test_a_run_that_compared_nothing_is_counted_as_such() -> None:
    registry = CollectorRegistry()
    metrics = ReconcileMetrics(registry, "orders")
    empty = [WindowResult(Window(p, 0, 0, 0, 300_000), Tally()) for p in range(3)]
    metrics.completed(Reconciliation("r1", "orders", "/t", 0, 1_000, empty))
    samples = _samples(registry)
    assert (
        sample(samples, "synthetic_sla_reconciliation_runs_total", result="nothing_compared") == 1
    )
    assert sample(samples, "synthetic_sla_reconciliation_runs_total", result="complete") == 0
    assert sample(samples, "synthetic_sla_reconciliation_windows_total", status="empty") == 3
    assert sample(samples, "synthetic_sla_reconciliation_windows_total", status="complete") == 0
