"""The Kafka reader's lanes: its partitions split by the broker that leads them, each
lane read by a consumer of its own.

A consumer throws away every fetch it has in flight, to every broker, when its
assignment changes, and a reader that follows the writer changes its assignment as
canaries are sent (see ``kafka``'s module doc). With a single consumer, a broker slow
to answer fetches got no answer through: at first the other brokers' records kept
changing the assignment (10,000 partitions on three brokers: two brokers' partitions
judged lost every round), and once a change waited for every partition to come back,
the change made after a second of waiting threw its fetch away all the same (346
partitions, one broker holding fetches 1.5 s: 4,933 canaries judged lost in a minute,
every one of them kept by Kafka). With a lane per broker, a change throws away only
the fetch to the broker whose partitions changed: a slow broker delays its own
canaries, which is what the probe must measure, and never the others'.

A partition stays with the lane that reads it for as long as it is read (moving it
while its fetch is out would throw the fetch away, or read it twice); one that no lane
reads joins the lane of the broker that leads it, or the first lane while that broker
has none. The grouping only spares fetches: a lane's consumer reads any partition
from wherever its own metadata says the leader is, so a lane that outlived a leader
change still reads correctly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Lanes one reader opens at most (a consumer, and its connections, each): partitions
# of brokers beyond them are read by the first lane.
LANES_AT_MOST = 32


@dataclass(eq=False)
class Lane:
    """One consumer and the partitions it reads now."""

    broker: int  # the broker whose partitions it takes on (-1: the cluster's unknown)
    consumer: Any  # AIOKafkaConsumer
    reading: frozenset[int] = frozenset()
    # When its assignment last changed, and whether every partition it reads has come
    # back in a fetch since (remembered until the next change).
    changed_at: float = 0.0
    all_fetched: bool = False
    # How long its assignment waits for a fetch still out (see KafkaTransport._read_lane).
    patience: float = 0.0
    # Since when nothing has been on its way to its partitions (None: something is),
    # and whether they are paused for it (see KafkaTransport._pause_idle).
    idle_since: float | None = None
    paused: bool = False
    pump: asyncio.Task[None] | None = None


def lane_target(
    broker: int,
    reading: frozenset[int],
    wanted: frozenset[int],
    held: Mapping[int, int],
    home: Callable[[int], int],
) -> frozenset[int]:
    """What the lane of ``broker`` should read of the ``wanted`` partitions: those it
    reads already, and those no lane holds whose ``home`` lane it is.

    >>> held = {1: 7, 2: 7, 3: 9}
    >>> home = {4: 7, 5: 9}.get
    >>> sorted(lane_target(7, frozenset({1, 2}), frozenset({2, 3, 4, 5}), held, home))
    [2, 4]
    >>> sorted(lane_target(9, frozenset({3}), frozenset({2, 3, 4, 5}), held, home))
    [3, 5]
    """
    own = reading & wanted
    # Set operations first: at 10,000 partitions most of those wanted are held.
    joining = {p for p in wanted - held.keys() if home(p) == broker}
    return own | joining if joining else own
