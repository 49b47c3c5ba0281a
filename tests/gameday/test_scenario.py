"""The scenario file: valid files load, every bad one is one error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.errors import ConfigError
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
