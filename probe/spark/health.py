"""The Spark stage's own health, from a StreamingQueryListener, as Prometheus metrics.

The series are declared in probe.metrics with every other; this module reads them
off Spark's progress events. They are the stream-processor signals that throughput
and error rate miss:

* ``synthetic_sla_watermark_skew_seconds`` - now minus the event-time watermark. It
  is computed at scrape time from the last watermark, so it keeps rising while the
  query is stalled and no progress event arrives at all. The watermark is the one
  Spark holds after the last batch: the newest event time it saw minus the allowed
  lateness, or the one it reported if later. Spark moves it at the end of a batch but
  reports it only in the next batch's progress, and with batches that follow the
  records (probe.spark.heartbeat) the next may come a heartbeat later.
* ``synthetic_sla_spark_source_lag_records`` - records in the topic not judged yet: the
  log ends minus the offsets the query last committed (probe.spark.lag), refreshed by
  the probe itself while no batch completes (the query failing, restarting, stuck).
* ``synthetic_sla_spark_batch_duration_seconds`` - wall time of each micro-batch.
* ``synthetic_sla_spark_trigger_overruns_total`` - batches longer than the trigger
  interval (backpressure: the query cannot keep up with its own schedule).
* ``synthetic_sla_spark_commit_duration_seconds`` - offset WAL and commit log writes.
* ``synthetic_sla_spark_rows_dropped_by_watermark_total`` - rows later than the
  allowed lateness (dropped by Spark before the judge saw them).
* ``synthetic_sla_watermark_skew_{good,observed}_seconds_total`` - the skew SLO's
  seconds below its threshold, and all seconds.
* ``synthetic_sla_spark_seconds_since_last_batch`` - how long no batch completed.

The restart supervisor (probe.spark.stage) adds ``synthetic_sla_spark_query_up``,
``synthetic_sla_spark_query_restarts_total{reason}`` (reason from
:func:`failure_reason`) and ``synthetic_sla_spark_query_failed``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry
from pyspark import SparkContext
from pyspark.sql.streaming.listener import QueryProgressEvent, StreamingQueryListener

from probe.core.errors import SourceReadFailed, SourceReadTimedOut
from probe.metrics import SinkQueryMetrics
from probe.spark.lag import SourceLag

log = logging.getLogger(__name__)

# Spark's error classes (``[CLASS_NAME]`` in its messages) by the restart reason they
# mean, as prefixes; the first class in a message that has a family decides.
_ERROR_CLASS_FAMILIES = (
    ("FOREACH_BATCH_USER_FUNCTION_ERROR", "batch"),
    ("CONCURRENT_STREAM_LOG_UPDATE", "checkpoint"),
    ("CONCURRENT_QUERY", "checkpoint"),
    ("STATE_STORE", "checkpoint"),
    ("CANNOT_LOAD_STATE_STORE", "checkpoint"),
    ("STREAMING_CHECKPOINT", "checkpoint"),
    ("PYTHON_DATA_SOURCE", "source"),
    ("PYTHON_STREAMING_DATA_SOURCE", "source"),
)
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_.]+)\]")
# Without a known class, the JVM classes of the checkpoint and the source's own names.
# (Never a bare "checkpoint": the sink's path may well contain the word.)
_CHECKPOINT = re.compile(
    r"HDFSMetadataLog|OffsetSeqLog|CommitLog|CheckpointFileManager|StateStoreProvider"
)
# Without a known class, the source's by the exceptions it raises, never by the file
# a traceback passes through (moved or renamed, a file would stop matching): the
# sla_kafka source's reads fail with SourceReadFailed or a subclass, whose name ends
# the Python traceback in the message; its stream reader and librdkafka's errors
# (KafkaError) name themselves alike. Spark's own connector fails with its classes
# (KafkaMicroBatchStream, KafkaOffsetReaderAdmin...) or the Java client's
# (org.apache.kafka...) in the message.
_SOURCE = re.compile(
    "|".join(re.escape(error.__name__) for error in (SourceReadFailed, SourceReadTimedOut))
    + r"|KafkaStreamReader|NoBrokersAvailable|KafkaError"
    r"|org\.apache\.kafka\.|org\.apache\.spark\.sql\.kafka010\.|\[KAFKA_"
)
_TRACEBACK = "Traceback (most recent call last):"


def failure_reason(failure: str | None) -> str:
    """Why a query ended, as the ``reason`` label of its restarts: ``checkpoint``,
    ``source``, ``batch`` (anything else the batch ran into) or ``stopped`` (no error).

    >>> failure_reason("[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log.")
    'checkpoint'
    >>> failure_reason(None)
    'stopped'
    """
    if failure is None:
        return "stopped"
    for error_class in _ERROR_CLASS.findall(failure):
        for prefix, reason in _ERROR_CLASS_FAMILIES:
            if error_class.startswith(prefix):
                return reason
    if _CHECKPOINT.search(failure):
        return "checkpoint"
    if _SOURCE.search(failure):
        return "source"
    return "batch"


def failure_summary(failure: str) -> str:
    """One line for a log or /readyz: Spark's error class and, when Python raised,
    the Python exception's own line (not py4j's "An exception was raised by the
    Python Proxy"), else the message's first line.
    """
    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    if not lines:
        return failure
    error_class = _ERROR_CLASS.match(lines[0])
    prefix = f"[{error_class.group(1)}] " if error_class else ""
    if _TRACEBACK in failure:
        after = failure.split(_TRACEBACK, 1)[1].splitlines()
        # The traceback ends at the exception's line: the first unindented line after
        # the frames (Spark appends its SQLSTATE and the JVM stack after it).
        raised = next(
            (
                line.strip()
                for line in after[1:]
                if line and not line[0].isspace() and not line.startswith("SQLSTATE")
            ),
            None,
        )
        if raised:
            return (prefix + raised)[:500]
    return lines[0][:500]


def parse_spark_time(text: str | None) -> int | None:
    """Spark's ISO-8601 progress timestamps ('2026-11-21T10:00:00.000Z') to epoch ns."""
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)


def source_lag(latest: str | None, processed: str | None) -> int | None:
    """Records between the source's latest and processed offsets (JSON offset maps:
    by partition, or by topic then partition as Spark's connector writes them); None
    while the latest offsets are unknown (broker away, topic not there yet).

    >>> source_lag('{"t": {"0": 9, "1": 4}}', '{"t": {"0": 7, "1": 4}}')
    2
    """
    latest_map = _offset_map(latest)
    if latest_map is None:
        return None
    processed_map = _offset_map(processed) or {}
    return sum(max(0, int(o) - int(processed_map.get(p, 0))) for p, o in latest_map.items())


def _offset_map(text: str | None) -> dict[str, int] | None:
    # Progress carries offsets as JSON text; an unknown offset comes as an empty or
    # non-JSON string, which must not break the listener (and with it every metric).
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    flat: dict[str, int] = {}
    for name, entry in value.items():
        if isinstance(entry, dict):  # Spark's connector: {"topic": {"0": 12, ...}}
            flat.update({f"{name}/{partition}": offset for partition, offset in entry.items()})
        else:
            flat[name] = entry
    return flat


class SparkHealth:
    """Turns one sink query's progress events into its series
    (:class:`probe.metrics.sink.SinkQueryMetrics`, declared with every other series)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        target: str,
        trigger_s: float,
        clock_ns: Callable[[], int] = time.time_ns,
        *,
        skew_threshold_s: float = 120.0,
        allowed_lateness_s: float | None = None,
    ) -> None:
        self.target = target
        self.trigger_s = trigger_s
        # The query's watermark delay: with it, the watermark a batch's newest event
        # time sets counts from that batch (see the module docstring).
        self.allowed_lateness_s = allowed_lateness_s
        self.metrics = SinkQueryMetrics(registry, target, clock_ns, skew_threshold_s)
        # Set by the sink stage: then the lag is the log ends against the committed
        # offsets, kept up to date between batches; else only progress tells it.
        self.lag: SourceLag | None = None

    def on_progress(self, progress: Any) -> None:
        """Apply one StreamingQueryProgress (from the listener or `lastProgress`)."""
        durations = progress.durationMs or {}
        batch_ms = durations.get("triggerExecution")
        if log.isEnabledFor(logging.DEBUG) and progress.numInputRows:
            # Where a batch's time went, by Spark's phases (latestOffset: the source's
            # listing; addBatch: the read, the judge and foreachBatch), in one line
            # whatever the partitions.
            state = progress.stateOperators or []
            log.debug(
                "sink batch %s: %d records in %s ms (%s; judge state: updates %d ms, "
                "commit %d ms, %d bytes)",
                progress.batchId,
                progress.numInputRows,
                batch_ms,
                ", ".join(f"{phase} {ms}" for phase, ms in sorted(durations.items())),
                sum(op.allUpdatesTimeMs for op in state),
                sum(op.commitTimeMs for op in state),
                sum(op.memoryUsedBytes for op in state),
            )
        commit_ms = durations.get("walCommit", 0) + durations.get("commitOffsets", 0)
        sources = progress.sources or []
        self.metrics.batch(
            duration_s=None if batch_ms is None else batch_ms / 1000,
            trigger_s=self.trigger_s,
            commit_s=commit_ms / 1000,
            dropped=sum(op.numRowsDroppedByWatermark for op in progress.stateOperators or []),
            watermark_ns=self._watermark_ns(progress.eventTime or {}),
            lag=(
                # The topic's source: the heartbeat beside it holds no records.
                source_lag(sources[0].latestOffset, sources[0].endOffset) or 0
                if sources and self.lag is None
                else None
            ),
        )
        if self.lag is not None and sources:
            # The sink reads one source: its listed ends and the offsets just committed.
            self.lag.progress(sources[0].latestOffset, sources[0].endOffset)

    def _watermark_ns(self, event_time: dict[str, str]) -> int | None:
        # Spark reports the epoch until the first event time is seen: not a watermark.
        reported = parse_spark_time(event_time.get("watermark")) or None
        newest = parse_spark_time(event_time.get("max"))
        if newest is None or self.allowed_lateness_s is None:
            return reported
        held = newest - int(self.allowed_lateness_s * 1e9)
        return held if reported is None else max(reported, held)


class HealthListener(StreamingQueryListener):
    """Feeds every progress event of the named query into SparkHealth."""

    def __init__(self, health: SparkHealth, query_name: str) -> None:
        self._health = health
        self._query_name = query_name
        self._wrapper: Any = None

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` registers on the JVM: pyspark's wrapper,
        around :class:`_ProgressAsJson` instead of pyspark's own call-backs."""
        if self._wrapper is None:
            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is added to a running session"
            self._wrapper = jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))
        return self._wrapper

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        if event.progress.name == self._query_name:
            self._health.on_progress(event.progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class _ProgressAsJson:
    """The JVM's listener call-backs, each progress event read as its JSON in one call.

    pyspark's own call-backs read an event field by field over py4j, each map and list
    element by element, a Java exception ending each iteration (which pyspark's error
    conversion then looks up class by class, scanning Spark's jars on the JVM side): at
    a batch every trigger, that was about a tenth of the sink's JVM and of the probe's
    own thread. The JSON is what ``StreamingQuery.lastProgress`` reads too. Only progress
    is listened to (see HealthListener).
    """

    def __init__(self, listener: StreamingQueryListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            event = QueryProgressEvent.fromJson(json.loads(jevent.json()))
        except (KeyError, ValueError):
            # A field its JSON leaves out (Spark omits rates that are not numbers)
            # that pyspark's reader requires: read it field by field instead.
            event = QueryProgressEvent.fromJObject(jevent)
        self._listener.onQueryProgress(event)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements: ClassVar = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
