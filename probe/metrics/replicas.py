"""The canary topic's brokers and its partitions in replica trouble, per target.

Which broker leads each partition and which partitions are in replica trouble are
rendered at scrape time, as staleness is (probe.metrics.staleness), from the last
metadata refresh (:class:`ReplicaCollector`), so a broker or a problem that is gone
from the metadata is gone from the next scrape. The per-partition ones follow the
same setting as staleness, ``metrics.partition_series``: in ``stale`` mode a partition
has a leader series while it is stale or in trouble, which is when a join needs it.

A broker that is down stays in ``synthetic_sla_broker_info`` (``listed="false"``, with
its last known address) and an offline partition keeps a leader series naming the
broker that led it last (:class:`probe.core.replicas.Remembered`): the documented join
from a stale partition to its broker and address must not drop the partition at fault
while its broker is down.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from probe.core.replicas import Remembered, TopicReplicas, partition_problems
from probe.metrics.rendered import LinePrefixes, RenderedGauge
from probe.metrics.staleness import PartitionSeries, StalenessCollector


class ReplicaCollector(Collector):
    """The canary topic's brokers and troubled partitions, rendered at scrape time from
    the last metadata refresh of each target (see the module doc).

    ``synthetic_sla_broker_info``: every broker the metadata lists (``listed="true"``)
    or a canary partition names (``"false"``: down), with its last known address.
    ``synthetic_sla_partition_leader``: each partition's leader, or while it is offline
    the broker that led it last (else its preferred leader), so that a per-partition
    series finds its broker in one join. As ``partition_series``
    says: every partition (all), those in replica trouble or stale in some stage now
    (stale: as the staleness collector says), or none.
    ``synthetic_sla_partition_replica_problem``: each troubled partition, once, under
    its worst problem (see probe.core.replicas.partition_problems); none with ``none``.
    """

    def __init__(self, staleness: StalenessCollector, partition_series: PartitionSeries) -> None:
        self._staleness = staleness
        self._partition_series = partition_series
        # Each target's entry is replaced whole at a refresh: a scrape, on whatever
        # thread, reads one refresh or the next, never a mix (a TopicReplicas is never
        # changed once made).
        self._topics: dict[str, tuple[TopicReplicas, Remembered]] = {}
        self._prefixes = LinePrefixes()

    def update(self, target: str, topic: TopicReplicas) -> None:
        _, remembered = self._topics.get(target, (topic, Remembered()))
        self._topics[target] = (topic, remembered.after(topic))

    def leader_of(self, target: str, partition: int) -> int | None:
        """The partition's leader at the target's last refresh (None: unknown, offline)."""
        found = self._topics.get(target)
        return None if found is None else found[0].leader_of(partition)

    def collect(self) -> Iterator[Metric]:
        brokers = InfoMetricFamily(
            "synthetic_sla_broker",
            "Every broker the last metadata refresh listed (listed=true) or that holds a "
            "canary replica or led a canary partition last (listed=false: down), with its "
            "last known address (host:port).",
            labels=["target", "broker"],
        )
        leaders = RenderedGauge(
            "synthetic_sla_partition_leader",
            "1 for the broker leading the partition now (an offline partition: the broker "
            "that led it last, else its preferred leader), to join per-partition series "
            "to their broker. Which partitions have a "
            "series: metrics.partition_series (all; stale: stale or in replica trouble; "
            "none).",
            labels=["target", "partition", "broker"],
        )
        problems = RenderedGauge(
            "synthetic_sla_partition_replica_problem",
            "1 for each canary partition in replica trouble, under its worst problem: "
            "offline (no leader; leader none), under_min_isr, under_replicated. None with "
            "metrics.partition_series none.",
            labels=["target", "partition", "leader", "problem"],
        )
        mode = self._partition_series
        for target, (topic, remembered) in sorted(self._topics.items()):
            for broker in sorted(remembered.brokers(topic)):
                brokers.add_metric(
                    [target, str(broker)],
                    {
                        "address": remembered.addresses.get(broker, ""),
                        "listed": "true" if broker in topic.brokers else "false",
                    },
                )
            if mode is PartitionSeries.NONE:
                continue
            troubled = partition_problems(topic)
            for trouble in troubled:
                leader = "none" if trouble.leader is None else str(trouble.leader)
                self._add(problems, target, str(trouble.partition), leader, trouble.problem.value)
            shown: set[int] | None = None  # every partition
            if mode is PartitionSeries.STALE:
                shown = {t.partition for t in troubled} | self._staleness.stale_partitions(target)
            for number in sorted(topic.partitions if shown is None else shown):
                named = remembered.blamed(topic, number)
                if named is not None:
                    self._add(leaders, target, str(number), str(named))
        self._prefixes.trim(leaders.series() + problems.series())  # gone, or recovered
        yield brokers
        yield leaders
        yield problems

    def _add(self, family: RenderedGauge, *labels: str) -> None:
        self._prefixes.add(family, (family.name, *labels), labels, 1.0)
