"""The judge operator's memory of its groups (judge_operator._REMEMBERED): a worker that
wrote a group last judges its next batch without reading the streams' state again, and
trusts that memory only while the group's stored token is the one it wrote.

Pure tests: the state handle below keeps Spark's state in dictionaries, counting the
calls a real state server would answer; a snapshot of it stands for a state store
version, restored as Spark restores one for a replayed batch. The operator on real
Spark (restarts from a checkpoint included) is tested in test_sink_buckets and
test_sink_restarts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark.sql.streaming.stateful_processor import TimerValues

from probe.spark import judge_operator
from probe.spark.judge_operator import JUDGE_BUCKETS, JudgeProcessor
from probe.spark.rows import DECODED

SECOND = 1_000_000_000
INCARNATION = 1_795_000_000_000_000_000
PROBE, TARGET = "probe-a", "kafka"
BUCKET = 3
# Twelve streams of one group.
PARTITIONS = [BUCKET + i * JUDGE_BUCKETS for i in range(12)]
KEY = (PROBE, TARGET, BUCKET)


class _MapState:
    def __init__(self, store: dict[str, Any], calls: list[str]) -> None:
        self.store, self.calls = store, calls

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self.calls.append("get")
        value: tuple[Any, ...] | None = self.store["streams"].get(key)
        return value

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.calls.append("update")
        self.store["streams"][key] = value


class _ValueState:
    def __init__(self, store: dict[str, Any], calls: list[str]) -> None:
        self.store, self.calls = store, calls

    def exists(self) -> bool:
        return self.store["deadlines"] is not None

    def get(self) -> tuple[Any, ...] | None:
        return self.store["deadlines"]  # type: ignore[no-any-return]

    def update(self, value: tuple[Any, ...]) -> None:
        self.store["deadlines"] = value


class _Handle:
    """One group's state, as Spark's state server keeps it for a task."""

    def __init__(self, store: dict[str, Any], calls: list[str]) -> None:
        self.store, self.calls = store, calls

    def getMapState(self, name: str, *_schemas: Any) -> _MapState:
        return _MapState(self.store, self.calls)

    def getValueState(self, name: str, *_schemas: Any) -> _ValueState:
        return _ValueState(self.store, self.calls)

    def registerTimer(self, ms: int) -> None:
        self.store["timers"].add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.store["timers"].discard(ms)


def new_store() -> dict[str, Any]:
    return {"streams": {}, "deadlines": None, "timers": set()}


def canaries(seq: int, partitions: list[int] = PARTITIONS, at_ns: int = 0) -> pd.DataFrame:
    """One canary a stream, as the decode step hands them to the judge."""
    rows = [
        {
            "stream_probe": PROBE,
            "stream_target": TARGET,
            "stream_partition": p,
            "probe_id": PROBE,
            "target": TARGET,
            "partition": p,
            "incarnation": INCARNATION,
            "seq": seq,
            "produced_ns": at_ns,
            "produced_at": pd.Timestamp(at_ns, unit="ns"),
            "trace_context": None,
            "reason": None,
            "kafka_partition": p,
            "kafka_offset": seq,
            "value": None,
        }
        for p in partitions
    ]
    keys = ["stream_probe", "stream_target", "stream_partition"]
    return pd.DataFrame(rows, columns=[*keys, *DECODED.fieldNames()])


def judge(
    store: dict[str, Any], frame: pd.DataFrame, now_ns: int
) -> tuple[pd.DataFrame, list[str]]:
    """One batch of one group in a task of a worker: the outcome rows and the state
    server calls it made."""
    calls: list[str] = []
    processor = JudgeProcessor(freshness_ns=5 * SECOND, loss_timeout_ns=10 * SECOND)
    processor.init(_Handle(store, calls))  # type: ignore[arg-type]
    timer = TimerValues(currentProcessingTimeInMs=now_ns // 1_000_000)
    out = pd.concat(list(processor.handleInputRows(KEY, iter([frame]), timer)))
    return out, calls


def outcomes(out: pd.DataFrame) -> list[tuple[int, int, str]]:
    fates = out[out["kind"] == "fate"]
    return sorted(zip(fates["partition"], fates["seq"], fates["outcome"], strict=True))


@pytest.fixture(autouse=True)
def a_fresh_worker() -> Iterator[None]:
    judge_operator._REMEMBERED.clear()
    yield
    judge_operator._REMEMBERED.clear()


def test_the_worker_that_wrote_a_group_last_judges_its_next_batch_without_reading_streams() -> None:
    store = new_store()
    _, first = judge(store, canaries(1, at_ns=SECOND), 2 * SECOND)
    assert first.count("update") == len(PARTITIONS)

    out, second = judge(store, canaries(2, at_ns=21 * SECOND), 22 * SECOND)

    assert "get" not in second
    assert second.count("update") == len(PARTITIONS)
    assert outcomes(out) == [(p, 2, "delivered") for p in PARTITIONS]


def test_a_group_another_worker_wrote_since_is_read_again() -> None:
    store = new_store()
    judge(store, canaries(1, at_ns=SECOND), 2 * SECOND)
    remembered = dict(judge_operator._REMEMBERED)
    # Another worker judges the next batch: it remembers nothing of the group.
    judge_operator._REMEMBERED.clear()
    judge(store, canaries(2, at_ns=21 * SECOND), 22 * SECOND)
    # The first worker again, its memory from before the other's write, and canary 2
    # read again at its offset: a re-read of a record judged already (no row at all)
    # against the other worker's write; a new arrival against the stale memory.
    judge_operator._REMEMBERED.clear()
    judge_operator._REMEMBERED.update(remembered)

    out, calls = judge(store, canaries(2, at_ns=21 * SECOND), 42 * SECOND)

    assert calls.count("get") == len(PARTITIONS)
    assert out.empty, "canary 2 was judged already, by the other worker"


def test_a_replayed_batch_is_judged_against_the_restored_state_not_the_failed_attempts() -> None:
    store = new_store()
    judge(store, canaries(1, at_ns=SECOND), 2 * SECOND)
    before = copy.deepcopy(store)
    # The batch of canary 2 is judged and its state written, then the task fails
    # before Spark commits the state store: the replay starts from the version before.
    judge(store, canaries(2, at_ns=21 * SECOND), 22 * SECOND)
    store.clear()
    store.update(before)

    out, calls = judge(store, canaries(2, at_ns=21 * SECOND), 22 * SECOND)

    assert calls.count("get") == len(PARTITIONS), "the failed attempt's memory is not trusted"
    assert outcomes(out) == [(p, 2, "delivered") for p in PARTITIONS]


def test_a_batch_that_fails_halfway_leaves_no_memory_of_the_group() -> None:
    store = new_store()
    judge(store, canaries(1, at_ns=SECOND), 2 * SECOND)
    broken = canaries(2, at_ns=21 * SECOND)
    # A column of objects takes the bad value as it is (pandas refuses a str in an
    # int64 column, or will).
    broken["incarnation"] = broken["incarnation"].astype(object)
    broken.loc[5, "incarnation"] = "not a number"

    with pytest.raises(ValueError, match="not a number"):
        judge(store, broken, 22 * SECOND)

    assert KEY[:3] not in {group[:3] for group in judge_operator._REMEMBERED}
