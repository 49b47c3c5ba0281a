"""The mirror stage's reader: the canary topic as MirrorMaker 2 replicated it to the
target cluster (a :class:`~probe.transport.kafka.KafkaTransport` that never writes),
and the heartbeats MirrorMaker 2 writes to that cluster for the flow from the source
(probe.core.heartbeats).

The heartbeats are followed from the end of the ``heartbeats`` topic by a consumer of
their own, assigned its partitions once the topic is found (each refresh looks until
then). The newest one from ``mirror.source_alias`` is the mirror's sign of life apart
from the canaries: canaries lost while heartbeats arrive point at the replication of
the canary topic (a task, an ACL, the topic filter); both stopped, at the whole mirror
or its way to the target cluster. Where the heartbeats cannot be read (no Read ACL on
the topic, heartbeats turned off), that is said once and the stage judges on without
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from probe.config import KafkaConfig
from probe.core.heartbeats import HEARTBEATS_TOPIC, read_heartbeat
from probe.transport.kafka import KafkaTransport
from probe.transport.kafka_client import never_auto_create

log = logging.getLogger(__name__)

# Heartbeats come about once a second: a fetch may wait for the next one.
HEARTBEAT_WAIT_MS = 1000


class MirrorReader(KafkaTransport):
    """The mirrored topic on the target cluster, read whole, never written; and the
    newest heartbeat from ``source_alias`` (:meth:`mirror_heartbeat`)."""

    def __init__(self, config: KafkaConfig, source_alias: str, **options: Any) -> None:
        super().__init__(config, writes=False, **options)
        self._source_alias = source_alias
        self._heartbeats = AIOKafkaConsumer(
            **self._options,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=HEARTBEAT_WAIT_MS,
        )
        never_auto_create(self._heartbeats._client)
        self._newest: float | None = None
        # Following the heartbeats, once their topic is found; never tried again once
        # they cannot be read.
        self._tail: asyncio.Task[None] | None = None
        self._unreadable = False

    async def start(self) -> None:
        await super().start()
        try:
            await self._heartbeats.start()
        except (KafkaError, OSError) as exc:
            # The canary topic's reader started on this cluster a moment ago: a
            # heartbeat reader that cannot is left out, not the stage.
            log.warning("mirror: cannot read MirrorMaker 2's heartbeats: %s", exc)
            self._unreadable = True

    async def partitions(self) -> list[int]:
        found = await super().partitions()
        if self._tail is None and not self._unreadable:
            await self._follow_heartbeats()
        return found

    async def _follow_heartbeats(self) -> None:
        """Assign the heartbeats topic's partitions at their end and follow them, once
        the topic exists (MirrorMaker 2 creates it when it starts)."""
        # Metadata of every topic: the consumer's own lists only those it reads. A
        # refresh that fails is tried again at the next round; the stage reads on.
        try:
            cluster = await self._heartbeats._client.fetch_all_metadata()
        except (KafkaError, OSError) as exc:
            log.debug("mirror: heartbeats' metadata: %r", exc)
            return
        partitions = cluster.partitions_for_topic(HEARTBEATS_TOPIC)
        if not partitions:
            return
        self._heartbeats.assign([TopicPartition(HEARTBEATS_TOPIC, p) for p in partitions])
        self._tail = asyncio.create_task(self._follow(), name="mirror heartbeats")

    async def _follow(self) -> None:
        while True:
            try:
                batches = await self._heartbeats.getmany(timeout_ms=HEARTBEAT_WAIT_MS * 2)
            except KafkaError as exc:
                log.warning(
                    "mirror: stopped reading MirrorMaker 2's heartbeats (topic %s): %s; "
                    "grant Read on it to follow them, the mirror stage judges on without",
                    HEARTBEATS_TOPIC,
                    exc,
                )
                return
            for records in batches.values():
                for record in records:
                    beat = read_heartbeat(record.key, record.value)
                    if beat is not None and beat.source == self._source_alias:
                        at = beat.at_ms / 1000
                        self._newest = at if self._newest is None else max(self._newest, at)

    def mirror_heartbeat(self) -> float | None:
        return self._newest

    def _clients(self) -> Iterator[Any]:
        yield from super()._clients()
        yield self._heartbeats._client

    async def close(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await self._tail
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(1.0):
                await self._heartbeats.stop()
        await super().close()
