"""Who holds the canary topic's partitions: leaders, replicas, in-sync replicas. Pure.

The Kafka clients refresh the topic's metadata every round anyway (to find new or
vanished partitions); the same answer says, per partition, which broker leads it,
which brokers hold a replica and which of those are in sync. From it the probe
attributes every canary to the broker that led its partition when it was produced,
and counts the canary topic's partitions that are in trouble, the broker signals an
on-call looks at first (seed 002): under-replicated (fewer in-sync replicas than
replicas), offline (no leader), under min ISR (fewer in-sync replicas than the topic's
``min.insync.replicas``: an acks=all produce is refused).

No I/O here: the transport reads the client's metadata into :class:`TopicReplicas`
(:func:`topic_replicas` takes any records shaped like aiokafka's
``PartitionMetadata``), and :func:`replica_health` sums it up.

>>> topic = TopicReplicas(
...     {0: PartitionReplicas(0, 1, (1, 2), (1, 2)), 1: PartitionReplicas(1, None, (2, 3), ())},
...     brokers=frozenset({1, 2, 3}),
...     min_insync=2,
... )
>>> health = replica_health(topic)
>>> health.offline, health.under_replicated, health.under_min_isr, health.leaderless_brokers
(1, 1, 1, (2, 3))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """One partition: its leader (None while it has none: offline), replicas and ISR,
    as broker ids; replicas in the topic's assignment order (the first is the
    preferred leader)."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicReplicas:
    """The canary topic's partitions as the last metadata refresh saw them, the
    brokers that refresh listed, and the topic's min.insync.replicas (None: unknown,
    the broker did not say)."""

    partitions: Mapping[int, PartitionReplicas]
    brokers: frozenset[int]
    min_insync: int | None = None

    def leader_of(self, partition: int) -> int | None:
        found = self.partitions.get(partition)
        return None if found is None else found.leader


@dataclass(frozen=True, slots=True)
class ReplicaHealth:
    """The canary topic's replica state, counted.

    ``leaders``: canary partitions led, for every broker listed (0 for one that leads
    none); ``leaderless_brokers``: those brokers, sorted: a broker that leads no canary
    partition is not measured by the probe.
    """

    partitions: int
    under_replicated: int
    offline: int
    under_min_isr: int
    min_insync: int | None
    leaders: Mapping[int, int]
    leaderless_brokers: tuple[int, ...]


def replica_health(topic: TopicReplicas) -> ReplicaHealth:
    """Count what is wrong with the topic's replicas (see the module doc)."""
    partitions = topic.partitions.values()
    led = Counter(p.leader for p in partitions if p.leader is not None)
    leaders = {broker: led.get(broker, 0) for broker in sorted(topic.brokers | led.keys())}
    min_insync = topic.min_insync
    return ReplicaHealth(
        partitions=len(topic.partitions),
        under_replicated=sum(1 for p in partitions if len(p.isr) < len(p.replicas)),
        offline=sum(1 for p in partitions if p.leader is None),
        under_min_isr=0
        if min_insync is None
        else sum(1 for p in partitions if len(p.isr) < min_insync),
        min_insync=min_insync,
        leaders=leaders,
        leaderless_brokers=tuple(b for b in sorted(topic.brokers) if not led.get(b)),
    )


class PartitionRecord(Protocol):
    """A partition's metadata as Kafka clients hold it (aiokafka's PartitionMetadata):
    a leader of -1 means none."""

    @property
    def partition(self) -> int: ...

    @property
    def leader(self) -> int: ...

    @property
    def replicas(self) -> Sequence[int]: ...

    @property
    def isr(self) -> Sequence[int]: ...


def topic_replicas(
    records: Iterable[PartitionRecord], brokers: Iterable[int], min_insync: int | None = None
) -> TopicReplicas:
    """The client's view of one topic, as :class:`TopicReplicas`.

    >>> from collections import namedtuple
    >>> Record = namedtuple("Record", "partition leader replicas isr")
    >>> topic = topic_replicas([Record(0, -1, [1, 2], [])], brokers=[1, 2])
    >>> topic.leader_of(0) is None, topic.partitions[0].replicas
    (True, (1, 2))
    """
    return TopicReplicas(
        {
            record.partition: PartitionReplicas(
                record.partition,
                record.leader if record.leader >= 0 else None,
                tuple(record.replicas),
                tuple(record.isr),
            )
            for record in records
        },
        frozenset(brokers),
        min_insync,
    )
