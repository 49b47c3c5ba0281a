"""What a stream's judge remembers of its past canaries, in a size that does not grow
with the canaries judged.

A stream's judge remembers up to ``JudgePolicy.memory`` (4,096) decided canaries, and
the produce time and offset of the newest few hundred that arrived (see
:mod:`probe.core.judge`). Kept as dictionaries of tuples, that was about 475 kB a stream once
the memory was full (after 4,096 rounds: 23 hours at a 20 s interval), 4.7 GB at 10,000
partitions, and the Spark sink read and wrote it whole, as JSON, for every stream of
every batch. Both structures here hold the same facts in a few kilobytes:

- :class:`DecidedRuns`: the decided canaries as runs of consecutive sequence numbers
  sharing an incarnation and a lost flag. A healthy stream is one run however long it
  lived; each outage adds a run or two.
- :class:`ArrivedRing`: the newest arrivals in four arrays of machine integers, in
  arrival order, the oldest dropped first.

Both are exact: nothing is approximated, every question the judge asks gets the answer
the dictionaries gave.
"""

from __future__ import annotations

import base64
import binascii
import sys
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, pairwise
from typing import TypeGuard

# A canary's name within its stream: (incarnation, seq).
Ident = tuple[int, int]


class DecidedRuns:
    """A set of decided canaries, each with its lost flag, as sorted disjoint runs.

    Run ``i`` covers seqs ``first[i] .. end[i] - 1`` of incarnation ``inc[i]``, all with
    flag ``lost[i]``. Runs are ordered by (incarnation, first); two runs that touch
    (same incarnation, one's end the other's first) and share their flag are one run.
    The judge adds a canary at the top of its sequence nearly always, which extends the
    last run in O(1); anything else costs a binary search and a list insertion over the
    runs, which an outage makes a handful of.

    >>> runs = DecidedRuns()
    >>> for seq in (0, 1, 2, 4):
    ...     runs.add((7, seq), lost=False)
    >>> runs.add((7, 3), lost=True)
    >>> runs.runs()
    [[7, 0, 3, False], [7, 3, 4, True], [7, 4, 5, False]]
    >>> runs.get((7, 3)), runs.get((7, 5)), len(runs)
    (True, None, 5)
    >>> runs.drop_lowest(2)
    (7, 2)
    """

    __slots__ = ("_count", "_ends", "_keys", "_lost")

    def __init__(self) -> None:
        self._keys: list[Ident] = []  # (incarnation, first seq) of each run
        self._ends: list[int] = []  # one past the run's last seq
        self._lost: list[bool] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _run_of(self, ident: Ident) -> int:
        """The index of the run holding ``ident``, or -1."""
        i = bisect_right(self._keys, ident) - 1
        if i >= 0 and self._keys[i][0] == ident[0] and ident[1] < self._ends[i]:
            return i
        return -1

    def get(self, ident: Ident) -> bool | None:
        """The canary's lost flag if it is decided, else None."""
        i = self._run_of(ident)
        return None if i < 0 else self._lost[i]

    def __contains__(self, ident: object) -> bool:
        return isinstance(ident, tuple) and self._run_of(ident) >= 0

    def add(self, ident: Ident, *, lost: bool) -> None:
        """Decide ``ident`` with this flag (a decided one takes the new flag)."""
        held = self._run_of(ident)
        if held >= 0:
            if self._lost[held] == lost:
                return
            self._split_out(held, ident)
        incarnation, seq = ident
        keys, ends, flags = self._keys, self._ends, self._lost
        i = bisect_right(keys, ident)  # runs [0, i) start at or below ident
        before = i - 1
        after_touches = i < len(keys) and keys[i] == (incarnation, seq + 1) and flags[i] == lost
        extends_before = (
            before >= 0
            and keys[before][0] == incarnation
            and ends[before] == seq
            and flags[before] == lost
        )
        if extends_before:
            ends[before] = seq + 1
            if after_touches:  # the gap between two runs closed: one run
                ends[before] = ends[i]
                del keys[i], ends[i], flags[i]
            self._count += 1
            return
        if after_touches:
            keys[i] = ident
        else:
            keys.insert(i, ident)
            ends.insert(i, seq + 1)
            flags.insert(i, lost)
        self._count += 1

    def _split_out(self, i: int, ident: Ident) -> None:
        """Remove ``ident`` from run ``i``, which holds it."""
        incarnation, seq = ident
        first, end, lost = self._keys[i][1], self._ends[i], self._lost[i]
        del self._keys[i], self._ends[i], self._lost[i]
        pieces = [(first, seq), (seq + 1, end)]
        for start, stop in reversed(pieces):
            if start < stop:
                self._keys.insert(i, (incarnation, start))
                self._ends.insert(i, stop)
                self._lost.insert(i, lost)
        self._count -= 1

    def lowest(self) -> Ident | None:
        return self._keys[0] if self._keys else None

    def drop_lowest(self, count: int) -> Ident | None:
        """Forget the ``count`` lowest (incarnation, seq); returns the new lowest, if any."""
        while count > 0 and self._keys:
            incarnation, first = self._keys[0]
            size = self._ends[0] - first
            if size <= count:
                del self._keys[0], self._ends[0], self._lost[0]
                self._count -= size
                count -= size
            else:
                self._keys[0] = (incarnation, first + count)
                self._count -= count
                count = 0
        return self.lowest()

    @classmethod
    def from_runs(cls, rows: Sequence[Sequence[object]]) -> DecidedRuns:
        """Rebuild from :meth:`runs`. Raises ``ValueError`` unless every row is
        ``[incarnation, first, end, lost]`` with ``first < end``, in order, disjoint."""
        runs = cls()
        for row in rows:
            incarnation, first, end, lost = row
            if not (_is_int(incarnation) and _is_int(first) and _is_int(end)):
                raise ValueError(f"stream state: decided runs hold integers: {row!r}")
            if first >= end or not isinstance(lost, bool):
                raise ValueError(
                    f"stream state: a decided run is [inc, first, end > first, lost]: {row!r}"
                )
            if runs._keys:
                last_incarnation, _ = runs._keys[-1]
                if (incarnation, first) < runs._keys[-1] or (
                    incarnation == last_incarnation and first < runs._ends[-1]
                ):
                    raise ValueError("stream state: decided runs must be in order and disjoint")
            runs._keys.append((incarnation, first))
            runs._ends.append(end)
            runs._lost.append(lost)
            runs._count += end - first
        return runs

    def idents(self) -> Iterator[Ident]:
        """Every decided canary, lowest first."""
        for (incarnation, first), end in zip(self._keys, self._ends, strict=True):
            for seq in range(first, end):
                yield incarnation, seq

    def runs(self) -> list[list[int | bool]]:
        """``[incarnation, first, end, lost]`` per run, lowest first (the state's form)."""
        return [
            [incarnation, first, end, lost]
            for (incarnation, first), end, lost in zip(
                self._keys, self._ends, self._lost, strict=True
            )
        ]


# Machine integers: incarnations, seqs and produce times are unsigned 64-bit on the wire
# (probe.core.canary); an offset is -1 where the canary was not read from a log.
_UNSIGNED, _SIGNED = "Q", "q"


class ArrivedRing:
    """The produce time and offset of the newest ``capacity`` canaries that arrived,
    in arrival order.

    Four arrays of machine integers (32 bytes a canary) instead of a dictionary of
    tuples (about 270). A lookup is a scan for the seq (in C, ``array.index``), checked
    against the incarnation; dropping the oldest moves the arrays down by one (a
    ``memmove`` of a few kilobytes).
    """

    __slots__ = ("_capacity", "_incarnations", "_offsets", "_produced", "_seqs")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._incarnations = array(_UNSIGNED)
        self._seqs = array(_UNSIGNED)
        self._produced = array(_UNSIGNED)
        self._offsets = array(_SIGNED)

    def __len__(self) -> int:
        return len(self._seqs)

    def _index(self, ident: Ident) -> int:
        incarnation, seq = ident
        seqs, start = self._seqs, 0
        if seq < 0:  # never stored: every stored seq is unsigned
            return -1
        while True:
            try:
                i = seqs.index(seq, start)
            except (ValueError, OverflowError):
                return -1
            if self._incarnations[i] == incarnation:
                return i
            start = i + 1

    def get(self, ident: Ident) -> tuple[int, int] | None:
        """(produced_ns, offset) of this canary's arrival, if it is among the newest."""
        i = self._index(ident)
        return None if i < 0 else (self._produced[i], self._offsets[i])

    def put(self, ident: Ident, produced_ns: int, offset: int) -> None:
        """Record an arrival (a canary not recorded yet); the oldest beyond capacity go."""
        self._incarnations.append(ident[0])
        self._seqs.append(ident[1])
        self._produced.append(produced_ns)
        self._offsets.append(offset)
        if len(self._seqs) > self._capacity:
            self._drop(0)

    def _drop(self, i: int) -> None:
        del self._incarnations[i], self._seqs[i], self._produced[i], self._offsets[i]

    def forget_below(self, lowest: Ident | None) -> None:
        """Forget every arrival below ``lowest`` (None: every arrival): the judge keeps
        arrivals only of canaries it still remembers as decided."""
        if not self._seqs:
            return
        if lowest is None:
            for column in self._columns():
                del column[:]
            return
        # Checked in C first: nearly always nothing is that old.
        incarnation, seq = lowest
        if min(self._incarnations) > incarnation or (
            min(self._incarnations) == incarnation == max(self._incarnations)
            and min(self._seqs) >= seq
        ):
            return
        for i in reversed(range(len(self._seqs))):
            if (self._incarnations[i], self._seqs[i]) < lowest:
                self._drop(i)

    def rows(self) -> Iterator[tuple[int, int, int, int]]:
        """(incarnation, seq, produced_ns, offset), oldest first."""
        return zip(self._incarnations, self._seqs, self._produced, self._offsets, strict=True)

    def columns(self) -> list[list[int]]:
        """The state's form: the four columns, each as its first value and then the
        differences from one arrival to the next (small numbers: seqs and offsets step
        by one, incarnations by none), oldest first."""
        return [_deltas(column) for column in self._columns()]

    def packed(self) -> str:
        """The state's form since version 3: the four columns' machine integers (8
        bytes each, little-endian), one column after the other, deflated, in base64.

        The Spark sink writes a stream's state at every batch the stream has a record in,
        and reads it when its worker did not write it last. With the full ring as JSON
        lists of differences, a state cost about 170 us to write and 130 us to read;
        packed, 75 and 45 us, and 3.1 kB in the checkpoint instead of 5.0
        (benchmarks/bench_judge_state.py).
        """
        raw = b"".join(_little_endian(column) for column in self._columns())
        return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")

    @classmethod
    def from_packed(cls, capacity: int, text: object) -> ArrivedRing:
        """Rebuild from :meth:`packed`. Raises ``ValueError`` if it does not fit."""
        ring = cls(capacity)
        if not isinstance(text, str):
            raise ValueError("stream state: arrived must be a string")
        try:
            deflated = base64.b64decode(text, validate=True)
            # A ring never holds more than ``capacity`` arrivals: nothing larger is read.
            inflate = zlib.decompressobj()
            raw = inflate.decompress(deflated, 32 * capacity + 1)
        except (binascii.Error, zlib.error) as exc:
            raise ValueError(f"stream state: arrived: {exc}") from None
        if not inflate.eof or inflate.unused_data or len(raw) % 32 or len(raw) > 32 * capacity:
            raise ValueError("stream state: arrived: not four columns of at most the capacity")
        width = len(raw) // 4
        for i, column in enumerate(ring._columns()):
            column.frombytes(raw[i * width : (i + 1) * width])
            if sys.byteorder != "little":
                column.byteswap()
        return ring

    def _columns(self) -> tuple[array[int], array[int], array[int], array[int]]:
        return self._incarnations, self._seqs, self._produced, self._offsets

    @classmethod
    def from_columns(cls, capacity: int, columns: Sequence[Sequence[int]]) -> ArrivedRing:
        """Rebuild from :meth:`columns`. Raises ``ValueError`` if they do not fit."""
        ring = cls(capacity)
        if len(columns) != 4 or len({len(column) for column in columns}) > 1:
            raise ValueError("stream state: arrived must be four columns of one length")
        try:
            for target, column in zip(
                ring._columns(),
                columns,
                strict=True,
            ):
                target.extend(accumulate(column))  # refuses floats, strings
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"stream state: arrived: {exc}") from None
        while len(ring) > capacity:
            ring._drop(0)
        return ring


def _little_endian(column: array[int]) -> bytes:
    if sys.byteorder == "little":
        return column.tobytes()
    swapped = array(column.typecode, column)
    swapped.byteswap()
    return swapped.tobytes()


def _deltas(column: Sequence[int]) -> list[int]:
    return [column[0], *(b - a for a, b in pairwise(column))] if column else []


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
