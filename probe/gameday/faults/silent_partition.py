"""A silent partition: the broker acknowledges every canary, and one partition's records
never reach any reader.

The TCP proxy in front of the broker reads the Kafka protocol on each connection: it
splits both directions into frames (a 4-byte size, then the message), remembers
each request's API key and version by correlation id, and, while the fault is on,
rewrites Fetch responses so that the chosen partition's records are empty. The
partition's high watermark is left as the broker said: the consumer sees a
partition that has records it never gets, as with a stuck replica or a consumer
pinned to a dead leader. Produce requests and their acknowledgements pass untouched.

Fetch responses are decoded and encoded with aiokafka's own protocol structures
(versions 0 to 11, the ones aiokafka speaks; a flexible version, 12 and up, would
need the compact encoding and is passed through unchanged, and counted).
"""

from __future__ import annotations

import struct
from io import BytesIO
from typing import TYPE_CHECKING, Any

from aiokafka.protocol import fetch as fetch_protocol
from aiokafka.protocol.api import Response

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import SilentPartition

FETCH = 1
_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


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
    connection's ``FetchStripper``; flipped from the fault's thread (a bool store is
    atomic, and a frame is rewritten or not as a whole)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.active = False
        self.stripped_batches = 0
        self.unsupported = 0


class FetchStripper:
    """One connection's protocol state: frames in both directions, Fetch rewriting.

    ``from_client`` and ``from_broker`` take the bytes read from each side and return
    the bytes to forward; an incomplete frame is held until the rest arrives.
    """

    def __init__(self, filter_: PartitionFilter) -> None:
        self.filter = filter_
        self._requests: dict[int, tuple[int, int]] = {}
        self._from_client = bytearray()
        self._from_broker = bytearray()

    def from_client(self, chunk: bytes) -> bytes:
        # Requests are forwarded as they come; only their headers are remembered.
        self._from_client += chunk
        for frame in _frames(self._from_client):
            if len(frame) >= _REQUEST_HEADER.size:
                api_key, version, correlation_id = _REQUEST_HEADER.unpack_from(frame)
                self._requests[correlation_id] = (api_key, version)
        return chunk

    def from_broker(self, chunk: bytes) -> bytes:
        self._from_broker += chunk
        out = bytearray()
        for frame in _frames(self._from_broker):
            rewritten = self._rewrite(frame)
            out += _SIZE.pack(len(rewritten)) + rewritten
        return bytes(out)

    def _rewrite(self, frame: bytes) -> bytes:
        (correlation_id,) = _SIZE.unpack_from(frame)
        api_key, version = self._requests.pop(correlation_id, (-1, -1))
        if api_key != FETCH or not self.filter.active:
            return frame
        response = FETCH_RESPONSES.get(version)
        if response is None:
            self.filter.unsupported += 1
            return frame
        values = list(response.SCHEMA.decode(BytesIO(frame[4:])))
        # Every Fetch response version ends with its topics array; a partition's
        # tuple starts with its id and ends with its records.
        values[-1] = [
            (name, [self._strip(name, partition) for partition in partitions])
            for name, partitions in values[-1]
        ]
        body: bytes = response.SCHEMA.encode(values)
        return frame[:4] + body

    def _strip(self, topic: str, partition: tuple[Any, ...]) -> tuple[Any, ...]:
        if topic != self.filter.topic or partition[0] != self.filter.partition:
            return partition
        if partition[-1]:
            self.filter.stripped_batches += 1
        return (*partition[:-1], b"")


def _frames(buffer: bytearray) -> list[bytes]:
    """Complete frames (without their size) taken off the front of the buffer."""
    frames = []
    while len(buffer) >= _SIZE.size:
        (size,) = _SIZE.unpack_from(buffer)
        if len(buffer) < _SIZE.size + size:
            break
        frames.append(bytes(buffer[_SIZE.size : _SIZE.size + size]))
        del buffer[: _SIZE.size + size]
    return frames


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
