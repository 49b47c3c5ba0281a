"""The ``group`` section: the consumer-group stage's group id, its commit-latency SLO
and its fetch wait (docs/consumer-groups.md).

Each probe joins a group of its own by default, so probes and replicas never share one
and every member reads every partition.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from probe.config.base import _Section
from probe.config.durations import MINUTE, Duration, _between


class GroupConfig(_Section):
    """The group stage: a member of a consumer group of its own on the canary topic,
    which finds its coordinator, joins, commits what it read, and rejoins after a
    rebalance, as the cluster's real consumers do (docs/consumer-groups.md)."""

    # The group id; None: ``synthetic-sla-probe.<probe_id>``, a group per probe, so
    # that probes (and replicas) never share one and each reads every partition.
    id: Annotated[str | None, Field(min_length=1, max_length=249)] = None
    # A commit is good when the coordinator acknowledged it within this time; it is
    # also a bucket boundary of synthetic_sla_group_commit_latency_seconds.
    commit_latency_threshold: Annotated[Duration, _between(0.001, MINUTE)] = 0.5
    # Share of commits that must be good (failed commits count against it); the
    # chart's commit-latency burn alerts use the same objective.
    commit_latency_objective: float = Field(default=0.99, gt=0.0, lt=1.0)
    # The member's fetch max wait, as kafka.fetch_max_wait for the consumer stage. A
    # group member fetches every partition it is assigned all the time (it cannot
    # follow the writer as the consumer stage does), and every empty fetch names them
    # all: at 1,000 partitions on Apache Kafka, 100 ms cost the probe 2.7x the CPU of
    # the consumer stage alone, 500 ms 1.75x. Apache Kafka answers a fetch as soon as
    # a record arrives, so a longer wait costs it no latency there; a broker that holds
    # fetches until the wait runs out (the embedded one) adds up to this much to every
    # canary of the group stage, against a 500 ms latency threshold.
    fetch_max_wait: Annotated[Duration, _between(0.001, 10.0)] = 0.1

    def group_id(self, probe_id: str) -> str:
        """The id the group stage joins with.

        >>> GroupConfig().group_id("probe-7")
        'synthetic-sla-probe.probe-7'
        """
        return self.id or f"synthetic-sla-probe.{probe_id}"

    def consumer_protocol_group_id(self, probe_id: str) -> str:
        """The id the group_consumer stage joins with: the group stage's, suffixed (a
        group is of one protocol or the other while it has members).

        >>> GroupConfig().consumer_protocol_group_id("probe-7")
        'synthetic-sla-probe.probe-7.consumer-protocol'
        """
        return f"{self.group_id(probe_id)}.consumer-protocol"

    def share_group_id(self, probe_id: str) -> str:
        """The id of the share stage's share group (KIP-932): the group stage's,
        suffixed (share groups and consumer groups share one namespace of ids).

        >>> GroupConfig().share_group_id("probe-7")
        'synthetic-sla-probe.probe-7.share'
        """
        return f"{self.group_id(probe_id)}.share"
