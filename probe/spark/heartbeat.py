"""The sink query's heartbeat: a batch at least every few seconds while no records come,
and none between records' batches otherwise.

The judge's loss timers run in processing time (probe.spark.judge_operator): a
canary implied by a sequence gap is declared lost at its deadline even if its
partition, or the whole topic, falls silent. Timers fire only inside a batch. Spark's
``transformWithState`` in processing time therefore asks for a batch at *every*
trigger, records or not (its ``shouldRunAnotherBatch`` is always true, SPARK-50180):
at a 2 s trigger and a round every 20 s, nine batches in ten carried nothing, and at
1,000 partitions they were about 0.3 core of the machine (docs/scale.md).

So the sink query runs with ``spark.sql.streaming.noDataMicroBatches.enabled=false``
(a batch only when a source has something new) and reads, beside the topic, this
source: it holds no records, and its offset moves on once ``every`` seconds have passed
since the query's last batch (Spark commits every source's offsets at the end of every
batch: :meth:`HeartbeatReader.commit`). While records come, batches follow them and the
heartbeat never beats; when the topic falls silent (a broker away, a producer stopped)
a batch still runs every ``every`` seconds, its expired timers fire, and the
watermark Spark computed at the last records' batch takes effect.

A query's sources are fixed by its checkpoint: Spark refuses to resume a checkpoint
with a different number of them. :func:`probe.spark.lag.checkpoint_sources` tells a
sink whether the checkpoint it resumes was written with the heartbeat (two sources)
or without it (one: an older probe, or ``sink.heartbeat: null``); the checkpoint wins.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

HEARTBEAT_NAME = "sla_heartbeat"
# The period by default (sink.heartbeat), and for a checkpoint written with one.
HEARTBEAT_S = 10.0
# Spark's setting for batches without new records (see the module docstring).
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
# The columns of a topic's records the sink reads, as both Kafka sources type them.
# Spelt out, not imported: Spark's Python process for this source imports this module,
# and the Kafka source's would bring the Kafka client and Arrow along (18 MB).
RECORDS = StructType(
    [
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("value", BinaryType(), True),
    ]
)
# The offset's one key: the beats so far.
_BEAT = "beat"


class HeartbeatReader(DataSourceStreamReader):
    """Offsets ``{"beat": n}``; no records, ever.

    It lives in the driver's Python process for the source, for the whole query run:
    ``latestOffset`` and ``commit`` are called there, one at a time, by Spark's query
    thread.
    """

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        # A query (re)started counts from its start: its first batch follows records or
        # a full period, never at once.
        self._last_batch = clock()

    def initialOffset(self) -> dict[str, Any]:
        return {_BEAT: 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        # From the start Spark hands in (the last batch's end, kept in the checkpoint),
        # never from a count of its own: a restarted query resumes at the checkpoint's.
        beat = int(start[_BEAT])
        if self._clock() - self._last_batch >= self.every_s:
            beat += 1
        return {_BEAT: beat}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return []  # no records: a beat plans no task

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        # Called for every batch the query ends, whichever source had something new.
        self._last_batch = self._clock()


class HeartbeatSource(DataSource):
    """``spark.readStream.format("sla_heartbeat").option("every", "10")``: the columns
    the sink reads of a topic's records (:data:`RECORDS`), and never a record."""

    @classmethod
    def name(cls) -> str:
        return HEARTBEAT_NAME

    def schema(self) -> StructType:
        return RECORDS

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        every = float(self.options.get("every", "0"))
        if every <= 0:
            raise ValueError(f"{HEARTBEAT_NAME}: option 'every' must be > 0 (seconds)")
        return HeartbeatReader(every)
