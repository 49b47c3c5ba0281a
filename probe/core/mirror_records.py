"""MirrorMaker 2's own records on the cluster it replicates to, read: its heartbeats and
its checkpoints (connect-mirror-client's ``Heartbeat`` and ``Checkpoint``).

**Heartbeats.** Its heartbeat connector writes one to the ``heartbeats`` topic about
once a second (``emit.heartbeats.interval.seconds``), for each flow.

The record's key is the flow, two Kafka protocol STRINGs (a signed 16-bit length, then
UTF-8): the source cluster's alias, the target's. Its value is a 16-bit version (0),
then the time it was written, a signed 64-bit count of milliseconds since the epoch
(connect-mirror-client's ``Heartbeat``: KEY_SCHEMA, HEADER_SCHEMA, VALUE_SCHEMA_V0).
A heartbeat that arrives says the flow's worker runs and writes to the target; unlike
the canaries, it says nothing of the replicated topics.

**Checkpoints.** Its checkpoint connector writes, every
``emit.checkpoints.interval.seconds``, each source consumer group's committed offset
translated to the target's copy of the topic, to ``<source alias><separator>checkpoints
<separator>internal``. The key is the group, the topic (its name on the target) and the
partition: two STRINGs, a signed 32-bit partition. The value is a 16-bit version (0),
the offset committed on the source (upstream), the translated one (downstream), both
signed 64-bit, and the commit's metadata, a STRING. The translated offset is where a
consumer of the group failing over to the target starts: what lies between it and the
target's log end, it reads again.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"

_LENGTH = struct.Struct(">h")
_VALUE = struct.Struct(">hq")
_PARTITION = struct.Struct(">i")
_CHECKPOINT = struct.Struct(">hqq")


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


def checkpoints_topic(source_alias: str, separator: str = ".") -> str:
    """Where MirrorMaker 2 writes the checkpoints of the flow from ``source_alias`` (its
    replication policies' checkpointsTopic, internal topics named with the separator).

    >>> checkpoints_topic("source")
    'source.checkpoints.internal'
    """
    return f"{source_alias}{separator}checkpoints{separator}internal"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    group: str  # the consumer group on the source cluster
    topic: str  # the topic's name on the target cluster
    partition: int
    upstream_offset: int  # the group's committed offset on the source
    downstream_offset: int  # the same, translated to the target's copy


def read_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint | None:
    """The checkpoint a record holds; None for one that is not a version-0 checkpoint.

    >>> key = b"\\x00\\x01g\\x00\\x0fsource.canaries" + (2).to_bytes(4)
    >>> value = bytes(2) + (42).to_bytes(8) + (40).to_bytes(8) + bytes(2)
    >>> found = read_checkpoint(key, value)
    >>> found.group, found.topic, found.partition, found.upstream_offset, found.downstream_offset
    ('g', 'source.canaries', 2, 42, 40)
    >>> read_checkpoint(key, value[:9]) is None
    True
    """
    if key is None or value is None or len(value) < _CHECKPOINT.size:
        return None
    try:
        group, rest = _string(key)
        topic, rest = _string(rest)
        (partition,) = _PARTITION.unpack(rest)
        version, upstream, downstream = _CHECKPOINT.unpack_from(value)
        _metadata, left = _string(value[_CHECKPOINT.size :])
    except (ValueError, UnicodeDecodeError, struct.error):
        return None
    if left or version != 0:
        return None
    return Checkpoint(group, topic, partition, upstream, downstream)


def _string(data: bytes) -> tuple[str, bytes]:
    """A protocol STRING from the front of ``data``, and what follows it."""
    if len(data) < _LENGTH.size:
        raise ValueError("no length")
    (length,) = _LENGTH.unpack_from(data)
    end = _LENGTH.size + length
    if length < 0 or len(data) < end:
        raise ValueError("short")
    return data[_LENGTH.size : end].decode("utf-8"), data[end:]
