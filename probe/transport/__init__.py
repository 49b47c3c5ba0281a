"""Transports: the only code that knows a client library.

Every transport implements :class:`Transport`: list the partitions (or shards) of the
target, cover them so arrivals are seen from now on, send one canary to one
partition, stream arrivals, close. Client-library exceptions are mapped to
:mod:`probe.errors` here, nowhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from probe.config import ProbeConfig


@dataclass(frozen=True, slots=True)
class Arrival:
    """Raw bytes read back from one partition, with the wall-clock time (ns) they were read."""

    partition: int
    payload: bytes
    at_ns: int


class Transport(Protocol):
    # How many canaries the producer should send at once (each stamped when it goes
    # out), or None for a whole round at once: a transport that queues sends inside
    # its client would otherwise add that queue to every measured latency.
    max_in_flight: int | None

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

    def read_problem(self) -> str | None:
        """Why the reader cannot read right now, or None: a fetch that keeps failing
        (records it cannot decode, say), which a covered reader does not show."""

    async def close(self) -> None: ...


class TransportFactory(Protocol):
    def __call__(self, config: ProbeConfig, *, on_reconnect: Callable[[], None]) -> Transport:
        """The transport of one target; ``on_reconnect`` is called after each reconnection
        the transport makes by itself (for ``synthetic_sla_reconnects_total``)."""


# The client libraries are imported when a target of their kind is built, not when
# the config is validated against this map.
def _kafka(config: ProbeConfig, *, on_reconnect: Callable[[], None]) -> Transport:
    # aiokafka reconnects inside its clients and does not tell: nothing to count.
    from probe.transport.kafka import KafkaTransport  # noqa: PLC0415

    return KafkaTransport(config.kafka)


def _mqtt(config: ProbeConfig, *, on_reconnect: Callable[[], None]) -> Transport:
    from probe.transport.mqtt import MqttTransport  # noqa: PLC0415

    return MqttTransport(config.mqtt, probe_id=config.probe_id, on_reconnect=on_reconnect)


TRANSPORTS: Mapping[str, TransportFactory] = {"kafka": _kafka, "mqtt": _mqtt}
"""Target kinds by name: what ``targets:`` in the config may name, and how each is built."""
