"""Offset ranges of a Kafka topic, planned: what a read of it owes, partition by partition.

Pure: the offsets come in as arguments (listed by the brokers elsewhere, on the Spark
driver by :class:`probe.spark.topic_offsets.TopicOffsets`) and ranges come out. The
sla_kafka source (probe.spark.kafka_source) plans its stream batches and its batch reads
with these, and reconcile plans its windows' reads with them.

Offsets are maps ``{"<partition>": offset}`` keyed by the partition as text, as Spark's
checkpoint keeps them. A range is ``[start, end)``: its end is the next offset not read.

>>> ranges = clamp_ranges("t", {"0": 0, "1": 3}, {"0": 10, "1": 3}, {"0": 4}, {})
>>> [(r.partition, r.start, r.end) for r in ranges]
[(0, 4, 10), (1, 3, 3)]
>>> [(r.partition, r.start, r.end) for r in split_ranges(ranges, 2)]
[(0, 4, 7), (0, 7, 10)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from probe.core.judge import READ_AT_KEPT

Offsets = dict[str, int]

# How far before a truncated log's end a stream reads again (see effective_start):
# no further back than the judge can tell records read before from duplicates.
REREAD_RECORDS = READ_AT_KEPT


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


# -- a stream's batches -----------------------------------------------------------------


def admit(start: Offsets, latest: Offsets, max_records: int | None) -> Offsets:
    """The end offsets of the next batch: everything up to latest, or at most
    ``max_records`` records spread evenly over the partitions that have some.

    Pure, so the split is easy to reason about: every partition with a backlog gets a
    fair share each batch (no partition starves behind a large one), and whatever
    budget a small partition leaves is handed on to the others.

    >>> admit({"0": 0, "1": 0}, {"0": 10, "1": 2}, max_records=6)
    {'0': 4, '1': 2}
    """
    if max_records is None:
        return dict(latest)
    end = {p: start.get(p, 0) for p in latest}
    budget = max_records
    waiting = sorted((p for p in latest if latest[p] > end[p]), key=lambda p: latest[p] - end[p])
    while budget > 0 and waiting:
        share = max(1, budget // len(waiting))
        still_waiting = []
        for partition in waiting:
            take = min(share, latest[partition] - end[partition], budget)
            end[partition] += take
            budget -= take
            if end[partition] < latest[partition]:
                still_waiting.append(partition)
            if budget == 0:
                break
        waiting = still_waiting
    return end


def effective_start(start: Offsets, latest: Offsets, partition: str) -> int:
    """Where a partition's next batch starts: where the last one ended, unless the
    log now ends before that (truncated by an unclean leader election, or the
    topic re-created).

    Then the log holds, below its end, history already read and, after the point
    where the new leader's log parted from the one read, records not read yet;
    that point is not known here. The batch starts REREAD_RECORDS before the end:
    the judge knows the canaries read again there by their offsets and skips them
    (probe.core.judge, "Re-reads"), where reading from the log's beginning judged
    every one a duplicate. Records written after the truncation beyond that many
    are not read (a re-created topic that filled while the sink was away).

    >>> effective_start({"0": 5_000}, {"0": 4_900}, "0") == 4_900 - REREAD_RECORDS
    True
    >>> effective_start({"0": 7}, {"0": 9}, "0"), effective_start({}, {"1": 9}, "1")
    (7, 0)
    """
    begun = start.get(partition, 0)
    end = latest[partition]
    return max(0, end - REREAD_RECORDS) if begun > end else begun


def group_ranges(ranges: Sequence[OffsetRange], groups: int | None) -> list[list[OffsetRange]]:
    """At most ``groups`` groups of ranges with record counts as even as can be.

    Pure. Every range is in exactly one group, never split (a partition's records
    stay in offset order in one task); ``None`` keeps one range per group. Largest
    range first into the group with fewest records so far (LPT), so a backlog is
    spread over the tasks while the many tiny ranges of a steady stream collapse
    into a few tasks, whose fixed cost is what bounds a micro-batch's latency.

    >>> [[r.partition for r in g] for g in group_ranges(
    ...     [OffsetRange("t", p, 0, n) for p, n in enumerate([5, 1, 1, 3])], 2)]
    [[0], [1, 2, 3]]
    """
    if groups is None or len(ranges) <= groups:
        return [[r] for r in ranges]
    bins: list[list[OffsetRange]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for offsets in sorted(ranges, key=lambda r: (-r.size, r.partition)):
        lightest = loads.index(min(loads))
        bins[lightest].append(offsets)
        loads[lightest] += offsets.size
    return [sorted(group, key=lambda r: r.partition) for group in bins if group]


# -- a batch read's bounds ----------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """Where one side of a batch read lies on one partition: an ``offset``, or a
    ``timestamp`` (epoch ms) standing for the first offset at or after it."""

    kind: str
    value: int


@dataclass(frozen=True)
class BoundSpec:
    """One side of a batch read on every partition. ``default`` (None: the log's own
    edge, its beginning or its end) applies to the partitions ``named`` leaves out."""

    default: Bound | None
    named: Mapping[str, Bound]

    def on(self, partition: str) -> Bound | None:
        return self.named.get(partition, self.default)


def clamp_ranges(
    topic: str, begin: Offsets, end: Offsets, starts: Mapping[str, int], ends: Mapping[str, int]
) -> list[OffsetRange]:
    """Each partition's ``[start, end)`` held inside its log, never negative.

    Pure. A start before the log's beginning reads from the beginning (the records
    before it are gone), an end past its end stops there, and an end before its start
    reads nothing.

    >>> clamp_ranges("t", {"0": 5}, {"0": 9}, {"0": 2}, {"0": 20})
    [OffsetRange(topic='t', partition=0, start=5, end=9)]
    """
    ranges = []
    for partition in sorted(end, key=int):
        low, high = begin[partition], end[partition]
        first = min(max(starts.get(partition, low), low), high)
        last = min(max(ends.get(partition, high), first), high)
        ranges.append(OffsetRange(topic, int(partition), first, last))
    return ranges


def split_ranges(ranges: Sequence[OffsetRange], pieces: int | None) -> list[OffsetRange]:
    """The non-empty ranges, cut into about ``pieces`` ranges of even size when there
    are fewer (``minPartitions``): one large partition is then read by several tasks.

    Pure. The pieces of a range are contiguous and cover it exactly.

    >>> [(r.start, r.end) for r in split_ranges([OffsetRange("t", 0, 0, 10)], 3)]
    [(0, 4), (4, 8), (8, 10)]
    """
    filled = [r for r in ranges if r.size > 0]
    if not pieces or len(filled) >= pieces:
        return filled
    target = math.ceil(sum(r.size for r in filled) / pieces)
    cut = []
    for offsets in filled:
        step = math.ceil(offsets.size / math.ceil(offsets.size / target))
        for start in range(offsets.start, offsets.end, step):
            cut.append(replace(offsets, start=start, end=min(start + step, offsets.end)))
    return cut
