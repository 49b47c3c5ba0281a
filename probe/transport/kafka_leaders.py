"""Carrying out a leader plan (probe.core.leadership) on Kafka, with the admin requests
of ``kafka_admin``: grow, reassign, elect, in that order.

Kafka answers reassignments and elections from 2.4 on; a broker that does not know
them (the embedded one) or a probe without the ACL gets a problem back in words,
never an exception: the probe then measures the brokers it can, and the brokers that
lead nothing are counted.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import ClusterAuthorizationFailedError, KafkaError

from probe.core.leadership import LeaderPlan
from probe.core.partition_summary import partitions_summary
from probe.transport.kafka_admin import Election, Refused, elect, grow_to, reassign


async def carry_out(admin: AIOKafkaAdminClient, topic: str, plan: LeaderPlan) -> list[str]:
    """Grow, reassign, elect, in that order; what could not be done, in words."""
    problems: list[str] = []
    if plan.grow_to is not None:
        try:
            # Only ever to as many partitions as brokers: one request.
            await grow_to(admin, topic, plan.grow_to)
        except KafkaError as exc:
            problems.append(f"growing {topic} to {plan.grow_to} partitions: {exc}")
    moves = {change.partition: change.replicas for change in plan.reassign}
    problems += _worded("reassigning", await reassign(admin, topic, moves))
    elected = await elect(admin, Election.PREFERRED, topic, plan.elect)
    return problems + _worded("electing preferred leaders", elected)


def _worded(doing: str, refused: list[Refused]) -> list[str]:
    whole = [_problem(r) for r in refused if r.partition is None]
    partitions = [(r.partition, _problem(r)) for r in refused if r.partition is not None]
    if partitions and all(_NEEDS_ALTER in problem for _, problem in partitions):
        lines = [partitions[0][1]]  # an ACL refuses every partition alike: once is enough
    else:
        lines = partitions_by_problem(partitions)
    return [f"{doing}: {line}" for line in whole + lines]


def partitions_by_problem(refused: Iterable[tuple[int, str]]) -> list[str]:
    """One line per problem, naming its partitions by count, span and the first few:
    an outage refuses thousands of partitions alike, and the lines are logged.

    >>> partitions_by_problem([(0, "NotControllerError"), (1, "NotControllerError")])
    ['2 partitions 0-1: NotControllerError']
    """
    partitions: dict[str, list[int]] = {}
    for partition, problem in refused:
        partitions.setdefault(problem, []).append(partition)
    return [f"{partitions_summary(which)}: {problem}" for problem, which in partitions.items()]


_NEEDS_ALTER = "the probe's principal needs Alter on the cluster"


def _problem(refused: Refused) -> str:
    """A refusal in words for the probe's operator. Kafka's own message for a refused
    cluster ACL is a dump of the request; what the operator needs is the ACL to grant."""
    if refused.error is ClusterAuthorizationFailedError:
        return f"{refused.error.__name__}: {_NEEDS_ALTER} (or kafka.move_leaders: false)"
    return refused.problem
