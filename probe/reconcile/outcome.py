"""What a reconciliation found, per window and partition, and what a run concludes. Pure.

Per window, every source record and every table row is counted exactly once::

    source = matched + missing + mismatched
    sink   = matched + mismatched + extra + duplicated

``matched``: a source record whose table row carries the same checksum;
``missing``: a source record with no row; ``mismatched``: a source record whose row
(or one of its copies) has another checksum; ``extra``: a row whose offset (or key)
the source does not hold; ``duplicated``: the copies of a row beyond the first.
``excluded`` source records are ones the table is not meant to hold (in the canary
format: records the sink stage rejects into quarantine/, or foreign ones; matched
by key: records without a key).

Matched by key, a key the source holds ``n`` times is expected ``n`` times in the
table: with ``c`` rows, ``min(n, c)`` are matched (or mismatched), ``n - c`` missing
when fewer, ``c - n`` duplicated when more; with unique keys that is the offset rule.

A window is ``complete`` when it held something to compare and nothing but matches
was found, ``mismatch`` when a discrepancy was, ``empty`` when it held nothing to
compare (no record the table is meant to hold, no row: no evidence either way), and
``unverifiable`` when its source records may have left the topic: such a window is
reported with its counts and never judged either way.

A run's verdict (:class:`Verdict`): ``mismatch`` when a window is; else
``nothing_compared`` when not one record or row was judged (every window empty or
unverifiable: records written just now wait in windows still open, see
probe.reconcile.windows.Pending); else ``complete``. Only ``complete`` passes: a run
that compared nothing proves nothing, so a deploy check must not read it as a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from probe.reconcile.windows import Pending, Window


class WindowStatus(StrEnum):
    COMPLETE = "complete"
    MISMATCH = "mismatch"
    EMPTY = "empty"
    UNVERIFIABLE = "unverifiable"


class Verdict(StrEnum):
    """What a run concludes; also the ``result`` label of
    ``synthetic_sla_reconciliation_runs_total`` (beside ``failed``)."""

    COMPLETE = "complete"
    MISMATCH = "mismatch"
    NOTHING_COMPARED = "nothing_compared"


# `sla-probe reconcile`'s exit code per verdict. 2 is the CLI's (usage, config); a
# run that could not compare at all (brokers, Spark) exits 1 as a mismatch does.
EXIT_CODES = {Verdict.COMPLETE: 0, Verdict.MISMATCH: 1, Verdict.NOTHING_COMPARED: 3}


class RecordResult(StrEnum):
    """The ``result`` label of ``synthetic_sla_reconciliation_records_total``."""

    MATCHED = "matched"
    MISSING = "missing"
    EXTRA = "extra"
    DUPLICATED = "duplicated"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    # Rows of unverifiable windows: compared with nothing, judged neither way.
    UNVERIFIABLE = "unverifiable"


# The record results that are a discrepancy.
DISCREPANCIES = (
    RecordResult.MISSING,
    RecordResult.EXTRA,
    RecordResult.DUPLICATED,
    RecordResult.CHECKSUM_MISMATCH,
)


@dataclass(frozen=True, slots=True)
class Samples:
    """A few offsets of each kind of discrepancy, lowest first, at most the run's
    ``sample_size`` each: enough to start a forensic read or a targeted replay.
    Source records are named by offset; a table matched by key names its extra rows
    by key (``extra_keys``, in key order), having no offset for them."""

    missing: tuple[int, ...] = ()
    mismatched: tuple[int, ...] = ()
    extra: tuple[int, ...] = ()
    duplicated: tuple[int, ...] = ()
    extra_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Tally:
    """The counts of one window (see the module docstring for how they add up).

    Checksums are the sum of the records' 64-bit checksums modulo 2**64, as 16 hex
    digits: equal when both sides hold the same records once each, in any order.
    """

    source: int = 0
    sink: int = 0
    matched: int = 0
    missing: int = 0
    extra: int = 0
    duplicated: int = 0
    mismatched: int = 0
    excluded: int = 0
    source_checksum: str = "0" * 16
    sink_checksum: str = "0" * 16
    samples: Samples = Samples()

    @property
    def discrepancies(self) -> int:
        return self.missing + self.extra + self.duplicated + self.mismatched

    @property
    def empty(self) -> bool:
        """Nothing to compare: no record the table is meant to hold, no row."""
        return self.source == 0 and self.sink == 0

    def by_result(self) -> dict[RecordResult, int]:
        return {
            RecordResult.MATCHED: self.matched,
            RecordResult.MISSING: self.missing,
            RecordResult.EXTRA: self.extra,
            RecordResult.DUPLICATED: self.duplicated,
            RecordResult.CHECKSUM_MISMATCH: self.mismatched,
        }

    def counts(self) -> dict[str, int | str]:
        """The counts and checksums, under the names the JSON report and the report
        table share."""
        return {
            "source": self.source,
            "sink": self.sink,
            "matched": self.matched,
            "missing": self.missing,
            "extra": self.extra,
            "duplicated": self.duplicated,
            "checksum_mismatch": self.mismatched,
            "excluded": self.excluded,
            "source_checksum": self.source_checksum,
            "sink_checksum": self.sink_checksum,
        }


@dataclass(frozen=True, slots=True)
class WindowResult:
    window: Window
    tally: Tally

    @property
    def status(self) -> WindowStatus:
        if not self.window.verifiable:
            return WindowStatus.UNVERIFIABLE
        if self.tally.discrepancies:
            return WindowStatus.MISMATCH
        if self.tally.empty:
            return WindowStatus.EMPTY
        return WindowStatus.COMPLETE


@dataclass(frozen=True)
class Reconciliation:
    """One run: every window compared, in partition and offset order, and what it
    could not compare yet (``pending``). ``started_ms`` is the moment it planned at.

    >>> Reconciliation("r1", "orders", "/t", 0, 1, []).verdict
    <Verdict.NOTHING_COMPARED: 'nothing_compared'>
    >>> Reconciliation("r1", "orders", "/t", 0, 1, [], [Pending(0, 0, 9, 330_000)]).verdict_at_ms
    330000
    """

    run_id: str
    topic: str
    table: str
    started_ms: int
    finished_ms: int
    windows: Sequence[WindowResult] = field(default_factory=list)
    pending: Sequence[Pending] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        if any(w.status is WindowStatus.MISMATCH for w in self.windows):
            return Verdict.MISMATCH
        if self.judged() == 0:
            return Verdict.NOTHING_COMPARED
        return Verdict.COMPLETE

    @property
    def ok(self) -> bool:
        """Something was compared and every verifiable window is complete."""
        return self.verdict is Verdict.COMPLETE

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def pending_records(self) -> int:
        return sum(p.records for p in self.pending)

    @property
    def verdict_at_ms(self) -> int | None:
        """When a run compares every record pending now; None with none pending."""
        return max((p.compared_from_ms for p in self.pending if p.records), default=None)

    def judged(self) -> int:
        """Records and rows compared: every result but ``unverifiable``."""
        records = self.records()
        return sum(records[kind] for kind in RecordResult if kind is not RecordResult.UNVERIFIABLE)

    def records(self) -> dict[RecordResult, int]:
        """Records (and rows) by result over the run; an unverifiable window's table
        rows count as ``unverifiable`` and nothing else."""
        totals = dict.fromkeys(RecordResult, 0)
        for result in self.windows:
            if result.status is WindowStatus.UNVERIFIABLE:
                totals[RecordResult.UNVERIFIABLE] += result.tally.sink
                continue
            for kind, count in result.tally.by_result().items():
                totals[kind] += count
        return totals

    def windows_by_status(self) -> dict[WindowStatus, int]:
        counts = dict.fromkeys(WindowStatus, 0)
        for result in self.windows:
            counts[result.status] += 1
        return counts

    @property
    def mismatch_ratio(self) -> float:
        """Discrepancies over every record and row judged (verifiable windows); 0 when
        nothing was judged.

        >>> from probe.reconcile.windows import Window
        >>> Reconciliation("r", "t", "/t", 0, 1, [
        ...     WindowResult(Window(0, 0, 4), Tally(source=4, sink=3, matched=3, missing=1))
        ... ]).mismatch_ratio
        0.25
        """
        records, judged = self.records(), self.judged()
        discrepancies = sum(records[kind] for kind in DISCREPANCIES)
        return discrepancies / judged if judged else 0.0

    @property
    def duration_s(self) -> float:
        return (self.finished_ms - self.started_ms) / 1000
