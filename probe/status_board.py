"""What the status page shows, recorded as the stages judge: bounded, whatever the scale.

:class:`StatusBoard` is one more recorder beside the metrics (probe.stages.stage.Recorder):
every stage hands it the same findings it hands the Prometheus adapter, so the page
and the counters can never disagree on what a verdict was. It keeps, per target and
stage:

- the verdicts reached in each of the last ``rounds_kept`` rounds (a round: one tick
  of ``interval``, as the producer's rounds start on the wall clock's ticks);
- good and total events per minute over the longest SLO window (3 days: 4,320 slots
  of machine integers per SLI), from which each window's SLI, burn rate and budget
  left are summed when the page is taken. Windows are those of the shipped rules
  (5m, 30m, 1h, 2h, 6h, 1d, 3d), to the minute, over what *this process* counted:
  a window longer than its uptime says how much of it was counted. Prometheus keeps
  the long view across restarts; the page is for the incident at hand;
- and, for all stages together, the last ``failures_kept`` canaries not delivered,
  anomalies (foreign records aside: other probes sharing the topic are no failure)
  and invalid records, with their reason, partition, leader broker and trace id.

Memory does not grow with partitions: a failure costs a tuple in a ring of fixed
length, a round a row. Recording takes the lock for a few dictionary and array
updates: the sink's findings arrive on Spark's batch thread, the page is taken on
the event loop.

:class:`StatusView` is the shell's half: on each request it takes a snapshot of the
board, the stages' staleness (the stalest ``WORST_PARTITIONS`` chosen with
``heapq.nlargest``, never a sort of 10,000), the leaders, readiness and the sink's
batch progress, for probe.status_page to render.

>>> board = StatusBoard(interval_s=20, objectives=Objectives(), clock_ns=lambda: 0)
>>> board.count("orders", "consumer", [])
>>> board.stages()
[]
"""

from __future__ import annotations

import heapq
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

from probe import tracing
from probe.config import ProbeConfig, StageName
from probe.core.errors import RejectReason
from probe.core.judge import Anomaly, AnomalyKind, Fate, Finding, Outcome
from probe.metrics import StageSource
from probe.status_page import (
    WORST_PARTITIONS,
    FailureRow,
    PartitionStaleness,
    ReconcileRun,
    RoundVerdicts,
    SinkBatchProgress,
    SloTable,
    SloWindow,
    StageStatus,
    StatusSnapshot,
)

__all__ = [
    "SLO_WINDOWS",
    "Objectives",
    "StatusBoard",
    "StatusView",
    "refresh_every",
    "worst_partitions",
]

_Key = TypeVar("_Key")

# The shipped rules' windows (docs/alerting.md), shortest first.
SLO_WINDOWS: tuple[tuple[str, int], ...] = (
    ("5m", 300),
    ("30m", 1800),
    ("1h", 3600),
    ("2h", 7200),
    ("6h", 21600),
    ("1d", 86400),
    ("3d", 259200),
)
_MINUTE_NS = 60_000_000_000
_SLOTS = SLO_WINDOWS[-1][1] // 60

# Outcome -> column of a round's row (see _Round).
_COLUMN = {
    Outcome.DELIVERED: 1,
    Outcome.LATE: 2,
    Outcome.LOST: 3,
    Outcome.PRODUCE_FAILED: 4,
}
_ANOMALIES, _INVALID = 5, 6


@dataclass(frozen=True, slots=True)
class Objectives:
    """The SLO objectives (config ``slo``) and, per stage name, the latency threshold
    of its latency SLI (``metrics.latency_threshold``; the sink's and the mirror's own)."""

    availability: float = 0.999
    latency: float = 0.99
    latency_threshold_s: float = 0.5
    stage_latency_threshold_s: Mapping[str, float] | None = None

    @classmethod
    def of(cls, config: ProbeConfig) -> Objectives:
        return cls(
            availability=config.slo.availability_objective,
            latency=config.slo.latency_objective,
            latency_threshold_s=config.metrics.latency_threshold,
            stage_latency_threshold_s={
                stage: config.latency_threshold(stage)
                for stage in (StageName.SINK, StageName.MIRROR)
            },
        )

    def threshold_s(self, stage: str) -> float:
        return (self.stage_latency_threshold_s or {}).get(stage, self.latency_threshold_s)


class _Minutes:
    """Per-minute event counts of one stage over the longest window, as a ring.

    Slot ``minute % _SLOTS`` holds that minute's counts while ``stamp`` says it is
    that minute's; an older stamp means the slot is from a lap ago and counts nothing.
    """

    __slots__ = ("arrived", "delivered", "fast", "stamp", "total")

    def __init__(self) -> None:
        self.stamp = array("q", [-1]) * _SLOTS
        self.total = array("q", [0]) * _SLOTS
        self.delivered = array("q", [0]) * _SLOTS
        self.arrived = array("q", [0]) * _SLOTS
        self.fast = array("q", [0]) * _SLOTS

    def slot(self, now_ns: int) -> int:
        minute = now_ns // _MINUTE_NS
        slot = minute % _SLOTS
        if self.stamp[slot] != minute:
            self.stamp[slot] = minute
            self.total[slot] = self.delivered[slot] = self.arrived[slot] = self.fast[slot] = 0
        return slot

    def sums(self, now_ns: int) -> list[tuple[int, int, int, int]]:
        """Per window of SLO_WINDOWS: (delivered, total, fast, arrived)."""
        now_minute = now_ns // _MINUTE_NS
        sums = [[0, 0, 0, 0] for _ in SLO_WINDOWS]
        spans = [seconds // 60 for _, seconds in SLO_WINDOWS]
        for slot, minute in enumerate(self.stamp):
            age = now_minute - minute
            if minute < 0 or age < 0 or self.total[slot] == 0:
                continue
            counts = (self.delivered[slot], self.total[slot], self.fast[slot], self.arrived[slot])
            for window, span in enumerate(spans):
                if age < span:
                    into = sums[window]
                    for i in range(4):
                        into[i] += counts[i]
        return [(d, t, f, a) for d, t, f, a in sums]


class _StageRecord:
    __slots__ = ("minutes", "rounds", "threshold_ns")

    def __init__(self, rounds_kept: int, threshold_s: float) -> None:
        # Each row: [round index, delivered, late, lost, produce_failed, anomalies, invalid].
        self.rounds: deque[list[int]] = deque(maxlen=rounds_kept)
        self.minutes = _Minutes()
        self.threshold_ns = int(threshold_s * 1e9)

    def row(self, round_index: int) -> list[int]:
        rounds = self.rounds
        if not rounds or rounds[-1][0] < round_index:
            rounds.append([round_index, 0, 0, 0, 0, 0, 0])
        return rounds[-1]  # a clock stepped back counts into the newest row


# A failure as recorded: (when, target, stage, the finding or the invalid record's reason).
_Failure = tuple[int, str, str, Fate | Anomaly | RejectReason]


class StatusBoard:
    """The status page's memory of verdicts; a Recorder (probe.stages.stage).

    >>> board = StatusBoard(interval_s=20, objectives=Objectives(), clock_ns=lambda: 0)
    >>> metrics_and_board = [metrics, board]  # doctest: +SKIP
    >>> TargetProbe(config, keyring, metrics_and_board, metrics=metrics)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        interval_s: float,
        objectives: Objectives,
        rounds_kept: int = 10,
        failures_kept: int = 50,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.interval_ns = max(1, int(interval_s * 1e9))
        self.objectives = objectives
        self.started_ns = clock_ns()
        self._rounds_kept = rounds_kept
        self._clock_ns = clock_ns
        self._stages: dict[tuple[str, str], _StageRecord] = {}
        self._failures: deque[_Failure] = deque(maxlen=failures_kept)
        self._lock = threading.Lock()

    def stages(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._stages)

    def _record(self, target: str, stage: str) -> _StageRecord:
        key = (target, stage)
        record = self._stages.get(key)
        if record is None:
            threshold = self.objectives.threshold_s(stage)
            record = self._stages[key] = _StageRecord(self._rounds_kept, threshold)
        return record

    def declare(self, target: str, stage: str) -> None:
        """Show the stage from the start, with nothing judged yet."""
        with self._lock:
            self._record(target, stage)

    # -- Recorder --------------------------------------------------------------------

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        if not findings:
            return
        now_ns = self._clock_ns()
        with self._lock:
            record = self._record(target, stage)
            row = record.row(now_ns // self.interval_ns)
            minutes = record.minutes
            slot = minutes.slot(now_ns)
            for finding in findings:
                if isinstance(finding, Fate):
                    outcome = finding.outcome
                    row[_COLUMN[outcome]] += 1
                    minutes.total[slot] += 1
                    if outcome is Outcome.DELIVERED:
                        minutes.delivered[slot] += 1
                    else:
                        self._failures.append((now_ns, target, stage, finding))
                    latency = finding.latency_ns
                    if latency is not None:
                        minutes.arrived[slot] += 1
                        if latency <= record.threshold_ns:
                            minutes.fast[slot] += 1
                elif finding.kind is not AnomalyKind.FOREIGN:
                    row[_ANOMALIES] += 1
                    self._failures.append((now_ns, target, stage, finding))

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        now_ns = self._clock_ns()
        with self._lock:
            self._record(target, stage).row(now_ns // self.interval_ns)[_INVALID] += 1
            self._failures.append((now_ns, target, stage, reason))

    # -- what the page shows ---------------------------------------------------------

    def rounds(self, target: str, stage: str, now_ns: int) -> tuple[RoundVerdicts, ...]:
        """The last ``rounds_kept`` rounds up to the current one (in progress), rounds
        in which nothing was decided included."""
        current = now_ns // self.interval_ns
        with self._lock:
            record = self._stages.get((target, stage))
            rows = {} if record is None else {row[0]: tuple(row) for row in record.rounds}
        first = max(current - self._rounds_kept + 1, self.started_ns // self.interval_ns)
        return tuple(
            _round(index * self.interval_ns, rows.get(index), in_progress=index == current)
            for index in range(first, current + 1)
        )

    def slos(self, target: str, stage: str, now_ns: int) -> tuple[SloTable, ...]:
        with self._lock:
            record = self._stages.get((target, stage))
            sums = record.minutes.sums(now_ns) if record is not None else None
            threshold_s = self.objectives.threshold_s(stage)
        if sums is None:
            sums = [(0, 0, 0, 0)] * len(SLO_WINDOWS)
        # How much of each window this process has counted: its uptime, to the second.
        uptime_s = -(-max(0, now_ns - self.started_ns) // 1_000_000_000)
        objectives = self.objectives
        availability = SloTable(
            "availability",
            objectives.availability,
            "canaries delivered of all fates",
            tuple(
                SloWindow(name, span, min(span, uptime_s), d, t, objectives.availability)
                for (name, span), (d, t, _, _) in zip(SLO_WINDOWS, sums, strict=True)
            ),
        )
        latency = SloTable(
            "latency",
            objectives.latency,
            f"arrived canaries faster than {threshold_s:g} s",
            tuple(
                SloWindow(name, span, min(span, uptime_s), f, a, objectives.latency)
                for (name, span), (_, _, f, a) in zip(SLO_WINDOWS, sums, strict=True)
            ),
        )
        return (availability, latency)

    def failures(self, leader_of: Callable[[str, int], int | None]) -> tuple[FailureRow, ...]:
        with self._lock:
            recorded = list(self._failures)
        return tuple(_failure_row(failure, leader_of) for failure in recorded)


def _round(started_ns: int, row: tuple[int, ...] | None, *, in_progress: bool) -> RoundVerdicts:
    if row is None:
        return RoundVerdicts(started_ns, in_progress=in_progress)
    _, delivered, late, lost, produce_failed, anomalies, invalid = row
    return RoundVerdicts(
        started_ns, delivered, late, lost, produce_failed, anomalies, invalid, in_progress
    )


def _failure_row(failure: _Failure, leader_of: Callable[[str, int], int | None]) -> FailureRow:
    at_ns, target, stage, what = failure
    if isinstance(what, RejectReason):
        return FailureRow(at_ns, target, stage, "invalid", f"invalid record: {what.value}")
    partition = what.key.partition
    if isinstance(what, Anomaly):
        reason = {
            AnomalyKind.DUPLICATE: "read again after its fate",
            AnomalyKind.OUT_OF_ORDER: "arrived after a later canary of its partition",
            AnomalyKind.RESURRECTED: "arrived after it was declared lost or failed",
            AnomalyKind.SEQUENCE_JUMP: "sequence far ahead of the partition's: ignored",
            AnomalyKind.MISROUTED: "read on another partition than written to",
            AnomalyKind.FUTURE_DATED: "produced after it arrived, by the clocks",
            AnomalyKind.ABORTED_READ: "written in an aborted transaction, read committed",
        }.get(what.kind, what.kind.value)
        seq = what.seq if what.seq >= 0 else None
        broker = leader_of(target, partition)
        return FailureRow(at_ns, target, stage, what.kind.value, reason, partition, seq, broker)
    if what.outcome is Outcome.LATE:
        latency = (what.latency_ns or 0) / 1e9
        reason = f"arrived {latency:.3g} s after it was produced, past the freshness deadline"
    elif what.outcome is Outcome.LOST:
        reason = "acknowledged, not read within the loss timeout"
    else:
        reason = f"not acknowledged: {what.reason or 'unknown'}"
    ids = tracing.ids_of(what.trace_context)
    # The broker that led the partition when the canary was produced; else its leader now.
    broker = what.broker if what.broker is not None else leader_of(target, partition)
    return FailureRow(
        at_ns,
        target,
        stage,
        what.outcome.value,
        reason,
        partition,
        what.seq,
        broker,
        None if ids is None else ids.trace_id,
    )


def refresh_every(interval_s: float) -> int:
    """How often the page reloads itself: every round, within 5 s to a minute.

    >>> refresh_every(1.0), refresh_every(20.0), refresh_every(300.0)
    (5, 20, 60)
    """
    return int(min(60.0, max(5.0, interval_s)))


def worst_partitions(
    staleness: Mapping[_Key, int],
    partition_of: Callable[[_Key], int],
    is_stale: Callable[[int], bool],
    leader_of: Callable[[int], int | None],
    count: int = WORST_PARTITIONS,
) -> tuple[PartitionStaleness, ...]:
    """The ``count`` stalest partitions, stalest first (ties: the lower partition),
    chosen in one pass: O(n log count), never a sort of every partition."""
    worst = heapq.nlargest(count, staleness.items(), key=itemgetter(1))
    worst.sort(key=lambda item: (-item[1], partition_of(item[0])))
    return tuple(
        PartitionStaleness(
            partition_of(key), value / 1e9, is_stale(value), leader_of(partition_of(key))
        )
        for key, value in worst
    )


class StatusView:
    """Takes the page's snapshot on each request: the callable endpoints.build_app
    serves at ``/``. Every source is optional: ``reconcile --every`` has runs and no
    stages.

    >>> view = StatusView("run", config.target, readiness, board=board,
    ...                   sources=metrics.staleness.sources,
    ...                   leader_of=metrics.replica_state.leader_of)  # doctest: +SKIP
    """

    def __init__(
        self,
        service: str,
        target: str,
        readiness: Callable[[], tuple[bool, str]],
        *,
        board: StatusBoard | None = None,
        sources: Callable[[], Iterable[StageSource]] = list,
        leader_of: Callable[[str, int], int | None] = lambda target, partition: None,
        sink: Callable[[], SinkBatchProgress | None] | None = None,
        reconcile_runs: Callable[[], Sequence[ReconcileRun]] | None = None,
        refresh_s: int = 10,
        version: str = "",
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.service = service
        self.target = target
        self._readiness = readiness
        self._board = board
        self._sources = sources
        self._leader_of = leader_of
        self._sink = sink
        self._reconcile_runs = reconcile_runs
        self._refresh_s = refresh_s
        self._version = version
        self._clock_ns = clock_ns
        self._started_ns = clock_ns()

    def __call__(self) -> StatusSnapshot:
        now_ns = self._clock_ns()
        ready, reason = self._readiness()
        board = self._board
        stages = []
        shown: set[tuple[str, str]] = set()
        for source in self._sources():
            stages.append(self._stage(source.target, source.stage, now_ns, source))
            shown.add((source.target, source.stage))
        if board is not None:
            stages.extend(
                self._stage(target, stage, now_ns, None)
                for target, stage in board.stages()
                if (target, stage) not in shown
            )
        runs = None if self._reconcile_runs is None else tuple(self._reconcile_runs())
        return StatusSnapshot(
            service=self.service,
            target=self.target,
            now_ns=now_ns,
            ready=ready,
            readiness=reason,
            refresh_s=self._refresh_s,
            started_ns=self._started_ns,
            interval_s=None if board is None else board.interval_ns / 1e9,
            version=self._version,
            stages=tuple(stages),
            failures=() if board is None else board.failures(self._leader_of),
            sink=None if self._sink is None else self._sink(),
            reconcile_runs=runs,
        )

    def _stage(
        self, target: str, stage: str, now_ns: int, source: StageSource | None
    ) -> StageStatus:
        board = self._board
        worst: tuple[PartitionStaleness, ...] = ()
        partitions = stale = 0
        if source is not None:
            staleness = source.judge.staleness_ns(now_ns)
            partitions = len(staleness)
            threshold = source.stale_after_ns
            stale = sum(1 for value in staleness.values() if value > threshold)
            worst = worst_partitions(
                staleness,
                lambda key: key.partition,
                source.is_stale,
                lambda partition: self._leader_of(target, partition),
            )
        return StageStatus(
            target=target,
            stage=stage,
            rounds=() if board is None else board.rounds(target, stage, now_ns),
            slos=() if board is None else board.slos(target, stage, now_ns),
            worst=worst,
            partitions=partitions,
            stale_partitions=stale,
        )
