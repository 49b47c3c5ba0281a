"""The group coordinator slow or out of reach, while the partitions' leaders are fine.

Only a consumer-group member talks to the coordinator: it finds it
(FindCoordinator), joins and syncs (JoinGroup, SyncGroup), fetches and commits its
offsets (OffsetFetch, OffsetCommit) and heartbeats. The consumer stage assigns its
partitions itself and sends none of these, so this fault is one that only the group
stage (``--stages consumer,group``) can see.

The Kafka-aware proxy in front of the embedded broker (``kafka_wire``), or on Apache
Kafka the one in front of the broker coordinating the group of ``coordinator_of``
(found with FindCoordinator when the fault is injected; only the coordinator is sent
a group's commits and heartbeats), reads every request's API key. On the consumer
protocol (KIP-848, the group_consumer stage) the member's heartbeat is
ConsumerGroupHeartbeat, and librdkafka sends a coordinator's requests on a connection
of their own too. While the fault is on, the requests of the chosen APIs are

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

from probe.core.errors import ProbeError
from probe.gameday.faults.kafka_cluster import StepLog
from probe.transport.kafka_admin import group_coordinator

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.faults.proxy_rules import RequestHold
    from probe.gameday.scenario import CoordinatorRequests


class CoordinatorFaultError(ProbeError):
    """The coordinator to hold requests of could not be found."""


class CoordinatorApi(IntEnum):
    """The group coordinator's APIs a fault may act on, by their Kafka API key."""

    OffsetCommit = 8
    OffsetFetch = 9
    FindCoordinator = 10
    JoinGroup = 11
    Heartbeat = 12
    SyncGroup = 14
    ConsumerGroupHeartbeat = 68  # KIP-848


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
        self.spec = spec
        self.targets = targets
        self.hold: RequestHold | None = None
        # The broker whose requests are held (Apache Kafka): the group's coordinator.
        self.coordinator: int | None = None

    def inject(self) -> None:
        targets = self.targets
        if targets.cluster is None:
            hold = targets.embedded_proxy().request_hold
        else:
            group = targets.probe_group_id(self.spec.coordinator_of)
            self.coordinator = group_coordinator(targets.bootstrap_servers, group)
            if self.coordinator is None:
                raise CoordinatorFaultError(f"group {group}: no broker named its coordinator")
            StepLog(targets.kafka_cluster()).note(
                f"group {group} is coordinated by broker {self.coordinator}"
            )
            hold = targets.broker_proxies[self.coordinator].request_hold
        hold.api_keys = frozenset(CoordinatorApi[name] for name in self.spec.apis)
        hold.delay = self.spec.delay if self.spec.action == "delay" else None
        hold.active = True
        self.hold = hold

    def heal(self) -> None:
        # Requests already dropped stay lost: their clients time out and retry.
        if self.hold is not None:
            self.hold.active = False
