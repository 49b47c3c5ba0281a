"""Carrying out a leader plan (probe.core.leadership) on Kafka with the admin API.

aiokafka's admin client creates partitions but has neither partition reassignment
nor leader election: the requests are sent through its client as protocol structs,
AlterPartitionReassignments from aiokafka's own protocol module and ElectLeaders v0
(KIP-460's preferred election, which aiokafka does not define) from here. Kafka
answers both from 2.4 on; a broker that does not know them (the embedded one) or a
probe without the ACL gets a problem back in words, never an exception: the probe
then measures the brokers it can, and the brokers that lead nothing are counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.errors import ClusterAuthorizationFailedError, KafkaError, for_code
from aiokafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from probe.core.leadership import LeaderPlan
from probe.core.partition_summary import partitions_summary

TIMEOUT_MS = 30_000
# Apache Kafka's controller refuses an operation that writes over 10,000 records to
# its log (POLICY_VIOLATION, "excessively large batch operation"): a topic of 10,000
# partitions is one record per partition plus the topic's, and cannot be created in
# one request. Creating, growing, moving and electing go this many partitions at a time.
PARTITIONS_PER_REQUEST = 5_000


def growth_steps(current: int, wanted: int, per_request: int = PARTITIONS_PER_REQUEST) -> list[int]:
    """The partition counts to grow a topic through, ``per_request`` new ones at a
    time: ``growth_steps(1, 12000) == [5001, 10001, 12000]``; empty when not growing."""
    return list(range(current + per_request, wanted, per_request)) + (
        [wanted] if wanted > current else []
    )


def _chunks(items: list[Any], size: int = PARTITIONS_PER_REQUEST) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class ElectLeadersResponse_v0(Response):  # type: ignore[misc]  # names as aiokafka names them
    API_KEY = 43
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "replica_election_results",
            Array(
                ("topic", String("utf-8")),
                (
                    "partition_result",
                    Array(
                        ("partition_id", Int32),
                        ("error_code", Int16),
                        ("error_message", String("utf-8")),
                    ),
                ),
            ),
        ),
    )


class ElectLeadersRequest_v0(RequestStruct):  # type: ignore[misc]
    API_KEY = 43
    API_VERSION = 0
    RESPONSE_TYPE = ElectLeadersResponse_v0
    SCHEMA = Schema(
        ("topic_partitions", Array(("topic", String("utf-8")), ("partition_id", Array(Int32)))),
        ("timeout_ms", Int32),
    )


class ElectLeadersRequest(Request[ElectLeadersRequest_v0]):  # type: ignore[misc]
    """A preferred leader election for some partitions of one topic."""

    API_KEY = 43

    def __init__(self, topic: str, partitions: list[int], timeout_ms: int) -> None:
        self._topic = topic
        self._partitions = partitions
        self._timeout_ms = timeout_ms

    def build(self, request_struct_class: type[ElectLeadersRequest_v0]) -> ElectLeadersRequest_v0:
        return request_struct_class([(self._topic, self._partitions)], self._timeout_ms)


async def carry_out(admin: AIOKafkaAdminClient, topic: str, plan: LeaderPlan) -> list[str]:
    """Grow, reassign, elect, in that order; what could not be done, in words."""
    problems: list[str] = []
    if plan.grow_to is not None:
        try:
            # Only ever to as many partitions as brokers: one request.
            await admin.create_partitions({topic: NewPartitions(plan.grow_to)}, TIMEOUT_MS)
        except KafkaError as exc:
            problems.append(f"growing {topic} to {plan.grow_to} partitions: {exc}")
    moves: list[Any] = [(c.partition, list(c.replicas), {}) for c in plan.reassign]
    for some in _chunks(moves):
        request = AlterPartitionReassignmentsRequest(TIMEOUT_MS, [(topic, some, {})], {})
        problems += await _send(admin, request, "reassigning", _reassign_errors)
    for chosen in _chunks(list(plan.elect)):
        request = ElectLeadersRequest(topic, chosen, TIMEOUT_MS)
        problems += await _send(admin, request, "electing preferred leaders", _elect_errors)
    return problems


async def grow(admin: AIOKafkaAdminClient, topic: str, current: int, wanted: int) -> None:
    """Grow the topic to ``wanted`` partitions, PARTITIONS_PER_REQUEST at a time."""
    for count in growth_steps(current, wanted, PARTITIONS_PER_REQUEST):
        await admin.create_partitions({topic: NewPartitions(count)}, TIMEOUT_MS)


async def _send(admin: AIOKafkaAdminClient, request: Any, doing: str, errors: Any) -> list[str]:
    try:
        # The admin client's own way to the controller (private in aiokafka 0.14).
        response = await admin._send_to_controller(request)
    except (KafkaError, NotImplementedError) as exc:
        return [f"{doing}: {type(exc).__name__}: {exc}"]
    found: list[str] = errors(response)
    return [f"{doing}: {problem}" for problem in found]


def _reassign_errors(response: Any) -> list[str]:
    if response.error_code:
        return [_problem(response.error_code, response.error_message)]
    return partitions_by_problem(
        (partition, _problem(code, message))
        for topic_result in response.responses
        for partition, code, message, *_ in topic_result[1]
        if code
    )


def _elect_errors(response: Any) -> list[str]:
    refused = [
        (partition, _problem(code, message))
        for _, results in response.replica_election_results
        for partition, code, message in results
        if code not in (0, _ELECTION_NOT_NEEDED)
    ]
    if refused and all(_NEEDS_ALTER in problem for _, problem in refused):
        return [refused[0][1]]  # an ACL refuses every partition alike: once is enough
    return partitions_by_problem(refused)


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


def _problem(code: int, message: str | None) -> str:
    """An error in words. Kafka's own message for a refused cluster ACL is a dump of
    the request; what the operator needs is the ACL to grant."""
    error = for_code(code)
    if error is ClusterAuthorizationFailedError:
        return f"{error.__name__}: {_NEEDS_ALTER} (or kafka.move_leaders: false)"
    return f"{error.__name__} {message or ''}".strip()


# The preferred leader already leads: not a problem.
_ELECTION_NOT_NEEDED = 84


async def replicas_being_added(
    admin: AIOKafkaAdminClient, topic: str, partitions: list[int]
) -> dict[int, tuple[int, ...]]:
    """Per partition of these in a reassignment in flight, the replicas it adds
    (ListPartitionReassignments, KIP-455; Describe on the cluster). Raises KafkaError
    when refused or not answered."""
    request = ListPartitionReassignmentsRequest(TIMEOUT_MS, [(topic, partitions, {})], {})
    response = await admin._send_to_controller(request)
    if response.error_code:
        raise for_code(response.error_code)(_problem(response.error_code, response.error_message))
    return {
        partition: tuple(adding)
        for _, listed, _ in response.topics
        for partition, _, adding, _, _ in listed
        if adding
    }
