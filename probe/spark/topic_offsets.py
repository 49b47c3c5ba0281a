"""A topic's offsets as its brokers list them now: :class:`TopicOffsets`.

The sla_kafka source plans its batches with it on the Spark driver
(probe.spark.kafka_source), reconcile lists its windows' offsets with it
(probe.reconcile.job), and the sink's lag is measured with it (probe.spark.lag). No
Spark here: a librdkafka consumer (probe.spark.librdkafka), so a reader outside Spark
uses it alike.

**A listing** costs a few requests, not one per partition: one Metadata request for the
topic, and one ListOffsets request per broker for the end offsets of each 1,000
partitions (:data:`LIST_CHUNK`); beginnings only when asked for. Like every client of
the source, it never creates the topic it asks about.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from probe.core.errors import TransportError
from probe.core.offset_ranges import Offsets
from probe.core.partition_summary import partitions_summary
from probe.spark.librdkafka import NO_TOPIC, ClientLog, client_config, kafka_error, new_consumer

# How long the driver waits for one listing before it plans nothing (stream) or
# fails (batch).
LIST_TIMEOUT_S = 15.0
# ListOffsets markers: the log's first offset and its end.
_EARLIEST, _LATEST = -2, -1
# Partitions asked per listing call. librdkafka matches each partition of an answer to
# its request by a linear search, so a call's cost grows with the square of its size:
# 10,000 partitions' ends in one call cost 0.6-0.75 CPU-seconds, in calls of 1,000 0.1-0.15
# (and no more wall time on loopback), measured on the embedded broker. A call is one
# ListOffsets request per broker leading any of its partitions.
LIST_CHUNK = 1_000
# A listing's answers that the topic is gone: its leaders' "unknown topic", or the
# client's own metadata, refreshed meanwhile, lacking a partition (Kafka never takes
# partitions away: the topic was deleted, or re-created with fewer).
_GONE = (*NO_TOPIC, KafkaError._UNKNOWN_PARTITION)


class TopicGone(TransportError):
    """The brokers answered a listing with "unknown topic": the topic was deleted
    after the metadata that named its partitions (a broker's metadata lags a
    deletion by moments, so the listing is the later, truer answer)."""


class TopicOffsets:
    """Offsets of one topic's partitions as its brokers list them now (driver side).

    One consumer, made on first use and kept (a source is pickled to Spark's source
    runner, a client is not). Each call asks the brokers once: the topic's metadata
    (that topic's alone), or one ListOffsets request per broker for each
    :data:`LIST_CHUNK` partitions. A listing of 10,000 partitions' ends costs about
    a tenth of a CPU-second (librdkafka in one call: 0.6-0.75; kafka-python's listing
    of both ends and every topic's metadata: 0.4; benchmarks/bench_source_read.py);
    beginnings are listed only when needed. Client failures are raised as
    TransportError.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = options["topic"]
        self._options = dict(options)
        self._client: Any = None
        self._client_log = ClientLog()

    def _consumer(self) -> Any:
        if self._client is None:
            self._client = new_consumer(self._options, self._client_log)
        return self._client

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        try:
            yield
        except KafkaException as exc:
            raise TransportError(f"topic {self.topic}: {what}: {kafka_error(exc)}") from exc
        finally:
            if self._client is not None:
                self._client.poll(0)  # serves the client's log lines

    def partitions(self) -> list[int] | None:
        """The topic's partitions, or None when it does not exist."""
        with self._asking("metadata"):
            meta = self._consumer().list_topics(self.topic, timeout=LIST_TIMEOUT_S)
        topic = meta.topics.get(self.topic)
        if topic is None or (topic.error is not None and topic.error.code() in NO_TOPIC):
            return None
        if topic.error is not None:
            raise TransportError(f"topic {self.topic}: metadata: {topic.error.str()}")
        return sorted(topic.partitions)

    def _listed(self, partitions: Sequence[int | str], marker: int) -> Offsets:
        """Offsets at ``marker`` of the partitions the brokers answered for."""
        if not partitions:
            return {}
        asked = [TopicPartition(self.topic, int(p), marker) for p in partitions]
        found: list[TopicPartition] = []
        with self._asking("list offsets"):
            try:
                for first in range(0, len(asked), LIST_CHUNK):
                    chunk = asked[first : first + LIST_CHUNK]
                    found.extend(self._consumer().offsets_for_times(chunk, LIST_TIMEOUT_S))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _GONE:
                    raise TopicGone(f"topic {self.topic} not found") from exc
                raise
        return {str(tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    def ends(self, partitions: Sequence[int | str]) -> Offsets:
        """End offsets (the next offset to be written); a partition the brokers could
        not answer for (its leader moving) is left out. Raises TopicGone when the
        brokers no longer know the topic."""
        return self._listed(partitions, _LATEST)

    def begins(self, partitions: Sequence[int | str]) -> Offsets:
        """First offsets still in the logs; a partition without an answer is left out."""
        return self._listed(partitions, _EARLIEST)

    def now(self, side: str) -> tuple[list[int], Offsets] | None:
        """The topic's partitions and their ``earliest`` or ``latest`` offsets (a
        partition without an answer left out), or None while the topic does not
        exist: its metadata says so, or the listing meets its deletion."""
        partitions = self.partitions()
        if partitions is None:
            return None
        try:
            listed = (self.begins if side == "earliest" else self.ends)(partitions)
        except TopicGone:
            return None
        return partitions, listed

    def bounds(self) -> tuple[Offsets, Offsets]:
        """(beginning, end) offsets of every partition. Raises ValueError when the
        topic does not exist, TransportError when a partition has no answer."""
        partitions = self.partitions()
        if partitions is None:
            raise ValueError(f"topic {self.topic!r} not found")
        try:
            begin, end = self.begins(partitions), self.ends(partitions)
        except TopicGone as exc:
            raise ValueError(f"topic {self.topic!r} not found") from exc
        unlisted = {str(p) for p in partitions} - (begin.keys() & end.keys())
        if unlisted:
            raise TransportError(
                f"topic {self.topic}: no offsets listed for {partitions_summary(unlisted)}"
            )
        return begin, end

    def at_times(self, times_ms: Mapping[str, int]) -> dict[str, int | None]:
        """Per partition, the first offset whose record timestamp is at or after the
        time given, or None when every record is older (the time is past the log).

        Asked of an admin client, whose answer carries the record's timestamp:
        Apache Kafka answers "none" with offset -1, the embedded broker with offset 0
        and timestamp -1, which only the timestamp tells apart from a real answer."""
        # OffsetSpec is exported, but not listed so in confluent_kafka.admin's stubs.
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: PLC0415
            AdminClient,
            OffsetSpec,
        )

        if not times_ms:
            return {}
        settings = client_config(self._options)
        del settings["enable.auto.commit"]  # a consumer's setting; this is an admin client
        admin = AdminClient(dict[str, Any]({**settings, "logger": self._client_log}))
        asked = {
            TopicPartition(self.topic, int(p)): OffsetSpec.for_timestamp(ms)
            for p, ms in times_ms.items()
        }
        found: dict[str, int | None] = {}
        with self._asking("list offsets by time"):
            for tp, answer in admin.list_offsets(asked, request_timeout=LIST_TIMEOUT_S).items():
                info = answer.result()
                found[str(tp.partition)] = (
                    None if info.offset < 0 or info.timestamp < 0 else int(info.offset)
                )
        return found

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a client that already broke
                self._client.close()
            self._client = None
