"""Transports: the only code that knows a client library (aiokafka, confluent-kafka,
aiomqtt), as pyproject's import contract enforces; it lists the few places outside
that must speak one themselves (Spark's executor reads, the game days' wire proxy and
their second group member), each with its reason.

Every transport implements :class:`Transport`: list the partitions (or shards) of the
target, provision what is missing, cover them so arrivals are seen from now on, send
one canary to one partition, stream arrivals, close. Client-library exceptions are
mapped to :mod:`probe.core.errors` here, nowhere else.

Everything else that differs per kind of target (its label, stages, timeouts, pacing,
the readers of stages that read elsewhere) is its :class:`TargetLayout`: adding a kind
means a transport module and an entry in :data:`TRANSPORTS`, nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from probe.config import ProbeConfig, StageName, TargetKind
from probe.core.errors import ConnectFailed, ProduceFailure, TransactionOutcome
from probe.core.leadership import LeaderPlan
from probe.core.reader_signals import ReaderSignals
from probe.core.replicas import TopicReplicas

if TYPE_CHECKING:
    from probe.transport.kafka_group import GroupRecorder


@dataclass(frozen=True, slots=True)
class Arrival:
    """Raw bytes read back from one partition, with the wall-clock time (ns) they were read.

    ``offset`` is the record's offset where the transport has one (Kafka);
    ``traceparent`` the W3C context that travelled beside the record (a Kafka header,
    an MQTT 5 user property), unverified: the canary's signed copy is the trusted one.
    """

    partition: int
    payload: bytes
    at_ns: int
    offset: int | None = None
    traceparent: str | None = None


class Transport(Protocol):
    # OpenTelemetry's messaging.system of this transport: kafka, mqtt.
    messaging_system: str
    # How many canaries the producer should send at once (each stamped when it goes
    # out), or None for a whole round at once: a transport that queues sends inside
    # its client would otherwise add that queue to every measured latency.
    max_in_flight: int | None

    async def start(self) -> None:
        """Connect. Raises TransportError if the target cannot be reached."""

    async def partitions(self) -> list[int]:
        """Partitions (or shards) of the target right now, refreshed from the broker;
        empty when the topic does not exist."""

    async def provision(self) -> None:
        """Create what the target is missing (the topic), if the config allows it.

        Raises TransportError saying what is missing and how to fix it otherwise.
        """

    def describe(self, partitions: Sequence[int]) -> str:
        """The target's destination in words, for readiness: ``topic t: 3 partitions``;
        with no partitions, that it was not found."""

    async def cover(self, partitions: Sequence[int]) -> None:
        """Make sure every canary sent to these partitions from now on is read back.

        Returns once the reader is positioned: partitions already read keep their
        position; partitions new to the reader start at their beginning, because
        anything in a partition that was just created is new.
        """

    def destination(self, partition: int) -> str:
        """The topic a canary to this partition is written to (messaging.destination.name)."""

    def refused(self, partition: int, since: float) -> ProduceFailure | None:
        """Why the broker refused the partition's writes since ``since`` (monotonic
        seconds), when a send timed out while the client retried: the broker's own
        reason (not enough replicas) says more than the timeout. None if it did not
        answer or the transport cannot tell."""

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        """Write one canary and wait for the broker's acknowledgement; its offset when
        the broker gives one. ``trace_headers`` (``traceparent``, ``tracestate``) travel
        beside the record where the protocol has room: Kafka headers, MQTT 5 user
        properties. ``aborting``: in a transaction that is aborted (a transport that
        writes in transactions; the others never get it).

        Raises ProduceFailed(reason) if it is not acknowledged in time.
        """

    def arrivals(self) -> AsyncIterator[Arrival]:
        """Every record read back, as it arrives. Survives broker outages."""

    def read_problem(self) -> str | None:
        """Why the reader cannot read right now, or None: a fetch that keeps failing
        (records it cannot decode, say), which a covered reader does not show."""

    def signals(self) -> ReaderSignals:
        """What the reader measures beside its canaries, as it last read it: the
        transactional stage's unstable records, the mirror stage's heartbeats and
        checkpoint lag; NO_SIGNALS for a reader that has none."""

    def replicas(self) -> TopicReplicas | None:
        """Leaders, replicas and in-sync replicas of the partitions as the last
        :meth:`partitions` refresh saw them; None where the protocol has no brokers
        holding partitions (MQTT)."""

    async def spread_leaders(self, plan: LeaderPlan) -> list[str]:
        """Carry out a leader plan (probe.core.leadership): grow, reassign, elect. What could
        not be done, in words (no permission, a broker without the API); never raises."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TargetLayout:
    """What differs per kind of target, read from the config: everything the shell
    needs to know of a target without knowing its kind."""

    label: str  # the `target` label of its series
    stages: tuple[StageName, ...]
    send_timeout: float  # a canary not acknowledged by then is produce_failed
    spacing: float  # seconds between sends at least, on average (0: a round at once)
    # Stages that read with a reader of their own, and how to build it (called with
    # the group stage's recorder, or None): the bridge stage reads the Kafka topic a
    # bridge fills, the group stage the canary topic as a consumer-group member.
    readers: Mapping[StageName, Callable[[GroupRecorder | None], Transport]] = field(
        default_factory=dict
    )
    # Those of them that read the target's own partitions, where a canary's partition
    # is the one it names: the canary topic itself, or its mirror (MirrorMaker 2 writes
    # a record to the partition it was read from).
    same_partitions: frozenset[StageName] = frozenset()
    # Every this many rounds one is written in transactions and aborted (the
    # transactional stage's writes; see probe.stages.producer); 0: never.
    abort_every: int = 0

    def routed(self, stage: StageName) -> bool:
        """Whether the stage reads a canary from the partition the canary names: a
        stage reading another topic reads wherever that topic's writer put it."""
        return stage not in self.readers or stage in self.same_partitions


class TargetKindSpec(Protocol):
    """One kind of target: its layout, and its transport."""

    def layout(self, config: ProbeConfig) -> TargetLayout: ...

    def transport(
        self,
        config: ProbeConfig,
        *,
        on_reconnect: Callable[[], None],
        on_connect_failed: Callable[[ConnectFailed], None],
        on_transaction: Callable[[TransactionOutcome], None] = lambda _: None,
    ) -> Transport:
        """The transport of one target; ``on_reconnect`` is called after each reconnection
        the transport makes by itself (for ``synthetic_sla_reconnects_total``),
        ``on_connect_failed`` with each cause it finds of a connection lost mid-run and
        refused (for ``synthetic_sla_connect_errors_total``), ``on_transaction`` with
        how each of its transactions ended, where it writes in transactions."""


# The client libraries are imported when a target of their kind is built, not when
# this map is: importing the probe's core imports no client library.
class _Kafka:
    def layout(self, config: ProbeConfig) -> TargetLayout:
        # The sink stage judges in Spark (probe.spark), not in this process's target.
        stages: tuple[StageName, ...] = (StageName.CONSUMER,)
        readers: dict[StageName, Callable[[GroupRecorder | None], Transport]] = {}
        if StageName.GROUP in config.stages:
            stages += (StageName.GROUP,)
            readers[StageName.GROUP] = lambda recorder: self.group_reader(config, recorder)
        if StageName.GROUP_CONSUMER in config.stages:
            stages += (StageName.GROUP_CONSUMER,)
            readers[StageName.GROUP_CONSUMER] = lambda recorder: self.consumer_protocol_reader(
                config, recorder
            )
        if StageName.SHARE in config.stages:
            stages += (StageName.SHARE,)
            readers[StageName.SHARE] = lambda recorder: self.share_reader(config, recorder)
        if StageName.MIRROR in config.stages:
            stages += (StageName.MIRROR,)
            readers[StageName.MIRROR] = lambda _: self.mirror_reader(config)
        abort_every = 0
        if StageName.TRANSACTIONAL in config.stages:
            stages += (StageName.TRANSACTIONAL,)
            readers[StageName.TRANSACTIONAL] = lambda _: self.committed_reader(config)
            abort_every = config.transactions.abort_every
        rate = config.kafka.max_send_rate
        spacing = 1.0 / rate if rate else 0.0
        return TargetLayout(
            config.target,
            stages,
            config.kafka.send_timeout,
            spacing,
            readers,
            same_partitions=frozenset(readers),
            abort_every=abort_every,
        )

    def transport(
        self,
        config: ProbeConfig,
        *,
        on_reconnect: Callable[[], None],
        on_connect_failed: Callable[[ConnectFailed], None],
        on_transaction: Callable[[TransactionOutcome], None] = lambda _: None,
    ) -> Transport:
        # aiokafka reconnects inside its clients and does not tell: no reconnection to
        # count; a connection it cannot get back is diagnosed about once a round.
        from probe.transport.kafka import KafkaTransport  # noqa: PLC0415

        # With the transactional stage on, every canary is written in transactions.
        transactional = StageName.TRANSACTIONAL in config.stages
        transactions = config.transactions
        return KafkaTransport(
            config.kafka,
            hold=config.judge.loss_timeout,
            diagnose_every=config.interval,
            on_connect_failed=on_connect_failed,
            transactional_id=(
                transactions.transactional_id(config.probe_id) if transactional else None
            ),
            transaction_timeout=transactions.timeout,
            on_transaction=on_transaction,
        )

    def committed_reader(self, config: ProbeConfig) -> Transport:
        """The transactional stage's reader: the canary topic, committed records only."""
        from probe.transport.kafka import KafkaTransport  # noqa: PLC0415

        return KafkaTransport(config.kafka, writes=False, read_committed=True)

    def mirror_reader(self, config: ProbeConfig) -> Transport:
        """The mirror stage's reader: the mirrored canary topic on the target cluster,
        read whole, never created (MirrorMaker 2 creates it). It connects when it can:
        a target cluster down must not keep the source's stages from judging."""
        from probe.transport.deferred import DeferredReader  # noqa: PLC0415
        from probe.transport.kafka_mirror import MirrorReader  # noqa: PLC0415

        kafka = mirror_config(config).kafka
        mirror = config.mirror
        # The probe's consumer groups on the source, whose checkpoints it follows.
        groups = [
            group
            for stage, group in (
                (StageName.GROUP, config.group.group_id(config.probe_id)),
                (
                    StageName.GROUP_CONSUMER,
                    config.group.consumer_protocol_group_id(config.probe_id),
                ),
            )
            if stage in config.stages
        ]
        return DeferredReader(
            lambda: MirrorReader(
                kafka, mirror.source_alias, separator=mirror.separator, groups=groups
            ),
            kafka.topic,
            StageName.MIRROR,
        )

    def reader(self, config: ProbeConfig) -> Transport:
        """A transport that only reads a topic someone else fills (the bridge's)."""
        from probe.transport.kafka import KafkaTransport  # noqa: PLC0415

        return KafkaTransport(config.kafka, writes=False)

    def group_reader(self, config: ProbeConfig, recorder: GroupRecorder | None) -> Transport:
        """The group stage's reader: a member of the probe's consumer group."""
        from probe.transport.kafka_group import KafkaGroupReader  # noqa: PLC0415

        return KafkaGroupReader(
            config.kafka,
            config.group.group_id(config.probe_id),
            target=config.target,
            recorder=recorder,
            fetch_max_wait=config.group.fetch_max_wait,
        )

    def consumer_protocol_reader(
        self, config: ProbeConfig, recorder: GroupRecorder | None
    ) -> Transport:
        """The group_consumer stage's reader: a member of the probe's consumer group on
        the consumer protocol (KIP-848)."""
        from probe.transport.kafka_group_consumer import (  # noqa: PLC0415
            KafkaConsumerProtocolReader,
        )

        return KafkaConsumerProtocolReader(
            config.kafka,
            config.group.consumer_protocol_group_id(config.probe_id),
            target=config.target,
            recorder=recorder,
            fetch_max_wait=config.group.fetch_max_wait,
        )

    def share_reader(self, config: ProbeConfig, recorder: GroupRecorder | None) -> Transport:
        """The share stage's reader: a member of the probe's share group (KIP-932)."""
        from probe.transport.kafka_share import KafkaShareReader  # noqa: PLC0415

        return KafkaShareReader(
            config.kafka,
            config.group.share_group_id(config.probe_id),
            target=config.target,
            recorder=recorder,
            fetch_max_wait=config.group.fetch_max_wait,
        )


class _Mqtt:
    def layout(self, config: ProbeConfig) -> TargetLayout:
        mqtt = config.mqtt
        readers: dict[StageName, Callable[[GroupRecorder | None], Transport]] = {}
        if StageName.BRIDGE in mqtt.stages:
            bridged = bridge_config(config)
            readers[StageName.BRIDGE] = lambda _: _Kafka().reader(bridged)
        spacing = 1.0 / mqtt.max_send_rate if mqtt.max_send_rate else 0.0
        stages = tuple(StageName(stage) for stage in mqtt.stages)
        return TargetLayout(mqtt.target, stages, mqtt.send_timeout, spacing, readers)

    def transport(
        self,
        config: ProbeConfig,
        *,
        on_reconnect: Callable[[], None],
        on_connect_failed: Callable[[ConnectFailed], None],
        on_transaction: Callable[[TransactionOutcome], None] = lambda _: None,
    ) -> Transport:
        # The MQTT transport names a failed reconnection itself, and reads its password
        # and TLS files at every connection attempt.
        from probe.transport.mqtt import MqttTransport  # noqa: PLC0415

        return MqttTransport(config.mqtt, probe_id=config.probe_id, on_reconnect=on_reconnect)


def bridge_config(config: ProbeConfig) -> ProbeConfig:
    """The Kafka settings the bridge stage reads with: the kafka section's connection,
    the bridge's topic, and never creating it (the bridge owns that topic)."""
    assert config.mqtt.bridge is not None
    kafka = config.kafka.model_copy(
        update={"topic": config.mqtt.bridge.topic, "create_topic": False}
    )
    return config.model_copy(update={"kafka": kafka})


def mirror_config(config: ProbeConfig) -> ProbeConfig:
    """The Kafka settings the mirror stage reads with: the target cluster's connection
    (mirror section), the mirrored topic, never creating it or moving its leaders, and
    the kafka section's reading settings."""
    mirror = config.mirror
    kafka = config.kafka.in_section(
        "mirror",
        bootstrap_servers=mirror.bootstrap_servers,
        tls=mirror.tls,
        sasl=mirror.sasl,
        topic=mirror.mirrored_topic(config.kafka.topic),
        create_topic=False,
        move_leaders=False,
        partitions=None,
        replication_factor=None,
    )
    return config.model_copy(update={"kafka": kafka})


TRANSPORTS: Mapping[TargetKind, TargetKindSpec] = {
    TargetKind.KAFKA: _Kafka(),
    TargetKind.MQTT: _Mqtt(),
}
"""Every kind of target (``targets:`` in the config), and how each is laid out and built."""
