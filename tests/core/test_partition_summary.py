"""Partitions and offsets in a few words: count, span, the first few; never all."""

from __future__ import annotations

import doctest

import pytest

import probe.core.partition_summary as summary_module
from probe.core.partition_summary import offsets_summary, partitions_summary, ranges_summary


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(summary_module).failed == 0


@pytest.mark.parametrize(
    ("partitions", "words"),
    [
        ([], "no partitions"),
        ([0], "1 partition 0"),
        (range(3), "3 partitions 0-2"),
        ([0, 2, 5], "3 partitions 0,2,5"),
        ({"5", "0", "2"}, "3 partitions 0,2,5"),
        ([4, 3, 3, 9], "3 partitions 3-4,9"),
        (range(10_000), "10000 partitions 0-9999"),
        ([*range(10), *range(20, 30), 40, 50, 60, 70, 80], "25 partitions 0-9,20-29,40,50,60,…,80"),
        ([0, 2, 4, 6, 8, 10], "6 partitions 0,2,4,6,8,10"),
    ],
)
def test_partitions(partitions: list[int], words: str) -> None:
    assert partitions_summary(partitions) == words


@pytest.mark.parametrize(
    ("offsets", "words"),
    [
        ({}, "no partitions"),
        ({"3": 7}, "1 partition, offsets 7..7 (3:7)"),
        ({"1": 5, "0": 2}, "2 partitions, offsets 2..5 (0:2, 1:5)"),
        (
            {str(p): p * 10 for p in range(10_000)},
            "10000 partitions, offsets 0..99990 (first: 0:0, 1:10, 2:20, 3:30, 4:40, …)",
        ),
    ],
)
def test_offsets(offsets: dict[str, int], words: str) -> None:
    assert offsets_summary(offsets) == words


@pytest.mark.parametrize(
    ("ranges", "joined_by", "words"),
    [
        ({}, "..", "no partitions"),
        ({3155: (0, 1), 3156: (4, 9)}, "..", "2 partitions, offsets 0..9 (3155:0..1, 3156:4..9)"),
        (
            {p: (0, 1) for p in range(12)},
            "..",
            "12 partitions, offsets 0..1 (first: 0:0..1, 1:0..1, 2:0..1, 3:0..1, 4:0..1, …)",
        ),
        ({0: (12, 3), 1: (5, 5)}, "->", "2 partitions, offsets 3..12 (0:12->3, 1:5->5)"),
    ],
)
def test_ranges(ranges: dict[int, tuple[int, int]], joined_by: str, words: str) -> None:
    assert ranges_summary(ranges, joined_by=joined_by) == words


def test_no_summary_grows_with_the_partition_count() -> None:
    """What a log line holds at 100 partitions it holds at 100,000, give or take the
    digits of the numbers themselves."""
    for partitions in (range(100), range(0, 200_000, 2)):
        assert len(partitions_summary(partitions)) < 80
        assert len(offsets_summary({p: 10**9 for p in partitions})) < 150
        assert len(ranges_summary({p: (10**9, 10**9 + 1) for p in partitions})) < 200
