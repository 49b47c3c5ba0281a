"""Reconciliation windows: the pure planner, table-driven."""

from __future__ import annotations

import doctest

import pytest

import probe.reconcile.windows as windows_module
from probe.reconcile.windows import (
    PartitionLog,
    Pending,
    Window,
    WindowSpec,
    offset_pending,
    offset_windows,
    open_boundaries,
    rows_by_time,
    time_boundaries,
    time_pending,
    time_windows,
)

MINUTE = 60_000


def test_the_examples_in_the_docstrings_hold() -> None:
    assert doctest.testmod(windows_module).failed == 0


@pytest.mark.parametrize(
    ("log", "since", "settled", "expected"),
    [
        # Aligned on multiples of the size, the last one cut at the settled offset.
        (PartitionLog(0, 0, 250), 0, 250, [(0, 100, True), (100, 200, True), (200, 250, True)]),
        # Records younger than the settle delay are not compared at all.
        (PartitionLog(0, 0, 250), 0, 120, [(0, 100, True), (100, 120, True)]),
        # The lookback starts inside a window: the whole window is compared.
        (PartitionLog(0, 0, 250), 130, 250, [(100, 200, True), (200, 250, True)]),
        # Records before 150 left the log: the window holding them is unverifiable.
        (PartitionLog(0, 150, 250), 150, 250, [(100, 200, False), (200, 250, True)]),
        # A settled offset past the log's end (listed a moment apart) stops at the end.
        (PartitionLog(0, 0, 90), 0, 95, [(0, 90, True)]),
        # Nothing settled yet, or an empty log: nothing to compare.
        (PartitionLog(0, 0, 90), 0, 0, []),
        (PartitionLog(0, 0, 0), 0, 0, []),
    ],
)
def test_offset_windows(
    log: PartitionLog, since: int, settled: int, expected: list[tuple[int, int, bool]]
) -> None:
    planned = offset_windows(log, 100, since, settled)
    assert [(w.start, w.end, w.verifiable) for w in planned] == expected
    assert all(w.partition == log.partition and w.start_ms is None for w in planned)


@pytest.mark.parametrize(
    ("now", "lookback", "settle", "expected"),
    [
        # 12:07:10 with a 10-minute lookback and 30 s settle: 11:55-12:00, 12:00-12:05.
        (
            (12 * 60 + 7) * MINUTE + 10_000,
            10 * MINUTE,
            30_000,
            [(11 * 60 + 55) * MINUTE, 12 * 60 * MINUTE, (12 * 60 + 5) * MINUTE],
        ),
        # 12:05:20 with 30 s settle: the window ending at 12:05 has not settled.
        (
            (12 * 60 + 5) * MINUTE + 20_000,
            10 * MINUTE,
            30_000,
            [(11 * 60 + 55) * MINUTE, 12 * 60 * MINUTE],
        ),
    ],
)
def test_time_boundaries_are_aligned_and_settled(
    now: int, lookback: int, settle: int, expected: list[int]
) -> None:
    assert time_boundaries(now, lookback, settle, 5 * MINUTE) == expected


# --- What a run leaves for a later one: records in windows still open -----------------

NOON = 12 * 60 * MINUTE


@pytest.mark.parametrize(
    ("now", "lookback", "expected"),
    [
        # Records written 45 s ago, at 12:02:15: the window 12:00-12:05 is open, the
        # ones before it are compared. Its records are compared from 12:05:30.
        (NOON + 3 * MINUTE, 60 * MINUTE, [NOON, NOON + 5 * MINUTE]),
        # 12:05:20: 12:00-12:05 has closed but not settled, 12:05-12:10 is open too.
        (NOON + 5 * MINUTE + 20_000, 60 * MINUTE, [NOON, NOON + 5 * MINUTE, NOON + 10 * MINUTE]),
        # 12:05:40: 12:00-12:05 has settled (compared), only 12:05-12:10 is open.
        (NOON + 5 * MINUTE + 40_000, 60 * MINUTE, [NOON + 5 * MINUTE, NOON + 10 * MINUTE]),
        # A lookback shorter than the settle delay: open windows start at the lookback.
        (NOON + 3 * MINUTE, 10_000, [NOON, NOON + 5 * MINUTE]),
        # Exactly on a boundary: the window starting now is open, and holds nothing yet.
        (NOON + 5 * MINUTE, 60 * MINUTE, [NOON, NOON + 5 * MINUTE, NOON + 10 * MINUTE]),
    ],
)
def test_open_boundaries_follow_the_last_compared_one_past_now(
    now: int, lookback: int, expected: list[int]
) -> None:
    bounds = open_boundaries(now, lookback, 30_000, 5 * MINUTE)
    assert bounds == expected
    compared = time_boundaries(now, lookback, 30_000, 5 * MINUTE)
    # Open windows start where the compared ones end: no record falls between them.
    if len(compared) > 1:
        assert bounds[0] == compared[-1]
    assert bounds[-1] > now


def test_records_in_open_windows_are_pending_until_their_window_settles() -> None:
    bounds = [NOON, NOON + 5 * MINUTE, NOON + 10 * MINUTE]
    log = PartitionLog(1, begin=0, end=90)
    pending = time_pending(
        log, bounds, {NOON: 70, NOON + 5 * MINUTE: 85, NOON + 10 * MINUTE: None}, 30_000
    )
    assert pending == [
        Pending(1, 70, 85, NOON + 5 * MINUTE + 30_000, NOON, NOON + 5 * MINUTE),
        Pending(1, 85, 90, NOON + 10 * MINUTE + 30_000, NOON + 5 * MINUTE, NOON + 10 * MINUTE),
    ]
    assert [p.records for p in pending] == [15, 5]
    # No record after the last compared window: nothing pending.
    assert (
        time_pending(
            log, bounds, {NOON: 90, NOON + 5 * MINUTE: None, NOON + 10 * MINUTE: None}, 30_000
        )
        == []
    )
    # An empty log.
    assert time_pending(PartitionLog(0, 0, 0), bounds, dict.fromkeys(bounds), 30_000) == []


@pytest.mark.parametrize(
    ("log", "settled", "expected"),
    [
        (PartitionLog(0, 0, 250), 240, [(240, 250)]),
        (PartitionLog(0, 0, 250), 250, []),  # everything settled
        (PartitionLog(0, 0, 250), 300, []),  # listed a moment apart
        (PartitionLog(0, 100, 250), 50, [(100, 250)]),  # from the log's first record
        (PartitionLog(0, 0, 0), 0, []),
    ],
)
def test_records_younger_than_the_settle_delay_are_pending(
    log: PartitionLog, settled: int, expected: list[tuple[int, int]]
) -> None:
    pending = offset_pending(log, settled, now_ms=NOON, settle_ms=30_000)
    assert [(p.start, p.end) for p in pending] == expected
    assert all(p.compared_from_ms == NOON + 30_000 and p.start_ms is None for p in pending)


def test_time_windows_take_the_first_offset_at_each_boundary() -> None:
    bounds = [0, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE]
    log = PartitionLog(2, begin=0, end=90)
    planned = time_windows(log, bounds, {0: 0, 5 * MINUTE: 30, 10 * MINUTE: 30, 15 * MINUTE: None})
    assert planned == [
        Window(2, 0, 30, 0, 5 * MINUTE, True),
        Window(2, 30, 30, 5 * MINUTE, 10 * MINUTE, True),  # no record in it
        Window(2, 30, 90, 10 * MINUTE, 15 * MINUTE, True),  # every record older than 15'
    ]
    assert planned[0].label == "00:00:00-00:05:00"


def test_a_time_window_that_may_have_lost_records_is_unverifiable() -> None:
    bounds = [0, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE]
    # Records 0..39 were deleted; 40 is the first record at or after 0' and at or
    # after 5': the deleted ones may have belonged to either window.
    log = PartitionLog(0, begin=40, end=90)
    planned = time_windows(log, bounds, {0: 40, 5 * MINUTE: 40, 10 * MINUTE: 60, 15 * MINUTE: 90})
    assert [(w.start, w.end, w.verifiable) for w in planned] == [
        (40, 40, False),
        (40, 60, False),
        (60, 90, True),  # record 59 is older than 10' and still here: nothing lost after
    ]


def test_rows_by_time_are_unverifiable_where_an_overlapping_window_is() -> None:
    # A table matched by key: its extra rows are placed by time. A row of a record
    # deleted from the topic would look extra, so a span overlapping a window that
    # may have lost records is not judged.
    placed = [
        Window(0, 40, 40, 0, 5 * MINUTE, verifiable=False),
        Window(0, 40, 60, 5 * MINUTE, 10 * MINUTE),
        Window(1, 0, 9, 5 * MINUTE, 10 * MINUTE),
    ]
    spans = [(0, 5 * MINUTE), (5 * MINUTE, 10 * MINUTE)]
    by_time = rows_by_time(placed, spans)
    assert [(w.partition, w.start_ms, w.end_ms, w.verifiable) for w in by_time] == [
        (None, 0, 5 * MINUTE, False),
        (None, 5 * MINUTE, 10 * MINUTE, True),
    ]
    # Offset windows have no time: each overlaps the one span (from the start here).
    offsets = [Window(0, 0, 100), Window(1, 0, 100, verifiable=False)]
    (span,) = rows_by_time(offsets, [(None, 10 * MINUTE)])
    assert (span.verifiable, span.label) == (False, "before 00:10:00")
    assert rows_by_time(offsets[:1], [(None, 10 * MINUTE)])[0].verifiable


@pytest.mark.parametrize(
    ("offsets", "duration_ms"), [(None, None), (100, 1000), (0, None), (None, 0)]
)
def test_a_window_spec_is_one_positive_size(offsets: int | None, duration_ms: int | None) -> None:
    with pytest.raises(ValueError, match="window"):
        WindowSpec(offsets, duration_ms)
