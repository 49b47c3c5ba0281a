"""A run's result: ``expect.max_lost`` judged on the probe's counters at the end, and
said in the report and the detection table."""

from __future__ import annotations

import pytest

from probe.gameday.report import (
    MARKDOWN_HEADER,
    TABLE_END,
    TABLE_START,
    markdown_rows,
    splice_table,
    table,
    to_json,
)
from probe.gameday.runner import GamedayResult
from probe.gameday.scenario import Scenario
from probe.gameday.verdict import PhaseTimes, TimelineVerdict

QUIET = TimelineVerdict(alerts=[], false_pages=[], resolution=None)


def _result(max_lost: int | None, canaries: dict[str, float] | None) -> GamedayResult:
    scenario = Scenario.model_validate(
        {
            "name": "kafka-rolling-restart",
            "broker": "apache-kafka",
            "fault": {"kind": "kafka-rolling-restart"},
            "expect": {"max_lost": max_lost},
        }
    )
    return GamedayResult(
        scenario, PhaseTimes(0.0, 10.0, 20.0, 30.0), QUIET, computed=QUIET, canaries=canaries
    )


@pytest.mark.parametrize(
    ("max_lost", "canaries", "failures"),
    [
        (0, {"delivered": 120.0, "lost": 0.0, "produce_failed": 4.0}, []),
        (0, {"delivered": 120.0}, []),
        (2, {"delivered": 120.0, "lost": 2.0}, []),
        (0, {"delivered": 120.0, "lost": 3.0}, ["3 canaries lost, more than 0"]),
        (0, None, ["the probe's lost canaries could not be read at the end"]),
        # Not asked: not judged, whatever was lost.
        (None, {"lost": 30.0}, []),
    ],
)
def test_max_lost_is_judged_on_the_probes_counters(
    max_lost: int | None, canaries: dict[str, float] | None, failures: list[str]
) -> None:
    assert _result(max_lost, canaries).failures() == failures


def test_the_lost_canaries_are_in_every_report() -> None:
    result = _result(0, {"delivered": 120.0, "lost": 0.0, "produce_failed": 4.0})
    assert to_json(result)["canaries"] == {"delivered": 120.0, "lost": 0.0, "produce_failed": 4.0}
    assert to_json(result)["max_lost"] == 0
    assert (
        "canaries (the probe's counters at the end, live): delivered 120, lost 0, "
        "produce_failed 4; at most 0 lost"
    ) in table(result).splitlines()
    assert markdown_rows(result)[0] == (
        "| kafka-rolling-restart | canaries lost | 0 lost of 124 (4 produce_failed) "
        "| - | 0 | pass |"
    )
    failed = _result(0, {"delivered": 120.0, "lost": 3.0})
    assert markdown_rows(failed)[0].endswith("| 0 | FAIL |")
    # Without max_lost, the table keeps its rows as they were.
    assert len(markdown_rows(_result(None, {"lost": 1.0}))) == 1


def _document(*rows: str) -> str:
    table_text = "\n".join([*MARKDOWN_HEADER, *rows])
    return f"# Detection\n\n{TABLE_START}\n{table_text}\n{TABLE_END}\n\nAfter.\n"


def _row(scenario: str, what: str) -> str:
    return f"| {scenario} | {what} | 1 | 2 | 3 | pass |"


def test_a_run_of_all_scenarios_writes_the_whole_table() -> None:
    old = _document(_row("a", "old"), _row("b", "old"))
    written = splice_table(old, [_row("c", "new")])
    assert _row("c", "new") in written
    assert "| a |" not in written
    assert "| b |" not in written
    assert written.endswith(f"{TABLE_END}\n\nAfter.\n")


def test_a_run_of_named_scenarios_replaces_only_their_rows_in_place() -> None:
    old = _document(_row("a", "old 1"), _row("a", "old 2"), _row("b", "old"), _row("c", "old"))
    written = splice_table(
        old, [_row("b", "new 1"), _row("b", "new 2"), _row("d", "new")], theirs_only=True
    )
    rows = [
        line for line in written.splitlines() if line.startswith("| ") and "scenario" not in line
    ]
    assert rows == [
        _row("a", "old 1"),
        _row("a", "old 2"),
        _row("b", "new 1"),
        _row("b", "new 2"),
        _row("c", "old"),
        _row("d", "new"),  # a scenario the table did not hold yet: at the end
    ]
