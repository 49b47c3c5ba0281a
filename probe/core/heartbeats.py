"""MirrorMaker 2's heartbeats, read: what its heartbeat connector writes to the
``heartbeats`` topic of the cluster it replicates to, about once a second
(``emit.heartbeats.interval.seconds``), for each flow.

The record's key is the flow, two Kafka protocol STRINGs (a signed 16-bit length, then
UTF-8): the source cluster's alias, the target's. Its value is a 16-bit version (0),
then the time it was written, a signed 64-bit count of milliseconds since the epoch
(connect-mirror-client's ``Heartbeat``: KEY_SCHEMA, HEADER_SCHEMA, VALUE_SCHEMA_V0).
A heartbeat that arrives says the flow's worker runs and writes to the target; unlike
the canaries, it says nothing of the replicated topics.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"

_LENGTH = struct.Struct(">h")
_VALUE = struct.Struct(">hq")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    source: str  # the source cluster's alias
    target: str  # the target cluster's alias
    at_ms: int  # when MirrorMaker 2 wrote it, ms since the epoch


def read_heartbeat(key: bytes | None, value: bytes | None) -> Heartbeat | None:
    """The heartbeat a record holds; None for one that is not a version-0 heartbeat.

    >>> flow = b"\\x00\\x06source\\x00\\x06target"
    >>> read_heartbeat(flow, bytes(2) + (1_795_966_310_449).to_bytes(8))
    Heartbeat(source='source', target='target', at_ms=1795966310449)
    >>> read_heartbeat(b"\\x00\\x06sour", b"") is None
    True
    """
    if key is None or value is None or len(value) != _VALUE.size:
        return None
    try:
        source, rest = _string(key)
        target, rest = _string(rest)
    except (ValueError, UnicodeDecodeError):
        return None
    version, at_ms = _VALUE.unpack(value)
    if rest or version != 0:
        return None
    return Heartbeat(source, target, at_ms)


def _string(data: bytes) -> tuple[str, bytes]:
    """A protocol STRING from the front of ``data``, and what follows it."""
    if len(data) < _LENGTH.size:
        raise ValueError("no length")
    (length,) = _LENGTH.unpack_from(data)
    end = _LENGTH.size + length
    if length < 0 or len(data) < end:
        raise ValueError("short")
    return data[_LENGTH.size : end].decode("utf-8"), data[end:]
