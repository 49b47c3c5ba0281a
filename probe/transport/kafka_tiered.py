"""The tiered read's requests (probe.stages.tiered): a timestamp lookup and fetches from
one partition's leader, on an aiokafka client of its own.

The requests are made one by one, not through a consumer: a consumer retries a fetch
that fails on the broker's side without a pause and without telling its caller (an
aiokafka consumer sent 3,500 fetches a second against a remote store that had gone,
and logged each), where a tiered read must end, and say why. Each answer's error is
the broker's own name for it (UNKNOWN_SERVER_ERROR is what a remote storage manager's
failure comes back as; KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, NOT_LEADER...).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords

from probe.config import KafkaConfig
from probe.transport.kafka_admin import Refused, topic_settings
from probe.transport.kafka_client import connection_options, never_auto_create

log = logging.getLogger(__name__)

# A fetch is answered once a record is there or after this long: a remote read the
# broker has not finished by its remote.fetch.max.wait.ms comes back empty, and is
# asked again.
FETCH_WAIT_MS = 500
# Enough for a batch of canaries (a fetch returns at least one whole batch anyway).
FETCH_MAX_BYTES = 1 << 20
READ_UNCOMMITTED = 0


class TieredReadError(Exception):
    """A lookup or fetch the broker answered with an error, or that never reached it:
    ``reason`` is the broker's name of the error, or the client's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one fetch returned: the records' values from the offset asked, oldest
    first, and where the next fetch starts."""

    payloads: list[bytes]
    next_offset: int


class TieredReader:
    """One client for the tiered read's requests on the canary topic."""

    def __init__(self, config: KafkaConfig) -> None:
        self._topic = config.topic
        self._client = AIOKafkaClient(**connection_options(config))
        never_auto_create(self._client)

    async def start(self) -> None:
        await self._client.bootstrap()

    async def close(self) -> None:
        await self._client.close()

    async def partitions(self) -> list[int]:
        """The canary topic's partitions as a fresh metadata answer lists them."""
        try:
            await self._client.force_metadata_update()
        except KafkaError as error:
            raise TieredReadError(_client_reason(error)) from None
        return sorted(self._client.cluster.partitions_for_topic(self._topic) or ())

    async def offset_at(self, partition: int, timestamp_ms: int) -> int | None:
        """The offset of the first record written at or after ``timestamp_ms`` (a
        ListOffsets by timestamp, which the broker answers from the remote store's time
        index where the local log no longer holds it); None when there is none."""
        request = OffsetRequest(-1, READ_UNCOMMITTED, [(self._topic, [(partition, timestamp_ms)])])
        answer = await self._ask(partition, request)
        for _topic, partitions in answer.topics:
            for found, error_code, *rest in partitions:
                if found == partition:
                    _raise_for(error_code)
                    offset = int(rest[-1])
                    return None if offset < 0 else offset
        raise TieredReadError("no answer for the partition")

    async def fetch(self, partition: int, offset: int) -> Fetched:
        """The records from ``offset`` one fetch returns (none when the broker's remote
        read had not finished by its wait)."""
        request = FetchRequest(
            FETCH_WAIT_MS,
            1,
            FETCH_MAX_BYTES,
            READ_UNCOMMITTED,
            [(self._topic, [(partition, offset, FETCH_MAX_BYTES)])],
        )
        answer = await self._ask(partition, request)
        for _topic, partitions in answer.topics:
            for found, error_code, _high_watermark, *data in partitions:
                if found == partition:
                    _raise_for(error_code)
                    return _records_from(data[-1], offset)
        raise TieredReadError("no answer for the partition")

    async def _ask(self, partition: int, request: Any) -> Any:
        leader = self._client.cluster.leader_for_partition(TopicPartition(self._topic, partition))
        if leader is None or leader < 0:
            raise TieredReadError("LEADER_NOT_AVAILABLE")
        try:
            return await self._client.send(leader, request)
        except KafkaError as error:
            raise TieredReadError(_client_reason(error)) from None


async def topic_storage(config: KafkaConfig, names: Sequence[str]) -> dict[str, str | None] | None:
    """These settings of the canary topic, as the cluster describes them; None when it
    does not say (refused, or no broker answered)."""
    admin = AIOKafkaAdminClient(**connection_options(config))
    try:
        await admin.start()
        settings = await topic_settings(admin, config.topic, names)
    except KafkaError:
        return None
    finally:
        with contextlib.suppress(KafkaError):
            await admin.close()
    if isinstance(settings, Refused):
        return None
    return {name: setting.value for name, setting in settings.items()}


def _raise_for(error_code: int) -> None:
    if error_code:
        error = for_code(error_code)
        # aiokafka names a few codes it does not know UNKNOWN: keep the number then.
        name = error.message if error.errno == error_code else f"ERROR_{error_code}"
        raise TieredReadError("UNKNOWN_SERVER_ERROR" if name == "UNKNOWN" else name)


def _client_reason(error: KafkaError) -> str:
    """A client-side failure's reason: aiokafka's error class, as a label."""
    return type(error).__name__


def _records_from(message_set: bytes | None, offset: int) -> Fetched:
    """The values of a fetch answer's records from ``offset`` on, control batches (a
    transaction's markers) passed over, and the offset after the last batch."""
    payloads: list[bytes] = []
    next_offset = offset
    if not message_set:
        return Fetched(payloads, next_offset)
    records = MemoryRecords(message_set)
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        next_offset = max(next_offset, batch.next_offset)
        if batch.is_control_batch:
            continue
        payloads.extend(
            bytes(record.value)
            for record in batch
            if record.offset >= offset and record.value is not None
        )
    return Fetched(payloads, next_offset)
