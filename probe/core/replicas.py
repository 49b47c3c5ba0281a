"""Who holds the canary topic's partitions: leaders, replicas, in-sync replicas. Pure.

The Kafka clients refresh the topic's metadata every round anyway (to find new or
vanished partitions); the same answer says, per partition, which broker leads it,
which brokers hold a replica and which of those are in sync. From it the probe
attributes every canary to the broker that led its partition when it was produced,
and counts the canary topic's partitions that are in trouble, the broker signals an
on-call looks at first (seed 002): under-replicated (fewer in-sync replicas than
replicas), offline (no leader), under min ISR (fewer in-sync replicas than the topic's
``min.insync.replicas``: an acks=all produce is refused).

It also names the brokers behind the trouble: per broker, the partitions where its
replica is out of sync (a stopped broker: every replica it holds), and per troubled
partition its worst problem, its leader and the replicas missing from its ISR.

On a cluster with eligible leader replicas (KIP-966, ELR: on by default from Kafka
4.1), the high watermark stops while a partition's ISR is under min.insync.replicas,
and the replicas that leave the ISR then are kept as *eligible*: out of sync for new
writes, yet holding every committed record, so the controller elects one cleanly when
the ISR is gone (the ISR may then be empty). Under min ISR still means acks=all writes
refused; what the acknowledged records rest on is the ISR and the eligible replicas
together, counted apart (``under_min_isr_with_elr``), and each broker's eligible
replicas beside its out-of-sync ones. Only DescribeTopicPartitions lists them, and
only while some partition is under min ISR or offline do they exist: ``eligible``.

A partition reassignment in flight lists the replicas it adds beside the old ones,
out of the ISR until they have copied the log: those are being copied, not lagging,
and are left out as Kafka itself leaves them out of its under-replicated count (its
replication factor is the replicas less the ones being added). Which replicas are
being added only the controller says (ListPartitionReassignments): ``adding``.

No I/O here: the transport reads the client's metadata into :class:`TopicReplicas`
(:func:`topic_replicas` takes any records shaped like aiokafka's
``PartitionMetadata``), :func:`replica_health` sums it up and
:func:`partition_problems` lists the partitions in trouble.

>>> topic = TopicReplicas(
...     {0: PartitionReplicas(0, 1, (1, 2), (1, 2)), 1: PartitionReplicas(1, None, (2, 3), ())},
...     brokers=frozenset({1, 2, 3}),
...     min_insync=2,
... )
>>> health = replica_health(topic)
>>> health.offline, health.under_replicated, health.under_min_isr, health.leaderless_brokers
(1, 1, 1, (2, 3))
>>> dict(health.out_of_sync)
{1: 0, 2: 1, 3: 1}

With eligible leader replicas, partition 0 (ISR 1 alone) is under min ISR, yet its
committed records are on two brokers:

>>> elr = TopicReplicas(
...     {0: PartitionReplicas(0, 1, (1, 2, 3), (1,))}, frozenset({1, 3}), min_insync=2,
...     eligible={0: (2,)},
... )
>>> health = replica_health(elr)
>>> health.under_min_isr, health.under_min_isr_with_elr, dict(health.eligible)
(1, 0, {2: 1})
>>> [(p.partition, p.problem.value, p.leader, p.missing) for p in partition_problems(topic)]
[(1, 'offline', None, (2, 3))]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
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
    brokers that refresh listed, the topic's min.insync.replicas (None: unknown, the
    broker did not say) and the listed brokers' addresses ("host:port"; a broker
    without one is simply absent).

    Kafka lists only the brokers that are up: a stopped broker drops out of
    ``brokers`` but stays in the replica lists of the partitions it holds.
    """

    partitions: Mapping[int, PartitionReplicas]
    brokers: frozenset[int]
    min_insync: int | None = None
    addresses: Mapping[int, str] = field(default_factory=dict)
    # Per partition, the replicas a reassignment in flight is adding (absent: none).
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    # Per partition, its eligible leader replicas (KIP-966; absent: none, or a cluster
    # that keeps none).
    eligible: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def leader_of(self, partition: int) -> int | None:
        found = self.partitions.get(partition)
        return None if found is None else found.leader

    def owed(self, partition: PartitionReplicas) -> tuple[int, ...]:
        """The replicas that ought to be in sync: all but those being added.

        >>> topic = TopicReplicas({}, frozenset({1, 2, 3}), adding={0: (3,)})
        >>> topic.owed(PartitionReplicas(0, 1, (1, 2, 3), (1, 2)))
        (1, 2)
        """
        adding = self.adding.get(partition.partition, ())
        return tuple(b for b in partition.replicas if b not in adding)


@dataclass(frozen=True, slots=True)
class ReplicaHealth:
    """The canary topic's replica state, counted.

    ``leaders``: canary partitions led, for every broker listed (0 for one that leads
    none); ``leaderless_brokers``: those brokers, sorted: a broker that leads no canary
    partition is not measured by the probe. ``out_of_sync``: canary partitions where the
    broker holds a replica that is not in the ISR, for every broker listed (0 for one
    whose replicas are all in sync) and every broker that holds one (a stopped broker
    is no longer listed, and every replica it holds is out of sync): the broker behind
    "under-replicated". ``eligible``: canary partitions where the broker's replica is
    an eligible leader replica, for every broker that holds one.
    ``under_min_isr_with_elr``: partitions whose ISR and eligible replicas together
    are fewer than min.insync.replicas (where no ELR is kept, ``under_min_isr``).
    """

    partitions: int
    under_replicated: int
    offline: int
    under_min_isr: int
    under_min_isr_with_elr: int
    min_insync: int | None
    # The fewest replicas a partition owes (those a reassignment adds not counted); 0
    # without partitions. What acks=all can promise: min_insync of these.
    replication_factor: int
    leaders: Mapping[int, int]
    leaderless_brokers: tuple[int, ...]
    out_of_sync: Mapping[int, int]
    eligible: Mapping[int, int] = field(default_factory=dict)


def replica_health(topic: TopicReplicas) -> ReplicaHealth:
    """Count what is wrong with the topic's replicas (see the module doc)."""
    partitions = topic.partitions.values()
    led = Counter(p.leader for p in partitions if p.leader is not None)
    leaders = {broker: led.get(broker, 0) for broker in sorted(topic.brokers | led.keys())}
    lagging = Counter(b for p in partitions for b in topic.owed(p) if b not in p.isr)
    min_insync = topic.min_insync
    eligible = topic.eligible
    return ReplicaHealth(
        partitions=len(topic.partitions),
        under_replicated=sum(1 for p in partitions if len(p.isr) < len(topic.owed(p))),
        offline=sum(1 for p in partitions if p.leader is None),
        under_min_isr=0
        if min_insync is None
        else sum(1 for p in partitions if len(p.isr) < min_insync),
        under_min_isr_with_elr=0
        if min_insync is None
        else sum(
            1
            for p in partitions
            if len(set(p.isr) | set(eligible.get(p.partition, ()))) < min_insync
        ),
        min_insync=min_insync,
        replication_factor=min((len(topic.owed(p)) for p in partitions), default=0),
        leaders=leaders,
        leaderless_brokers=tuple(b for b in sorted(topic.brokers) if not led.get(b)),
        out_of_sync={b: lagging.get(b, 0) for b in sorted(topic.brokers | lagging.keys())},
        eligible=dict(sorted(Counter(b for held in eligible.values() for b in held).items())),
    )


class ReplicaProblem(StrEnum):
    """What is wrong with a partition's replicas, worst first (a partition is listed
    under its worst): no leader, so nothing is read or written; fewer in-sync replicas
    than min.insync.replicas, so acks=all produces are refused; fewer in-sync replicas
    than replicas, so one more failure may lose data or availability."""

    OFFLINE = "offline"
    UNDER_MIN_ISR = "under_min_isr"
    UNDER_REPLICATED = "under_replicated"


@dataclass(frozen=True, slots=True)
class PartitionProblem:
    """A troubled partition: its worst problem, its leader (None: offline) and its
    replicas missing from the ISR, in assignment order."""

    partition: int
    problem: ReplicaProblem
    leader: int | None
    missing: tuple[int, ...]


def partition_problems(topic: TopicReplicas) -> tuple[PartitionProblem, ...]:
    """Every partition in trouble, once, under its worst problem, by partition number.

    A partition with fewer replicas than min.insync.replicas is under min ISR with
    every replica in sync (nothing is missing: the topic's settings are at fault).
    """
    problems = []
    min_insync = topic.min_insync or 0
    for partition in topic.partitions.values():
        in_sync = len(partition.isr)
        owed = topic.owed(partition)
        if partition.leader is None:
            problem = ReplicaProblem.OFFLINE
        elif in_sync < min_insync:
            problem = ReplicaProblem.UNDER_MIN_ISR
        elif in_sync < len(owed):
            problem = ReplicaProblem.UNDER_REPLICATED
        else:
            continue  # the common case, at every scrape: nothing more to look at
        missing = tuple(b for b in owed if b not in partition.isr)
        problems.append(PartitionProblem(partition.partition, problem, partition.leader, missing))
    return tuple(sorted(problems, key=lambda found: found.partition))


@dataclass(frozen=True, slots=True)
class Remembered:
    """What earlier metadata refreshes said that the last one may not: each broker's
    last known address (a stopped broker drops out of the metadata, and its address
    with it) and each partition's last leader (an offline partition has none). So the
    partition at fault and the broker behind it can still be named while that broker
    is down, which is when the on-call asks.

    >>> up = TopicReplicas({0: PartitionReplicas(0, 2, (1, 2), (1, 2))}, frozenset({1, 2}),
    ...                    addresses={1: "kafka-1:9092", 2: "kafka-2:9092"})
    >>> down = TopicReplicas({0: PartitionReplicas(0, None, (1, 2), (2,))}, frozenset({1}),
    ...                      addresses={1: "kafka-1:9092"})
    >>> seen = Remembered().after(up).after(down)
    >>> seen.blamed(down, 0), seen.addresses[2], sorted(seen.brokers(down))
    (2, 'kafka-2:9092', [1, 2])
    >>> Remembered().blamed(down, 0)  # never seen led: its preferred leader
    1
    """

    addresses: Mapping[int, str] = field(default_factory=dict)
    leaders: Mapping[int, int] = field(default_factory=dict)

    def after(self, topic: TopicReplicas) -> Remembered:
        """What is remembered once ``topic`` is the last refresh (a partition that is
        gone from the topic is forgotten)."""
        leaders = {}
        for number, partition in topic.partitions.items():
            last = partition.leader if partition.leader is not None else self.leaders.get(number)
            if last is not None:
                leaders[number] = last
        return Remembered({**self.addresses, **topic.addresses}, leaders)

    def blamed(self, topic: TopicReplicas, partition: int) -> int | None:
        """The broker to name for a partition: its leader now; offline, the broker that
        led it last, else its preferred leader; None for a partition the topic lacks."""
        found = topic.partitions.get(partition)
        if found is None:
            return None
        if found.leader is not None:
            return found.leader
        last = self.leaders.get(partition)
        if last is not None:
            return last
        return found.replicas[0] if found.replicas else None

    def brokers(self, topic: TopicReplicas) -> frozenset[int]:
        """Every broker the topic's metadata lists or that a partition names: a broker
        that is down still holds its replicas and may be a partition's last leader."""
        holding = {b for p in topic.partitions.values() for b in p.replicas}
        led_last = {self.leaders[p] for p in topic.partitions if p in self.leaders}
        return topic.brokers | holding | led_last


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
    records: Iterable[PartitionRecord],
    brokers: Iterable[int],
    min_insync: int | None = None,
    *,
    addresses: Mapping[int, str] | None = None,
    adding: Mapping[int, tuple[int, ...]] | None = None,
    eligible: Mapping[int, tuple[int, ...]] | None = None,
) -> TopicReplicas:
    """The client's view of one topic, as :class:`TopicReplicas`.

    >>> from collections import namedtuple
    >>> Record = namedtuple("Record", "partition leader replicas isr")
    >>> topic = topic_replicas(
    ...     [Record(0, -1, [1, 2], [])], brokers=[1, 2], addresses={1: "kafka-1:9092"}
    ... )
    >>> topic.leader_of(0) is None, topic.partitions[0].replicas, topic.addresses
    (True, (1, 2), {1: 'kafka-1:9092'})
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
        dict(addresses or {}),
        dict(adding or {}),
        dict(eligible or {}),
    )


def broker_address(host: str, port: int) -> str:
    """A broker's address as "host:port", an IPv6 host in brackets.

    >>> broker_address("kafka-1.kafka", 9092), broker_address("::1", 9092)
    ('kafka-1.kafka:9092', '[::1]:9092')
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
