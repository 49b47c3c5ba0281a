"""Reconciliation windows: which offsets of which partition are compared. Pure.

A window is a range of offsets ``[start, end)`` of one Kafka partition. Windows are
planned on the driver from the log's offsets alone, then both sides (the topic and
the table) place a record by its partition and offset, so a record is in the same
window on both sides whatever its timestamps say.

Two ways to cut a partition:

- **by offsets**: every ``size`` offsets, aligned on multiples of it
  (``[0, 1000)``, ``[1000, 2000)``...), so a window is the same from run to run;
- **by time**: every ``duration`` of record time, aligned on the epoch
  (``12:00-12:05``...); each boundary becomes, per partition, the first offset whose
  record is at or after it (Kafka's ``offsets_for_times``), which assumes record
  timestamps do not go backwards within a partition (LogAppendTime, or one producer
  per partition).

**Fair windows.** Records younger than the settle delay may still be on their way to
the table: a window is compared only up to the first offset younger than
``now - settle`` (by offsets: the last window is cut there; by time: only windows that
ended before it). And a window is **unverifiable** when some of its records may have
left the topic (retention, deletion) before they could be compared: its source count
would be short through no fault of the sink. An offset window is unverifiable when it
starts before the log's first offset; a time window when the log has lost records
and the window's first offset is the log's first one (a deleted record might have
belonged to it).

**Pending records.** What a run does not compare yet is said, not dropped: the
records after the last compared offset (by offsets: younger than the settle delay; by
time: in a window that has not closed, or closed less than the settle delay ago) are
:class:`Pending`, each range with the moment a run first compares it: the window's
end plus the settle delay (by offsets: now plus the settle delay, at the latest).

**Rows by time.** A table matched by a key column has no partition or offset to
place a row by. A row whose key matches a record is in that record's window; one
whose key matches none (an *extra* row) can only be placed by a time column of the
table, in a window with no partition (:func:`rows_by_time`) spanning a stretch of
time the placed windows cover. It is unverifiable when one of them is: a row whose
record left the topic would look extra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """How partitions are cut: every ``offsets`` offsets, or every ``duration_ms`` of
    record time (exactly one of them).

    >>> WindowSpec(duration_ms=300_000).by_time
    True
    """

    offsets: int | None = None
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.offsets is None) == (self.duration_ms is None):
            raise ValueError("a window is cut by offsets or by duration, exactly one")
        if min(size for size in (self.offsets, self.duration_ms) if size is not None) < 1:
            raise ValueError("a window's size must be >= 1")

    @property
    def by_time(self) -> bool:
        return self.duration_ms is not None


@dataclass(frozen=True, slots=True)
class PartitionLog:
    """One partition's log as listed: ``begin`` its first offset still held (0 unless
    records were deleted), ``end`` the next offset to be written."""

    partition: int
    begin: int
    end: int


@dataclass(frozen=True, slots=True)
class Window:
    """Offsets ``[start, end)`` of one partition, compared as one.

    ``start_ms``/``end_ms`` are the record-time bounds of a time window (None for an
    offset window). ``verifiable`` is False when some of its source records may have
    left the topic: its counts are reported, never judged. ``partition`` None: the
    table's rows placed by their time alone (see rows_by_time), holding no offsets.
    """

    partition: int | None
    start: int
    end: int
    start_ms: int | None = None
    end_ms: int | None = None
    verifiable: bool = True

    @property
    def label(self) -> str:
        """``12:00:00-12:05:00`` (UTC) for a time window, ``offsets 0-999`` otherwise.

        >>> Window(0, 0, 1000).label
        'offsets 0-999'
        >>> Window(None, 0, 0, None, 300_000).label
        'before 00:05:00'
        """
        if self.start_ms is not None and self.end_ms is not None:
            return f"{_clock(self.start_ms)}-{_clock(self.end_ms)}"
        if self.end_ms is not None:
            return f"before {_clock(self.end_ms)}"
        return f"offsets {self.start}-{self.end - 1}" if self.end > self.start else "no offsets"


@dataclass(frozen=True, slots=True)
class Pending:
    """Offsets ``[start, end)`` of one partition that this run could not compare yet,
    and ``compared_from_ms``: when a run first compares them (they will have settled
    and their window closed). Counted by offsets: a transactional topic's markers
    count as records here. ``start_ms``/``end_ms``: the open time window's bounds
    (None by offsets).

    >>> Pending(0, 40, 49, 930_000).records
    9
    """

    partition: int
    start: int
    end: int
    compared_from_ms: int
    start_ms: int | None = None
    end_ms: int | None = None

    @property
    def records(self) -> int:
        return self.end - self.start


def _clock(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%H:%M:%S" if moment.microsecond == 0 else "%H:%M:%S.%f")


def offset_windows(log: PartitionLog, size: int, since: int, settled: int) -> list[Window]:
    """Windows of ``size`` offsets from the one holding offset ``since`` up to
    ``settled`` (the first offset too young to compare; the last window is cut there).

    >>> [(w.start, w.end, w.verifiable) for w in offset_windows(
    ...     PartitionLog(0, begin=150, end=420), 100, since=150, settled=390)]
    [(100, 200, False), (200, 300, True), (300, 390, True)]
    """
    settled = min(settled, log.end)
    first = (max(since, 0) // size) * size
    return [
        Window(log.partition, start, min(start + size, settled), verifiable=start >= log.begin)
        for start in range(first, settled, size)
    ]


def offset_pending(log: PartitionLog, settled: int, now_ms: int, settle_ms: int) -> list[Pending]:
    """The records of one partition from ``settled`` (the first offset too young to
    compare) to the log's end: compared by the time the newest of them settles.

    >>> [(p.start, p.end, p.compared_from_ms) for p in offset_pending(
    ...     PartitionLog(0, begin=0, end=420), 390, now_ms=1_000, settle_ms=30_000)]
    [(390, 420, 31000)]
    """
    start = min(max(settled, log.begin), log.end)
    if start >= log.end:
        return []
    return [Pending(log.partition, start, log.end, now_ms + settle_ms)]


def time_boundaries(now_ms: int, lookback_ms: int, settle_ms: int, duration_ms: int) -> list[int]:
    """The window boundaries to compare now: epoch multiples of ``duration_ms`` from
    the one at or before ``now - lookback`` to the last one at or before
    ``now - settle``. Consecutive boundaries bound one window; fewer than two, none.

    >>> time_boundaries(now_ms=1_000_000, lookback_ms=400_000, settle_ms=30_000,
    ...                 duration_ms=300_000)
    [600000, 900000]
    """
    first = math.floor((now_ms - lookback_ms) / duration_ms) * duration_ms
    last = math.floor((now_ms - settle_ms) / duration_ms) * duration_ms
    return list(range(first, last + 1, duration_ms))


def open_boundaries(now_ms: int, lookback_ms: int, settle_ms: int, duration_ms: int) -> list[int]:
    """The boundaries of the windows not compared now: from the last one
    :func:`time_boundaries` gives (not before the lookback) to the first after now.
    Consecutive boundaries bound one open window; its records wait for a later run.

    >>> open_boundaries(now_ms=1_000_000, lookback_ms=400_000, settle_ms=30_000,
    ...                 duration_ms=300_000)
    [900000, 1200000]
    >>> open_boundaries(now_ms=1_210_000, lookback_ms=400_000, settle_ms=30_000,
    ...                 duration_ms=300_000)
    [900000, 1200000, 1500000]
    """
    first = math.floor((now_ms - lookback_ms) / duration_ms) * duration_ms
    last = math.floor((now_ms - settle_ms) / duration_ms) * duration_ms
    after_now = math.floor(now_ms / duration_ms) * duration_ms + duration_ms
    return list(range(max(first, last), after_now + 1, duration_ms))


def time_pending(
    log: PartitionLog,
    boundaries: Sequence[int],
    offsets_at: Mapping[int, int | None],
    settle_ms: int,
) -> list[Pending]:
    """The records of one partition in the open windows between ``boundaries``
    (:func:`open_boundaries`), each window's with the moment it settles. The last
    boundary lies after now: ``offsets_at`` None there, so the last window runs to the
    log's end (a record stamped in the future waits there too).

    >>> [(p.start, p.end, p.compared_from_ms) for p in time_pending(
    ...     PartitionLog(0, begin=0, end=70), [900_000, 1_200_000],
    ...     {900_000: 40, 1_200_000: None}, settle_ms=30_000)]
    [(40, 70, 1230000)]
    """
    return [
        Pending(
            log.partition,
            window.start,
            window.end,
            window.end_ms + settle_ms,
            start_ms=window.start_ms,
            end_ms=window.end_ms,
        )
        for window in time_windows(log, boundaries, offsets_at)
        if window.end > window.start and window.end_ms is not None
    ]


def time_windows(
    log: PartitionLog, boundaries: Sequence[int], offsets_at: Mapping[int, int | None]
) -> list[Window]:
    """The time windows between consecutive ``boundaries`` on one partition.

    ``offsets_at`` maps each boundary to the first offset of this partition whose
    record is at or after it, None when every record is older (then the log's end).

    >>> [(w.start, w.end, w.verifiable) for w in time_windows(
    ...     PartitionLog(1, begin=0, end=70), [0, 300_000, 600_000],
    ...     {0: 0, 300_000: 40, 600_000: None})]
    [(0, 40, True), (40, 70, True)]
    """
    offsets = [_at(log, offsets_at[moment]) for moment in boundaries]
    return [
        Window(
            log.partition,
            start,
            max(start, end),
            start_ms=t0,
            end_ms=t1,
            # The log lost records before `begin`: if this window starts there, some
            # of them may have been its own.
            verifiable=not (log.begin > 0 and start <= log.begin),
        )
        for (t0, start), (t1, end) in pairwise(zip(boundaries, offsets, strict=True))
    ]


def _at(log: PartitionLog, offset: int | None) -> int:
    return log.end if offset is None else min(max(offset, log.begin), log.end)


def rows_by_time(placed: Sequence[Window], spans: Sequence[tuple[int | None, int]]) -> list[Window]:
    """Windows with no partition, one per span ``(start_ms, end_ms)`` of table time
    (start None: from the beginning), for the rows no record's window holds. Each is
    verifiable when every placed window it overlaps is (an offset window, with no
    time bounds, overlaps every span).

    >>> [(w.start_ms, w.end_ms, w.verifiable) for w in rows_by_time(
    ...     [Window(0, 0, 40, 0, 300_000, verifiable=False), Window(0, 40, 70, 300_000, 600_000)],
    ...     [(0, 300_000), (300_000, 600_000)])]
    [(0, 300000, False), (300000, 600000, True)]
    """
    return [
        Window(
            None,
            0,
            0,
            start_ms=start,
            end_ms=end,
            verifiable=all(
                w.verifiable
                for w in placed
                if w.start_ms is None
                or w.end_ms is None
                or ((start is None or w.end_ms > start) and w.start_ms < end)
            ),
        )
        for start, end in spans
    ]
