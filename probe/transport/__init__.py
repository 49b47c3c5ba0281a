"""Transports: the only code that knows a client library.

Every transport implements :class:`Transport`: list the partitions (or shards) of the
target, cover them so arrivals are seen from now on, send one canary to one
partition, stream arrivals, close. Client-library exceptions are mapped to
:mod:`probe.errors` here, nowhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Arrival:
    """Raw bytes read back from one partition, with the wall-clock time (ns) they were read."""

    partition: int
    payload: bytes
    at_ns: int


class Transport(Protocol):
    async def start(self) -> None:
        """Connect. Raises TransportError if the target cannot be reached."""

    async def partitions(self) -> list[int]:
        """Partitions (or shards) of the target right now, refreshed from the broker."""

    async def cover(self, partitions: Sequence[int]) -> None:
        """Make sure every canary sent to these partitions from now on is read back.

        Returns once the reader is positioned: partitions already read keep their
        position; partitions new to the reader start at their beginning, because
        anything in a partition that was just created is new.
        """

    async def send(self, partition: int, payload: bytes) -> None:
        """Write one canary and wait for the broker's acknowledgement.

        Raises ProduceFailed(reason) if it is not acknowledged in time.
        """

    def arrivals(self) -> AsyncIterator[Arrival]:
        """Every record read back, as it arrives. Survives broker outages."""

    async def close(self) -> None: ...
