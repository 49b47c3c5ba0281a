"""Every broker measured: a plan that gives every broker the lead of a canary partition.

The probe measures a broker only through the canary partitions it leads: a broker that
leads none (added after the topic was created, or back from a restart without its
leaderships) is invisible to it. With topic management on, the probe plans, from the
metadata it already has, the fewest changes that give every broker the lead of at
least one canary partition, and carries them out with the admin API:

1. too few partitions for the brokers: grow the topic to one per broker;
2. a broker that is the preferred leader (first replica) of no partition takes over
   one partition from the broker that is preferred for the most, one that already
   holds a replica on it if there is one (a reorder moves no data);
3. a partition whose preferred leader is alive, in sync, and not leading it gets a
   preferred leader election (a broker that takes a replica it did not hold is
   elected at a later pass, once it has caught up and joined the ISR).

Pure, like KMinion's partition planner: :func:`plan_leaders` takes the topic's
replicas and returns a :class:`LeaderPlan`; :class:`LeaderKeeper` decides when to act
(times are passed in). It never churns (Strimzi Canary #221: reassigning every 10 s
raised produce latency from milliseconds to seconds): it acts only when the broker set
differs from the one it last saw settled, and at most every ``min_gap`` seconds, until
a plan comes out empty; then it waits for the broker set to change again.

>>> from probe.core.replicas import PartitionReplicas, TopicReplicas
>>> topic = TopicReplicas(
...     {0: PartitionReplicas(0, 1, (1, 2), (1, 2)), 1: PartitionReplicas(1, 1, (1, 2), (1, 2))},
...     brokers=frozenset({1, 2}),
... )
>>> plan = plan_leaders(topic)
>>> plan.reassign, plan.elect
((Reassignment(partition=1, replicas=(2, 1)),), (1,))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from probe.core.replicas import PartitionReplicas, TopicReplicas


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition's new replica list, its preferred leader first."""

    partition: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaderPlan:
    """What to change so that every broker leads a canary partition.

    ``grow_to``: the partition count the topic must grow to first (None: enough);
    ``reassign``: replica lists to change; ``elect``: partitions whose preferred leader
    (after the reassignments) should lead and does not.
    """

    grow_to: int | None = None
    reassign: tuple[Reassignment, ...] = ()
    elect: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return self.grow_to is None and not self.reassign and not self.elect


def plan_leaders(topic: TopicReplicas) -> LeaderPlan:
    """The fewest changes that make every live broker the preferred leader, and the
    leader, of at least one canary partition (see the module doc).

    Deterministic: brokers are served in id order, donors are the partitions of the
    broker preferred for the most partitions (ties: the lowest broker id), and
    within a donor broker the highest partition.
    """
    brokers = sorted(topic.brokers)
    partitions = dict(topic.partitions)
    if not brokers or not partitions:
        return LeaderPlan()
    grow_to = len(brokers) if len(partitions) < len(brokers) else None
    preferred = {p: r.replicas[0] for p, r in partitions.items() if r.replicas}
    counts = Counter(preferred.values())
    reassign: dict[int, Reassignment] = {}
    for broker in brokers:
        if counts[broker]:
            continue
        donor = _donor(partitions, preferred, counts, broker, taken=reassign.keys())
        if donor is None:
            continue  # every broker leads just one: the topic must grow first
        replicas = _led_by(broker, partitions[donor].replicas)
        reassign[donor] = Reassignment(donor, replicas)
        counts[preferred[donor]] -= 1
        preferred[donor] = broker
        counts[broker] += 1
    elect = tuple(
        sorted(
            p
            for p, leader in preferred.items()
            if leader in topic.brokers
            and partitions[p].leader != leader
            and leader in partitions[p].isr
        )
    )
    return LeaderPlan(grow_to, tuple(reassign[p] for p in sorted(reassign)), elect)


def _donor(
    partitions: dict[int, PartitionReplicas],
    preferred: dict[int, int],
    counts: Counter[int],
    broker: int,
    taken: Collection[int],
) -> int | None:
    """The partition to hand to ``broker``: of a broker preferred for more than one,
    the most; one that already has a replica on ``broker`` if any."""
    candidates = [p for p, leader in preferred.items() if counts[leader] > 1 and p not in taken]
    if not candidates:
        return None

    def rank(partition: int) -> tuple[bool, int, int, int]:
        leader = preferred[partition]
        return (
            broker not in partitions[partition].replicas,  # a reorder first
            -counts[leader],
            leader,
            -partition,
        )

    return min(candidates, key=rank)


def _led_by(broker: int, replicas: tuple[int, ...]) -> tuple[int, ...]:
    """The replica list with ``broker`` first: a reorder when it holds a replica,
    else it takes the place of the last follower (the replication factor stays)."""
    if broker in replicas:
        return (broker, *(r for r in replicas if r != broker))
    return (broker, *replicas[:-1])


@dataclass(slots=True)
class LeaderKeeper:
    """When to act on a plan: the broker set differs from the one last seen settled,
    and ``min_gap`` seconds have passed since the last action. Times in seconds, given.

    >>> keeper = LeaderKeeper(min_gap=300.0)
    >>> keeper.due(frozenset({1, 2}), now=0.0)
    True
    >>> keeper.acted(now=0.0)
    >>> keeper.due(frozenset({1, 2}), now=60.0)
    False
    >>> keeper.settled(frozenset({1, 2}))
    >>> keeper.due(frozenset({1, 2}), now=900.0), keeper.due(frozenset({1, 2, 3}), now=900.0)
    (False, True)
    """

    min_gap: float = 300.0
    _settled: frozenset[int] | None = None
    _acted_at: float | None = None

    def due(self, brokers: frozenset[int], now: float) -> bool:
        if brokers == self._settled:
            return False
        return self._acted_at is None or now - self._acted_at >= self.min_gap

    def acted(self, now: float) -> None:
        self._acted_at = now

    def settled(self, brokers: frozenset[int]) -> None:
        """Every broker leads a canary partition: nothing to do until the set changes."""
        self._settled = brokers
