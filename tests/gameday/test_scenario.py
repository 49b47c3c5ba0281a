"""The scenario file: valid files load, every bad one is one error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.core.errors import ConfigError
from probe.gameday.scenario import load_scenario

MINIMAL = "name: outage\nfault: {kind: broker-stop}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_a_minimal_scenario_gets_the_live_defaults(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, MINIMAL))
    assert scenario.mode == "local"
    assert scenario.fault.kind == "broker-stop"
    assert (scenario.phases.steady, scenario.phases.fault, scenario.phases.recovery) == (
        15.0,
        20.0,
        30.0,
    )
    config = scenario.probe_config()
    assert config.interval == 1.0
    assert config.judge.loss_timeout == 3.0
    assert config.kafka.create_topic
    # 20 s in production per 1 s live.
    assert scenario.time_factor == 20.0


def test_expectations_and_probe_settings(tmp_path: Path) -> None:
    scenario = load_scenario(
        _write(
            tmp_path,
            """
name: silent-partition
probe: {interval: 2s, kafka: {partitions: 4}}
production: {interval: 30s}
phases: {steady: 10s, fault: 40s, recovery: 1m}
fault: {kind: silent-partition, partition: 2}
expect:
  fire:
    - alert: SyntheticSlaPartitionSilent
      labels: {partition: 2, stage: consumer}
      within: 2m
      live: false
  forbid: [SyntheticSlaProbeDown]
  tolerate: [SyntheticSlaInvalidCanaries]
  resolve_within: 10m
""",
        )
    )
    (expected,) = scenario.expect.fire
    assert expected.labels == {"partition": "2", "stage": "consumer"}
    assert expected.within == 120.0
    assert not expected.live
    assert expected.matches(
        {"alertname": "SyntheticSlaPartitionSilent", "partition": "2", "stage": "consumer"}
    )
    assert not expected.matches({"alertname": "SyntheticSlaPartitionSilent", "partition": "1"})
    assert scenario.expect.resolve_within == 600.0
    assert scenario.probe_config().kafka.partitions == 4
    assert scenario.time_factor == 15.0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("name: x\n", "fault: Field required"),
        ("name: x\nfault: {kind: nope}\n", "fault: unknown fault kind; one of broker-data-loss"),
        ("name: x\nfault: {}\n", "fault: needs a kind"),
        ("name: x\nfault: {kind: proxy-latency, delay: soon}\n", "fault.delay: not a duration"),
        ("name: x\nfault: {kind: hostile-records, random: -1}\n", "fault.random: Input should be"),
        (MINIMAL + "phases: {fault: 0s}\n", "phases.fault: must be > 0"),
        (MINIMAL + "phases: {stedy: 1s}\n", "phases.stedy: unknown setting"),
        (MINIMAL + "probe: {interval: 1ms}\n", "probe.interval: must be between 1s and 1h"),
        (MINIMAL + "probe: {kafka: {topik: x}}\n", "probe.kafka.topik: unknown setting"),
        (MINIMAL + "expect: {fire: [{labels: {}}]}\n", "expect.fire.0.alert: Field required"),
        (
            MINIMAL + "expect: {fire: [{alert: A}], forbid: [A]}\n",
            "expect: A is both expected and forbidden",
        ),
        (MINIMAL + "mode: staging\n", "staging: required with mode: staging"),
        ("name: x\nfault: {kind: hooks}\n", "fault.kind: hooks needs mode: staging"),
        (MINIMAL + "name: y\n", "name: given twice"),
        ("- a list\n", "scenario: "),
        ("name: Bad Name\nfault: {kind: broker-stop}\n", "name: String should match"),
        (
            "name: x\nmode: staging\nfault: {kind: hooks}\n"
            "staging: {inject: {command: a}, heal: {command: b}}\n",
            "staging: give exactly one of prometheus_url and alertmanager_url",
        ),
        (
            "name: x\nfault: {kind: sink-stall}\n",
            "probe.stages: fault kind sink-stall needs the sink stage",
        ),
        (
            "name: x\nfault: {kind: producer-clock-skew, offset: 0s}\n",
            "fault.offset: must not be 0",
        ),
        (
            "name: x\nfault: {kind: producer-clock-skew, offset: -1m}\n"
            "probe: {stages: [consumer, sink]}\n",
            "sink_process: fault kind producer-clock-skew needs `own`",
        ),
        (
            "name: x\nfault: {kind: broker-stop}\nsink_process: own\n",
            "probe.stages: sink_process: own needs the sink stage",
        ),
        (
            "name: x\nfault: {kind: sink-stall}\nsink_process: own\n"
            "probe: {stages: [consumer, sink]}\n",
            "sink_process: fault kind sink-stall holds the sink in the probe",
        ),
        (
            "name: x\nfault: {kind: coordinator-requests}\n",
            "probe.stages: fault.coordinator_of: group needs the group stage",
        ),
        (
            "name: x\nfault: {kind: group-member-flapping}\n",
            "probe.stages: fault.member_of: group needs the group stage",
        ),
        (
            "name: x\nbroker: apache-kafka\nprobe: {stages: [consumer, group]}\n"
            "fault: {kind: group-member-flapping, member_of: group_consumer}\n",
            "probe.stages: fault.member_of: group_consumer needs the group_consumer stage",
        ),
        (
            "name: x\nprobe: {stages: [consumer, group]}\n"
            "fault: {kind: group-member-flapping, period: 0s}\n",
            "fault.period: must be > 0",
        ),
        (
            "name: x\nfault: {kind: coordinator-requests, action: drop, delay: 1s}\n"
            "probe: {stages: [consumer, group]}\n",
            "fault.delay: only with action: delay",
        ),
        (
            "name: x\nfault: {kind: coordinator-requests, apis: [Fetch]}\n",
            "fault.apis.0: Input should be 'OffsetCommit', 'OffsetFetch'",
        ),
        (
            "name: x\nfault: {kind: coordinator-requests, apis: [Heartbeat, Heartbeat]}\n",
            "fault.apis: an API named twice",
        ),
        (
            "name: x\nfault: {kind: coordinator-requests, action: stall}\n",
            "fault.action: Input should be 'delay' or 'drop'",
        ),
        # The broker of a local run, and the faults that need one kind of broker.
        (MINIMAL + "broker: kafka\n", "broker: Input should be 'embedded' or 'apache-kafka'"),
        (
            "name: x\nfault: {kind: kafka-broker-stop}\n",
            "fault.kind: kafka-broker-stop acts on the Apache Kafka cluster: needs broker: "
            "apache-kafka (this scenario has broker: embedded)",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: broker-stop}\n",
            "fault.kind: broker-stop acts on the embedded broker: needs broker: embedded",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: broker-data-loss}\n",
            "fault.kind: broker-data-loss acts on the embedded broker",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: silent-partition}\n",
            "fault.kind: silent-partition acts on the embedded broker",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-stop, broker: 4}\n",
            "fault.broker: Input should be less than or equal to 3",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-stop, how: crash}\n",
            "fault.how: Input should be 'controlled' or 'kill'",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-stop, "
            "coordinator_of: group_consumer}\nprobe: {stages: [consumer, group]}\n",
            "probe.stages: fault.coordinator_of: group_consumer needs the group_consumer stage",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-stop, "
            "coordinator_of: mqtt}\n",
            "fault.coordinator_of: Input should be 'group', 'group_consumer' or 'transactional'",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-brokers-down, brokers: [2, 2]}\n",
            "fault.brokers: a broker named twice",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-brokers-down, brokers: []}\n",
            "fault.brokers: Tuple should have at least 1 item",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-blackhole, broker: 0}\n",
            "fault.broker: Input should be greater than or equal to 1",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-controller-kill, broker: 1}\n",
            "fault.broker: unknown setting",
        ),
        (
            "name: x\nfault: {kind: kafka-unclean-election}\n",
            "fault.kind: kafka-unclean-election acts on the Apache Kafka cluster",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-unclean-election, broker: 4}\n",
            "fault.broker: Input should be less than or equal to 3",
        ),
        (
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-reassignment, throttle: 0}\n",
            "fault.throttle: Input should be greater than or equal to 1",
        ),
        (
            "name: x\nmode: staging\nbroker: apache-kafka\nfault: {kind: hooks}\n"
            "staging: {prometheus_url: http://p, inject: {command: a}, heal: {command: b}}\n",
            "broker: a staging run uses your brokers; broker is for mode: local",
        ),
        (MINIMAL + "expect: {max_lost: -1}\n", "expect.max_lost: Input should be greater than"),
        (
            "name: x\nfault: {kind: probe-restart}\nexpect: {max_lost: 0}\n",
            "expect.max_lost: probe-restart restarts the probe, whose counters start again",
        ),
        (
            "name: x\nmode: staging\nfault: {kind: hooks}\nexpect: {max_lost: 0}\n"
            "staging: {prometheus_url: http://p, inject: {command: a}, heal: {command: b}}\n",
            "expect.max_lost: needs mode: local",
        ),
    ],
)
def test_a_bad_scenario_is_one_error_naming_the_field(
    tmp_path: Path, text: str, error: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_scenario(_write(tmp_path, text))
    assert str(raised.value).startswith(error), str(raised.value)


def test_a_missing_rules_file_is_a_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL + "prometheus: {rules_file: nowhere.yml}\n")
    with pytest.raises(ConfigError, match=r"^prometheus.rules_file: .*nowhere.yml is not a file"):
        load_scenario(path)


def test_the_broker_is_embedded_unless_the_scenario_says_apache_kafka(tmp_path: Path) -> None:
    assert load_scenario(_write(tmp_path, MINIMAL)).broker == "embedded"
    assert load_scenario(_write(tmp_path, MINIMAL)).expect.max_lost is None
    scenario = load_scenario(
        _write(
            tmp_path,
            "name: x\nbroker: apache-kafka\nfault: {kind: kafka-broker-stop}\n"
            "expect: {max_lost: 0}\n",
        )
    )
    assert scenario.broker == "apache-kafka"
    assert scenario.expect.max_lost == 0


@pytest.mark.parametrize(
    ("fault", "settings"),
    [
        (
            "{kind: kafka-broker-stop}",
            {"broker": 3, "how": "controlled", "coordinator_of": None},
        ),
        (
            "{kind: kafka-broker-stop, broker: 1, how: kill}",
            {"broker": 1, "how": "kill", "coordinator_of": None},
        ),
        ("{kind: kafka-rolling-restart}", {"in_sync_timeout": 120.0}),
        ("{kind: kafka-rolling-restart, in_sync_timeout: 1m}", {"in_sync_timeout": 60.0}),
        ("{kind: kafka-brokers-down}", {"brokers": (2, 3)}),
        ("{kind: kafka-brokers-down, brokers: [1]}", {"brokers": (1,)}),
        ("{kind: kafka-broker-blackhole}", {"broker": 2}),
        ("{kind: kafka-controller-kill}", {}),
        ("{kind: kafka-unclean-election}", {"broker": 2, "alone": 15.0}),
        ("{kind: kafka-unclean-election, broker: 3, alone: 1m}", {"broker": 3, "alone": 60.0}),
        ("{kind: kafka-reassignment}", {"throttle": 1, "complete_timeout": 120.0}),
        (
            "{kind: kafka-reassignment, throttle: 5, complete_timeout: 1m}",
            {"throttle": 5, "complete_timeout": 60.0},
        ),
    ],
)
def test_the_cluster_faults_and_their_defaults(
    tmp_path: Path, fault: str, settings: dict[str, object]
) -> None:
    scenario = load_scenario(_write(tmp_path, f"name: x\nbroker: apache-kafka\nfault: {fault}\n"))
    assert scenario.fault.model_dump(exclude={"kind"}) == settings


@pytest.mark.parametrize(
    "kind", ["proxy-latency", "proxy-blackhole", "hostile-records", "probe-restart"]
)
def test_the_faults_of_any_broker_run_on_the_cluster_too(tmp_path: Path, kind: str) -> None:
    scenario = load_scenario(
        _write(tmp_path, f"name: x\nbroker: apache-kafka\nfault: {{kind: {kind}}}\n")
    )
    assert scenario.fault.kind == kind


@pytest.mark.parametrize(
    ("fault", "settings"),
    [
        (
            "{kind: coordinator-requests}",
            {"action": "delay", "apis": ("OffsetCommit",), "delay": 2.0, "coordinator_of": "group"},
        ),
        (
            "{kind: coordinator-requests, coordinator_of: group_consumer,"
            " apis: [OffsetCommit, ConsumerGroupHeartbeat]}",
            {
                "apis": ("OffsetCommit", "ConsumerGroupHeartbeat"),
                "coordinator_of": "group_consumer",
            },
        ),
        (
            "{kind: coordinator-requests, delay: 500ms, apis: [OffsetCommit, Heartbeat]}",
            {"action": "delay", "apis": ("OffsetCommit", "Heartbeat"), "delay": 0.5},
        ),
        (
            "{kind: coordinator-requests, action: drop, apis: [FindCoordinator, JoinGroup]}",
            {"action": "drop", "apis": ("FindCoordinator", "JoinGroup"), "delay": None},
        ),
        ("{kind: group-member-flapping}", {"period": 10.0, "member_of": "group"}),
        (
            "{kind: group-member-flapping, member_of: group_consumer}",
            {"member_of": "group_consumer"},
        ),
        ("{kind: group-member-flapping, period: 2s}", {"period": 2.0}),
    ],
)
def test_the_group_faults_and_their_defaults(
    tmp_path: Path, fault: str, settings: dict[str, object]
) -> None:
    stages = "[consumer, group, group_consumer]"
    scenario = load_scenario(
        _write(tmp_path, f"name: x\nprobe: {{stages: {stages}}}\nfault: {fault}\n")
    )
    dump = scenario.fault.model_dump(exclude={"kind"})
    assert {name: dump[name] for name in settings} == settings
