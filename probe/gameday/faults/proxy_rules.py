"""What the Kafka-aware proxy does to the frames it forwards, as its faults set it:
requests held back (the coordinator fault: ``coordinator``) and one partition's
records stripped from Fetch responses (the silent partition: ``silent_partition``).

Each rule is shared by every connection of its proxy, which applies it, and set from
the fault's thread, a single store per field (read per frame). The rules live apart
from the faults that set them: a fault takes the targets (``base.LocalTargets``),
which hold the proxy, so a proxy importing the faults' modules would import itself.

Fetch responses are decoded and encoded with aiokafka's own protocol structures
(versions 0 to 11, the ones aiokafka speaks; a flexible version, 12 and up, would
need the compact encoding and is passed through unchanged, and counted).
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from aiokafka.protocol import fetch as fetch_protocol
from aiokafka.protocol.api import Response

from probe.gameday.faults.kafka_wire import Frame


class RequestHold:
    """Which requests are held back, and how: shared by every connection of the proxy,
    set from the fault's thread (each field a single store, read per request)."""

    def __init__(self) -> None:
        self.api_keys: frozenset[int] = frozenset()
        # Seconds a held request waits; None: it is dropped.
        self.delay: float | None = 0.0
        self.active = False
        self.delayed = 0
        self.dropped = 0

    def hold(self, request: Frame) -> float | None:
        """Seconds this request waits before it is forwarded; None: never forwarded."""
        if not self.active or request.api_key not in self.api_keys:
            return 0.0
        if self.delay is None:
            self.dropped += 1
            return None
        self.delayed += 1
        return self.delay


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
