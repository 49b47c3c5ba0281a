"""A silent partition: the broker acknowledges every canary, and one partition's records
never reach any reader.

The TCP proxy in front of the broker reads the Kafka protocol on each connection
(``kafka_wire``: frames, and which request each response answers) and, while the
fault is on, rewrites Fetch responses so that the chosen partition's records are empty. The
partition's high watermark is left as the broker said: the consumer sees a
partition that has records it never gets, as with a stuck replica or a consumer
pinned to a dead leader. Produce requests and their acknowledgements pass untouched.

Fetch responses are decoded and encoded with aiokafka's own protocol structures
(versions 0 to 11, the ones aiokafka speaks; a flexible version, 12 and up, would
need the compact encoding and is passed through unchanged, and counted).
"""

from __future__ import annotations

from io import BytesIO
from typing import TYPE_CHECKING, Any

from aiokafka.protocol import fetch as fetch_protocol
from aiokafka.protocol.api import Response

from probe.gameday.faults.kafka_wire import Frame

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import SilentPartition

FETCH = 1


def _fetch_responses() -> dict[int, Any]:
    """aiokafka's Fetch response structures by version (aiokafka is untyped)."""
    found: dict[int, Any] = {}
    for cls in vars(fetch_protocol).values():
        is_response = isinstance(cls, type) and issubclass(cls, Response)
        if is_response and getattr(cls, "API_KEY", None) == FETCH:
            found[int(getattr(cls, "API_VERSION"))] = cls  # noqa: B009
    return found


FETCH_RESPONSES = _fetch_responses()


class PartitionFilter:
    """What is stripped: one partition of one topic, while ``active``. Shared by every
    connection of the proxy; flipped from the fault's thread (a bool store is
    atomic, and a frame is rewritten or not as a whole)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.active = False
        self.stripped_batches = 0
        self.unsupported = 0


class FetchStripper:
    """Rewrites Fetch responses by the filter; every connection's responses go through
    the one stripper of its proxy (it holds no state of its own)."""

    def __init__(self, filter_: PartitionFilter) -> None:
        self.filter = filter_

    def rewrite(self, response: Frame) -> Frame:
        if response.api_key != FETCH or not self.filter.active:
            return response
        schema = FETCH_RESPONSES.get(response.api_version)
        if schema is None:
            self.filter.unsupported += 1
            return response
        frame = response.body
        values = list(schema.SCHEMA.decode(BytesIO(frame[4:])))
        # Every Fetch response version ends with its topics array; a partition's
        # tuple starts with its id and ends with its records.
        values[-1] = [
            (name, [self._strip(name, partition) for partition in partitions])
            for name, partitions in values[-1]
        ]
        body: bytes = schema.SCHEMA.encode(values)
        return Frame(response.api_key, response.api_version, frame[:4] + body)

    def _strip(self, topic: str, partition: tuple[Any, ...]) -> tuple[Any, ...]:
        if topic != self.filter.topic or partition[0] != self.filter.partition:
            return partition
        if partition[-1]:
            self.filter.stripped_batches += 1
        return (*partition[:-1], b"")


class SilentPartitionFault:
    """Strip ``partition``'s records from every Fetch response until healed."""

    def __init__(self, spec: SilentPartition, targets: LocalTargets) -> None:
        self.filter = targets.embedded_proxy().partition_filter
        self.filter.topic = targets.topic
        self.filter.partition = spec.partition

    def inject(self) -> None:
        self.filter.active = True

    def heal(self) -> None:
        self.filter.active = False
