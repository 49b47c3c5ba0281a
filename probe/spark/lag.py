"""Source lag: the records of the topic the sink has not judged yet, measured by the
probe itself, whatever the query is doing.

Spark reports a source's latest and processed offsets only in the progress of a
micro-batch that ran. While the query fails, restarts, or hangs in a batch, no
progress comes: a lag taken from progress stands still at its last value (0 when the
query failed on its first batch, which is what users saw while the sink fell hours
behind). Here the probe lists the topic's log ends itself (the source's own listing:
one Metadata request and a ListOffsets per broker, :class:`TopicOffsets`) every
few seconds, and subtracts the offsets the query last committed:

* those of its last progress event, when one came since the probe started;
* else those of the last batch committed in its checkpoint: the offset log entry
  (``offsets/<id>``) of the newest commit (``commits/<id>``), as Spark resumes from;
* else, before the query ever committed a batch, its starting offsets
  (``sla_kafka_start.json``, pinned by the sink when the query first started).

A partition the committed offsets do not name is owed whole (the source reads a new
partition from its beginning), and so is one whose log now ends before the committed
offset (re-created or truncated: read again from its beginning).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

import pyarrow.fs as pafs

from probe.core.offset_ranges import Offsets
from probe.spark.tables import filesystem_of, read_text
from probe.spark.topic_offsets import TopicOffsets

log = logging.getLogger(__name__)

# In the checkpoint, beside Spark's logs: the source's offsets when the query first
# started (pinned there by probe.spark.sink.SinkJob.pin_start).
START_FILE = "sla_kafka_start.json"


def owed(ends: Mapping[str, int], committed: Mapping[str, int]) -> int:
    """Records between the committed offsets and the log ends, as the source would
    read them next.

    >>> owed({"0": 10, "1": 4, "2": 3}, {"0": 7, "1": 9})  # 3, 4 (started over), 3 (new)
    10
    """
    total = 0
    for partition, end in ends.items():
        done = committed.get(partition, 0)
        total += end if end < done else end - done
    return total


def committed_offsets(text: str | None, topic: str) -> Offsets | None:
    """A source's offsets as Spark keeps them (JSON: by partition as sla_kafka writes
    them, or by topic then partition as Spark's own connector does), for ``topic``.

    >>> committed_offsets('{"orders": {"0": 12, "1": 3}}', "orders")
    {'0': 12, '1': 3}
    >>> committed_offsets('{"0": 5}', "orders")
    {'0': 5}
    """
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if isinstance(value.get(topic), dict):
        value = value[topic]
    if not all(isinstance(o, int) for o in value.values()):
        return None
    return {str(p): int(o) for p, o in value.items()}


def _newest_batch(root: str, log_name: str) -> int | None:
    """The newest batch id in one of a checkpoint's logs (``offsets``, ``commits``)."""
    filesystem, path = filesystem_of(f"{root}/{log_name}")
    batches = [
        int(info.base_name)
        for info in filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        if info.base_name.isdigit()
    ]
    return max(batches, default=None)


def _offset_entry(root: str, batch: int) -> list[str]:
    """A batch's offset log entry: "v1", the batch's metadata, then a line per source
    (the topic's first: probe.spark.sink)."""
    entry = read_text(f"{root}/offsets/{batch}")
    return entry.splitlines() if entry else []


def last_committed(checkpoint: str, topic: str) -> Offsets | None:
    """The source's offsets after the newest batch committed in a query's checkpoint,
    or its starting offsets before it committed any; None when there are neither."""
    root = checkpoint.rstrip("/")
    batch = _newest_batch(root, "commits")
    if batch is not None:
        lines = _offset_entry(root, batch)
        if len(lines) >= 3:
            return committed_offsets(lines[2], topic)
    return committed_offsets(read_text(f"{root}/{START_FILE}"), topic)


def checkpoint_sources(checkpoint: str) -> int | None:
    """How many sources the newest batch planned in a query's checkpoint read: 2 for a
    sink written with its heartbeat (probe.spark.heartbeat), 1 without; None for a
    checkpoint without any batch planned yet, which any query may take."""
    root = checkpoint.rstrip("/")
    batch = _newest_batch(root, "offsets")
    return None if batch is None else max(0, len(_offset_entry(root, batch)) - 2)


class SourceLag:
    """The sink's source lag (records), reported through ``report`` at every progress
    event (:meth:`progress`) and at every :meth:`refresh`, which the sink stage calls
    every few seconds whatever the query does. A refresh lists the log ends itself only
    when no progress brought them within ``every`` seconds: while batches flow, the
    source's own listing (in their progress) is used, and the brokers asked once.

    ``options`` are the source's (``bootstrap.servers``, ``topic``, ``kafka.*``).
    """

    def __init__(
        self,
        options: Mapping[str, str],
        checkpoint: str,
        report: Callable[[int], None],
        *,
        every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = options["topic"]
        self.every = every
        self._options = dict(options)
        self._checkpoint = checkpoint
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()
        self._ends: Offsets | None = None
        self._ends_at = -math.inf
        self._committed: Offsets | None = None  # from progress, once one came
        self._offsets: TopicOffsets | None = None

    def progress(self, latest: str | None, committed: str | None) -> None:
        """A progress event's source offsets (JSON, as Spark reports them): the log
        ends the source listed for the batch, and the offsets the batch committed."""
        ends = committed_offsets(latest, self.topic)
        done = committed_offsets(committed, self.topic)
        with self._lock:
            if ends is not None:
                self._ends, self._ends_at = ends, self._clock()
            if done is not None:
                self._committed = done
            ends, done = self._ends, self._committed
        if ends is not None and done is not None:
            self._report(owed(ends, done))

    def refresh(self) -> int | None:
        """Report and return the lag now; None (nothing reported) while the log ends
        cannot be listed (brokers away, the topic gone), or before the query has
        offsets of its own (it has not started yet)."""
        with self._lock:
            fresh = self._clock() - self._ends_at < self.every
            ends, committed = self._ends, self._committed
        if not fresh:
            ends = self._list_ends()
            with self._lock:
                self._ends, self._ends_at = ends, self._clock()
        if ends is None:
            return None
        if committed is None:
            try:
                committed = last_committed(self._checkpoint, self.topic)
            except OSError as exc:
                log.debug("source lag: cannot read the checkpoint: %s", exc)
        if committed is None:
            return None
        lag = owed(ends, committed)
        self._report(lag)
        return lag

    def _list_ends(self) -> Offsets | None:
        try:
            if self._offsets is None:
                self._offsets = TopicOffsets(self._options)
            found = self._offsets.now("latest")
            return None if found is None else found[1]
        except Exception as exc:  # brokers away: no figure, and a new client next time
            log.debug("source lag: cannot list the log ends of %s: %s", self.topic, exc)
            self.close()
            return None

    def close(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
