"""Built-in faults of a local game day, one module per kind of fault.

A fault is injected at the start of the fault phase and healed at its end:

    fault = build_fault(scenario.fault, targets)
    fault.inject()
    ...                     # the fault phase
    fault.heal()

``FAULTS`` maps each ``kind`` of the scenario file to its class; the scenario model's
``kind`` values and this map are checked against each other by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from probe.gameday.faults.base import Fault, LocalTargets
from probe.gameday.faults.broker import BrokerDataLossFault, BrokerStopFault
from probe.gameday.faults.clock_skew import ProducerClockSkewFault
from probe.gameday.faults.coordinator import CoordinatorRequestsFault
from probe.gameday.faults.group_member import GroupMemberFlappingFault
from probe.gameday.faults.hostile import HostileRecordsFault
from probe.gameday.faults.kafka_cluster import (
    KafkaBrokerBlackholeFault,
    KafkaBrokersDownFault,
    KafkaBrokerStopFault,
    KafkaControllerKillFault,
    KafkaReassignmentFault,
    KafkaRollingRestartFault,
    KafkaUncleanElectionFault,
)
from probe.gameday.faults.link import ProxyBlackholeFault, ProxyLatencyFault
from probe.gameday.faults.mirror import MirrorStallFault, MirrorStopFault, MirrorTopicRecreateFault
from probe.gameday.faults.probe_restart import ProbeRestartFault
from probe.gameday.faults.replayed import ReplayedCanariesFault
from probe.gameday.faults.share_member import ShareMemberStallFault
from probe.gameday.faults.silent_partition import SilentPartitionFault
from probe.gameday.faults.sink_stall import SinkStallFault
from probe.gameday.faults.tiered import TieredStoreUnreadableFault
from probe.gameday.faults.transaction import TransactionLeftOpenFault

FAULTS: dict[str, Callable[[Any, LocalTargets], Fault]] = {
    "broker-stop": BrokerStopFault,
    "broker-data-loss": BrokerDataLossFault,
    "proxy-latency": ProxyLatencyFault,
    "proxy-blackhole": ProxyBlackholeFault,
    "hostile-records": HostileRecordsFault,
    "replayed-canaries": ReplayedCanariesFault,
    "probe-restart": ProbeRestartFault,
    "silent-partition": SilentPartitionFault,
    "sink-stall": SinkStallFault,
    "producer-clock-skew": ProducerClockSkewFault,
    "coordinator-requests": CoordinatorRequestsFault,
    "group-member-flapping": GroupMemberFlappingFault,
    "share-member-stall": ShareMemberStallFault,
    "transaction-left-open": TransactionLeftOpenFault,
    "kafka-broker-stop": KafkaBrokerStopFault,
    "kafka-rolling-restart": KafkaRollingRestartFault,
    "kafka-brokers-down": KafkaBrokersDownFault,
    "kafka-broker-blackhole": KafkaBrokerBlackholeFault,
    "kafka-controller-kill": KafkaControllerKillFault,
    "kafka-unclean-election": KafkaUncleanElectionFault,
    "kafka-reassignment": KafkaReassignmentFault,
    "mirror-stop": MirrorStopFault,
    "mirror-stall": MirrorStallFault,
    "mirror-topic-recreate": MirrorTopicRecreateFault,
    "tiered-store-unreadable": TieredStoreUnreadableFault,
}


def build_fault(spec: Any, targets: LocalTargets) -> Fault:
    """The fault a scenario's ``fault`` section describes, on these targets."""
    try:
        factory = FAULTS[spec.kind]
    except KeyError:
        raise NotImplementedError(f"fault kind {spec.kind} has no local implementation") from None
    return factory(spec, targets)


__all__ = ["FAULTS", "Fault", "LocalTargets", "build_fault"]
