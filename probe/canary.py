"""The canary record and its signed wire encoding. Pure: no I/O, no clock reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Canary:
    """One synthetic record, written to one partition (or shard) of one target.

    ``incarnation`` is the start time (ns) of the producing process: sequence numbers
    restart with every incarnation, so (probe_id, incarnation, target, partition, seq)
    names a canary uniquely. ``seq`` is contiguous per partition among *acknowledged*
    canaries: a canary whose produce failed gives its number to the next one, so a
    gap seen downstream means loss.
    """

    probe_id: str
    incarnation: int
    target: str
    partition: int
    seq: int
    produced_ns: int
    trace_context: str | None = None
