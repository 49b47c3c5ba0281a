"""The mirror stage's reader: the canary topic as MirrorMaker 2 replicated it to the
target cluster (a :class:`~probe.transport.kafka.KafkaTransport` that never writes),
and what MirrorMaker 2 writes to that cluster of its own for the flow from the source:
its heartbeats and its checkpoints (probe.core.mirror_records).

Both are followed from the end of their topics by one consumer of their own, each
topic assigned once it is found (each refresh looks until then: MirrorMaker 2 creates
them when its connectors start).

- **Heartbeats.** The newest one from ``mirror.source_alias`` is the mirror's sign of
  life apart from the canaries: canaries lost while heartbeats arrive point at the
  replication of the canary topic (a task, an ACL, the topic filter); both stopped, at
  the whole mirror or its way to the target cluster.
- **Checkpoints.** For the probe's own consumer groups on the source (the group
  stages'), the newest checkpoint's translated offset per partition of the mirrored
  topic, against the topic's end on the target: the records a consumer of the group
  failing over now would read again (checkpoint lag). MirrorMaker 2 translates offsets
  through its offset syncs (every ``offset.lag.max`` records, and at its tasks'
  commits): on a busy topic the lag is at least the gap between two syncs.

Where a topic cannot be read (no Read ACL, heartbeats or checkpoints turned off), that
is said once and the stage judges on without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from probe.config import KafkaConfig
from probe.core.mirror_records import (
    HEARTBEATS_TOPIC,
    checkpoints_topic,
    read_checkpoint,
    read_heartbeat,
)
from probe.core.reader_signals import ReaderSignals
from probe.transport.kafka import KafkaTransport
from probe.transport.kafka_client import never_auto_create

log = logging.getLogger(__name__)

# Heartbeats come about once a second: a fetch may wait for the next one.
INTERNAL_WAIT_MS = 1000


class MirrorReader(KafkaTransport):
    """The mirrored topic on the target cluster, read whole, never written; and the
    newest heartbeat from ``source_alias`` and the newest checkpoints of ``groups``
    (:meth:`signals`)."""

    def __init__(
        self,
        config: KafkaConfig,
        source_alias: str,
        *,
        separator: str = ".",
        groups: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(config, writes=False, **options)
        self._source_alias = source_alias
        self._groups = frozenset(groups)
        self._internal = AIOKafkaConsumer(
            **self._options,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=INTERNAL_WAIT_MS,
        )
        never_auto_create(self._internal._client)
        # Each internal topic followed, by name, with what reads its records.
        self._readers: dict[str, Callable[[bytes | None, bytes | None], None]] = {
            HEARTBEATS_TOPIC: self._heartbeat
        }
        if self._groups:
            self._readers[checkpoints_topic(source_alias, separator)] = self._checkpoint
        self._newest_heartbeat: float | None = None
        # Per group of the probe's, per partition of the mirrored topic: the newest
        # translated offset (the lag is the largest over the groups).
        self._translated: dict[str, dict[int, int]] = {}
        self._followed: set[str] = set()
        self._tail: asyncio.Task[None] | None = None
        # Never tried again once the topics cannot be read.
        self._unreadable = False

    async def start(self) -> None:
        await super().start()
        try:
            await self._internal.start()
        except (KafkaError, OSError) as exc:
            # The canary topic's reader started on this cluster a moment ago: a
            # reader of MirrorMaker 2's topics that cannot is left out, not the stage.
            log.warning("mirror: cannot read MirrorMaker 2's heartbeats and checkpoints: %s", exc)
            self._unreadable = True

    async def partitions(self) -> list[int]:
        found = await super().partitions()
        if len(self._followed) < len(self._readers) and not self._unreadable:
            await self._follow_internal_topics()
        return found

    async def _follow_internal_topics(self) -> None:
        """Assign the internal topics found so far at their end, and follow them."""
        # Metadata of every topic: the consumer's own lists only those it reads. A
        # refresh that fails is tried again at the next round; the stage reads on.
        try:
            cluster = await self._internal._client.fetch_all_metadata()
        except (KafkaError, OSError) as exc:
            log.debug("mirror: MirrorMaker 2's topics' metadata: %r", exc)
            return
        found = {
            topic: partitions
            for topic in self._readers
            if (partitions := cluster.partitions_for_topic(topic))
        }
        if set(found) == self._followed:
            return
        # A new assignment starts every partition at its end again: a few heartbeats
        # and checkpoints are passed over, none of which a newer one does not repeat.
        self._internal.assign(
            [TopicPartition(topic, p) for topic, partitions in found.items() for p in partitions]
        )
        self._followed = set(found)
        if self._tail is None:
            self._tail = asyncio.create_task(self._follow(), name="mirror internal topics")

    async def _follow(self) -> None:
        while True:
            try:
                batches = await self._internal.getmany(timeout_ms=INTERNAL_WAIT_MS * 2)
            except KafkaError as exc:
                log.warning(
                    "mirror: stopped reading MirrorMaker 2's topics (%s): %s; grant Read "
                    "on them to follow them, the mirror stage judges on without",
                    ", ".join(sorted(self._readers)),
                    exc,
                )
                return
            for tp, records in batches.items():
                read = self._readers[tp.topic]
                for record in records:
                    read(record.key, record.value)

    def _heartbeat(self, key: bytes | None, value: bytes | None) -> None:
        beat = read_heartbeat(key, value)
        if beat is not None and beat.source == self._source_alias:
            at = beat.at_ms / 1000
            newest = self._newest_heartbeat
            self._newest_heartbeat = at if newest is None else max(newest, at)

    def _checkpoint(self, key: bytes | None, value: bytes | None) -> None:
        checkpoint = read_checkpoint(key, value)
        if checkpoint is None or checkpoint.group not in self._groups:
            return
        if checkpoint.topic == self._topic:
            by_group = self._translated.setdefault(checkpoint.group, {})
            by_group[checkpoint.partition] = checkpoint.downstream_offset

    def signals(self) -> ReaderSignals:
        lag: dict[int, int] | None = None
        if self._translated:
            ends = self._fetched_offsets()
            lag = {}
            for translated in self._translated.values():
                for partition, offset in translated.items():
                    if partition in ends:
                        behind = max(0, ends[partition][0] - offset)
                        lag[partition] = max(lag.get(partition, 0), behind)
        return ReaderSignals(mirror_heartbeat=self._newest_heartbeat, checkpoint_lag=lag)

    def _clients(self) -> Iterator[Any]:
        yield from super()._clients()
        yield self._internal._client

    async def close(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await self._tail
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(1.0):
                await self._internal.stop()
        await super().close()
