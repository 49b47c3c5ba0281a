"""The ``tiered`` section: reads of canaries old enough to have left the brokers' local
log, served from tiered storage (KIP-405; docs/tiered-storage.md).

The canary topic keeps its newest segments on the brokers' disks for its
``local.retention.ms`` and the rest in the remote store. Every stage reading the log's
tail reads local segments only; a consumer catching up or replaying reads the remote
ones, through the broker's remote storage manager, a path with its own latency and
failures. With ``tiered.enabled``, every ``every`` the probe looks up, by timestamp,
the canary written ``age`` ago on a few partitions and reads it: time to its first
record, and whether the remote read failed, are the tiered read's own SLI.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from probe.config.base import _Section
from probe.config.durations import DAY, MINUTE, Duration, _between


class TieredConfig(_Section):
    """The tiered read: how old a canary it reads, how often, how many partitions."""

    # Reads of canaries from tiered storage, beside the rounds (off by default).
    enabled: bool = False
    # How old the canaries it reads are: longer than the canary topic's
    # local.retention.ms, so they are in the remote store only (the probe says so at
    # start when the topic keeps them locally longer).
    age: Annotated[Duration, _between(1.0, 30 * DAY)] = 3600.0
    # How often a read is made.
    every: Annotated[Duration, _between(1.0, DAY)] = 60.0
    # Partitions read each time, in turn through the topic's partitions.
    partitions: Annotated[int, Field(ge=1, le=1000)] = 3
    # A read whose first record has not come by then is a failed read (``timeout``).
    timeout: Annotated[Duration, _between(1.0, 10 * MINUTE)] = 30.0
    # A read whose first record came later than this is slow: the latency SLI's
    # threshold (remote stores answer in seconds, not milliseconds).
    threshold: Annotated[Duration, _between(0.01, 10 * MINUTE)] = 5.0
