"""Faults of the Apache Kafka cluster (``broker: apache-kafka``): brokers stopped,
killed, restarted in turn, cut off from the probe, the active controller killed, an
unclean leader election, and a partition reassignment in flight.

The cluster is three combined broker and controller nodes (``probe.apache_kafka``),
each advertising a proxy of its own to clients, while the brokers replicate on their
own listener: blackholing one proxy cuts the probe off from that broker and from
nothing else. A stopped node is stopped with SIGTERM, a controlled shutdown that
moves its leaderships away first; a killed one with SIGKILL, a crash that the
controller notices only when the broker's session times out.

What is in sync is asked of the cluster itself, with a metadata request through the
proxies, as any client would; which node is the active controller is read from the
nodes' own ``quorum-state`` files (see :func:`active_controller`). Every request to
the cluster (metadata, config changes, elections, reassignments) is the probe's own
admin module's, :mod:`probe.transport.kafka_admin`.
Every step a fault takes is written, timed, to ``faults.log`` in the cluster's
directory.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probe.core.errors import ProbeError
from probe.transport.kafka_admin import (
    BROKER,
    MIN_INSYNC,
    TOPIC,
    ClusterAdmin,
    Config,
    cluster_topics,
    group_coordinator,
    transaction_coordinator,
)

if TYPE_CHECKING:
    from probe.apache_kafka.cluster import KafkaCluster
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.faults.proxy import TcpProxy
    from probe.gameday.scenario import (
        KafkaBrokerBlackhole,
        KafkaBrokersDown,
        KafkaBrokerStop,
        KafkaControllerKill,
        KafkaReassignment,
        KafkaRollingRestart,
        KafkaUncleanElection,
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

    ``topics`` is a metadata answer's topic list as ``cluster_topics`` gives it (in
    aiokafka's ``describe_topics`` shape). A wanted topic missing from it is lagging
    (``topic: not listed``), except ``__consumer_offsets``, which exists only once a
    consumer group was used.
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


def leader_moves(
    partitions: Iterable[Mapping[str, Any]], brokers: Iterable[int]
) -> dict[int, tuple[int, ...]]:
    """Each partition's new replica list: its leader's replica moved to the lowest
    broker that holds none of it, that broker first (the preferred leader, elected
    when the move completes: Kafka moves a leadership only off a replica being removed).

    ``partitions`` is one topic's partition list of a metadata answer. A partition
    with a replica on every broker has nowhere to move: ClusterFaultError, naming the
    replication factor, as for one without a leader.

    >>> leader_moves([{"partition": 0, "leader": 1, "replicas": [1, 2]}], [1, 2, 3])
    {0: (3, 2)}
    """
    everyone = sorted(brokers)
    moves: dict[int, tuple[int, ...]] = {}
    for partition in sorted(partitions, key=lambda p: int(p["partition"])):
        index, leader = int(partition["partition"]), int(partition["leader"])
        replicas = [int(r) for r in partition["replicas"]]
        if leader not in replicas:
            raise ClusterFaultError(f"partition {index} has no leader to move ({leader})")
        free = [b for b in everyone if b not in replicas]
        if not free:
            raise ClusterFaultError(
                f"partition {index} has a replica on every broker ({replicas}): a move "
                "needs a replication factor below the broker count "
                "(probe.kafka.replication_factor)"
            )
        moves[index] = (free[0], *(r for r in replicas if r != leader))
    return moves


def throttle_settings(
    topic: str,
    replicas: Mapping[int, Sequence[int]],
    moves: Mapping[int, Sequence[int]],
    brokers: Iterable[int],
    rate: int,
) -> list[Config]:
    """The replication throttle of these moves, as ``kafka-reassign-partitions
    --throttle`` sets it: ``rate`` bytes per second on every broker, applied to the
    moved partitions' current replicas as leaders and to their new replicas as
    followers (an in-sync replica is never throttled)."""
    rates = [
        Config(BROKER, str(broker), f"{side}.replication.throttled.rate", str(rate))
        for broker in sorted(brokers)
        for side in ("leader", "follower")
    ]
    leaders = [f"{p}:{r}" for p in sorted(moves) for r in replicas[p]]
    followers = [f"{p}:{r}" for p in sorted(moves) for r in moves[p] if r not in replicas[p]]
    return [
        *rates,
        Config(TOPIC, topic, "leader.replication.throttled.replicas", ",".join(leaders)),
        Config(TOPIC, topic, "follower.replication.throttled.replicas", ",".join(followers)),
    ]


# --- The cluster, asked -----------------------------------------------------------------


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


class StepLog:
    """Each step of a fault, timed, in ``faults.log`` beside the nodes' directories."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.path = cluster.workdir / "faults.log"

    def __call__(self, step: str, action: Callable[[], object]) -> float:
        began = time.monotonic()
        action()
        seconds = time.monotonic() - began
        self.note(f"{step}: {seconds:.1f}s")
        return seconds

    def note(self, line: str) -> None:
        """What a step found, untimed."""
        with self.path.open("a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} {line}\n")


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
        self.log = StepLog(self.cluster)
        self.bootstrap_servers = targets.bootstrap_servers
        # The group (or the transactional id) whose coordinator is the broker to stop,
        # if the spec says so.
        self.coordinated = spec.coordinator_of
        self.group = (
            None
            if spec.coordinator_of is None
            else targets.probe_transactional_id()
            if spec.coordinator_of == "transactional"
            else targets.probe_group_id(spec.coordinator_of)
        )

    def inject(self) -> None:
        if self.group is not None:
            transactional = self.coordinated == "transactional"
            ask = transaction_coordinator if transactional else group_coordinator
            what = f"{'transactional id' if transactional else 'group'} {self.group}"
            coordinator = ask(self.bootstrap_servers, self.group)
            if coordinator is None:
                raise ClusterFaultError(f"{what}: no broker named its coordinator")
            self.broker = coordinator
            self.log.note(f"{what} is coordinated by broker {coordinator}")
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
    of its own through the fault phase; heal waits for it to end.

    The roll ends with a preferred leader election of the canary topic: what Kafka's
    own auto.leader.rebalance.enable does in production within its check interval
    (leader.imbalance.check.interval.seconds, 300 s), and the probe's topic management
    within its five minutes. A game day compresses time and ends sooner: without it the
    broker restarted last would still lead nothing at the end, and the replay, which
    holds the last state for its tail, would see it unmeasured for good."""

    def __init__(self, spec: KafkaRollingRestart, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.bootstrap_servers = targets.bootstrap_servers
        self.topic = targets.topic
        self.in_sync_timeout = spec.in_sync_timeout
        self.log = StepLog(self.cluster)
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
            self.log("preferred leaders elected", self._elect_preferred)
        except BaseException as error:  # handed to heal(), on the runner's thread
            self._error = error

    def _elect_preferred(self) -> None:
        partitions = _topic_partitions(self.bootstrap_servers, self.topic)
        with ClusterAdmin(self.bootstrap_servers) as admin:
            problems = admin.elect_preferred(
                self.topic, sorted(int(p["partition"]) for p in partitions)
            )
        if problems:
            raise ClusterFaultError(f"preferred election: {'; '.join(problems)}")

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
        self.log = StepLog(self.cluster)

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
        self.log = StepLog(self.cluster)
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


def _done(problems: Sequence[str], doing: str) -> None:
    """A request's problems are the fault's failure."""
    if problems:
        raise ClusterFaultError(f"{doing}: {'; '.join(problems[:6])}")


def _topic_partitions(bootstrap_servers: str, topic: str) -> list[dict[str, Any]]:
    """The topic's partitions in a metadata answer (ClusterFaultError: not listed)."""
    for listed in cluster_topics(bootstrap_servers):
        if listed["topic"] == topic and listed.get("error_code", 0) == 0 and listed["partitions"]:
            partitions: list[dict[str, Any]] = listed["partitions"]
            return partitions
    raise ClusterFaultError(f"topic {topic}: not in the cluster's metadata")


# From the only in-sync replica's death to the stale replicas' election: the
# controller elects outside the ISR only once the dead broker is fenced, when its
# session times out (broker.session.timeout.ms, 9 s).
ELECTION_TIMEOUT = 60.0


class KafkaUncleanElectionFault:
    """The canary topic's only in-sync replica lost, stale replicas elected in its place.

    inject: the topic's ``min.insync.replicas`` lowered to 1, every broker but
    ``broker`` stopped (controlled), ``broker`` left to acknowledge canaries alone for
    ``alone`` seconds, then killed: the fault is in place, the only in-sync replica is
    lost. The others are then started again in a thread of their own through the
    fault phase (stale, they cannot lead: the canary partitions stay offline). heal:
    once they are up, an unclean election of the canary partitions, ``broker`` started
    again (it truncates its log to the new leaders'), ``min.insync.replicas`` restored.

    ``acknowledged_alone``: records per partition written while ``broker`` was the only
    replica in sync; ``vanished``: records per partition its log held when it was
    killed that the new leaders' logs lack (at least: a canary written between the
    election and the count fills one of their offsets again).
    """

    def __init__(self, spec: KafkaUncleanElection, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.bootstrap_servers = targets.bootstrap_servers
        self.topic = targets.topic
        self.broker = spec.broker
        self.alone = spec.alone
        self.others = [node_id for node_id in sorted(self.cluster.nodes) if node_id != spec.broker]
        self.log = StepLog(self.cluster)
        self.partitions: list[int] = []
        self.acknowledged_alone: dict[int, int] = {}
        self.vanished: dict[int, int] = {}
        self._ends_at_kill: dict[int, int] = {}
        # The topic's own min.insync.replicas before (None: the broker's default).
        self._min_insync: str | None = None
        self._stale: threading.Thread | None = None
        self._error: BaseException | None = None

    def inject(self) -> None:
        partitions = _topic_partitions(self.bootstrap_servers, self.topic)
        self.partitions = sorted(int(p["partition"]) for p in partitions)
        with ClusterAdmin(self.bootstrap_servers) as admin:
            self._min_insync = admin.topic_setting(self.topic, MIN_INSYNC)
            lower = [Config(TOPIC, self.topic, MIN_INSYNC, "1")]
            self.log(
                f"topic {self.topic}: {MIN_INSYNC} 1 (was {self._min_insync or 'the default'})",
                lambda: _done(admin.set_configs(lower), f"lowering {MIN_INSYNC}"),
            )
        for other in self.others:
            self.log(f"broker {other}: controlled stop", self.cluster.node(other).stop)
        with ClusterAdmin(self.bootstrap_servers) as admin:
            alone_from = admin.log_ends(self.topic, self.partitions)
            self.log(
                f"broker {self.broker}: the only replica in sync for {self.alone:g}s",
                lambda: time.sleep(self.alone),
            )
            self._ends_at_kill = admin.log_ends(self.topic, self.partitions)
        self.log(f"broker {self.broker}: kill", self.cluster.node(self.broker).kill)
        self.acknowledged_alone = {
            p: end - alone_from.get(p, end) for p, end in self._ends_at_kill.items()
        }
        self.log.note(
            f"broker {self.broker} acknowledged {sum(self.acknowledged_alone.values())} "
            f"records alone {self.acknowledged_alone}"
        )
        self._stale = threading.Thread(target=self._start_stale, name="gameday-stale", daemon=True)
        self._stale.start()

    def _start_stale(self) -> None:
        try:
            self.log(
                f"brokers {self.others}: started and registered (stale)",
                lambda: _start_some(self.cluster, self.others),
            )
        except BaseException as error:  # handed to heal(), on the runner's thread
            self._error = error

    def heal(self) -> None:
        if self._stale is not None:
            self._stale.join(2 * REGISTERED_TIMEOUT)
            if self._stale.is_alive():
                raise ClusterFaultError(f"brokers {self.others} did not start in time")
        if self._error is not None:
            raise ClusterFaultError(f"starting brokers {self.others}: {self._error}")
        with ClusterAdmin(self.bootstrap_servers) as admin:
            self.log(
                f"unclean election: partitions {self.partitions} led by brokers {self.others}",
                lambda: self._elect(admin),
            )
            ends = admin.log_ends(self.topic, self.partitions)
        self.vanished = {p: max(0, end - ends.get(p, end)) for p, end in self._ends_at_kill.items()}
        self.log.note(
            f"the new leaders' logs lack {sum(self.vanished.values())} records of broker "
            f"{self.broker}'s {self.vanished}"
        )
        self.log(
            f"broker {self.broker}: started and registered",
            lambda: _start_registered(self.cluster, [self.broker]),
        )
        restore = [Config(TOPIC, self.topic, MIN_INSYNC, self._min_insync)]
        with ClusterAdmin(self.bootstrap_servers) as admin:
            self.log(
                f"topic {self.topic}: {MIN_INSYNC} {self._min_insync or 'back to the default'}",
                lambda: _done(admin.set_configs(restore), f"restoring {MIN_INSYNC}"),
            )

    def _elect(self, admin: ClusterAdmin) -> None:
        """Until a stale replica leads every canary partition. The controller answers
        ELECTION_NOT_NEEDED while the dead broker's session lasts (it still counts as
        the leader), so the election is asked again until the leaders have changed."""
        deadline = time.monotonic() + ELECTION_TIMEOUT
        while True:
            problems = admin.elect_unclean(self.topic, self.partitions)
            listed = _topic_partitions(self.bootstrap_servers, self.topic)
            leaders = {int(p["partition"]): int(p["leader"]) for p in listed}
            if all(leaders.get(p) in self.others for p in self.partitions):
                return
            if time.monotonic() > deadline:
                raise ClusterFaultError(
                    f"unclean election: leaders {leaders} after {ELECTION_TIMEOUT:g}s"
                    + (f" ({'; '.join(problems[:3])})" if problems else "")
                )
            time.sleep(0.5)


def _start_some(cluster: KafkaCluster, node_ids: Sequence[int]) -> None:
    """Start these nodes together and return once as many brokers are registered as
    are running (the others stay down)."""
    cluster.start_nodes(*node_ids)
    running = sum(1 for node in cluster.nodes.values() if node.running)
    cluster.wait_ready(brokers=running, timeout=REGISTERED_TIMEOUT)


class KafkaReassignmentFault:
    """A partition reassignment in flight: every canary partition's leader replica
    moved to a broker that holds none of it (:func:`leader_moves`), under a
    replication throttle of ``throttle`` bytes per second (:func:`throttle_settings`)
    that holds the new replicas behind while canaries keep being written. heal lifts
    the throttle, waits until every move is complete (the leaderships move to the new
    replicas then) and clears the throttled replica lists, as
    ``kafka-reassign-partitions --verify`` does.

    ``moves``: partition to its new replica list; ``in_flight`` and ``still_moving``:
    the partitions the controller listed as being reassigned once inject had started
    them, and when heal began (a new replica that caught up between two canaries
    joined the ISR and completed its move early).
    """

    def __init__(self, spec: KafkaReassignment, targets: LocalTargets) -> None:
        self.cluster = targets.kafka_cluster()
        self.bootstrap_servers = targets.bootstrap_servers
        self.topic = targets.topic
        self.throttle = spec.throttle
        self.complete_timeout = spec.complete_timeout
        self.log = StepLog(self.cluster)
        self.moves: dict[int, tuple[int, ...]] = {}
        self.in_flight: list[int] = []
        self.still_moving: list[int] = []
        self._settings: list[Config] = []

    def inject(self) -> None:
        partitions = _topic_partitions(self.bootstrap_servers, self.topic)
        replicas = {int(p["partition"]): [int(r) for r in p["replicas"]] for p in partitions}
        self.moves = leader_moves(partitions, self.cluster.nodes)
        self._settings = throttle_settings(
            self.topic, replicas, self.moves, self.cluster.nodes, self.throttle
        )
        with ClusterAdmin(self.bootstrap_servers) as admin:
            self.log(
                f"replication throttled to {self.throttle} B/s",
                lambda: _done(admin.set_configs(self._settings), "throttling"),
            )
            self.log(
                f"reassigning {self.moves}",
                lambda: _done(admin.reassign(self.topic, self.moves), "reassigning"),
            )
            self.in_flight = sorted(admin.reassignments(self.topic, self.moves))
        self.log.note(f"partitions {self.in_flight} being reassigned")

    def heal(self) -> None:
        rates = [c for c in self._settings if c.resource_type == BROKER]
        lists = [c for c in self._settings if c.resource_type == TOPIC]
        with ClusterAdmin(self.bootstrap_servers) as admin:
            self.still_moving = sorted(admin.reassignments(self.topic, self.moves))
            self.log.note(f"partitions {self.still_moving} still being reassigned")
            self.log(
                "replication throttle lifted",
                lambda: _done(admin.set_configs(_deleted(rates)), "lifting the throttle"),
            )
            self.log("every move complete", lambda: self._until_complete(admin))
            self.log(
                "throttled replicas cleared",
                lambda: _done(admin.set_configs(_deleted(lists)), "clearing the throttle"),
            )

    def _until_complete(self, admin: ClusterAdmin) -> None:
        deadline = time.monotonic() + self.complete_timeout
        while moving := admin.reassignments(self.topic, self.moves):
            if time.monotonic() > deadline:
                raise ClusterFaultError(
                    f"reassignment: partitions {sorted(moving)} still moving after "
                    f"{self.complete_timeout:g}s"
                )
            time.sleep(0.25)


def _deleted(settings: Iterable[Config]) -> list[Config]:
    return [Config(c.resource_type, c.resource, c.name, None) for c in settings]
