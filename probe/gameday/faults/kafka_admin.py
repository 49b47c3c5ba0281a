"""The admin requests of the cluster faults that aiokafka's admin client does not offer.

aiokafka 0.14 defines AlterPartitionReassignments and ListPartitionReassignments
(KIP-455) as protocol structs but has no method for them, and has neither
IncrementalAlterConfigs (KIP-339: set or delete one setting and leave the others; its
``alter_configs`` replaces a resource's every dynamic setting) nor ElectLeaders v1
(KIP-460: the election type, unclean included). Each is sent here as a struct through
the admin client's own way to the controller (on KRaft any broker, which forwards).

What a request could not do comes back in words, one line per refused resource or
partition, never as an exception: the fault decides whether to retry or give up.

    with ClusterAdmin("127.0.0.1:9092") as admin:
        problems = admin.set_configs([Config(TOPIC, "canaries", "min.insync.replicas", "1")])
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    DescribeConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

# Config resource types (Kafka's ConfigResource.Type).
TOPIC = 2
BROKER = 4
# IncrementalAlterConfigs operations.
_SET, _DELETE = 0, 1
# ElectLeaders election types.
_PREFERRED, _UNCLEAN = 0, 1
# Election results that are no refusal: the partition already has a leader.
_ELECTION_NOT_NEEDED = 84
# DescribeConfigs config_source of a setting made on the topic itself.
_DYNAMIC_TOPIC_CONFIG = 1
REQUEST_TIMEOUT_MS = 10_000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Config:
    """One setting of one resource (``TOPIC`` or ``BROKER``, named by the topic or the
    broker id); ``value`` None deletes the setting (back to its default)."""

    resource_type: int
    resource: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition being reassigned, as ListPartitionReassignments lists it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class IncrementalAlterConfigsResponse_v0(Response):  # type: ignore[misc]  # aiokafka's names
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


class ElectionRequest(Request[ElectLeadersRequest_v1]):  # type: ignore[misc]
    """A leader election (KIP-460) for some partitions of one topic: preferred (the
    first replica, where it is in sync) or unclean (a live replica outside the ISR
    where no ISR member is alive)."""

    API_KEY = 43

    def __init__(
        self, election_type: int, topic: str, partitions: Sequence[int], timeout_ms: int
    ) -> None:
        self._election_type = election_type
        self._topic = topic
        self._partitions = list(partitions)
        self._timeout_ms = timeout_ms

    def build(self, request_struct_class: type[ElectLeadersRequest_v1]) -> ElectLeadersRequest_v1:
        return request_struct_class(
            self._election_type, [(self._topic, self._partitions)], self._timeout_ms
        )


class ClusterAdmin:
    """An aiokafka admin client on an event loop of its own, for the faults' threads:
    each call runs to its end before it returns."""

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

    def _send(
        self,
        request: Any,
        answer: Callable[[Any], list[str]],
        doing: str,
        node: int | None = None,
    ) -> list[str]:
        """To ``node``, or to the controller (through any broker, on KRaft)."""
        admin = self._admin
        try:
            if node is None:
                response = self._run(admin._send_to_controller(request))
            else:
                response = self._run(admin._send_request_to_node(node, request))
        except (KafkaError, OSError, TimeoutError, NotImplementedError) as exc:
            return [f"{doing}: {type(exc).__name__}: {exc}"]
        return [f"{doing}: {problem}" for problem in answer(response)]

    def topic_setting(self, topic: str, name: str) -> str | None:
        """The value of a setting made on the topic itself (None: the topic has none,
        the broker's default applies). Raises KafkaError when no broker answers."""
        request = DescribeConfigsRequest([(TOPIC, topic, [name])], True)
        response = self._run(self._admin._send_request(request))
        for error_code, message, _, _, entries in response.resources:
            if error_code:
                raise for_code(error_code)(message)
            for entry in entries:
                if entry[0] == name and entry[3] == _DYNAMIC_TOPIC_CONFIG:
                    return str(entry[1])
        return None

    def set_configs(self, configs: Sequence[Config]) -> list[str]:
        """Set (or delete, value None) these settings, every other one left alone. A
        broker's own settings are sent to that broker (Kafka refuses them from any
        other), the rest to the controller."""
        problems: list[str] = []
        by_node: dict[int | None, list[Config]] = {}
        for config in configs:
            node = int(config.resource) if config.resource_type == BROKER else None
            by_node.setdefault(node, []).append(config)
        for node, some in by_node.items():
            request = IncrementalAlterConfigsRequest(some)
            problems += self._send(request, _config_errors, "configs", node)
        return problems

    def elect_unclean(self, topic: str, partitions: Sequence[int]) -> list[str]:
        """An unclean election of these partitions; a partition that has a leader
        already is no problem."""
        request = ElectionRequest(_UNCLEAN, topic, partitions, REQUEST_TIMEOUT_MS)
        return self._send(request, _election_errors, "unclean election")

    def elect_preferred(self, topic: str, partitions: Sequence[int]) -> list[str]:
        """A preferred election of these partitions; one led by its preferred replica
        already is no problem."""
        request = ElectionRequest(_PREFERRED, topic, partitions, REQUEST_TIMEOUT_MS)
        return self._send(request, _election_errors, "preferred election")

    def reassign(self, topic: str, replicas: Mapping[int, Sequence[int]]) -> list[str]:
        """Start reassigning these partitions to these replica lists (the first the
        preferred leader)."""
        moves: list[Any] = [(p, list(r), {}) for p, r in sorted(replicas.items())]
        request = AlterPartitionReassignmentsRequest(REQUEST_TIMEOUT_MS, [(topic, moves, {})], {})
        return self._send(request, _reassignment_errors, "reassigning")

    def log_ends(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's log end offset as its leader says. Raises KafkaError when
        a leader does not answer."""
        return self._run(self._log_ends(topic, sorted(partitions)))

    async def _log_ends(self, topic: str, partitions: list[int]) -> dict[int, int]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, request_timeout_ms=REQUEST_TIMEOUT_MS
        )
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
            return {tp.partition: int(end) for tp, end in ends.items()}
        finally:
            await consumer.stop()

    def reassignments(self, topic: str, partitions: Iterable[int]) -> dict[int, Reassignment]:
        """The reassignments in flight among these partitions (empty: none). Raises
        KafkaError when the controller does not answer."""
        wanted = sorted(partitions)
        request = ListPartitionReassignmentsRequest(REQUEST_TIMEOUT_MS, [(topic, wanted, {})], {})
        response = self._run(self._admin._send_to_controller(request))
        if response.error_code:
            raise for_code(response.error_code)(response.error_message)
        return {
            partition: Reassignment(tuple(replicas), tuple(adding), tuple(removing))
            for _, listed, _ in response.topics
            for partition, replicas, adding, removing, _ in listed
        }


def _problem(code: int, message: str | None) -> str:
    return f"{for_code(code).__name__} {message or ''}".strip()


def _config_errors(response: Any) -> list[str]:
    return [
        f"{('topic' if kind == TOPIC else 'broker')} {name}: {_problem(code, message)}"
        for code, message, kind, name in response.responses
        if code
    ]


def _election_errors(response: Any) -> list[str]:
    if response.error_code:
        return [_problem(response.error_code, None)]
    return [
        f"partition {partition}: {_problem(code, message)}"
        for _, results in response.replica_election_results
        for partition, code, message in results
        if code not in (0, _ELECTION_NOT_NEEDED)
    ]


def _reassignment_errors(response: Any) -> list[str]:
    if response.error_code:
        return [_problem(response.error_code, response.error_message)]
    return [
        f"partition {partition}: {_problem(code, message)}"
        for _, results, _ in response.responses
        for partition, code, message, _ in results
        if code
    ]
