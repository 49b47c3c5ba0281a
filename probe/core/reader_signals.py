"""What a stage's reader measures beside its canaries: the stages' own signals on the
shared reader interface (probe.transport.Transport.signals), one value for all of them,
so that a stage with a signal of its own adds a field here, not a method to every
transport."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReaderSignals:
    """Each signal is None where the reader has none (not its stage, or not read yet)."""

    # The transactional stage's reader: records between each partition's last stable
    # offset and its high watermark (records of transactions still open).
    unstable_records: Mapping[int, int] | None = None
    # The mirror stage's reader: when MirrorMaker 2 stamped the newest heartbeat from
    # the source cluster it has read, seconds since the epoch.
    mirror_heartbeat: float | None = None
    # The mirror stage's reader: per partition of the mirrored topic, the records
    # between the translated offset of the probe's group's newest checkpoint and the
    # topic's end on the target (what a consumer of the group failing over now would
    # read again).
    checkpoint_lag: Mapping[int, int] | None = None


NO_SIGNALS = ReaderSignals()
