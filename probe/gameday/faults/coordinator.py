"""The group coordinator slow or out of reach, while the partitions' leaders are fine.

Only a consumer-group member talks to the coordinator: it finds it
(FindCoordinator), joins and syncs (JoinGroup, SyncGroup), fetches and commits its
offsets (OffsetFetch, OffsetCommit) and heartbeats. The consumer stage assigns its
partitions itself and sends none of these, so this fault is one that only the group
stage (``--stages consumer,group``) can see.

The Kafka-aware proxy in front of the embedded broker (``kafka_wire``) reads every
request's API key. While the fault is on, the requests of the chosen APIs are

- delayed: forwarded ``delay`` late. A broker answers a connection's requests in
  order, so what the client sent after a delayed request on the same connection waits
  behind it (aiokafka sends the coordinator's requests on a connection of their own;
  its fetches and produces do not wait);
- dropped: never forwarded, never answered; the client's request times out. A
  request sent after a dropped one on the same connection is answered before the
  dropped one ever is, and aiokafka closes that connection as out of sync: a
  FindCoordinator dropped on the connection a member also fetches on costs it that
  connection, as an unreachable coordinator on the broker it fetches from would.

The proxy holds requests back by its rule (``proxy_rules.RequestHold``), which this
fault sets.

Fetch and Produce are never in the list (the scenario model refuses them): the
canaries keep flowing to and from the partitions' leaders.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import CoordinatorRequests


class CoordinatorApi(IntEnum):
    """The group coordinator's APIs a fault may act on, by their Kafka API key."""

    OffsetCommit = 8
    OffsetFetch = 9
    FindCoordinator = 10
    JoinGroup = 11
    Heartbeat = 12
    SyncGroup = 14


class CoordinatorRequestsFault:
    """Delay or drop the requests of ``spec.apis`` until healed.

    >>> fault = CoordinatorRequestsFault(
    ...     CoordinatorRequests(kind="coordinator-requests", action="delay", delay=2.0),
    ...     targets,
    ... )
    >>> fault.inject()       # every OffsetCommit forwarded 2 s late
    >>> fault.heal()
    """

    def __init__(self, spec: CoordinatorRequests, targets: LocalTargets) -> None:
        self.hold = targets.embedded_proxy().request_hold
        self.hold.api_keys = frozenset(CoordinatorApi[name] for name in spec.apis)
        self.hold.delay = spec.delay if spec.action == "delay" else None

    def inject(self) -> None:
        self.hold.active = True

    def heal(self) -> None:
        # Requests already dropped stay lost: their clients time out and retry.
        self.hold.active = False
