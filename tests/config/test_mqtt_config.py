"""MQTT configuration: the URL, security, stages, which targets are probed, the report."""

from __future__ import annotations

import pytest

from probe.config import load, parse_mqtt_url
from probe.core.errors import ConfigError
from probe.core.judge import Fate, Outcome, StreamKey
from probe.services.report import Report, Tally

URL = {"mqtt.url": "mqtt://broker:1883"}
BRIDGE = {**URL, "mqtt.bridge.topic": "edge", "kafka.bootstrap_servers": "k:9092"}


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("mqtt://broker", ("mqtt", "broker", 1883)),
        ("mqtts://broker", ("mqtts", "broker", 8883)),
        ("mqtt://10.0.0.7:1884/", ("mqtt", "10.0.0.7", 1884)),
    ],
)
def test_mqtt_urls(url: str, parsed: tuple[str, str, int]) -> None:
    assert parse_mqtt_url(url) == parsed


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"mqtt.url": "tcp://broker:1883"}, "mqtt.url", "use mqtt://"),
        ({"mqtt.url": "mqtt://probe:secret@broker"}, "mqtt.url", "credentials"),
        ({"mqtt.url": "mqtt://broker:99999"}, "mqtt.url", "bad port"),
        ({"mqtt.url": "mqtt://broker/topic"}, "mqtt.url", "only a scheme"),
        ({**URL, "mqtt.qos": 3}, "mqtt.qos", "0, 1 or 2"),
        ({**URL, "mqtt.shards": 0}, "mqtt.shards", "greater than or equal to 1"),
        ({**URL, "mqtt.protocol": "4"}, "mqtt.protocol", "'5' or '3.1.1'"),
        ({**URL, "mqtt.topic_prefix": "sla/#"}, "mqtt.topic_prefix", "wildcards"),
        ({**URL, "mqtt.tls.ca_file": "ca.pem"}, "mqtt.tls", "mqtts://"),
        ({**URL, "mqtt.password": "secret"}, "mqtt.password", "mqtt.username"),
        ({**URL, "mqtt.stages": "mqtt,bridge"}, "mqtt.stages", "mqtt.bridge.topic"),
        ({**URL, "mqtt.stages": "mqtt,sink"}, "mqtt.stages.1", "'mqtt' or 'bridge'"),
        ({**URL, "mqtt.stages": ""}, "mqtt.stages", "at least one"),
        ({**URL, "targets": "kafka,redis"}, "targets", "known: kafka, mqtt"),
        ({"targets": "mqtt"}, "targets", "mqtt.url"),
        ({**BRIDGE, "kafka.bootstrap_servers": None}, "kafka.bootstrap_servers", "bridge"),
        ({**URL, "targets": "kafka,mqtt", "mqtt.target": "kafka"}, "mqtt.target", "differ"),
        # A blank broker list is an error, not "no bridge Kafka given".
        ({**BRIDGE, "kafka.bootstrap_servers": " "}, "kafka.bootstrap_servers", "is empty"),
        ({**URL, "mqtt.keepalive": "inf"}, "mqtt.keepalive", "not a finite duration"),
        ({**URL, "mqtt.keepalive": "20h"}, "mqtt.keepalive", "between 1s and 65535s"),
        ({**URL, "mqtt.send_timeout": "nan"}, "mqtt.send_timeout", "not a finite duration"),
        ({**URL, "mqtt.max_send_rate": "inf"}, "mqtt.max_send_rate", "finite number"),
        ({**URL, "mqtt.max_send_rate": "nan"}, "mqtt.max_send_rate", "finite number"),
        ({**URL, "mqtt.target": "ü" * 200}, "mqtt.target", "at most 255"),
        ({**URL, "mqtt.bridge": "edge"}, "mqtt.bridge", "must be a mapping of settings"),
    ],
)
def test_errors_name_the_field(overrides: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides)
    assert caught.value.field == field
    assert words in caught.value.message
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "targets"),
    [
        ({}, ("kafka",)),  # `once` on the embedded broker, as ever
        ({"kafka.bootstrap_servers": "k:9092"}, ("kafka",)),
        (URL, ("mqtt",)),  # only MQTT given: only MQTT probed
        ({**URL, "kafka.bootstrap_servers": "k:9092"}, ("kafka", "mqtt")),
        (BRIDGE, ("kafka", "mqtt")),
        ({**BRIDGE, "targets": ["mqtt"]}, ("mqtt",)),  # Kafka only read, by the bridge
        ({**URL, "targets": "mqtt,kafka,mqtt"}, ("mqtt", "kafka")),
    ],
)
def test_which_targets_are_probed(overrides: dict[str, object], targets: tuple[str, ...]) -> None:
    assert load(overrides=overrides).targets == targets


def test_defaults_and_stages() -> None:
    mqtt = load(overrides=URL).mqtt
    assert (mqtt.target, mqtt.topic_prefix, mqtt.shards, mqtt.qos, mqtt.protocol) == (
        "mqtt", "synthetic-sla", 3, 1, "5",
    )  # fmt: skip
    assert mqtt.stages == ("mqtt",)
    assert not mqtt.persistent_session
    assert load(overrides=BRIDGE).mqtt.stages == ("mqtt", "bridge")
    assert load(overrides={**BRIDGE, "mqtt.stages": "bridge"}).mqtt.stages == ("bridge",)
    # YAML reads `protocol: 5` as a number; flags and the environment give text.
    assert load(overrides={**URL, "mqtt.protocol": 5}).mqtt.protocol == "5"
    assert load(overrides={**URL, "mqtt.qos": "2"}).mqtt.qos == 2


def test_password_is_secret() -> None:
    config = load(overrides={**URL, "mqtt.username": "probe", "mqtt.password": "hunter2"})
    assert config.mqtt.password is not None
    assert config.mqtt.password.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(config)


def test_several_targets_report_each_and_one_verdict() -> None:
    kafka, mqtt = Tally("kafka"), Tally("edge")
    kafka.count("kafka", "consumer", [Fate(StreamKey("p", "kafka", 0), 0, Outcome.DELIVERED, 1)])
    mqtt.count("edge", "mqtt", [Fate(StreamKey("p", "edge", 0), 0, Outcome.LOST, None)])
    report = Report([kafka, mqtt])
    assert not report.ok
    assert report.as_dict()["ok"] is False
    targets = report.as_dict()["targets"]
    assert isinstance(targets, list)
    assert [target["target"] for target in targets] == ["kafka", "edge"]
    table = report.to_table()
    assert table.count("result:") == 1
    assert table.endswith("result: FAIL")
    assert "target kafka" in table
    assert "target edge" in table
    # One target's table is its own; its JSON has the shape of many (version 1).
    assert Report([kafka]).to_table() == kafka.to_table()
    assert Report([kafka]).as_dict() == {"version": 1, "ok": True, "targets": [kafka.as_dict()]}
