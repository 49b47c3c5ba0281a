"""The judge as a Spark stateful operator (transformWithStateInPandas).

One group of the operator holds many streams: the streams of one (probe, target) whose
partition falls in one of :data:`JUDGE_BUCKETS` buckets (``partition % JUDGE_BUCKETS``).
With a group per stream, at 10,000 partitions a batch made 10,000 calls into Python,
each with its own frame, its own state reads and timer calls (about 50 ms a stream on a
busy 2-core machine: a 1,000-partition batch took 27 s). Now a batch makes at most
``JUDGE_BUCKETS`` calls per (probe, target), and a stream costs its state's read and
write only when it has records or a deadline due.

State of a group:

``streams``
    Map state, partition -> the stream's :class:`probe.core.judge.StreamState` as JSON
    (about 3 kB once full, its newest arrivals packed: :mod:`probe.core.judge_memory`).
``deadlines``
    Value state, JSON: ``{"due": {partition: earliest loss deadline (ns)}, "timer": ms,
    "written": token}`` for the streams with canaries pending, and the one
    processing-time timer kept at the earliest of them, so canaries implied by a
    sequence gap are declared lost even if their partition falls silent. ``written``
    names the group's last write (a random token, new at every write of its streams).

Each call into Spark's state server costs a round trip and, on the JVM side, a row
converted each way: reading and writing every stream's state, stream by stream, was
most of the judge's time at 10,000 partitions. So a Python worker remembers the judges
of the groups it last wrote, under that write's token (:data:`_REMEMBERED`): when the
group's stored token is still the one it wrote, nothing was written since, and its
judges are the stored state, so only the token is read. Otherwise (another worker
judged the group since, a batch failed or is replayed, the query restarted) the
streams a batch needs are read again. A group's memory is dropped while its batch
runs and kept again only once its state and token are written, so a failure halfway
leaves nothing to trust.

A sink checkpoint of an older probe (a group and a ``judge`` value state per stream)
keeps its offsets; its judge state is not read: each stream is learnt again from its
next canary, and nothing below a stream's first canary is inferred, so no false loss.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Iterator
from itertools import groupby
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from probe.core.canary import Canary
from probe.core.judge import Fate, Finding, Judge, JudgePolicy, StreamKey
from probe.spark.rows import (
    JUDGED,
    finding_row,
    frame_rows,
    judged_row,
    rejected_out,
    typed_frame,
)

# Groups of streams per (probe, target). Fixed: it names the groups of the state in a
# sink's checkpoint, so a change would strand every stream's state. 64 keeps a group's
# call cheap at 10,000 partitions (about 160 streams) and leaves work for many tasks.
JUDGE_BUCKETS = 64

_JSON = StructType([StructField("json", StringType())])
_PARTITION = StructType([StructField("partition", LongType())])


def bucket_of(partition: Any) -> Any:
    """The group of a stream's partition (a Spark column or an int alike)."""
    return partition % JUDGE_BUCKETS


@dataclasses.dataclass
class _Deadlines:
    due: dict[int, int]  # partition -> earliest loss deadline of its pending canaries
    timer_ms: int | None  # the processing-time timer registered for the earliest
    written: str | None = None  # the token of the group's last write

    def earliest_ms(self) -> int | None:
        return min(self.due.values()) // 1_000_000 + 1 if self.due else None


# (probe, target, bucket, freshness ns, loss timeout ns): a group of the judge as a
# worker knows it. The policy is part of it: a query restarted with other deadlines
# judges with judges of its own.
_GroupKey = tuple[str, str, int, int, int]


@dataclasses.dataclass
class _Remembered:
    written: str  # the token this worker wrote with the group's state
    judges: dict[int, Judge]  # partition -> judge, as stored under that token


# The judges of the groups this worker process wrote last, by group. A worker serves
# one task at a time; its memory outlives the task (Spark reuses Python workers). At
# most a group's streams each: about 10 kB a stream once its memory is full.
_REMEMBERED: dict[_GroupKey, _Remembered] = {}


class JudgeProcessor(StatefulProcessor):
    """The judge as a Spark stateful operator, one group per (probe, target, bucket)."""

    def __init__(self, freshness_ns: int, loss_timeout_ns: int) -> None:
        self.policy = JudgePolicy(freshness_ns=freshness_ns, loss_timeout_ns=loss_timeout_ns)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.streams = handle.getMapState("streams", _PARTITION, _JSON)
        self.deadlines = handle.getValueState("deadlines", _JSON)

    def _group(self, key: tuple[Any, ...]) -> _GroupKey:
        policy = self.policy
        return (str(key[0]), str(key[1]), int(key[2]), policy.freshness_ns, policy.loss_timeout_ns)

    def _judges(
        self, group: _GroupKey, deadlines: _Deadlines, needed: set[int]
    ) -> dict[int, Judge]:
        """The group's judges of the ``needed`` streams (and any this worker remembers
        as stored), their state as stored. Takes the group's memory: :meth:`_remember`
        gives it back once the new state is written."""
        remembered = _REMEMBERED.pop(group, None)
        judges: dict[int, Judge] = {}
        if remembered is not None and remembered.written == deadlines.written:
            judges = remembered.judges
        for partition in needed - judges.keys():
            judge = judges[partition] = Judge(self.policy)
            stored = self.streams.getValue((partition,))
            if stored is not None:
                stream = StreamKey(group[0], group[1], partition)
                judge.import_state(stream, json.loads(stored[0]))
        return judges

    def _remember(self, group: _GroupKey, deadlines: _Deadlines, judges: dict[int, Judge]) -> None:
        if deadlines.written is not None:
            _REMEMBERED[group] = _Remembered(deadlines.written, judges)

    def _save(self, judge: Judge, key: StreamKey, deadlines: _Deadlines) -> None:
        exported = judge.export_state(key)
        if exported is not None:
            # Compact separators: a state is written at every batch its stream has
            # records in, and kept in the checkpoint's changelog (a fifth smaller).
            self.streams.updateValue(
                (key.partition,), (json.dumps(exported, separators=(",", ":")),)
            )
        deadline = judge.next_deadline_ns()
        if deadline is None:
            deadlines.due.pop(key.partition, None)
        else:
            deadlines.due[key.partition] = deadline

    def _load_deadlines(self) -> _Deadlines:
        stored = self.deadlines.get()
        if stored is None:
            return _Deadlines({}, None)
        data = json.loads(stored[0])
        due = {int(partition): int(ns) for partition, ns in data["due"].items()}
        # Absent from the state of an older probe: nothing remembered matches it.
        return _Deadlines(due, data["timer"], data.get("written"))

    def _store_deadlines(self, deadlines: _Deadlines, before: _Deadlines, wrote: bool) -> None:
        """Keeps the timer at the earliest deadline; writes the deadlines when they
        changed or any stream was written (``wrote``: with a new token)."""
        wanted = deadlines.earliest_ms()
        if wanted != deadlines.timer_ms:
            if deadlines.timer_ms is not None:
                self.handle.deleteTimer(deadlines.timer_ms)
            if wanted is not None:
                self.handle.registerTimer(wanted)
            deadlines.timer_ms = wanted
        if wrote:
            deadlines.written = secrets.token_hex(8)
        if deadlines != before:
            due = {str(partition): ns for partition, ns in sorted(deadlines.due.items())}
            data = {"due": due, "timer": deadlines.timer_ms, "written": deadlines.written}
            self.deadlines.update((json.dumps(data),))

    def _due(self, deadlines: _Deadlines, now_ns: int, judged: set[int]) -> list[int]:
        """The group's streams whose loss deadline passed and that had no record."""
        return sorted(p for p, ns in deadlines.due.items() if ns <= now_ns and p not in judged)

    def _expire_due(
        self,
        group: _GroupKey,
        now_ns: int,
        deadlines: _Deadlines,
        due: list[int],
        judges: dict[int, Judge],
    ) -> list[dict[str, object]]:
        """Losses of the ``due`` streams."""
        out: list[dict[str, object]] = []
        for partition in due:
            stream = StreamKey(group[0], group[1], partition)
            judge = judges[partition]
            out.extend(finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns))
            self._save(judge, stream, deadlines)
        return out

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        probe, target = str(key[0]), str(key[1])
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        batch = pd.concat(list(rows))
        rejected = batch["reason"].notna()
        # Rejected records share this operator so the query reads its source once;
        # they pass straight through and never touch a stream's state.
        out: list[dict[str, object]] = [rejected_out(row) for row in frame_rows(batch[rejected])]
        arrivals = batch[~rejected]
        if arrivals.empty and not self.deadlines.exists():
            yield typed_frame(out, JUDGED)
            return
        deadlines = self._load_deadlines()
        before = dataclasses.replace(deadlines, due=dict(deadlines.due))
        group = self._group(key)
        arrivals = arrivals.sort_values(["stream_partition", "kafka_partition", "kafka_offset"])
        judged = {int(p) for p in arrivals["stream_partition"].unique()}
        due = self._due(deadlines, now_ns, judged)
        judges = self._judges(group, deadlines, judged | set(due))
        # One pass over the rows, not a frame per stream (pandas' indexing of every
        # column for every stream was half the batch's time at 1,000 streams).
        by_stream = groupby(frame_rows(arrivals), key=_stream_partition)
        for partition, records in by_stream:
            stream = StreamKey(probe, target, int(partition))
            judge = judges[stream.partition]
            for row in records:
                out.extend(self._arrival(judge, stream, row, now_ns))
            out.extend(finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns))
            self._save(judge, stream, deadlines)
        out.extend(self._expire_due(group, now_ns, deadlines, due, judges))
        self._store_deadlines(deadlines, before, wrote=bool(judged or due))
        self._remember(group, deadlines, judges)
        yield typed_frame(out, JUDGED)

    def _arrival(
        self, judge: Judge, stream: StreamKey, row: Any, now_ns: int
    ) -> list[dict[str, object]]:
        canary = Canary(
            probe_id=stream.probe_id,
            incarnation=int(row.incarnation),
            target=stream.target,
            partition=stream.partition,
            seq=int(row.seq),
            produced_ns=int(row.produced_ns),
            trace_context=row.trace_context,
        )
        offset = int(row.kafka_offset)
        if judge.was_read_at(canary, offset):
            # Read again by a source that moved back over a truncated log: it is in the
            # table and judged already (probe.core.judge, "Re-reads").
            return []
        return [
            judged_row("canary", canary, None, now_ns, row),
            *(
                finding_row(_traced(f, canary), canary.incarnation, now_ns, row, canary.produced_ns)
                for f in judge.on_arrived(canary, now_ns, offset)
            ),
        ]

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        deadlines = self._load_deadlines()
        before = dataclasses.replace(deadlines, due=dict(deadlines.due))
        deadlines.timer_ms = None  # the timer that fired is gone
        group = self._group(key)
        due = self._due(deadlines, now_ns, set())
        judges = self._judges(group, deadlines, set(due))
        out = self._expire_due(group, now_ns, deadlines, due, judges)
        self._store_deadlines(deadlines, before, wrote=bool(due))
        self._remember(group, deadlines, judges)
        yield typed_frame(out, JUDGED)

    def close(self) -> None:
        pass


def _stream_partition(row: Any) -> int:
    return int(row.stream_partition)


def _traced(finding: Finding, canary: Canary) -> Finding:
    """The arrived canary's own fate with its trace context (the sink's span and
    exemplar use it); any other finding of the arrival (a fate implied for another
    sequence number, an anomaly) as it is: its context is not this canary's."""
    if isinstance(finding, Fate) and (finding.key, finding.seq) == (
        StreamKey.of(canary),
        canary.seq,
    ):
        return dataclasses.replace(finding, trace_context=canary.trace_context)
    return finding
