"""What `reconcile --every` shows on its status page: the last runs, bounded."""

from __future__ import annotations

from probe.core.errors import ReconcileFailed
from probe.reconcile.outcome import Reconciliation
from probe.services.reconcile import RUNS_SHOWN, Readiness
from probe.status_board import StatusView
from probe.status_page import render
from tests.status_dom import parse


def test_the_last_runs_are_kept_with_a_failure_and_its_reason() -> None:
    readiness = Readiness()
    for n in range(RUNS_SHOWN + 5):
        readiness.completed(Reconciliation(f"r{n}", "orders", "/t", 0, 60_000 + n, []))
    readiness.failed(ReconcileFailed("no broker of 127.0.0.1:9 answered <in time>"), 2 * 10**18)
    assert len(readiness.runs) == RUNS_SHOWN
    assert readiness() == (
        False,
        "reconcile: last run failed: no broker of 127.0.0.1:9 answered <in time>",
    )
    view = StatusView("reconcile", "orders", readiness, reconcile_runs=lambda: readiness.runs)
    dom = parse(render(view()))
    rows = dom.find_all("tr", "run")
    assert len(rows) == RUNS_SHOWN
    assert rows[0].attrs["data-verdict"] == "failed"
    assert rows[0].cell("summary") == "no broker of 127.0.0.1:9 answered <in time>"
    assert rows[1].attrs["data-verdict"] == "nothing_compared"
    assert dom.by_id("stages") is None
