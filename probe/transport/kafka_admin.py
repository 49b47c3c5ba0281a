"""Kafka's admin requests, the probe's and the game days' alike: topics created and
grown, leader elections, partition reassignments, topic settings, log end offsets,
and the brokers and topics the metadata lists.

aiokafka's admin client (0.14) creates topics and partitions, describes settings and
reads the metadata, and offers no method for the rest. It defines
AlterPartitionReassignments and ListPartitionReassignments (KIP-455) as protocol
structs only, and defines neither ElectLeaders (v0 the preferred election; v1,
KIP-460, the election type, unclean included), IncrementalAlterConfigs (KIP-339:
set or delete one setting and leave the others; its ``alter_configs`` replaces a
resource's every dynamic setting) nor DescribeTopicPartitions (KIP-966: the eligible
leader replicas, which the metadata does not carry): those are defined here. Each is
sent as a struct through the admin client's own ways to the controller (on KRaft any broker, which
forwards) or to one broker. Nor has it ListOffsets: log end offsets are asked by a
consumer of their own.

What the cluster refuses, and a request no broker answers, comes back as values
(:class:`Refused`), never as an exception: each caller words them for its reader (the
probe's leader plan for its operator, in ``kafka_leaders``; a game day's fault in its
log) and decides whether to try again. Lookups whose answer the caller needs
(reassignments in flight, log end offsets) raise KafkaError instead.

Two faces: async functions on an ``AIOKafkaAdminClient`` the caller holds (the
transport keeps one open across refreshes), and :class:`ClusterAdmin`, synchronous,
on an event loop of its own, for callers on threads (the game days' faults):

    with ClusterAdmin("127.0.0.1:9092") as admin:
        problems = admin.set_configs([Config(TOPIC, "canaries", "min.insync.replicas", "1")])
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from io import BytesIO
from types import TracebackType
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError, for_code
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    DescribeConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Boolean,
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    String,
    TaggedFields,
)

# How long the controller may work on a request (the requests' own timeout_ms).
TIMEOUT_MS = 30_000
# Apache Kafka's controller refuses an operation that writes over 10,000 records to
# its log (POLICY_VIOLATION, "excessively large batch operation"): a topic of 10,000
# partitions is one record per partition plus the topic's, and cannot be created in
# one request. Creating, growing, moving and electing go this many partitions at a time.
PARTITIONS_PER_REQUEST = 5_000
# The game days' admin clients: their client's request timeout, and their requests'.
REQUEST_TIMEOUT_MS = 10_000
# A metadata request asked again and again until a cluster is ready or in sync.
METADATA_TIMEOUT_MS = 3_000

# Config resource types (Kafka's ConfigResource.Type).
TOPIC = 2
BROKER = 4
GROUP = 32  # a consumer or share group's own settings (KIP-848, KIP-932)
_RESOURCE_NAMES = {TOPIC: "topic", BROKER: "broker", GROUP: "group"}
# IncrementalAlterConfigs operations.
_SET, _DELETE = 0, 1
# An election result that is no refusal: the partition has the leader asked for.
_ELECTION_NOT_NEEDED = 84
# DescribeConfigs config_source of a setting made on the topic itself.
_DYNAMIC_TOPIC_CONFIG = 1
MIN_INSYNC = "min.insync.replicas"

# Whatever keeps a request from being answered: the connection, the client's own
# timeout, a broker that does not speak the request's version.
_UNANSWERED = (KafkaError, OSError, TimeoutError, NotImplementedError)

T = TypeVar("T")


class Election(IntEnum):
    """ElectLeaders' election types (KIP-460)."""

    PREFERRED = 0  # the first replica, where it is in sync
    UNCLEAN = 1  # a live replica outside the ISR, where no ISR member is alive


@dataclass(frozen=True, slots=True)
class Refused:
    """What a request could not do: one ``partition``, or (None) the whole request.

    ``error`` and ``message`` are Kafka's (None: no broker answered the request);
    ``problem`` says it in words: the error's name and Kafka's message, or why no
    answer came.
    """

    partition: int | None
    problem: str
    error: type[KafkaError] | None = None
    message: str | None = None

    @classmethod
    def by_kafka(cls, partition: int | None, code: int, message: str | None) -> Refused:
        error = for_code(code)
        return cls(partition, f"{error.__name__} {message or ''}".strip(), error, message)


@dataclass(frozen=True, slots=True)
class Config:
    """One setting of one resource (``TOPIC``, ``BROKER`` or ``GROUP``, named by the
    topic, the broker id or the group id); ``value`` None deletes the setting (back to
    its default)."""

    resource_type: int
    resource: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Setting:
    """A topic's setting as DescribeConfigs answers it; ``on_topic``: made on the topic
    itself, not a default of the broker or the cluster."""

    value: str | None
    on_topic: bool


@dataclass(frozen=True, slots=True)
class ReassignmentInFlight:
    """A partition being reassigned, as ListPartitionReassignments lists it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


# How many partitions DescribeTopicPartitions answers at most per request (Kafka's own
# default); a larger topic is asked page by page, from the cursor each answer gives.
DESCRIBE_PARTITIONS_PAGE = 2_000


# --- The requests aiokafka does not define (its names: API, version) -----------------


class ElectLeadersResponse_v0(Response):  # type: ignore[misc]  # aiokafka is untyped
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


class ElectLeadersResponse_v1(Response):  # type: ignore[misc]
    API_KEY = 43
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
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


class ElectLeadersRequest_v1(RequestStruct):  # type: ignore[misc]
    API_KEY = 43
    API_VERSION = 1
    RESPONSE_TYPE = ElectLeadersResponse_v1
    SCHEMA = Schema(
        ("election_type", Int8),
        ("topic_partitions", Array(("topic", String("utf-8")), ("partition_id", Array(Int32)))),
        ("timeout_ms", Int32),
    )


class ElectLeadersRequest(Request[ElectLeadersRequest_v0 | ElectLeadersRequest_v1]):  # type: ignore[misc]
    """A leader election for some partitions of one topic, in the highest version both
    sides speak: v1 from Kafka 2.4, v0 (preferred elections only) on 2.2 and 2.3."""

    API_KEY = 43

    def __init__(
        self, election: Election, topic: str, partitions: Sequence[int], timeout_ms: int
    ) -> None:
        self._election = election
        self._topic = topic
        self._partitions = list(partitions)
        self._timeout_ms = timeout_ms

    def build(
        self, request_struct_class: type[ElectLeadersRequest_v0 | ElectLeadersRequest_v1]
    ) -> ElectLeadersRequest_v0 | ElectLeadersRequest_v1:
        topics = [(self._topic, self._partitions)]
        if request_struct_class.API_VERSION >= 1:
            return request_struct_class(int(self._election), topics, self._timeout_ms)
        if self._election is not Election.PREFERRED:
            raise IncompatibleBrokerVersion("an unclean election needs ElectLeaders v1 (Kafka 2.4)")
        return request_struct_class(topics, self._timeout_ms)


class IncrementalAlterConfigsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "responses",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
            ),
        ),
    )


class IncrementalAlterConfigsRequest_v0(RequestStruct):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v0
    SCHEMA = Schema(
        (
            "resources",
            Array(
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                (
                    "configs",
                    Array(
                        ("name", String("utf-8")),
                        ("config_operation", Int8),
                        ("value", String("utf-8")),
                    ),
                ),
            ),
        ),
        ("validate_only", Boolean),
    )


class IncrementalAlterConfigsRequest(Request[IncrementalAlterConfigsRequest_v0]):  # type: ignore[misc]
    API_KEY = 44

    def __init__(self, configs: Sequence[Config]) -> None:
        self._configs = configs

    def build(
        self, request_struct_class: type[IncrementalAlterConfigsRequest_v0]
    ) -> IncrementalAlterConfigsRequest_v0:
        resources: dict[tuple[int, str], list[tuple[str, int, str | None]]] = {}
        for config in self._configs:
            operation = _DELETE if config.value is None else _SET
            entry = (config.name, operation, config.value)
            resources.setdefault((config.resource_type, config.resource), []).append(entry)
        return request_struct_class(
            [(kind, name, entries) for (kind, name), entries in resources.items()], False
        )


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka is untyped
    """A topic id: 16 bytes as they come."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


class _Cursor(AbstractType[tuple[str, int] | None]):  # type: ignore[misc]
    """DescribeTopicPartitions' cursor, a nullable struct of a flexible version: -1 for
    none, else 1 and the topic and partition to go on from (then its tagged fields)."""

    _NAME = CompactString("utf-8")

    @classmethod
    def encode(cls, value: tuple[str, int] | None) -> bytes:
        marker: bytes = Int8.encode(-1 if value is None else 1)
        if value is None:
            return marker
        topic, partition = value
        fields: bytes = cls._NAME.encode(topic) + Int32.encode(partition)
        return marker + fields + b"\x00"  # no tagged fields

    @classmethod
    def decode(cls, data: BytesIO) -> tuple[str, int] | None:
        if Int8.decode(data) < 0:
            return None
        topic, partition = cls._NAME.decode(data), Int32.decode(data)
        TaggedFields.decode(data)
        return (topic or "", partition)


class DescribeTopicPartitionsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 75
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", _Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("eligible_leader_replicas", CompactArray(Int32)),
                        ("last_known_elr", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("next_cursor", _Cursor),
        ("tags", TaggedFields),
    )


class DescribeTopicPartitionsRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 75
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTopicPartitionsResponse_v0
    SCHEMA = Schema(
        ("topics", CompactArray(("name", CompactString("utf-8")), ("tags", TaggedFields))),
        ("response_partition_limit", Int32),
        ("cursor", _Cursor),
        ("tags", TaggedFields),
    )


class DescribeTopicPartitionsRequest(Request[DescribeTopicPartitionsRequest_v0]):  # type: ignore[misc]
    """One topic's partitions from ``cursor`` on, at most ``limit`` of them (Kafka 3.8+;
    a broker without it raises IncompatibleBrokerVersion at the send)."""

    API_KEY = 75

    def __init__(self, topic: str, limit: int, cursor: tuple[str, int] | None) -> None:
        self._topic, self._limit, self._cursor = topic, limit, cursor

    def build(
        self, request_struct_class: type[DescribeTopicPartitionsRequest_v0]
    ) -> DescribeTopicPartitionsRequest_v0:
        return request_struct_class([(self._topic, {})], self._limit, self._cursor, {})


# --- Topics created and grown --------------------------------------------------------


def growth_steps(current: int, wanted: int, per_request: int = PARTITIONS_PER_REQUEST) -> list[int]:
    """The partition counts to grow a topic through, ``per_request`` new ones at a
    time: ``growth_steps(1, 12000) == [5001, 10001, 12000]``; empty when not growing."""
    return list(range(current + per_request, wanted, per_request)) + (
        [wanted] if wanted > current else []
    )


async def create_topic(
    admin: AIOKafkaAdminClient, topic: str, partitions: int, replication_factor: int
) -> None:
    """Create the topic, PARTITIONS_PER_REQUEST partitions at first, then grown to
    ``partitions``. Raises KafkaError: TopicAlreadyExistsError when it exists, the
    broker's own error when it refuses (a policy, an ACL, too few brokers for the
    replication factor)."""
    first = min(partitions, PARTITIONS_PER_REQUEST)
    new = NewTopic(topic, num_partitions=first, replication_factor=replication_factor)
    _raise_topic_errors(await admin.create_topics([new]))
    await grow(admin, topic, first, partitions)


async def grow(admin: AIOKafkaAdminClient, topic: str, current: int, wanted: int) -> None:
    """Grow the topic to ``wanted`` partitions, PARTITIONS_PER_REQUEST at a time.
    Raises KafkaError when refused."""
    for count in growth_steps(current, wanted, PARTITIONS_PER_REQUEST):
        await grow_to(admin, topic, count)


async def grow_to(admin: AIOKafkaAdminClient, topic: str, count: int) -> None:
    """Grow the topic to ``count`` partitions in one request (at most
    PARTITIONS_PER_REQUEST new ones). Raises KafkaError when refused."""
    await admin.create_partitions({topic: NewPartitions(count)}, TIMEOUT_MS)


def _raise_topic_errors(response: Any) -> None:
    """aiokafka's create_topics returns the broker's per-topic errors without raising
    them: a refused creation (a policy, an ACL, too few brokers for the replication
    factor) passed for a created topic."""
    for name, code, *rest in response.topic_errors:
        if code:
            message = rest[0] if rest and isinstance(rest[0], str) else None
            raise for_code(code)(f"topic {name}: {message or 'refused'}")


# --- Leaders elected, partitions reassigned ------------------------------------------


async def elect(
    admin: AIOKafkaAdminClient,
    election: Election,
    topic: str,
    partitions: Sequence[int],
    timeout_ms: int = TIMEOUT_MS,
) -> list[Refused]:
    """Elect these partitions' leaders; what was refused. A partition that has the
    leader asked for already is no refusal; a request refused as a whole (v1) is one
    refusal, not one per partition."""
    refused: list[Refused] = []
    for some in _in_requests(list(partitions)):
        request = ElectLeadersRequest(election, topic, some, timeout_ms)
        response = await _answer(admin._send_to_controller(request))
        if isinstance(response, Refused):
            refused.append(response)
        elif getattr(response, "error_code", 0):  # v1 on: the whole request
            refused.append(Refused.by_kafka(None, response.error_code, None))
        else:
            refused += [
                Refused.by_kafka(partition, code, message)
                for _, results in response.replica_election_results
                for partition, code, message in results
                if code not in (0, _ELECTION_NOT_NEEDED)
            ]
    return refused


async def reassign(
    admin: AIOKafkaAdminClient,
    topic: str,
    replicas: Mapping[int, Sequence[int]],
    timeout_ms: int = TIMEOUT_MS,
) -> list[Refused]:
    """Start reassigning these partitions to these replica lists (the first the
    preferred leader); what was refused."""
    moves: list[Any] = [(p, list(r), {}) for p, r in sorted(replicas.items())]
    refused: list[Refused] = []
    for some in _in_requests(moves):
        request = AlterPartitionReassignmentsRequest(timeout_ms, [(topic, some, {})], {})
        response = await _answer(admin._send_to_controller(request))
        if isinstance(response, Refused):
            refused.append(response)
        elif response.error_code:
            refused.append(Refused.by_kafka(None, response.error_code, response.error_message))
        else:
            refused += [
                Refused.by_kafka(partition, code, message)
                for topic_result in response.responses
                for partition, code, message, *_ in topic_result[1]
                if code
            ]
    return refused


async def reassignments(
    admin: AIOKafkaAdminClient,
    topic: str,
    partitions: Iterable[int],
    timeout_ms: int = TIMEOUT_MS,
) -> dict[int, ReassignmentInFlight]:
    """The reassignments in flight among these partitions (empty: none), as the
    controller lists them (Describe on the cluster). Raises KafkaError when refused
    or not answered."""
    wanted = sorted(partitions)
    request = ListPartitionReassignmentsRequest(timeout_ms, [(topic, wanted, {})], {})
    response = await admin._send_to_controller(request)
    if response.error_code:
        raise for_code(response.error_code)(response.error_message)
    return {
        partition: ReassignmentInFlight(tuple(replicas), tuple(adding), tuple(removing))
        for _, listed, _ in response.topics
        for partition, replicas, adding, removing, _ in listed
    }


async def eligible_leaders(
    admin: AIOKafkaAdminClient, topic: str, node: int | None = None
) -> dict[int, tuple[int, ...]]:
    """The eligible leader replicas (KIP-966) of the topic's partitions that have some:
    out of the ISR, yet holding every committed record (the high watermark stops while
    the ISR is under min.insync.replicas), so the controller elects one cleanly once
    the ISR is gone. None on a cluster without ELR (before Kafka 4.1 unless turned on,
    or ``eligible.leader.replicas.version`` 0). Raises KafkaError when refused or not
    answered (IncompatibleBrokerVersion: a broker before Kafka 3.8). Asked of ``node``
    (None: any broker the admin client knows)."""
    found: dict[int, tuple[int, ...]] = {}
    cursor: tuple[str, int] | None = None
    while True:
        request = DescribeTopicPartitionsRequest(topic, DESCRIBE_PARTITIONS_PAGE, cursor)
        if node is None:
            response = await admin._send_request(request)
        else:
            response = await admin._send_request_to_node(node, request)
        for code, _, _, _, partitions, _, _ in response.topics:
            if code:
                raise for_code(code)(f"DescribeTopicPartitions {topic}")
            for _, index, _, _, _, _, eligible, _, _, _ in partitions:
                if eligible:
                    found[index] = tuple(eligible)
        cursor = response.next_cursor
        if cursor is None or cursor[0] != topic:
            return found


def _in_requests(items: list[T]) -> list[list[T]]:
    """As many requests as PARTITIONS_PER_REQUEST allows (see above)."""
    size = PARTITIONS_PER_REQUEST
    return [items[i : i + size] for i in range(0, len(items), size)]


async def _answer(sent: Awaitable[Any]) -> Any:
    """The response, or why none came, as a refusal of the whole request."""
    try:
        return await sent
    except _UNANSWERED as exc:
        return Refused(None, f"{type(exc).__name__}: {exc}")


# --- Settings ------------------------------------------------------------------------


async def topic_settings(
    admin: AIOKafkaAdminClient, topic: str, names: Sequence[str]
) -> dict[str, Setting] | Refused:
    """These settings of the topic, by name (one the broker does not list is left
    out), or the broker's refusal (DescribeConfigs on the topic). Raises KafkaError
    when no broker answers."""
    request = DescribeConfigsRequest([(TOPIC, topic, list(names))], False)
    response = await admin._send_request(request)
    settings: dict[str, Setting] = {}
    for code, message, _, _, entries in response.resources:
        if code:
            return Refused.by_kafka(None, code, message)
        for name, value, _, source, *_ in entries:
            settings[name] = Setting(value, source == _DYNAMIC_TOPIC_CONFIG)
    return settings


async def min_insync_replicas(admin: AIOKafkaAdminClient, topic: str) -> int | None:
    """The topic's min.insync.replicas, its own or the default it takes; None when the
    broker does not say (refused, or no number). Raises KafkaError when no broker
    answers."""
    settings = await topic_settings(admin, topic, [MIN_INSYNC])
    setting = None if isinstance(settings, Refused) else settings.get(MIN_INSYNC)
    if setting is None or setting.value is None:
        return None
    try:
        return int(setting.value)
    except ValueError:
        return None


async def set_configs(admin: AIOKafkaAdminClient, configs: Sequence[Config]) -> list[str]:
    """Set (or delete, value None) these settings, every other one left alone; what was
    refused, one line per resource (``topic canaries: PolicyViolationError ...``) or
    request not answered. A broker's own settings are sent to that broker (Kafka
    refuses them from any other), the rest to the controller."""
    problems: list[str] = []
    by_node: dict[int | None, list[Config]] = {}
    for config in configs:
        node = int(config.resource) if config.resource_type == BROKER else None
        by_node.setdefault(node, []).append(config)
    for node, some in by_node.items():
        request = IncrementalAlterConfigsRequest(some)
        if node is None:
            response = await _answer(admin._send_to_controller(request))
        else:
            response = await _answer(admin._send_request_to_node(node, request))
        if isinstance(response, Refused):
            problems.append(response.problem)
            continue
        problems += [
            f"{_RESOURCE_NAMES.get(kind, 'resource')} {name}: "
            + Refused.by_kafka(None, code, message).problem
            for code, message, kind, name in response.responses
            if code
        ]
    return problems


# --- Offsets and metadata ------------------------------------------------------------


async def log_ends(
    bootstrap_servers: str,
    topic: str,
    partitions: Iterable[int],
    request_timeout_ms: int = REQUEST_TIMEOUT_MS,
) -> dict[int, int]:
    """Each partition's log end offset as its leader says. Raises KafkaError when a
    leader does not answer."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=request_timeout_ms
    )
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in sorted(partitions)])
        return {tp.partition: int(end) for tp, end in ends.items()}
    finally:
        await consumer.stop()


async def topic_partitions(admin: AIOKafkaAdminClient, topic: str) -> list[int]:
    """The topic's partitions as a metadata answer lists them, in order; empty when the
    topic does not exist. Raises KafkaError when no broker answers."""
    described: list[dict[str, Any]] = await admin.describe_topics([topic])
    return sorted(
        int(partition["partition"])
        for found in described
        if found["topic"] == topic and not found["error_code"]
        for partition in found["partitions"]
    )


def cluster_topics(bootstrap_servers: str) -> list[dict[str, Any]]:
    """Every topic of a metadata answer, as aiokafka's ``describe_topics`` gives them
    (empty when no broker answered)."""

    async def ask(admin: AIOKafkaAdminClient) -> list[dict[str, Any]]:
        topics: list[dict[str, Any]] = await admin.describe_topics()
        return topics

    return asyncio.run(_metadata(bootstrap_servers, {}, ask)) or []


def group_coordinator(bootstrap_servers: str, group_id: str, **security: str) -> int | None:
    """The broker coordinating group ``group_id`` (FindCoordinator: the same for either
    consumer group protocol, and for share groups); None when no broker answered."""

    async def ask(admin: AIOKafkaAdminClient) -> int:
        return int(await admin.find_coordinator(group_id))

    return asyncio.run(_metadata(bootstrap_servers, security, ask))


def transaction_coordinator(
    bootstrap_servers: str, transactional_id: str, **security: str
) -> int | None:
    """The broker coordinating the transactions of ``transactional_id`` (FindCoordinator
    with the transaction key type); None when no broker answered."""

    async def ask(admin: AIOKafkaAdminClient) -> int:
        return int(await admin.find_coordinator(transactional_id, coordinator_type=1))

    return asyncio.run(_metadata(bootstrap_servers, security, ask))


def live_brokers(bootstrap_servers: str, **security: str) -> set[int]:
    """The broker ids a metadata answer lists (registered and unfenced); empty when no
    broker answered. ``security``: the client's SASL options, in aiokafka's names."""

    async def ask(admin: AIOKafkaAdminClient) -> set[int]:
        described = await admin.describe_cluster()
        return {int(b["node_id"]) for b in described["brokers"]}

    return asyncio.run(_metadata(bootstrap_servers, security, ask)) or set()


async def _metadata(
    bootstrap_servers: str,
    security: Mapping[str, str],
    ask: Callable[[AIOKafkaAdminClient], Awaitable[T]],
) -> T | None:
    """A metadata answer from a client of its own (None: no broker answered), for
    callers that ask until a cluster is ready or in sync."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=METADATA_TIMEOUT_MS, **security
    )
    try:
        await admin.start()
        return await ask(admin)
    except (TimeoutError, KafkaError, OSError):
        return None
    finally:
        await admin.close()


# --- The synchronous face ------------------------------------------------------------


class ClusterAdmin:
    """An admin client on an event loop of its own, for callers on threads (the game
    days' faults): each call runs to its end before it returns. What the cluster
    refuses comes back as one line per refused partition or resource."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._loop = asyncio.new_event_loop()

    def __enter__(self) -> ClusterAdmin:
        try:
            # aiokafka's clients take the running loop when they are made.
            self._admin = self._run(self._new_admin())
            self._run(self._admin.start())
        except BaseException:
            self._loop.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self._run(self._admin.close())
        finally:
            self._loop.close()

    async def _new_admin(self) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, request_timeout_ms=REQUEST_TIMEOUT_MS
        )

    def _run(self, call: Awaitable[T]) -> T:
        return self._loop.run_until_complete(call)

    def topic_setting(self, topic: str, name: str) -> str | None:
        """The value of a setting made on the topic itself (None: the topic has none,
        the broker's default applies). Raises KafkaError when refused or when no
        broker answers."""
        settings = self._run(topic_settings(self._admin, topic, [name]))
        if isinstance(settings, Refused):
            raise (settings.error or KafkaError)(settings.message)
        setting = settings.get(name)
        return str(setting.value) if setting is not None and setting.on_topic else None

    def set_configs(self, configs: Sequence[Config]) -> list[str]:
        """Set (or delete, value None) these settings, every other one left alone."""
        return [f"configs: {problem}" for problem in self._run(set_configs(self._admin, configs))]

    def elect_unclean(self, topic: str, partitions: Sequence[int]) -> list[str]:
        """An unclean election of these partitions; a partition that has a leader
        already is no problem."""
        refused = self._run(
            elect(self._admin, Election.UNCLEAN, topic, partitions, REQUEST_TIMEOUT_MS)
        )
        return _lines("unclean election", refused)

    def elect_preferred(self, topic: str, partitions: Sequence[int]) -> list[str]:
        """A preferred election of these partitions; one led by its preferred replica
        already is no problem."""
        refused = self._run(
            elect(self._admin, Election.PREFERRED, topic, partitions, REQUEST_TIMEOUT_MS)
        )
        return _lines("preferred election", refused)

    def reassign(self, topic: str, replicas: Mapping[int, Sequence[int]]) -> list[str]:
        """Start reassigning these partitions to these replica lists (the first the
        preferred leader)."""
        refused = self._run(reassign(self._admin, topic, replicas, REQUEST_TIMEOUT_MS))
        return _lines("reassigning", refused)

    def log_ends(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's log end offset as its leader says. Raises KafkaError when
        a leader does not answer."""
        return self._run(log_ends(self.bootstrap_servers, topic, partitions))

    def delete_topic(self, topic: str) -> None:
        """Delete the topic; one that does not exist is no problem. Raises KafkaError
        when refused or when the controller does not answer."""
        self._run(self._admin.delete_topics([topic], timeout_ms=REQUEST_TIMEOUT_MS))

    def reassignments(
        self, topic: str, partitions: Iterable[int]
    ) -> dict[int, ReassignmentInFlight]:
        """The reassignments in flight among these partitions (empty: none). Raises
        KafkaError when the controller does not answer."""
        return self._run(reassignments(self._admin, topic, partitions, REQUEST_TIMEOUT_MS))


def _lines(doing: str, refused: Iterable[Refused]) -> list[str]:
    """One line per refusal, the partition it names first."""
    return [
        f"{doing}: {'' if r.partition is None else f'partition {r.partition}: '}{r.problem}"
        for r in refused
    ]
