"""Faults of the Apache Kafka cluster (``broker: apache-kafka``): brokers stopped,
killed, restarted in turn, cut off from the probe, and the active controller killed.

The cluster is three combined broker and controller nodes (``probe.apache_kafka``),
each advertising a proxy of its own to clients, while the brokers replicate on their
own listener: blackholing one proxy cuts the probe off from that broker and from
nothing else. A stopped node is stopped with SIGTERM, a controlled shutdown that
moves its leaderships away first; a killed one with SIGKILL, a crash that the
controller notices only when the broker's session times out.

What is in sync is asked of the cluster itself, with a metadata request (aiokafka's
admin client) through the proxies, as any client would; which node is the active
controller is read from the nodes' own ``quorum-state`` files (see
:func:`active_controller`). Every step a fault takes is written, timed, to
``faults.log`` in the cluster's directory.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError

if TYPE_CHECKING:
    from probe.apache_kafka.cluster import KafkaCluster
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.faults.proxy import TcpProxy
    from probe.gameday.scenario import (
        KafkaBrokerBlackhole,
        KafkaBrokersDown,
        KafkaBrokerStop,
        KafkaControllerKill,
        KafkaRollingRestart,
    )

CONSUMER_OFFSETS = "__consumer_offsets"
# A restarted node: its JVM started, then registered and unfenced by the controller.
REGISTERED_TIMEOUT = 120.0
# Finding the active controller: a quorum that just elected may take a few seconds to
# write it down on every node.
CONTROLLER_TIMEOUT = 30.0


class ClusterFaultError(ProbeError):
    """A cluster fault could not be injected or healed in time (the cluster did not
    come back, never got in sync, or has no active controller)."""


# --- Pure: what the cluster said, judged -------------------------------------------------


def lagging_partitions(topics: Iterable[Mapping[str, Any]], wanted: Iterable[str]) -> list[str]:
    """Partitions of the ``wanted`` topics whose ISR is not every replica, or that have
    no leader, as ``topic[partition] isr/replicas`` (empty: all in sync).

    ``topics`` is a metadata answer's topic list as aiokafka's ``describe_topics``
    gives it. A wanted topic missing from it is lagging (``topic: not listed``), except
    ``__consumer_offsets``, which exists only once a consumer group was used.
    """
    listed = {str(topic["topic"]): topic for topic in topics}
    found: list[str] = []
    for name in wanted:
        topic = listed.get(name)
        if topic is None or topic.get("error_code", 0) != 0 or not topic["partitions"]:
            if name != CONSUMER_OFFSETS:
                found.append(f"{name}: not listed")
            continue
        for partition in sorted(topic["partitions"], key=lambda p: int(p["partition"])):
            replicas, isr = set(partition["replicas"]), set(partition["isr"])
            if partition["leader"] < 0 or not replicas <= isr:
                found.append(
                    f"{name}[{partition['partition']}] leader {partition['leader']} "
                    f"isr {sorted(isr)} of {sorted(replicas)}"
                )
    return found


def quorum_leader(states: Iterable[str]) -> int | None:
    """The KRaft leader (the active controller) that the nodes' ``quorum-state`` files
    name at the highest epoch, or None when none names one yet.

    Each node writes the file at every election it sees (Kafka's ``FileQuorumStateStore``:
    JSON with ``leaderId`` and ``leaderEpoch``; -1 while it knows no leader). A file
    being rewritten reads as not there.
    """
    best: tuple[int, int] | None = None
    for text in states:
        try:
            state = json.loads(text)
            leader, epoch = int(state["leaderId"]), int(state["leaderEpoch"])
        except (ValueError, KeyError, TypeError):
            continue
        if leader >= 0 and (best is None or epoch > best[0]):
            best = (epoch, leader)
    return None if best is None else best[1]


# --- The cluster, asked -----------------------------------------------------------------


def cluster_topics(bootstrap_servers: str) -> list[dict[str, Any]]:
    """Every topic of a metadata answer (empty when no broker answered)."""
    return asyncio.run(_cluster_topics(bootstrap_servers))


async def _cluster_topics(bootstrap_servers: str) -> list[dict[str, Any]]:
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415
    from aiokafka.errors import KafkaError  # noqa: PLC0415

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=3000)
    try:
        await admin.start()
        topics: list[dict[str, Any]] = await admin.describe_topics()
        return topics
    except (TimeoutError, KafkaError, OSError):
        return []
    finally:
        await admin.close()


def wait_in_sync(bootstrap_servers: str, topics: Sequence[str], timeout: float, what: str) -> float:
    """Until every partition of ``topics`` has its full ISR; the seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    wanted = [*topics, CONSUMER_OFFSETS]
    lagging = lagging_partitions(cluster_topics(bootstrap_servers), wanted)
    while lagging:
        if time.monotonic() > deadline:
            raise ClusterFaultError(
                f"{what}: not in sync after {timeout:g}s: {', '.join(lagging[:6])}"
            )
        time.sleep(0.25)
        lagging = lagging_partitions(cluster_topics(bootstrap_servers), wanted)
    return time.monotonic() - began


def active_controller(cluster: KafkaCluster, timeout: float = CONTROLLER_TIMEOUT) -> int:
    """The node id of the active KRaft controller, among the running nodes.

    Read from each node's ``__cluster_metadata-0/quorum-state`` (the leader at the
    highest epoch), not asked of the quorum: DescribeQuorum is a request no Python
    client speaks, and Kafka's own ``kafka-metadata-quorum`` tool is in the
    ``kafka-tools`` jar, which the pinned jars do not include.
    """
    deadline = time.monotonic() + timeout
    while True:
        running = [node for node in cluster.nodes.values() if node.running]
        states = []
        for node in running:
            path = node.directory / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                states.append(path.read_text())
            except OSError:
                continue
        leader = quorum_leader(states)
        if leader is not None and any(node.node_id == leader for node in running):
            return leader
        if time.monotonic() > deadline:
            raise ClusterFaultError(f"no active controller among the running nodes ({states})")
        time.sleep(0.25)


class _StepLog:
    """Each step of a fault, timed, in ``faults.log`` beside the nodes' directories."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.path = cluster.workdir / "faults.log"

    def __call__(self, step: str, action: Callable[[], object]) -> float:
        began = time.monotonic()
        action()
        seconds = time.monotonic() - began
        with self.path.open("a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} {step}: {seconds:.1f}s\n")
        return seconds


def _start_registered(cluster: KafkaCluster, node_ids: Sequence[int]) -> None:
    """Start these nodes (together: two of three controllers need each other for a
    quorum), and return once every broker of the cluster is registered and unfenced."""
    cluster.start_nodes(*node_ids)
    cluster.wait_ready(timeout=REGISTERED_TIMEOUT)


# --- The faults ---------------------------------------------------------------------------


class KafkaBrokerStopFault:
    """One broker down for the fault phase: controlled (SIGTERM) or killed (SIGKILL)."""

    def __init__(self, spec: KafkaBrokerStop, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.broker = spec.broker
        self.how = spec.how
        self.log = _StepLog(self.cluster)

    def inject(self) -> None:
        node = self.cluster.node(self.broker)
        stop = node.stop if self.how == "controlled" else node.kill
        self.log(f"broker {self.broker}: {self.how} stop", stop)

    def heal(self) -> None:
        self.log(
            f"broker {self.broker}: started and registered",
            lambda: _start_registered(self.cluster, [self.broker]),
        )


class KafkaRollingRestartFault:
    """Each broker in turn, the active controller last (as an operator rolls a
    cluster): controlled stop, start, and wait until every canary partition and
    ``__consumer_offsets`` has its full ISR before the next. The roll runs in a thread
    of its own through the fault phase; heal waits for it to end."""

    def __init__(self, spec: KafkaRollingRestart, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.bootstrap_servers = targets.bootstrap_servers
        self.topic = targets.topic
        self.in_sync_timeout = spec.in_sync_timeout
        self.log = _StepLog(self.cluster)
        self.order: list[int] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def inject(self) -> None:
        controller = active_controller(self.cluster)
        self.order = [i for i in sorted(self.cluster.nodes) if i != controller] + [controller]
        self._thread = threading.Thread(target=self._roll, name="gameday-roll", daemon=True)
        self._thread.start()

    def _roll(self) -> None:
        try:
            for node_id in self.order:
                self._restart(node_id)
        except BaseException as error:  # handed to heal(), on the runner's thread
            self._error = error

    def _restart(self, node_id: int) -> None:
        self.log(f"broker {node_id}: controlled stop", self.cluster.node(node_id).stop)
        self.log(
            f"broker {node_id}: started and registered",
            lambda: _start_registered(self.cluster, [node_id]),
        )
        self.log(
            f"broker {node_id}: every ISR full",
            lambda: wait_in_sync(
                self.bootstrap_servers,
                [self.topic],
                self.in_sync_timeout,
                f"after restarting broker {node_id}",
            ),
        )

    def heal(self) -> None:
        """Returns once the last broker is back in every ISR; raises what the roll met."""
        if self._thread is not None:
            # Each step has its own deadline; this one only guards against a hang.
            limit = len(self.order) * (60 + REGISTERED_TIMEOUT + self.in_sync_timeout)
            self._thread.join(limit)
            if self._thread.is_alive():
                raise ClusterFaultError(f"the rolling restart did not end in {limit:g}s")
        if self._error is not None:
            raise ClusterFaultError(f"rolling restart: {self._error}") from self._error


class KafkaBrokersDownFault:
    """These brokers stopped for the fault phase, one controlled shutdown after the
    other (each moves its leaderships away while a controller quorum still stands);
    started together at heal."""

    def __init__(self, spec: KafkaBrokersDown, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.brokers = list(spec.brokers)
        self.log = _StepLog(self.cluster)

    def inject(self) -> None:
        for broker in self.brokers:
            self.log(f"broker {broker}: controlled stop", self.cluster.node(broker).stop)

    def heal(self) -> None:
        self.log(
            f"brokers {self.brokers}: started and registered",
            lambda: _start_registered(self.cluster, self.brokers),
        )


class KafkaBrokerBlackholeFault:
    """The proxy in front of one broker forwards nothing; the brokers still replicate."""

    def __init__(self, spec: KafkaBrokerBlackhole, targets: LocalTargets) -> None:
        targets.kafka_cluster()
        self.proxy: TcpProxy = targets.broker_proxies[spec.broker]

    def inject(self) -> None:
        self.proxy.blackhole()

    def heal(self) -> None:
        self.proxy.restore()


class KafkaControllerKillFault:
    """SIGKILL of the active KRaft controller (its broker with it); started at heal,
    which returns once it is registered again. ``killed`` says which node it was."""

    def __init__(self, spec: KafkaControllerKill, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.log = _StepLog(self.cluster)
        self.killed: int | None = None

    def inject(self) -> None:
        killed = self.killed = active_controller(self.cluster)
        self.log(f"broker {killed} (active controller): kill", self.cluster.node(killed).kill)

    def heal(self) -> None:
        if self.killed is None:
            return
        killed = self.killed
        self.log(
            f"broker {killed}: started and registered",
            lambda: _start_registered(self.cluster, [killed]),
        )
