"""The scenario file: what to run, which fault, and what the alerting path must do.

A scenario is YAML, validated once; every problem is one
:class:`~probe.core.errors.ConfigError` naming the field (``phases.fault: must be > 0``),
which the CLI prints as ``sla-probe: config error: ...`` and exits 2.

    name: broker-outage
    mode: local                      # or staging (the user's pipeline, shell hooks)
    probe:                           # the probe's own configuration for the live run
      interval: 1s                   #   (the `--config` YAML; defaults in LIVE_PROBE)
    production:
      interval: 20s                  # the canary interval the replay rescales to
    phases: {steady: 15s, fault: 20s, recovery: 30s}
    broker: embedded                 # or apache-kafka (three KRaft nodes, `make kafka`)
    fault: {kind: broker-stop}
    expect:
      fire:
        - alert: SyntheticSlaAvailabilityBudgetBurn
          labels: {stage: consumer}
          within: 2m                 # production time, checked on the replay
      forbid: [SyntheticSlaProbeDown]
      no_other_alerts: true          # every other firing alert is a false page
      resolve_within: 10m            # production time after recovery starts
      max_lost: 0                    # canaries the probe counted lost, at most (local)

Times in ``expect`` are production times: the live run is compressed by
``production.interval / probe.interval``, and what production would see is computed
by the replay (``probe.gameday.replay``). ``fire[].live`` says whether the alert
must also fire in the live run: some cannot at a compressed interval (a ``for: 5m``
or a 60 s staleness threshold are real minutes live).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from probe.config import Duration, ProbeConfig, StageName, parse_duration
from probe.config import read_yaml as read_yaml_file
from probe.core.errors import ConfigError
from probe.validation import first_problem

# The probe configuration of a local live run, beneath the scenario's `probe:`
# section. One canary a second (so a minute of live time is 20 production intervals),
# and every timeout of the judge compressed by the same factor as the interval
# (production: 20 s interval, 60 s loss timeout, 10 s send timeout), so the counts a
# fault produces are the counts production would see, only sooner.
LIVE_PROBE: dict[str, Any] = {
    "interval": "1s",
    "kafka": {
        "create_topic": True,
        "partitions": 3,
        "send_timeout": "500ms",
        "fetch_max_wait": "20ms",
    },
    "judge": {"freshness": "1s", "loss_timeout": "3s"},
    # The group stage's member fetches like the consumer stage here: the embedded broker
    # holds a fetch for the whole wait, and the default 500 ms (kept low-CPU for many
    # partitions) would be added to every group canary's latency, whose threshold is
    # 0.5 s.
    "group": {"fetch_max_wait": "20ms"},
    "metrics": {"host": "127.0.0.1"},
}


def _signed_duration(value: object) -> float:
    if isinstance(value, str) and value.strip().startswith("-"):
        return -parse_duration(value.strip()[1:])
    return parse_duration(value)


SignedDuration = Annotated[float, BeforeValidator(_signed_duration)]


class _Section(BaseModel):
    # A typo in a scenario must not silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Phases(_Section):
    """Live durations. Steady must let a healthy pipeline's alerts settle."""

    steady: Duration = 15.0
    fault: Duration = 20.0
    recovery: Duration = 30.0


class Production(_Section):
    """What the replay rescales the live run to."""

    # The production canary interval: live time is stretched by interval / probe.interval.
    interval: Duration = 20.0
    # Healthy history prepended to the replay, extrapolated from the steady phase: a
    # production probe has been running for long, and its 1 h and 6 h windows are full.
    history: Duration = 6 * 3600.0
    # Healthy time appended after the live run, extrapolated from its end, so alerts
    # whose windows outlast the recovery phase can be seen resolving (the 3d/6h ticket
    # holds for 6 h after the last loss).
    tail: Duration = 7 * 3600.0
    # False: no replay (a staging run whose Prometheus already is production's).
    replay: bool = True


class LocalPrometheus(_Section):
    """The Prometheus a local run starts, loading the shipped rules file."""

    scrape_interval: Duration = 1.0
    # Another rules file (your own rendering of the chart); default: the shipped one.
    rules_file: Path | None = None


class Hook(_Section):
    """A shell command of a staging run; its output goes into the report."""

    command: str = Field(min_length=1)
    timeout: Duration = 120.0


class Staging(_Section):
    """The user's pipeline: their probe, their Prometheus, their fault."""

    prometheus_url: str | None = None
    alertmanager_url: str | None = None
    # Selects the probe's series for the replay (query_range on prometheus_url).
    probe_selector: str = '{job="synthetic-sla-probe"}'
    inject: Hook
    heal: Hook
    # Runs before the steady phase and after recovery, whatever happened (optional).
    setup: Hook | None = None
    teardown: Hook | None = None
    # How often to ask the alerts API.
    poll_interval: Duration = 5.0

    @model_validator(mode="after")
    def _one_api(self) -> Staging:
        if (self.prometheus_url is None) == (self.alertmanager_url is None):
            raise ValueError("give exactly one of prometheus_url and alertmanager_url")
        return self


# --- Faults: one model per kind, `kind` selects it ---------------------------------------


def _each_once(what: str) -> AfterValidator:
    """A list naming each of its items once: ``brokers: [2, 2]`` is a typo."""

    def check(items: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(set(items)) != len(items):
            raise ValueError(f"{what} named twice")
        return items

    return AfterValidator(check)


class BrokerStop(_Section):
    """Stop the broker for the fault phase, start it at heal (Tansu: empty storage)."""

    kind: Literal["broker-stop"]


class BrokerDataLoss(_Section):
    """Restart the broker at once: the outage is short, every record and topic is lost."""

    kind: Literal["broker-data-loss"]


class ProxyLatency(_Section):
    """Delay every chunk between probe and broker, both ways."""

    kind: Literal["proxy-latency"]
    delay: Duration = 1.0


class ProxyBlackhole(_Section):
    """Forward nothing between probe and broker; connections stay open, silent."""

    kind: Literal["proxy-blackhole"]


class SilentPartition(_Section):
    """Strip one partition's records from fetch responses: acknowledged, never read."""

    kind: Literal["silent-partition"]
    partition: int = Field(default=1, ge=0)


class HostileRecords(_Section):
    """Write records that are not valid canaries onto the canary topic."""

    kind: Literal["hostile-records"]
    random: int = Field(default=3, ge=0, le=10_000)
    tampered: int = Field(default=3, ge=0, le=10_000)
    random_size: int = Field(default=64, ge=1, le=1_000_000)


class ReplayedCanaries(_Section):
    """Read the probe's own canaries back and write them again: duplicates."""

    kind: Literal["replayed-canaries"]
    count: int = Field(default=3, ge=1, le=10_000)


class ProbeRestart(_Section):
    """SIGTERM the probe at inject, start it again at heal."""

    kind: Literal["probe-restart"]


class SinkStall(_Section):
    """Hold the Spark sink stage's batches (SIGUSR1 to the probe), resume at heal
    (SIGUSR2). The probe must run the sink stage (``stages: [consumer, sink]``)."""

    kind: Literal["sink-stall"]


class ProducerClockSkew(_Section):
    """The producing probe's clock runs ``offset`` ahead of the sink's (negative:
    behind): at inject the probe restarts with its clock shifted (libfaketime), at heal
    it restarts on the true clock. Skew is between processes: the sink must run in its
    own (``sink_process: own``), as the chart deploys it."""

    kind: Literal["producer-clock-skew"]
    offset: SignedDuration = 30.0  # `30s`, `-1m`; negative: behind

    @field_validator("offset")
    @classmethod
    def _not_zero(cls, offset: float) -> float:
        if offset == 0:
            raise ValueError("must not be 0 (how far the producer's clock is off)")
        return offset


# The group coordinator's APIs, by name (probe.gameday.faults.coordinator.CoordinatorApi).
CoordinatorApiName = Literal[
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "SyncGroup",
    "ConsumerGroupHeartbeat",
]
# The group stages, whose consumer group a fault may act on: the classic protocol's
# member, and the consumer protocol's (KIP-848).
GroupStageName = Literal["group", "group_consumer"]


class CoordinatorRequests(_Section):
    """The group coordinator's requests of ``apis`` delayed by ``delay``
    (``action: delay``) or never forwarded (``action: drop``: the client times out),
    by the Kafka-aware proxy in front of the coordinator (the embedded broker's, or on
    Apache Kafka that of the broker coordinating ``coordinator_of``'s group, asked of
    the cluster when the fault is injected); Fetch and Produce pass untouched. Only a
    group stage meets the coordinator: the probe must run that one."""

    kind: Literal["coordinator-requests"]
    coordinator_of: GroupStageName = "group"
    action: Literal["delay", "drop"] = "delay"
    apis: Annotated[tuple[CoordinatorApiName, ...], _each_once("an API")] = Field(
        default=("OffsetCommit",), min_length=1
    )
    # How late each request is forwarded; only with action: delay (default 2 s).
    delay: Duration | None = None

    @model_validator(mode="after")
    def _delay_fits(self) -> CoordinatorRequests:
        if self.action == "drop" and self.delay is not None:
            raise ValueError("fault.delay: only with action: delay (a dropped request never goes)")
        if self.action == "delay" and self.delay is None:
            return self.model_copy(update={"delay": 2.0})
        return self


class GroupMemberFlapping(_Section):
    """An extra member joins the probe's consumer group (``member_of``'s: the group
    stage's ``group.id`` or the derived one, or the group_consumer stage's) on the
    canary topic, is assigned partitions, and leaves again, never committing: two
    rebalances every ``period``, until healed. The probe must run that stage."""

    kind: Literal["group-member-flapping"]
    # Whose group: the group stage's (classic protocol, the member on aiokafka) or the
    # group_consumer stage's (consumer protocol, the member on librdkafka).
    member_of: GroupStageName = "group"
    # From one join to the next; a join slower than this is followed by the next at once.
    # A rebalance does not compress: the embedded broker holds every JoinGroup about
    # 5 s. At 10 s the extra member joined again before the probe's member had its
    # partitions back from the last leave, and held half of them, unread, through the
    # whole fault (measured: every group canary on them lost).
    period: Duration = 10.0


class ShareMemberStall(_Section):
    """A member of the probe's share group (the share stage's) that acquires records on
    the canary topic and freezes with them, never acknowledging, until healed: its
    locks run out and its session ends on Kafka's own clocks (30 s and 45 s by
    default), and its records are delivered again to the probe's member. The probe
    must run the share stage, on Apache Kafka (the embedded broker has no share
    groups)."""

    kind: Literal["share-member-stall"]


class TransactionLeftOpen(_Section):
    """A transaction on the canary topic, with a record on every partition, neither
    committed nor aborted until healed: the last stable offsets are pinned there. The
    probe must run the transactional stage."""

    kind: Literal["transaction-left-open"]


# --- Faults of the Apache Kafka cluster (``broker: apache-kafka``): node ids 1 to 3 ----

BrokerId = Annotated[int, Field(ge=1, le=3)]


class KafkaBrokerStop(_Section):
    """One broker down for the fault phase: ``controlled`` (SIGTERM, its leaderships
    moved away first) or ``kill`` (SIGKILL, a crash); started at heal, which returns
    once it is registered again."""

    kind: Literal["kafka-broker-stop"]
    broker: BrokerId = 3
    how: Literal["controlled", "kill"] = "controlled"
    # Instead of ``broker``: the broker coordinating that group stage's consumer group,
    # asked of the cluster when the fault is injected (which broker it is depends on
    # the group id and on where __consumer_offsets' leaders are).
    coordinator_of: Literal["group", "group_consumer", "transactional"] | None = None


class KafkaRollingRestart(_Section):
    """Each broker in turn: controlled stop, start, and wait until every canary
    partition (and ``__consumer_offsets``) has its full ISR again before the next.
    Runs through the fault phase; heal waits for the last broker to be in sync."""

    kind: Literal["kafka-rolling-restart"]
    # How long one broker may take to be back in every ISR.
    in_sync_timeout: Duration = 120.0


class KafkaBrokersDown(_Section):
    """These brokers stopped (controlled, one after the other), started at heal."""

    kind: Literal["kafka-brokers-down"]
    brokers: Annotated[tuple[BrokerId, ...], _each_once("a broker")] = Field(
        default=(2, 3), min_length=1, max_length=3
    )


class KafkaBrokerBlackhole(_Section):
    """The proxy in front of one broker's client listener forwards nothing: the probe
    is cut off from it, while the brokers still replicate (their own listener)."""

    kind: Literal["kafka-broker-blackhole"]
    broker: BrokerId = 2


class KafkaControllerKill(_Section):
    """SIGKILL the active KRaft controller (a combined node: its broker dies with it),
    start it again at heal."""

    kind: Literal["kafka-controller-kill"]


class KafkaUncleanElection(_Section):
    """The canary topic's only in-sync replica lost and a stale one elected in its
    place. inject: the topic's min.insync.replicas lowered to 1 (an operator keeping
    writes going; Kafka's default), every broker but ``broker`` stopped (controlled),
    ``broker`` left to acknowledge canaries alone for ``alone``, then killed, and the
    others started again: stale, they cannot lead, and the canary partitions are
    offline for the fault phase. heal: an unclean leader election of the canary
    partitions (KIP-460, as ``kafka-leader-election --election-type unclean``), which
    loses what ``broker`` acknowledged alone; ``broker`` started again (it truncates its
    log to the new leaders'), min.insync.replicas restored."""

    kind: Literal["kafka-unclean-election"]
    broker: BrokerId = 2
    alone: Duration = 15.0


class KafkaReassignment(_Section):
    """A partition reassignment in flight: every canary partition's leader replica
    moved to a broker that holds none of it (the topic needs fewer replicas than
    brokers: ``probe.kafka.replication_factor``), under a replication throttle that
    keeps the copies in flight through the fault phase while canaries are written.
    heal lifts the throttle and returns once every move is complete (the leaderships
    move to the new replicas then)."""

    kind: Literal["kafka-reassignment"]
    # Bytes per second each broker may replicate for the moves (`--throttle`). A new
    # replica catches up, joins the ISR and completes its move as soon as one of its
    # fetches finds nothing new; a broker over its quota leaves the throttled
    # partitions out of its fetches until the quota's 11 s window has passed. At 1 B/s
    # one round of canaries copied puts it over for the whole window, longer than
    # between two canaries (as a quota used up by the large partitions of a real
    # reassignment holds a small one back): the moves stay in flight until lifted. At
    # 100 B/s a canary round is under the quota and the moves completed early.
    throttle: int = Field(default=1, ge=1)
    # How long the moves may take to complete once the throttle is lifted.
    complete_timeout: Duration = 120.0


# --- Faults of the mirror (a probe with the mirror stage, on Apache Kafka): MirrorMaker 2
# between the probe's cluster and a target cluster of one broker, both the run's own ---


class MirrorStop(_Section):
    """MirrorMaker 2 stopped (SIGTERM: its tasks commit their offsets) for the fault
    phase, started again at heal: it copies on from the offsets it committed."""

    kind: Literal["mirror-stop"]


class MirrorStall(_Section):
    """MirrorMaker 2 frozen (SIGSTOP) for ``pause`` out of every ``every`` through the
    fault phase: a Connect worker starved of CPU or in long GC pauses. It replicates in
    bursts between its pauses, late, and loses nothing."""

    kind: Literal["mirror-stall"]
    pause: Duration = 3.0
    every: Duration = 5.0

    @model_validator(mode="after")
    def _pause_within_every(self) -> MirrorStall:
        if self.pause >= self.every:
            raise ValueError("fault.pause: must be shorter than fault.every")
        return self


class MirrorTopicRecreate(_Section):
    """The mirrored topic deleted on the target cluster at inject. MirrorMaker 2 finds
    it missing at its next topic refresh (every 2 s here), creates it again and copies
    on into it from its committed offsets: what it wrote before is gone with the old
    topic."""

    kind: Literal["mirror-topic-recreate"]


# --- Faults of tiered storage (a probe with tiered.enabled, on Apache Kafka): the cluster
# with KIP-405 on and LocalTieredStorage as its remote store ---


class TieredStoreUnreadable(_Section):
    """The remote store's files moved away from under the brokers for the fault phase
    (an object store that lost its bucket, or the brokers' access to it), and moved back
    at heal: every remote read fails meanwhile, while the brokers serve their local logs
    as before."""

    kind: Literal["tiered-store-unreadable"]


class ShellHooks(_Section):
    """Staging: the fault is whatever `staging.inject` and `staging.heal` do."""

    kind: Literal["hooks"]


Fault = Annotated[
    BrokerStop
    | BrokerDataLoss
    | ProxyLatency
    | ProxyBlackhole
    | SilentPartition
    | HostileRecords
    | ReplayedCanaries
    | ProbeRestart
    | SinkStall
    | ProducerClockSkew
    | CoordinatorRequests
    | GroupMemberFlapping
    | ShareMemberStall
    | TransactionLeftOpen
    | KafkaBrokerStop
    | KafkaRollingRestart
    | KafkaBrokersDown
    | KafkaBrokerBlackhole
    | KafkaControllerKill
    | KafkaUncleanElection
    | KafkaReassignment
    | MirrorStop
    | MirrorStall
    | MirrorTopicRecreate
    | TieredStoreUnreadable
    | ShellHooks,
    Field(discriminator="kind"),
]


# --- Expectations -----------------------------------------------------------------------


def _label_value(value: object) -> object:
    # YAML reads `partition: 1` as a number; label values are always text.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


LabelValue = Annotated[str, BeforeValidator(_label_value)]


class AlertMatcher(_Section):
    """An alert by name and some of its labels (``labels`` a subset of the alert's)."""

    alert: str = Field(min_length=1)
    labels: dict[str, LabelValue] = Field(default_factory=dict)

    def matches(self, labels: dict[str, str]) -> bool:
        return labels.get("alertname") == self.alert and all(
            labels.get(name) == value for name, value in self.labels.items()
        )


def _matcher(value: object) -> object:
    # `tolerate: [SyntheticSlaInvalidCanaries]`: a bare name matches every such alert.
    return {"alert": value} if isinstance(value, str) else value


class ExpectedAlert(AlertMatcher):
    """An alert that must fire."""

    # Production time from fault start to firing, checked on the replay.
    within: Duration | None = None
    # It must fire in the live run too (False: the live run cannot show it, e.g. a
    # `for: 5m` on a compressed run shorter than five minutes).
    live: bool = True


class Expectations(_Section):
    fire: tuple[ExpectedAlert, ...] = ()
    # These must not fire at all (names).
    forbid: tuple[str, ...] = ()
    # Every firing alert that `fire` and `tolerate` do not name is a false page.
    no_other_alerts: bool = True
    # Alerts that may fire without being a false page (e.g. a ticket a fault may cause).
    tolerate: tuple[Annotated[AlertMatcher, BeforeValidator(_matcher)], ...] = ()
    # Production time after recovery starts by which every alert has resolved.
    resolve_within: Duration | None = None
    # Canaries the probe may count `lost` (acknowledged, never arrived), every stage
    # together, read from its counters at the end of a local run (None: not checked).
    max_lost: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Expectations:
        for expected in self.fire:
            if expected.alert in self.forbid:
                raise ValueError(f"{expected.alert} is both expected and forbidden")
        return self


class Scenario(_Section):
    """One game day. See the module docstring for the file format."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    mode: Literal["local", "staging"] = "local"
    # The probe's configuration (the `--config` YAML), merged over LIVE_PROBE.
    probe: dict[str, Any] = Field(default_factory=dict)
    production: Production = Production()
    prometheus: LocalPrometheus = LocalPrometheus()
    phases: Phases = Phases()
    fault: Fault
    expect: Expectations = Expectations()
    staging: Staging | None = None
    # Slow scenarios run in `make gameday`, not in the tests.
    slow: bool = False
    # Local runs with the sink stage: inside `sla-probe run` (probe), or as its own
    # `sla-probe sink` process beside it (own), as the chart deploys it.
    sink_process: Literal["probe", "own"] = "probe"
    # The broker of a local run: the embedded Tansu broker behind one proxy, or Apache
    # Kafka's three KRaft nodes (`make kafka`), each behind a proxy of its own.
    broker: Literal["embedded", "apache-kafka"] = "embedded"

    @model_validator(mode="after")
    def _mode_fits(self) -> Scenario:
        if self.mode == "staging" and self.staging is None:
            raise ValueError("staging: required with mode: staging")
        if self.mode == "local" and self.fault.kind == "hooks":
            raise ValueError("fault.kind: hooks needs mode: staging")
        if self.mode == "staging" and self.fault.kind != "hooks":
            raise ValueError("fault.kind: a staging run injects with its hooks: use kind: hooks")
        if self.mode == "staging" and self.broker != "embedded":
            raise ValueError("broker: a staging run uses your brokers; broker is for mode: local")
        if self.mode == "staging" and self.expect.max_lost is not None:
            raise ValueError("expect.max_lost: needs mode: local (the probe's own counters)")
        needs = FAULT_BROKERS.get(self.fault.kind)
        if needs is not None and needs != self.broker:
            raise ValueError(
                f"fault.kind: {self.fault.kind} acts on the {_BROKER_NAMES[needs]}: "
                f"needs broker: {needs} (this scenario has broker: {self.broker})"
            )
        if self.expect.max_lost is not None and self.fault.kind in _RESTARTS_PROBE:
            raise ValueError(
                f"expect.max_lost: {self.fault.kind} restarts the probe, whose counters "
                "start again: its losses cannot be read at the end"
            )
        return self

    def probe_config(self) -> ProbeConfig:
        """The live probe's validated configuration (without broker and key file)."""
        return _probe_config(self.live_probe_tree())

    def live_probe_tree(self) -> dict[str, Any]:
        return _merge(LIVE_PROBE, self.probe)

    @property
    def live_interval(self) -> float:
        return self.probe_config().interval

    @property
    def time_factor(self) -> float:
        """Production seconds per live second."""
        return self.production.interval / self.live_interval


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _probe_config(tree: dict[str, Any]) -> ProbeConfig:
    try:
        return ProbeConfig.model_validate(tree)
    except ValidationError as exc:
        raise _first_error(exc, prefix=("probe",)) from None


def _first_error(error: ValidationError, prefix: tuple[str, ...] = ()) -> ConfigError:
    parts, message, first = first_problem(error)
    # A discriminated union puts the kind's tag in the path: fault.broker-stop.x -> fault.x
    loc = [*prefix, *(part for part in parts if not part.endswith("]"))]
    if len(loc) >= 2 and loc[0] == "fault" and loc[1] in _FAULT_KINDS:
        del loc[1]
    field = ".".join(loc) or "scenario"
    if first["type"] == "union_tag_invalid":
        message = f"unknown fault kind; one of {', '.join(sorted(_FAULT_KINDS))}"
    elif first["type"] == "union_tag_not_found":
        message = f"needs a kind: one of {', '.join(sorted(_FAULT_KINDS))}"
    # Model validators of a section report at the section; say which one.
    if message.startswith(
        (
            "staging: ",
            "fault.kind: ",
            "fault.delay: ",
            "fault.pause: ",
            "broker: ",
            "expect.max_lost: ",
        )
    ):
        field, _, message = message.partition(": ")
    return ConfigError(field, message)


# The fault kinds that act on one kind of broker only; every other kind runs on both
# (the proxy faults act on every proxy between the probe and its brokers).
FAULT_BROKERS: dict[str, str] = {
    "broker-stop": "embedded",
    "broker-data-loss": "embedded",
    # The Kafka-aware proxy of the embedded broker strips the partition's fetches.
    "silent-partition": "embedded",
    "kafka-broker-stop": "apache-kafka",
    "kafka-rolling-restart": "apache-kafka",
    "kafka-brokers-down": "apache-kafka",
    "kafka-broker-blackhole": "apache-kafka",
    "kafka-controller-kill": "apache-kafka",
    "kafka-unclean-election": "apache-kafka",
    "kafka-reassignment": "apache-kafka",
    # Share groups (KIP-932): the embedded broker has none.
    "share-member-stall": "apache-kafka",
    # Read with Apache Kafka's transactions; the embedded broker's are not probed.
    "transaction-left-open": "apache-kafka",
    # MirrorMaker 2 replicates between two Apache Kafka clusters.
    "mirror-stop": "apache-kafka",
    "mirror-stall": "apache-kafka",
    "mirror-topic-recreate": "apache-kafka",
}
_BROKER_NAMES = {"embedded": "embedded broker", "apache-kafka": "Apache Kafka cluster"}
_RESTARTS_PROBE = {"probe-restart", "producer-clock-skew"}
# The fault kinds only one stage meets: that stage must run (a consumer-group member
# for the coordinator's and the flapping member's, the share group's member, the
# read_committed reader, the Spark sink).
_NEEDS_STAGE = {
    "share-member-stall": StageName.SHARE,
    "transaction-left-open": StageName.TRANSACTIONAL,
    "sink-stall": StageName.SINK,
    "mirror-stop": StageName.MIRROR,
    "mirror-stall": StageName.MIRROR,
    "mirror-topic-recreate": StageName.MIRROR,
}

_FAULT_KINDS = {
    get_args(model.model_fields["kind"].annotation)[0] for model in get_args(get_args(Fault)[0])
}


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; raises ConfigError naming the field.

    >>> load_scenario(Path("scenarios/broker-stop.yaml")).fault.kind
    'broker-stop'
    """
    loaded = read_yaml_file(path)
    if not isinstance(loaded, dict):
        raise ConfigError("scenario", f"{path} must hold a mapping of settings")
    try:
        scenario = Scenario.model_validate(loaded)
    except ValidationError as exc:
        raise _first_error(exc) from None
    # The probe section is the probe's own configuration: validate it with the probe's
    # model now, so a bad interval is a bad scenario (exit 2), not a failed run.
    config = scenario.probe_config()
    needed = _NEEDS_STAGE.get(scenario.fault.kind)
    if needed is not None and needed not in config.stages:
        needs = f"fault kind {scenario.fault.kind} needs the {needed} stage"
        raise ConfigError("probe.stages", needs)
    for field in ("coordinator_of", "member_of"):
        of = getattr(scenario.fault, field, None)
        if of is not None and StageName(of) not in config.stages:
            raise ConfigError("probe.stages", f"fault.{field}: {of} needs the {of} stage")
    if StageName.MIRROR in config.stages and scenario.broker != "apache-kafka":
        raise ConfigError(
            "broker",
            "the mirror stage runs on MirrorMaker 2 between two Apache Kafka clusters: "
            "needs broker: apache-kafka",
        )
    if scenario.fault.kind == "sink-stall" and scenario.sink_process != "probe":
        raise ConfigError("sink_process", "fault kind sink-stall holds the sink in the probe")
    if scenario.sink_process == "own" and StageName.SINK not in config.stages:
        raise ConfigError("probe.stages", "sink_process: own needs the sink stage")
    if scenario.fault.kind == "producer-clock-skew" and scenario.sink_process != "own":
        raise ConfigError(
            "sink_process",
            "fault kind producer-clock-skew needs `own`: one process has one clock",
        )
    if scenario.mode == "local" and scenario.prometheus.rules_file is not None:
        rules = scenario.prometheus.rules_file
        if not rules.is_absolute():
            rules = path.parent / rules
        if not rules.is_file():
            raise ConfigError("prometheus.rules_file", f"{rules} is not a file")
        scenario = scenario.model_copy(
            update={"prometheus": scenario.prometheus.model_copy(update={"rules_file": rules})}
        )
    return scenario
