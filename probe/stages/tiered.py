"""The tiered read (docs/tiered-storage.md): every ``tiered.every``, the canaries written
``tiered.age`` ago on the next ``tiered.partitions`` partitions are looked up by
timestamp and read back from their leaders, which serve them from tiered storage once
the topic's local retention has passed (KIP-405).

The shell around probe.core.tiered's judgement: the clock, the requests
(probe.transport.kafka_tiered) and the series (probe.metrics.tiered). A read that has
not got its first record by ``tiered.timeout`` is failed (``timeout``); one the broker
answers with an error is failed with the error's name. Reads never hold the rounds:
they run beside them, one task, and a cluster that cannot be reached is tried again at
the next read (the stages measure that outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from probe.config import ProbeConfig
from probe.core.judge import OwnProbe
from probe.core.keys import KeySource
from probe.core.tiered import (
    STORAGE_SETTINGS,
    TIMEOUT,
    TieredOutcome,
    TieredRead,
    failed,
    judge_records,
    next_partitions,
    storage_problem,
)
from probe.metrics.tiered import TieredMetrics
from probe.transport.kafka_tiered import TieredReader, TieredReadError, topic_storage

log = logging.getLogger(__name__)


class TieredReads:
    """The tiered read of one Kafka target."""

    def __init__(
        self,
        config: ProbeConfig,
        keyring: KeySource,
        metrics: TieredMetrics,
        *,
        target: str,
        own: OwnProbe,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._config = config
        self._tiered = config.tiered
        self._keyring = keyring
        self._metrics = metrics
        self._target = target
        self._own = own
        self._clock_ns = clock_ns
        self._after: int | None = None
        self._reader: TieredReader | None = None
        # What the topic's settings said of where reads come from, as last said (""
        # nothing wrong; None: not asked yet).
        self._storage_said: str | None = None
        metrics.declare(target)

    async def run(self, stop: asyncio.Event) -> None:
        """Read every ``tiered.every`` until ``stop``; the first read after one interval
        (the canaries of the probe's first rounds are not old enough before)."""
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._tiered.every)
                if not stop.is_set():
                    await self.read_once()
        finally:
            await self.close()

    async def read_once(self) -> list[TieredRead]:
        """One read of the next partitions, counted; empty when the cluster could not be
        asked for them."""
        try:
            reader = await self._connected()
            partitions = await reader.partitions()
        except TieredReadError as error:
            log.warning("tiered read: cannot list the canary topic's partitions: %s", error)
            await self.close()
            return []
        chosen = next_partitions(partitions, self._after, self._tiered.partitions)
        if chosen:
            self._after = chosen[-1]
        reads = await asyncio.gather(*(self._read(reader, p) for p in chosen))
        for read in reads:
            self._metrics.count(self._target, read)
            if read.outcome is TieredOutcome.FAILED:
                log.warning("tiered read of partition %d failed: %s", read.partition, read.reason)
        return list(reads)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    async def _connected(self) -> TieredReader:
        if self._reader is None:
            reader = TieredReader(self._config.kafka)
            try:
                await reader.start()
            except Exception as error:  # aiokafka's errors are many; all mean "not now"
                with contextlib.suppress(Exception):
                    await reader.close()
                raise TieredReadError(type(error).__name__) from None
            self._reader = reader
        await self._check_storage()
        return self._reader

    async def _check_storage(self) -> None:
        """Whether the topic's settings have its reads served from tiered storage, asked
        at every read (an operator turns tiered storage on, or changes a retention, on a
        topic in use), said when the answer changes."""
        settings = await topic_storage(self._config.kafka, STORAGE_SETTINGS)
        if settings is None:
            return
        problem = storage_problem(settings, self._tiered.age) or ""
        if problem != self._storage_said:
            if problem:
                log.warning("tiered read: %s", problem)
            elif self._storage_said is not None:
                log.info("tiered read: the canary topic's old canaries are in tiered storage now")
            self._storage_said = problem

    async def _read(self, reader: TieredReader, partition: int) -> TieredRead:
        asked_ns = self._clock_ns() - int(self._tiered.age * 1e9)
        began = time.monotonic()
        try:
            async with asyncio.timeout(self._tiered.timeout):
                offset = await reader.offset_at(partition, asked_ns // 1_000_000)
                if offset is None:
                    return TieredRead(partition, TieredOutcome.NO_CANARY)
                while True:
                    fetched = await reader.fetch(partition, offset)
                    if fetched.payloads:
                        break
                    offset = fetched.next_offset
        except TimeoutError:
            return failed(partition, TIMEOUT)
        except TieredReadError as error:
            return failed(partition, error.reason)
        return judge_records(
            partition,
            fetched.payloads,
            asked_ns=asked_ns,
            read_ns=self._clock_ns(),
            first_record_s=time.monotonic() - began,
            within_s=2 * self._config.interval,
            keyring=self._keyring.ring,
            probe_id=self._own.probe_id,
            incarnation=self._own.incarnation,
            max_size=self._config.canary.max_size,
        )
