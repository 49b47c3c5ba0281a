"""A stage's reader that connects when it can, not before the target may start.

A target's stages start together, and a reader that cannot connect stops the target
from starting (the probe retries, judging nothing). That is right for readers of the
target's own cluster, which its producer cannot write without either. A reader of
another cluster (the mirror stage's: the cluster MirrorMaker 2 replicates to) must not
hold the source's stages hostage: a disaster-recovery cluster that is down when the
probe restarts is exactly what the mirror stage is there to report, as its canaries
lost, while every other stage judges on.

:class:`DeferredReader` starts at once whatever happens; each refresh
(:meth:`partitions`) tries to start the real reader until it has, and says why it
could not (the target is unready with that reason, the stage's canaries are judged
lost). A failed start closes what it began, so each try builds a new reader.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from probe.core.errors import ProduceFailure, TransportError
from probe.core.leadership import LeaderPlan
from probe.core.reader_signals import NO_SIGNALS, ReaderSignals
from probe.core.replicas import TopicReplicas

if TYPE_CHECKING:
    from probe.transport import Arrival, Transport

log = logging.getLogger(__name__)


class DeferredReader:
    """A reader built by ``build`` and started at the first refresh that can; until
    then it reads nothing and its refresh raises why. ``topic`` and ``stage`` name it
    in the lines that say so."""

    messaging_system = "kafka"
    max_in_flight: int | None = None

    def __init__(self, build: Callable[[], Transport], topic: str, stage: str) -> None:
        self._build = build
        self._name = topic
        self._said = f"stage {stage}: topic {topic}"
        self._reader: Transport | None = None
        self._started = asyncio.Event()
        self._closed = False
        self._last_problem: str | None = None

    async def start(self) -> None:
        """Never fails: the first try is the first refresh's."""
        with_problem = await self._try_start()
        if with_problem is not None:
            log.warning("%s: not read yet: %s; trying again each round", self._said, with_problem)

    async def _try_start(self) -> str | None:
        if self._reader is not None or self._closed:
            return None
        reader = self._build()
        try:
            await reader.start()
        except TransportError as exc:
            self._last_problem = str(exc)
            return self._last_problem
        self._reader = reader
        self._started.set()
        if self._last_problem is not None:
            log.info("%s: connected, read from now on", self._said)
        return None

    def _started_reader(self) -> Transport:
        if self._reader is None:
            raise TransportError(self._last_problem or "not connected yet")
        return self._reader

    async def partitions(self) -> list[int]:
        problem = await self._try_start()
        if problem is not None:
            raise TransportError(problem)
        return await self._started_reader().partitions()

    async def provision(self) -> None:
        await self._started_reader().provision()

    def describe(self, partitions: Sequence[int]) -> str:
        if self._reader is None:
            return f"topic {self._name}: {self._last_problem or 'not connected yet'}"
        return self._reader.describe(partitions)

    async def cover(self, partitions: Sequence[int]) -> None:
        await self._started_reader().cover(partitions)

    def destination(self, partition: int) -> str:
        return self._name

    def refused(self, partition: int, since: float) -> ProduceFailure | None:
        return None

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        raise TransportError(f"{self._name} is read, never written by the probe")

    async def arrivals(self) -> AsyncIterator[Arrival]:
        await self._started.wait()
        async for arrival in self._started_reader().arrivals():
            yield arrival

    def read_problem(self) -> str | None:
        return None if self._reader is None else self._reader.read_problem()

    def signals(self) -> ReaderSignals:
        return NO_SIGNALS if self._reader is None else self._reader.signals()

    def replicas(self) -> TopicReplicas | None:
        return None if self._reader is None else self._reader.replicas()

    async def spread_leaders(self, plan: LeaderPlan) -> list[str]:
        return []

    async def close(self) -> None:
        self._closed = True
        if self._reader is not None:
            await self._reader.close()
