"""The chart's Grafana dashboard is built by charts/dashboard.py (grafana-foundation-sdk):
the committed JSON is what it builds, its panels keep to their rows, and every number
has a unit.

What the panels show is tested where it is read: tests/test_slo_rules.py (the metrics
and rules the queries read), tests/test_chart.py (the ConfigMap, exemplars) and
tests/test_prometheus_e2e.py (every query against a real Prometheus).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "synthetic-sla-probe" / "dashboards" / "synthetic-sla-probe.json"


def _load_builder() -> Any:
    """charts/dashboard.py, the script `make dashboard` runs (not a package module)."""
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "charts" / "dashboard.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dashboard = _load_builder()


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return panels


def test_dashboard_json_is_built_by_charts_dashboard_py() -> None:
    assert DASHBOARD.read_text() == dashboard.dashboard_json(), (
        "charts/synthetic-sla-probe/dashboards/synthetic-sla-probe.json is out of date: "
        "run `make dashboard`"
    )


def test_dashboard_check_fails_on_a_stale_file_and_passes_once_written(tmp_path: Path) -> None:
    written = tmp_path / "dashboard.json"
    assert dashboard.main(["--check", "-o", str(written)]) == 1  # missing
    written.write_text(DASHBOARD.read_text().replace('"1m"', '"5m"'))
    assert dashboard.main(["--check", "-o", str(written)]) == 1  # edited by hand
    assert dashboard.main(["-o", str(written)]) == 0
    assert dashboard.main(["--check", "-o", str(written)]) == 0
    assert written.read_text() == DASHBOARD.read_text()


def test_dashboard_panels_do_not_overlap_and_stay_under_their_row() -> None:
    """Grafana orders panels by position: one above its row's header ends up in another row."""
    taken: dict[tuple[int, int], str] = {}
    rows = [p["gridPos"]["y"] for p in _panels() if p["type"] == "row"]
    header = -1
    for panel in _panels():
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[x, y]}"
                taken[x, y] = panel["title"]
        if panel["type"] == "row":
            header = grid["y"]
            continue
        below = [y for y in rows if y > header]
        assert grid["y"] > header, panel["title"]
        assert not below or grid["y"] + grid["h"] <= below[0], panel["title"]


def test_dashboard_panels_state_their_unit() -> None:
    """Every number has a unit, or mappings that turn a 0/1 state into words."""
    for panel in _panels():
        if panel["type"] in {"timeseries", "stat"}:
            defaults = panel["fieldConfig"]["defaults"]
            assert defaults.get("unit") or defaults.get("mappings"), panel["title"]
        if panel["type"] == "heatmap":
            assert panel["options"]["cellValues"]["unit"], panel["title"]


def test_dashboard_panel_ids_and_variable_ids_are_distinct() -> None:
    """Grafana keys panels (links, ?viewPanel=) and variables' state by these ids."""
    ids = [panel["id"] for panel in _panels()]
    assert len(ids) == len(set(ids))
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    assert [v["id"] for v in variables] == [v["name"] for v in variables]
