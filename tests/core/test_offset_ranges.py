"""Offset ranges planned (probe.core.offset_ranges): a stream's batches admitted and
grouped into tasks, a batch read's ranges held inside the log and split. Pure: no
broker, no Spark."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

import probe.core.offset_ranges as offset_ranges_module
from probe.core.offset_ranges import (
    OffsetRange,
    admit,
    clamp_ranges,
    group_ranges,
    split_ranges,
)


def test_doctests() -> None:
    assert doctest.testmod(offset_ranges_module).failed == 0


@pytest.mark.parametrize(
    ("start", "latest", "limit", "end"),
    [
        ({"0": 0, "1": 0}, {"0": 10, "1": 2}, None, {"0": 10, "1": 2}),
        ({"0": 0, "1": 0}, {"0": 10, "1": 2}, 6, {"0": 4, "1": 2}),
        ({"0": 0, "1": 0, "2": 0}, {"0": 5, "1": 5, "2": 5}, 3, {"0": 1, "1": 1, "2": 1}),
        ({"0": 3}, {"0": 3, "1": 4}, 100, {"0": 3, "1": 4}),
        ({"0": 0, "1": 0}, {"0": 100, "1": 100}, 1, {"0": 1, "1": 0}),
    ],
)
def test_admission_spreads_the_budget(
    start: dict[str, int], latest: dict[str, int], limit: int | None, end: dict[str, int]
) -> None:
    planned = admit(start, latest, limit)
    assert planned == end
    if limit is not None:
        assert sum(planned[p] - start.get(p, 0) for p in planned) <= limit


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30),
    groups=st.integers(min_value=1, max_value=8),
)
def test_grouping_keeps_every_range_once_and_balances_records(
    sizes: list[int], groups: int
) -> None:
    ranges = [OffsetRange("t", p, 10, 10 + n) for p, n in enumerate(sizes)]
    grouped = group_ranges(ranges, groups)
    assert len(grouped) == min(groups, len(ranges))
    read = sorted((r for g in grouped for r in g), key=lambda r: r.partition)
    assert read == ranges  # each once, unsplit
    assert all(g == sorted(g, key=lambda r: r.partition) for g in grouped)
    loads = [sum(r.size for r in g) for g in grouped]
    # Largest-first greedy: no group exceeds another by more than one range's records.
    assert max(loads) - min(loads) <= max(sizes)


def test_without_a_cap_every_range_is_its_own_task() -> None:
    ranges = [OffsetRange("t", p, 0, 1) for p in range(5)]
    assert group_ranges(ranges, None) == [[r] for r in ranges]


def test_ranges_are_held_inside_the_log() -> None:
    begin, end = {"0": 5, "1": 0, "2": 0}, {"0": 9, "1": 3, "2": 8}
    assert clamp_ranges("t", begin, end, {"0": 2, "2": 6}, {"0": 20, "2": 4}) == [
        OffsetRange("t", 0, 5, 9),  # the start before the log's beginning: from it
        OffsetRange("t", 1, 0, 3),  # not named: the whole log
        OffsetRange("t", 2, 6, 6),  # an end before the start: nothing
    ]


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=8),
    pieces=st.integers(min_value=1, max_value=20),
)
def test_split_ranges_cover_every_offset_once(sizes: list[int], pieces: int) -> None:
    ranges = [OffsetRange("t", p, 100, 100 + n) for p, n in enumerate(sizes)]
    cut = split_ranges(ranges, pieces)
    for offsets in ranges:
        mine = [r for r in cut if r.partition == offsets.partition]
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(offsets.start, offsets.end))
    filled = sum(1 for r in ranges if r.size)
    if 0 < filled < pieces:
        # Cut into pieces of at most an even share each.
        assert max(r.size for r in cut) <= -(-sum(sizes) // pieces)
    else:
        assert cut == [r for r in ranges if r.size]
