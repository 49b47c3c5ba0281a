"""What a reconciliation concludes, and how it is shown: pure, table-driven."""

from __future__ import annotations

import doctest
import json

import pytest

import probe.reconcile.outcome as outcome_module
import probe.reconcile.render as render_module
from probe.reconcile.outcome import (
    Reconciliation,
    RecordResult,
    Samples,
    Tally,
    Verdict,
    WindowResult,
    WindowStatus,
)
from probe.reconcile.render import as_json, render_table
from probe.reconcile.report_table import report_rows
from probe.reconcile.windows import Pending, Window

COMPLETE = Tally(source=10, sink=10, matched=10)
MISSING = Tally(source=10, sink=8, matched=8, missing=2, samples=Samples(missing=(3, 7)))


def _run(*results: WindowResult, pending: tuple[Pending, ...] = ()) -> Reconciliation:
    return Reconciliation(
        "r1", "orders", "/sink/canaries", 1_000, 3_500, list(results), list(pending)
    )


def test_the_examples_in_the_docstrings_hold() -> None:
    assert doctest.testmod(outcome_module).failed == 0
    assert doctest.testmod(render_module).failed == 0


@pytest.mark.parametrize(
    ("window", "tally", "status"),
    [
        (Window(0, 0, 10), COMPLETE, WindowStatus.COMPLETE),
        (Window(0, 0, 10), MISSING, WindowStatus.MISMATCH),
        (Window(0, 0, 10), Tally(source=1, sink=2, matched=1, duplicated=1), WindowStatus.MISMATCH),
        (Window(0, 0, 10), Tally(sink=1, extra=1), WindowStatus.MISMATCH),
        (Window(0, 0, 10), Tally(source=1, sink=1, mismatched=1), WindowStatus.MISMATCH),
        # Nothing on either side: no evidence either way, never "complete".
        (Window(0, 5, 5), Tally(), WindowStatus.EMPTY),
        (Window(0, 0, 300), Tally(), WindowStatus.EMPTY),
        # Only records the table is not meant to hold (quarantined, foreign).
        (Window(0, 0, 2), Tally(excluded=2), WindowStatus.EMPTY),
        # Never judged, whatever its counts.
        (Window(0, 0, 10, verifiable=False), MISSING, WindowStatus.UNVERIFIABLE),
        (Window(0, 0, 10, verifiable=False), COMPLETE, WindowStatus.UNVERIFIABLE),
    ],
)
def test_window_status(window: Window, tally: Tally, status: WindowStatus) -> None:
    assert WindowResult(window, tally).status is status


def test_a_run_with_one_mismatch_fails_and_counts_every_record_once() -> None:
    run = _run(
        WindowResult(Window(0, 0, 10), COMPLETE),
        WindowResult(Window(1, 0, 10), MISSING),
        WindowResult(
            Window(2, 0, 10, verifiable=False), Tally(source=4, sink=9, matched=4, extra=5)
        ),
    )
    assert run.exit_code == 1
    assert run.records() == {
        RecordResult.MATCHED: 18,
        RecordResult.MISSING: 2,
        RecordResult.EXTRA: 0,
        RecordResult.DUPLICATED: 0,
        RecordResult.CHECKSUM_MISMATCH: 0,
        RecordResult.UNVERIFIABLE: 9,
    }
    assert run.mismatch_ratio == pytest.approx(2 / 20)
    assert run.windows_by_status() == {
        WindowStatus.COMPLETE: 1,
        WindowStatus.MISMATCH: 1,
        WindowStatus.EMPTY: 0,
        WindowStatus.UNVERIFIABLE: 1,
    }


def test_unverifiable_windows_beside_compared_ones_pass() -> None:
    lost = WindowResult(Window(0, 0, 10, verifiable=False), MISSING)
    run = _run(lost, WindowResult(Window(1, 0, 10), COMPLETE))
    assert (run.verdict, run.ok, run.exit_code) == (Verdict.COMPLETE, True, 0)


# The new user's run: records written 45 s ago (12:02:15), 5-minute windows, an hour of
# lookback: twelve windows per partition closed and empty, the records in 12:00-12:05.
NOON = 12 * 3_600_000
NOW = NOON + 3 * 60_000
CLOSES = NOON + 5 * 60_000 + 30_000  # the window's end plus the settle delay


def _empty_hour(partitions: int = 3) -> list[WindowResult]:
    return [
        WindowResult(Window(p, 0, 0, NOW - (13 - i) * 300_000, NOW - (12 - i) * 300_000), Tally())
        for p in range(partitions)
        for i in range(12)
    ]


def _just_written(*windows: WindowResult) -> Reconciliation:
    pending = [Pending(p, 0, 3, CLOSES, NOON, NOON + 300_000) for p in range(3)]
    return Reconciliation("r1", "sla", "/sink/canaries", NOW, NOW + 4_000, list(windows), pending)


@pytest.mark.parametrize(
    "windows",
    [
        [],  # no window closed yet
        _empty_hour(),  # every closed window empty
        [WindowResult(Window(0, 0, 10, verifiable=False), MISSING)],  # all unverifiable
        [WindowResult(Window(0, 0, 2), Tally(excluded=2))],  # only quarantined records
    ],
)
def test_a_run_that_compared_nothing_never_passes(windows: list[WindowResult]) -> None:
    for run in (_run(*windows), _just_written(*windows)):
        assert run.judged() == 0
        assert (run.verdict, run.ok, run.exit_code) == (Verdict.NOTHING_COMPARED, False, 3)
        assert run.mismatch_ratio == 0.0
        assert as_json(run)["ok"] is False
        assert render_table(run).splitlines()[-1].startswith("result: NOTHING COMPARED")


def test_records_just_written_say_how_many_wait_and_when_they_are_compared() -> None:
    run = _just_written(*_empty_hour())
    assert (run.pending_records, run.verdict_at_ms) == (9, CLOSES)
    lines = render_table(run).splitlines()
    # Empty windows are not listed as evidence of anything: no rows, no column header.
    assert lines[0] == "reconcile sla -> /sink/canaries (run r1)"
    assert len(lines) == 3
    assert lines[-2] == (
        "pending: 9 records in windows still open, on 3 partitions: compared from "
        "1970-01-01T12:05:30Z (in 2m30s)"
    )
    assert lines[-1] == (
        "result: NOTHING COMPARED (36 windows: 36 empty): 0 records judged, 9 pending until "
        "1970-01-01T12:05:30Z: not a pass; reconcile again then"
    )
    report = as_json(run)
    assert (report["ok"], report["verdict"], report["judged"]) == (False, "nothing_compared", 0)
    assert report["windows_by_status"] == {
        "complete": 0,
        "mismatch": 0,
        "empty": 36,
        "unverifiable": 0,
    }
    assert report["pending"] == {
        "records": 9,
        "partitions": 3,
        "verdict_at": "1970-01-01T12:05:30Z",
        "verdict_in_s": 150.0,
    }
    assert {w["status"] for w in report["windows"]} == {"empty"}


def test_a_run_with_nothing_in_the_lookback_says_so() -> None:
    run = _run(*_empty_hour())
    assert render_table(run).splitlines()[-1] == (
        "result: NOTHING COMPARED (36 windows: 36 empty): 0 records judged, none pending: "
        "the topic holds no record to compare in the lookback"
    )
    assert as_json(run)["pending"] == {
        "records": 0,
        "partitions": 0,
        "verdict_at": None,
        "verdict_in_s": None,
    }


def test_a_complete_run_names_what_is_still_pending() -> None:
    run = _just_written(WindowResult(Window(0, 0, 10, NOON - 300_000, NOON), COMPLETE))
    assert (run.verdict, run.exit_code) == (Verdict.COMPLETE, 0)
    lines = render_table(run).splitlines()
    assert lines[-2].startswith("pending: 9 records in windows still open, on 3 partitions")
    assert lines[-1].startswith("result: OK (1 windows complete): 0 missing")


def test_the_report_table_holds_empty_windows_and_pending_records_as_such() -> None:
    rows = report_rows(_just_written(*_empty_hour(partitions=1)))
    assert [r["status"] for r in rows] == ["empty"] * 12 + ["pending"] * 3
    pending = rows[-1]
    assert (pending["partition"], pending["start_offset"], pending["end_offset"]) == (2, 0, 3)
    assert (pending["source"], pending["sink"], pending["matched"], pending["missing"]) == (
        3,
        0,
        0,
        0,
    )
    assert pending["window_end"] is not None
    assert pending["window_end"].timestamp() * 1000 == NOON + 300_000


def test_the_table_names_partition_window_and_missing_offsets() -> None:
    run = _run(
        WindowResult(Window(0, 0, 10, 0, 300_000), COMPLETE),
        WindowResult(Window(1, 40, 50, 0, 300_000), MISSING),
        WindowResult(
            Window(2, 0, 30),
            Tally(
                source=30,
                sink=31,
                matched=29,
                mismatched=1,
                duplicated=1,
                samples=Samples(mismatched=(17,), duplicated=(4,)),
            ),
        ),
    )
    text = render_table(run)
    lines = text.splitlines()
    assert lines[0] == "reconcile orders -> /sink/canaries (run r1)"
    assert lines[2].split() == [
        "0",
        "00:00:00-00:05:00",
        "0-9",
        "10",
        "10",
        "0",
        "0",
        "0",
        "0",
        "OK",
    ]
    assert lines[3].split()[-1] == "MISMATCH"
    assert "partition 1, window 00:00:00-00:05:00 (offsets 40-49): 2 missing: offsets 3, 7" in lines
    assert (
        "partition 2, window offsets 0-29: 1 checksum mismatches: offsets 17; "
        "1 duplicated: offsets 4" in lines
    )
    assert lines[-1] == (
        "result: MISMATCH (2 of 3 windows): 2 missing, 0 extra, 1 duplicated, "
        "1 checksum mismatches in 51 records"
    )


def test_a_table_matched_by_key_names_its_extra_rows_by_key() -> None:
    rows = WindowResult(
        Window(None, 0, 0, 0, 300_000),
        Tally(sink=2, extra=2, samples=Samples(extra_keys=("order-17", "order-9"))),
    )
    text = render_table(_run(rows))
    line = text.splitlines()[2].split()
    assert (line[0], line[1], line[2], line[-1]) == ("-", "00:00:00-00:05:00", "-", "MISMATCH")
    assert "table rows by time 00:00:00-00:05:00: 2 extra: keys order-17, order-9" in text
    report = as_json(_run(rows))
    assert report["windows"][0]["partition"] is None
    assert report["windows"][0]["samples"]["extra_keys"] == ["order-17", "order-9"]
    assert report["records"]["extra"] == 2


def test_a_sample_shorter_than_its_count_says_so() -> None:
    tally = Tally(source=50, sink=0, missing=50, samples=Samples(missing=(0, 1, 2)))
    text = render_table(_run(WindowResult(Window(3, 0, 50), tally)))
    assert "50 missing: offsets 0, 1, 2, ..." in text


def test_json_holds_every_window_and_the_totals() -> None:
    run = _run(
        WindowResult(Window(0, 0, 10, 0, 300_000), COMPLETE),
        WindowResult(Window(1, 40, 50), MISSING),
    )
    report = json.loads(json.dumps(as_json(run)))
    assert report["ok"] is False
    assert report["records"]["missing"] == 2
    assert report["discrepancies"] == 2
    assert report["duration_s"] == 2.5
    assert report["windows"][0]["start"] == "1970-01-01T00:00:00Z"
    assert report["windows"][1] | {"samples": None} == {
        "partition": 1,
        "start_offset": 40,
        "end_offset": 50,
        "start": None,
        "end": None,
        "status": "mismatch",
        "source": 10,
        "sink": 8,
        "matched": 8,
        "missing": 2,
        "extra": 0,
        "duplicated": 0,
        "checksum_mismatch": 0,
        "excluded": 0,
        "source_checksum": "0000000000000000",
        "sink_checksum": "0000000000000000",
        "samples": None,
    }
    assert report["windows"][1]["samples"]["missing"] == [3, 7]
