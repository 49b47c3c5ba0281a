"""A silent partition: the broker acknowledges every canary, and one partition's records
never reach any reader.

The TCP proxy in front of the broker reads the Kafka protocol on each connection
(``kafka_wire``: frames, and which request each response answers) and, while the
fault is on, rewrites Fetch responses so that the chosen partition's records are empty. The
partition's high watermark is left as the broker said: the consumer sees a
partition that has records it never gets, as with a stuck replica or a consumer
pinned to a dead leader. Produce requests and their acknowledgements pass untouched.
The stripping itself is the proxy's rule (``proxy_rules.FetchStripper``), which this
fault turns on and off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import SilentPartition


class SilentPartitionFault:
    """Strip ``partition``'s records from every Fetch response until healed."""

    def __init__(self, spec: SilentPartition, targets: LocalTargets) -> None:
        self.filter = targets.embedded_proxy().partition_filter
        self.filter.topic = targets.topic
        self.filter.partition = spec.partition

    def inject(self) -> None:
        self.filter.active = True

    def heal(self) -> None:
        self.filter.active = False
