"""A run's result: ``expect.max_lost`` judged on the probe's counters at the end, and
said in the report and the detection table."""

from __future__ import annotations

import pytest

from probe.gameday.report import markdown_rows, table, to_json
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
