"""A topic's partitions, and offsets per partition, in a few words.

Log lines, error messages and /readyz reasons that speak of partitions say how many,
their span and the first few, never all of them: at 10,000 partitions a line naming
each one is 50 kB, and the same line repeated fills a log. Pure, so every layer (the
transport, the target, the Spark source and sink) words them the same way.

>>> partitions_summary(range(10_000))
'10000 partitions 0-9999'
>>> partitions_summary([5, 0, 2])
'3 partitions 0,2,5'
>>> partitions_summary(range(0, 10_000, 2))
'5000 partitions 0,2,4,6,8,…,9998'
>>> offsets_summary({"0": 12, "1": 0, "2": 7})
'3 partitions, offsets 0..12 (0:12, 1:0, 2:7)'
>>> ranges_summary({p: (0, 1) for p in range(12)})
'12 partitions, offsets 0..1 (first: 0:0..1, 1:0..1, 2:0..1, 3:0..1, 4:0..1, …)'
>>> ranges_summary({3: (9, 2)}, joined_by="->")
'1 partition, offsets 2..9 (3:9->2)'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

# How many partitions (or runs of consecutive ones) a summary names before "…".
SHOWN = 5

# Offset maps in Spark's checkpoint and in JSON are keyed by the partition as text.
Partition = TypeVar("Partition", int, str)


def partitions_summary(partitions: Iterable[int | str]) -> str:
    """How many partitions, and which: runs of consecutive ones as ``lo-hi``, the
    first few runs and the last one when there are many.

    >>> partitions_summary([])
    'no partitions'
    >>> partitions_summary(["7"])
    '1 partition 7'
    """
    numbers = sorted({int(p) for p in partitions})
    if not numbers:
        return "no partitions"
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    shown = [f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in runs]
    if len(shown) > SHOWN + 1:
        shown = [*shown[:SHOWN], "…", shown[-1]]
    return f"{_count(len(numbers))} {','.join(shown)}"


def offsets_summary(offsets: Mapping[Partition, int]) -> str:
    """How many partitions, the span of their offsets, and the first few
    ``partition:offset`` (all of them when there are few).

    >>> offsets_summary({})
    'no partitions'
    """
    return _per_partition(
        {int(p): str(o) for p, o in offsets.items()}, offsets.values(), offsets.values()
    )


def ranges_summary(ranges: Mapping[Partition, tuple[int, int]], *, joined_by: str = "..") -> str:
    """How many partitions, the span from the lowest first offset to the highest last
    one, and the first few ``partition:first..last``; ``joined_by="->"`` words a move
    (from, to) instead of a range.
    """
    return _per_partition(
        {int(p): f"{a}{joined_by}{b}" for p, (a, b) in ranges.items()},
        [min(a, b) for a, b in ranges.values()],
        [max(a, b) for a, b in ranges.values()],
    )


def _per_partition(words: Mapping[int, str], lows: Iterable[int], highs: Iterable[int]) -> str:
    if not words:
        return "no partitions"
    first = sorted(words)[:SHOWN]
    listed = ", ".join(f"{p}:{words[p]}" for p in first)
    listed = f"first: {listed}, …" if len(words) > SHOWN else listed
    return f"{_count(len(words))}, offsets {min(lows)}..{max(highs)} ({listed})"


def _count(n: int) -> str:
    return f"{n} partition" if n == 1 else f"{n} partitions"
