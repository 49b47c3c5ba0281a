"""What a fault is, and what it may act on in a local environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from probe.config import GroupConfig, TransactionsConfig
from probe.core.errors import ProbeError

if TYPE_CHECKING:
    from probe.apache_kafka.cluster import KafkaCluster
    from probe.apache_kafka.mirror import MirrorMaker2
    from probe.apache_kafka.tiered import RemoteStore
    from probe.embedded import EmbeddedBroker
    from probe.gameday.faults.proxy import TcpProxy


class Fault(Protocol):
    """Injected when the fault phase starts, healed when it ends.

    ``inject`` returns once the fault is in place (a stopped broker no longer
    listens); ``heal`` once it is removed (a restarted broker listens again). Neither
    waits for the pipeline to recover: measuring that is the game day's job.
    """

    def inject(self) -> None: ...

    def heal(self) -> None: ...


class RestartableProcess(Protocol):
    # Added to the process's environment at its next start (e.g. a shifted clock).
    environment: dict[str, str]

    def stop(self) -> None: ...

    def start(self) -> None: ...

    def send_signal(self, signal: int) -> None: ...


class WrongBrokerError(ProbeError):
    """A fault asked for a broker this environment does not run (the scenario's
    validation refuses the combination first: ``broker``, ``fault.kind``)."""


@dataclass
class LocalTargets:
    """The local environment's parts a fault may act on: the embedded broker and its
    proxy (``broker: embedded``), or the Apache Kafka cluster and one proxy per node
    (``broker: apache-kafka``); the other pair is None and empty."""

    broker: EmbeddedBroker | None
    # Between probe and broker; the broker advertises its address.
    proxy: TcpProxy | None
    probe: RestartableProcess
    topic: str
    partitions: int
    # The probe's key file and id: a tampered canary needs neither, but knowing the
    # probe id lets a hostile record claim to be the probe's own.
    key_file: Path
    probe_id: str
    cluster: KafkaCluster | None = None
    # Node id -> the proxy in front of that node's client listener, which the node
    # advertises: cutting one off cuts the probe off from that broker only.
    broker_proxies: Mapping[int, TcpProxy] = field(default_factory=dict)
    # The probe's group.id (its group stage's group); None: the one it derives.
    group_id: str | None = None
    # With the mirror stage: MirrorMaker 2, the cluster it replicates the canary topic
    # to, and the topic's name there.
    mirror: MirrorMaker2 | None = None
    mirror_cluster: KafkaCluster | None = None
    mirrored_topic: str | None = None
    # With tiered reads on: the cluster's remote store (LocalTieredStorage's directory).
    remote_store: RemoteStore | None = None

    def probe_group_id(self, stage: str = "group") -> str:
        """The group the probe's group stage (or its group_consumer stage, or its share
        stage) is a member of."""
        group = GroupConfig(id=self.group_id)
        if stage == "group_consumer":
            return group.consumer_protocol_group_id(self.probe_id)
        if stage == "share":
            return group.share_group_id(self.probe_id)
        return group.group_id(self.probe_id)

    def probe_transactional_id(self) -> str:
        """The transactional id the probe's transactional stage writes with."""
        return TransactionsConfig().transactional_id(self.probe_id)

    @property
    def proxies(self) -> list[TcpProxy]:
        """Every proxy between the probe and its brokers."""
        return [self.proxy] if self.proxy is not None else list(self.broker_proxies.values())

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(proxy.address for proxy in self.proxies)

    def embedded_broker(self) -> EmbeddedBroker:
        if self.broker is None:
            raise WrongBrokerError("this fault needs broker: embedded")
        return self.broker

    def embedded_proxy(self) -> TcpProxy:
        if self.proxy is None:
            raise WrongBrokerError("this fault needs broker: embedded (its Kafka-aware proxy)")
        return self.proxy

    def kafka_cluster(self) -> KafkaCluster:
        if self.cluster is None:
            raise WrongBrokerError("this fault needs broker: apache-kafka")
        return self.cluster
