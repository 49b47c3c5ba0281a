"""The status page's renderer: pure, escaped, bounded, with stable hooks."""

from __future__ import annotations

import pytest

from probe.status_page import (
    FailureRow,
    PartitionStaleness,
    ReconcileRun,
    RoundVerdicts,
    SinkBatchProgress,
    SloTable,
    SloWindow,
    StageStatus,
    StatusSnapshot,
    render,
)
from tests.status_dom import parse

NOW_NS = 1_800_000_000 * 10**9
HOSTILE = '<script>alert("x")</script>&"\'><img src=x onerror=alert(1)>'


def snapshot(**fields: object) -> StatusSnapshot:
    base: dict[str, object] = {
        "service": "run",
        "target": "orders",
        "now_ns": NOW_NS,
        "ready": True,
        "readiness": "ready",
        "refresh_s": 20,
    }
    return StatusSnapshot(**{**base, **fields})  # type: ignore[arg-type]


def test_the_page_refreshes_itself_and_needs_no_script() -> None:
    page = render(snapshot())
    dom = parse(page)
    refresh = [m for m in dom.find_all("meta") if m.attrs.get("http-equiv") == "refresh"]
    assert [m.attrs["content"] for m in refresh] == ["20"]
    assert not dom.find_all("script")
    assert page.startswith("<!DOCTYPE html>")


def test_every_outside_string_is_escaped() -> None:
    stage = StageStatus(target=HOSTILE, stage=HOSTILE)
    failure = FailureRow(NOW_NS, HOSTILE, HOSTILE, HOSTILE, HOSTILE, 3, 7, 2, trace_id=HOSTILE)
    page = render(
        snapshot(
            target=HOSTILE,
            readiness=HOSTILE,
            version=HOSTILE,
            stages=(stage,),
            failures=(failure,),
            reconcile_runs=(ReconcileRun(HOSTILE, NOW_NS, HOSTILE, HOSTILE),),
        )
    )
    dom = parse(page)
    assert not dom.find_all("script")
    assert not dom.find_all("img")
    # The strings survive as text and attribute values, exactly.
    assert dom.by_id("readiness").cell("reason") == HOSTILE  # type: ignore[union-attr]
    row = dom.find_all("tr", "failure")[0]
    assert row.cell("reason") == HOSTILE
    assert row.cell("trace-id") == HOSTILE
    assert row.attrs["data-outcome"] == HOSTILE
    assert dom.find_all("section", "stage")[0].attrs["data-target"] == HOSTILE
    assert dom.find_all("tr", "run")[0].cell("summary") == HOSTILE


def test_readiness_says_why_not_ready() -> None:
    dom = parse(render(snapshot(ready=False, readiness="kafka: broker unreachable")))
    readiness = dom.by_id("readiness")
    assert readiness is not None
    assert readiness.attrs["data-ready"] == "false"
    assert "not-ready" in readiness.classes
    assert readiness.cell("reason") == "kafka: broker unreachable"


@pytest.mark.parametrize(
    ("counts", "verdict"),
    [
        ({}, "idle"),
        ({"delivered": 3}, "ok"),
        ({"delivered": 3, "lost": 1}, "failing"),
        ({"produce_failed": 3}, "failing"),
        ({"delivered": 3, "invalid": 1}, "failing"),
        ({"delivered": 3, "anomalies": 2}, "ok"),
    ],
)
def test_a_round_verdict(counts: dict[str, int], verdict: str) -> None:
    round_ = RoundVerdicts(NOW_NS, **counts)  # type: ignore[arg-type]
    stage = StageStatus("orders", "consumer", rounds=(round_,))
    row = parse(render(snapshot(stages=(stage,)))).find_all("tr", "round")[0]
    assert row.attrs["data-verdict"] == verdict
    assert row.cell("delivered") == str(counts.get("delivered", 0))


def test_rounds_are_listed_newest_first() -> None:
    rounds = tuple(RoundVerdicts(NOW_NS + i * 10**9, delivered=i) for i in range(3))
    stage = StageStatus("orders", "consumer", rounds=rounds)
    rows = parse(render(snapshot(stages=(stage,)))).find_all("tr", "round")
    assert [r.cell("delivered") for r in rows] == ["2", "1", "0"]


@pytest.mark.parametrize(
    ("good", "total", "objective", "burn", "left"),
    [
        (1000, 1000, 0.999, 0.0, 1.0),
        (999, 1000, 0.999, 1.0, 0.0),
        (990, 1000, 0.999, 10.0, -9.0),
        (99, 100, 0.99, 1.0, 0.0),
        (0, 0, 0.999, None, None),
    ],
)
def test_burn_rate_and_budget_left(
    good: int, total: int, objective: float, burn: float | None, left: float | None
) -> None:
    window = SloWindow("1h", 3600, 3600, good, total, objective)
    assert window.burn_rate == pytest.approx(burn)
    assert window.budget_left == pytest.approx(left)


def test_slo_rows_carry_window_and_burn() -> None:
    windows = (
        SloWindow("5m", 300, 300, 90, 100, 0.999),
        SloWindow("1h", 3600, 600, 0, 0, 0.999),
    )
    table = SloTable("availability", 0.999, "delivered of all fates", windows)
    dom = parse(render(snapshot(stages=(StageStatus("orders", "consumer", slos=(table,)),))))
    rows = {r.attrs["data-window"]: r for r in dom.find_all("tr", "window")}
    assert float(rows["5m"].attrs["data-burn-rate"]) == pytest.approx(100.0)
    assert "exhausted" in rows["5m"].find_all(cls="budget-left")[0].classes
    assert rows["1h"].attrs["data-burn-rate"] == ""
    # Counted over less than the window: it says how much.
    assert "10m 0s" in rows["1h"].text()


def test_worst_partitions_and_sink_progress() -> None:
    worst = (PartitionStaleness(7, 600.0, True, 2), PartitionStaleness(3, 2.5, False, None))
    stage = StageStatus("orders", "consumer", worst=worst, partitions=10_000, stale_partitions=1)
    sink = SinkBatchProgress(True, 42, 1.5, 12.0, 0, 1)
    dom = parse(render(snapshot(stages=(stage,), sink=sink)))
    rows = dom.find_all("tr", "partition")
    assert [(r.attrs["data-partition"], r.attrs["data-stale"]) for r in rows] == [
        ("7", "true"),
        ("3", "false"),
    ]
    assert rows[0].cell("broker") == "2"
    progress = dom.by_id("sink-progress")
    assert progress is not None
    assert progress.cell("batches") == "42"
    assert progress.find_all(cls="query-state")[0].attrs["data-running"] == "true"


def test_reconcile_runs_without_stages() -> None:
    runs = (
        ReconcileRun("r1", NOW_NS, "complete", "complete"),
        ReconcileRun("", NOW_NS, "failed", "no broker"),
    )
    dom = parse(render(snapshot(service="reconcile", reconcile_runs=runs)))
    rows = dom.find_all("tr", "run")
    assert [r.attrs["data-verdict"] for r in rows] == ["failed", "complete"]
    assert dom.by_id("stages") is None
    assert dom.by_id("failures") is None
    assert (
        "No run finished"
        in parse(render(snapshot(service="reconcile", reconcile_runs=())))
        .by_id("reconcile-runs")
        .text()
    )  # type: ignore[union-attr]
