"""The Kafka protocol as the game-day proxy sees it: frames on one connection, and
which request each response answers.

Both directions of a Kafka connection are frames: a 4-byte big-endian size, then the
message. A request starts with its API key, API version and correlation id; its
response starts with the same correlation id and says nothing else of what it
answers, so the request's key and version are remembered by correlation id until its
response comes. A broker answers a connection's requests in the order it received
them, and a client (aiokafka) drops a connection whose responses come out of order:
whoever holds a request back holds back everything after it on that connection.

The Kafka-aware proxy's faults act on these frames, through the proxy's rules
(``proxy_rules``): the silent partition rewrites Fetch responses
(``silent_partition``), the coordinator fault delays or drops the group
coordinator's requests (``coordinator``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
# A frame too short to carry a request header, or a response to no request seen.
UNKNOWN_API = -1


@dataclass(frozen=True)
class Frame:
    """One message (without its size) and the request it is or answers."""

    api_key: int
    api_version: int
    body: bytes

    def framed(self) -> bytes:
        """The bytes on the wire: the size, then the message."""
        return _SIZE.pack(len(self.body)) + self.body


class KafkaWire:
    """One connection's framing, both directions.

    ``requests`` and ``responses`` take the bytes read from the client and from the
    broker and return the complete frames among them, in order; an incomplete frame
    is held until the rest arrives.

    >>> wire = KafkaWire()
    >>> commit = struct.pack(">ihhi", 8, 8, 2, 7)       # OffsetCommit v2, correlation id 7
    >>> [(r.api_key, r.api_version) for r in wire.requests(commit)]
    [(8, 2)]
    >>> [r.api_key for r in wire.responses(struct.pack(">ii", 4, 7))]
    [8]
    """

    def __init__(self) -> None:
        self._requests: dict[int, tuple[int, int]] = {}
        self._from_client = bytearray()
        self._from_broker = bytearray()

    def requests(self, chunk: bytes) -> list[Frame]:
        self._from_client += chunk
        found = []
        for body in _frames(self._from_client):
            api_key = version = UNKNOWN_API
            if len(body) >= _REQUEST_HEADER.size:
                api_key, version, correlation_id = _REQUEST_HEADER.unpack_from(body)
                self._requests[correlation_id] = (api_key, version)
            found.append(Frame(api_key, version, body))
        return found

    def responses(self, chunk: bytes) -> list[Frame]:
        self._from_broker += chunk
        found = []
        for body in _frames(self._from_broker):
            api_key, version = UNKNOWN_API, UNKNOWN_API
            if len(body) >= _SIZE.size:
                (correlation_id,) = _SIZE.unpack_from(body)
                api_key, version = self._requests.pop(correlation_id, (UNKNOWN_API, UNKNOWN_API))
            found.append(Frame(api_key, version, body))
        return found


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
