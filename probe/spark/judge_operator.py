"""The judge as a Spark stateful operator (transformWithStateInPandas)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StringType, StructField, StructType

from probe.canary import Canary
from probe.judge import Fate, Finding, Judge, JudgePolicy, StreamKey
from probe.spark.rows import JUDGED, finding_row, judged_row, rejected_out, typed_frame


class JudgeProcessor(StatefulProcessor):
    """The judge as a Spark stateful operator, one instance per (probe, target, partition).

    State: the stream's :class:`probe.judge.StreamState` as JSON in a value state.
    A processing-time timer is kept at the earliest loss deadline, so canaries implied
    by a sequence gap are declared lost even if the partition falls silent.
    """

    def __init__(self, freshness_ns: int, loss_timeout_ns: int) -> None:
        self.policy = JudgePolicy(freshness_ns=freshness_ns, loss_timeout_ns=loss_timeout_ns)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("judge", StructType([StructField("json", StringType())]))

    def _judge(self, key: StreamKey) -> Judge:
        judge = Judge(self.policy)
        if self.state.exists():
            stored = self.state.get()
            assert stored is not None
            judge.import_state(key, json.loads(stored[0]))
        return judge

    def _save(self, judge: Judge, key: StreamKey) -> None:
        exported = judge.export_state(key)
        if exported is not None:
            self.state.update((json.dumps(exported),))
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        deadline = judge.next_deadline_ns()
        if deadline is not None:
            self.handle.registerTimer(deadline // 1_000_000 + 1)

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        stream = StreamKey(str(key[0]), str(key[1]), int(key[2]))
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        batch = pd.concat(list(rows)).sort_values(["kafka_partition", "kafka_offset"])
        rejected = batch["reason"].notna()
        # Rejected records share this operator so the query reads its source once;
        # they pass straight through and never touch a stream's state.
        out: list[dict[str, object]] = [
            rejected_out(row) for row in batch[rejected].itertuples(index=False)
        ]
        arrivals = batch[~rejected]
        if arrivals.empty and not self.state.exists():
            yield typed_frame(out, JUDGED)
            return
        judge = self._judge(stream)
        for row in arrivals.itertuples(index=False):
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
                # Read again by a source that moved back over a truncated log: it is
                # in the table and judged already (probe.judge, "Re-reads").
                continue
            out.append(judged_row("canary", canary, None, now_ns, row))
            out.extend(
                finding_row(_traced(f, canary), canary.incarnation, now_ns, row, canary.produced_ns)
                for f in judge.on_arrived(canary, now_ns, offset)
            )
        out.extend(finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns))
        self._save(judge, stream)
        yield typed_frame(out, JUDGED)

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        stream = StreamKey(str(key[0]), str(key[1]), int(key[2]))
        now_ns = timerValues.getCurrentProcessingTimeInMs() * 1_000_000
        judge = self._judge(stream)
        out = [finding_row(f, None, now_ns, None, None) for f in judge.expire(now_ns)]
        self._save(judge, stream)
        yield typed_frame(out, JUDGED)

    def close(self) -> None:
        pass


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
