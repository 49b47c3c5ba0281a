"""Configuration: layers (YAML < environment < flags), durations, errors naming fields."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from probe.config import ProbeConfig, load, parse_duration
from probe.core.canary import Canary, decode, encode
from probe.core.errors import ConfigError
from probe.core.keys import KeyRing, generate_key_ring
from tests.conftest import SLA_PROBE


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20s", 20.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("1.5", 1.5), (3, 3.0)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["s", "20 s", "1m 30s", "abc", "20sec", "-"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("yaml_text", "overrides", "field"),
    [
        ("interval: 0s\n", {}, "interval"),
        ("kafka:\n  send_timeout: soon\n", {}, "kafka.send_timeout"),
        ("kafka:\n  partitions: 0\n", {}, "kafka.partitions"),
        ("kafka:\n  topik: x\n", {}, "kafka.topik"),
        ("judge:\n  freshness: 10s\n  loss_timeout: 5s\n", {}, "judge.loss_timeout"),
        ("kafka:\n  tls:\n    cert_file: c.pem\n", {}, "kafka.tls.key_file"),
        (
            "kafka:\n  sasl:\n    mechanism: GSSAPI\n    username: u\n    password: p\n",
            {},
            "kafka.sasl.mechanism",
        ),
        ("", {"metrics.port": 70000}, "metrics.port"),
        ("- a list\n", {}, "config"),
        ("interval: [unclosed\n", {}, "config"),
    ],
)
def test_errors_name_the_field(
    tmp_path: Path, yaml_text: str, overrides: dict[str, object], field: str
) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load(path, overrides)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_yaml_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(
        "interval: 30s\nkafka:\n  topic: from-file\n  sasl:\n"
        "    mechanism: SCRAM-SHA-512\n    username: u\n    password: secret\n"
    )
    config = load(path, {"kafka.topic": "from-flag"})
    assert config.interval == 30.0
    assert config.kafka.topic == "from-flag"
    assert config.kafka.sasl is not None
    assert config.kafka.sasl.mechanism == "SCRAM-SHA-512"
    assert "secret" not in repr(config)


def test_environment_sits_between_file_and_flags(tmp_path: Path) -> None:
    """SLA_PROBE_<FLAG> overrides the file; the flag overrides the environment."""
    path = tmp_path / "probe.yaml"
    path.write_text("once:\n  rounds: 1\n")
    base = [SLA_PROBE, "once", "--config", str(path), "--json"]
    env = {**os.environ, "SLA_PROBE_INTERVAL": "not-a-duration", "SLA_PROBE_EMBEDDED": "true"}
    from_env = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert from_env.returncode == 2
    assert "once.interval" in from_env.stderr
    flag_wins = subprocess.run(
        [*base, "--interval", "200ms"], env=env, capture_output=True, text=True, check=False
    )
    assert flag_wins.returncode == 0, flag_wins.stderr


def test_keygen_writes_a_private_key_file(tmp_path: Path) -> None:
    target = tmp_path / "ring.json"
    result = subprocess.run(
        [SLA_PROBE, "keygen", "--kid", "k2026", "--output", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert target.stat().st_mode & 0o777 == 0o600
    ring = KeyRing.from_json(target.read_text())
    assert ring.active_kid == "k2026"


@pytest.mark.parametrize(
    "example", sorted((Path(__file__).parents[2] / "docs" / "examples").glob("*.yaml")), ids=str
)
def test_shipped_example_configs_are_valid(example: Path) -> None:
    # A SASL password comes from the environment, never from a shipped file.
    environ = {"SLA_PROBE_KAFKA_SASL_PASSWORD": "from-the-environment"}
    config = load(example, environ=environ if "sasl:" in example.read_text() else None)
    assert config.kafka.bootstrap_servers


# --- Broker list: only an absent setting means "none given" ---------------------------


@pytest.mark.parametrize(
    ("servers", "normalized"),
    [
        ("kafka-0:9092", "kafka-0:9092"),
        (" kafka-0:9092 , kafka-1:9093 ", "kafka-0:9092,kafka-1:9093"),
        ("kafka", "kafka"),  # no port: the clients' default, 9092
        ("10.0.0.7:9092,[::1]:9093,[fe80::1]", "10.0.0.7:9092,[::1]:9093,[fe80::1]"),
    ],
)
def test_broker_lists(servers: str, normalized: str) -> None:
    assert load(overrides={"kafka.bootstrap_servers": servers}).kafka.bootstrap_servers == (
        normalized
    )


@pytest.mark.parametrize(
    ("servers", "words"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        (" , ", "is empty"),
        ("host:notaport", "port 'notaport' is not a number"),
        ("host:", "no port after ':'"),
        (":9092", "no host"),
        ("host:0", "outside 1..65535"),
        ("host:65536", "outside 1..65535"),
        ("host:-1", "not a number"),
        ("a:9092,,b:9092", "empty entry"),
        ("a:9092,", "empty entry"),
        ("a b:9092", "not a host name"),
        ("::1:9092", "IPv6 address goes in brackets"),
        ("[not-v6]:9092", "not an IPv6 address"),
        ("[::1]9092", "only :port may follow"),
    ],
)
def test_blank_or_malformed_broker_lists_name_the_field(servers: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"kafka.bootstrap_servers": servers})
    assert caught.value.field == "kafka.bootstrap_servers"
    assert words in caught.value.message
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("field", "name", "words"),
    [
        ("kafka.topic", "bad/topic", "characters Kafka refuses in a topic name ('/')"),
        ("kafka.topic", "with space", "(' ')"),
        ("kafka.topic", "..", "not a topic name Kafka accepts"),
        ("kafka.topic", ".", "not a topic name Kafka accepts"),
        ("kafka.topic", "t" * 250, "at most 249 characters"),
        ("mqtt.bridge.topic", "caf\u00e9", "characters Kafka refuses"),
    ],
)
def test_a_topic_name_kafka_would_refuse_names_the_field(field: str, name: str, words: str) -> None:
    # Checked before any broker is asked: the embedded broker takes names Kafka refuses.
    with pytest.raises(ConfigError) as caught:
        load(overrides={field: name})
    assert caught.value.field == field
    assert words in caught.value.message


def test_topic_names_kafka_accepts() -> None:
    name = "Sla.probe_canaries-1" + "x" * 229  # 249 characters
    assert load(overrides={"kafka.topic": name}).kafka.topic == name


def test_an_empty_broker_list_in_the_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text('kafka:\n  bootstrap_servers: ""\n')
    with pytest.raises(ConfigError, match=r"^kafka\.bootstrap_servers: is empty"):
        load(path)
    # Absent or null: no broker given (`once` then starts the embedded one).
    path.write_text("kafka:\n  bootstrap_servers: null\n")
    assert load(path).kafka.bootstrap_servers is None
    assert load().kafka.bootstrap_servers is None


# --- Durations: finite, within documented bounds ---------------------------------------


@pytest.mark.parametrize("name", ["heartbeat", "skew_threshold", "first_batch_timeout"])
def test_an_optional_duration_given_as_null_is_none_and_out_of_bounds_exits_2(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(f"sink:\n  {name}: null\n")
    assert getattr(load(path).sink, name) is None
    path.write_text(f"sink:\n  {name}: 48h\n")
    with pytest.raises(ConfigError, match=rf"^sink\.{name}: .*must be between"):
        load(path)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "infinity", "1" + "0" * 400 + "s"])
def test_durations_are_finite(text: str) -> None:
    with pytest.raises(ValueError, match="not a finite duration"):
        parse_duration(text)
    with pytest.raises(ValueError, match="not a finite duration"):
        parse_duration(float(text.removesuffix("s")))


# Every duration setting: (field, min, max, default). The bounds table of
# docs/configuration.md ("Broker list and limits") must say the same: it is checked below.
DURATION_BOUNDS = [
    ("interval", "1s", "1h", "20s"),
    ("once.interval", "100ms", "5m", "1s"),
    ("once.loss_timeout", "1s", "1h", "10s"),
    ("kafka.send_timeout", "100ms", "5m", "10s"),
    ("kafka.fetch_max_wait", "1ms", "10s", "auto"),
    ("judge.freshness", "10ms", "1h", "5s"),
    ("judge.loss_timeout", "1s", "24h", "60s"),
    ("metrics.latency_threshold", "1ms", "1h", "500ms"),
    ("mqtt.send_timeout", "100ms", "5m", "10s"),
    ("mqtt.keepalive", "1s", "65535s", "30s"),
    ("mqtt.session_expiry", "1s", "168h", "5m"),
    ("sink.trigger", "100ms", "1h", "2s"),
    ("sink.freshness", "10ms", "24h", "30s"),
    ("sink.latency_threshold", "1ms", "1h", "5s"),
    ("sink.allowed_lateness", "1s", "24h", "60s"),
    ("group.commit_latency_threshold", "1ms", "1m", "500ms"),
    ("group.fetch_max_wait", "1ms", "10s", "100ms"),
    ("transactions.timeout", "1s", "15m", "1m"),
    ("tiered.age", "1s", "720h", "1h"),
    ("tiered.every", "1s", "24h", "1m"),
    ("tiered.timeout", "1s", "10m", "30s"),
    ("tiered.threshold", "10ms", "10m", "5s"),
]


def _value(config: object, dotted: str) -> object:
    for name in dotted.split("."):
        config = getattr(config, name)
    return config


@pytest.mark.parametrize(("field", "low", "high", "default"), DURATION_BOUNDS)
def test_duration_bounds(field: str, low: str, high: str, default: str) -> None:
    # judge.loss_timeout must stay >= judge.freshness, whichever of the two is tried.
    others = {
        "judge.loss_timeout": {"judge.freshness": "10ms"},
        "judge.freshness": {"judge.loss_timeout": "24h"},
    }
    base: dict[str, object] = {**others.get(field, {})}
    # auto: the probe decides (held as None).
    expected = None if default == "auto" else parse_duration(default)
    assert _value(load(overrides=base), field) == expected
    for inside in (low, high):
        assert _value(load(overrides={**base, field: inside}), field) == parse_duration(inside)
    for outside in (parse_duration(low) * 0.99, parse_duration(high) * 1.01):
        with pytest.raises(ConfigError) as caught:
            load(overrides={**base, field: outside})
        assert caught.value.field == field
        assert f"must be between {low} and {high}" in caught.value.message


def test_the_configuration_page_documents_the_duration_bounds() -> None:
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `([a-z_.]+)` \| (\S+) \| (\S+) \| (\S+) \|$", page, re.MULTILINE)
    assert sorted(rows) == sorted(DURATION_BOUNDS)


def test_every_duration_setting_is_in_the_table() -> None:
    durations = {
        f"{section}.{name}" if section else name
        for section, model in _sections()
        for name, info in model.model_fields.items()
        if any(getattr(m, "func", None) is parse_duration for m in info.metadata)
    }
    # Optional durations (null: none) are not in the table, but for one that null
    # does not switch off: auto, the probe deciding.
    durations.add("kafka.fetch_max_wait")
    assert durations == {field for field, *_ in DURATION_BOUNDS}


def _sections() -> list[tuple[str, type[BaseModel]]]:
    found: list[tuple[str, type[BaseModel]]] = [("", ProbeConfig)]
    for name, info in ProbeConfig.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            found.append((name, info.annotation))
    return found


# --- Sections and duplicate keys in the file -------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "overrides", "field"),
    [
        ("kafka: null\n", {}, "kafka"),
        ("kafka: 5\n", {}, "kafka"),
        ("judge: [1, 2]\n", {}, "judge"),
        ("kafka:\n  tls: yes\n", {}, "kafka.tls"),
        # An override into a null section must not hide it.
        ("kafka: null\n", {"kafka.topic": "t"}, "kafka"),
        ("kafka:\n  tls: off\n", {"kafka.tls.ca_file": "ca.pem"}, "kafka.tls"),
    ],
)
def test_a_section_must_be_a_mapping(
    tmp_path: Path, yaml_text: str, overrides: dict[str, object], field: str
) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load(path, overrides)
    assert caught.value.field == field
    assert caught.value.message.startswith("must be a mapping of settings")
    assert "Config" not in caught.value.message  # no pydantic model names


@pytest.mark.parametrize(
    ("yaml_text", "field", "lines"),
    [
        ("interval: 20s\nkafka:\n  topic: a\ninterval: 2s\n", "interval", "lines 1 and 4"),
        ("kafka:\n  topic: a\n  create_topic: true\n  topic: b\n", "kafka.topic", "lines 2 and 4"),
        ("kafka:\n  topic: a\nkafka:\n  create_topic: true\n", "kafka", "lines 1 and 3"),
        ("mqtt:\n  bridge: {topic: a, topic: b}\n", "mqtt.bridge.topic", "lines 2 and 2"),
    ],
)
def test_a_key_given_twice_is_an_error(
    tmp_path: Path, yaml_text: str, field: str, lines: str
) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.field == field
    assert caught.value.message == f"given twice in {path} ({lines})"


def test_merge_keys_may_override(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text("kafka: &k\n  send_timeout: 2s\nmqtt:\n  <<: *k\n  send_timeout: 3s\n")
    config = load(path)  # a key beside `<<` overrides the merged one: no duplicate
    assert (config.kafka.send_timeout, config.mqtt.send_timeout) == (2.0, 3.0)


# --- Own canaries must pass the size check of every stage -------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"canary.size": 5000, "canary.max_size": 4096}, "canary.size", "above canary.max_size"),
        ({"canary.size": 1_000_000}, None, None),  # below the default max_size: fine
        ({"canary.size": 4096, "canary.max_size": 4096}, None, None),  # exactly max_size
        # Unpadded, this probe's canaries are bigger than max_size.
        ({"canary.max_size": 256, "probe_id": "p" * 200}, "canary.max_size", "own canaries"),
        ({"probe_id": "é" * 200}, "probe_id", "at most 255"),
        ({"target": "t" * 250 + "ü" * 5}, "target", "at most 255"),
    ],
)
def test_own_canaries_must_pass_the_size_check(
    overrides: dict[str, object], field: str | None, words: str | None
) -> None:
    if field is None:
        load(overrides=overrides)
        return
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides)
    assert caught.value.field == field
    assert words is not None
    assert words in caught.value.message


def test_padded_canaries_at_max_size_are_accepted() -> None:
    config = load(overrides={"canary.size": 300, "canary.max_size": 300, "probe_id": "p" * 100})
    ring = generate_key_ring("k" * 32)
    canary = Canary(
        config.probe_id, 1, config.target, 0, 1, 1, "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    )
    record = encode(canary, ring, pad_to=config.canary.size)
    assert len(record) == config.canary.max_size
    assert decode(record, ring, max_size=config.canary.max_size) == canary
