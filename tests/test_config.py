"""Configuration: layers (YAML < environment < flags), durations, errors naming fields."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from probe.config import load, parse_duration
from probe.errors import ConfigError
from probe.keys import KeyRing
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
    env = {**os.environ, "SLA_PROBE_INTERVAL": "not-a-duration"}
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
    "scenario", sorted((Path(__file__).parents[1] / "scenarios").glob("*.yaml")), ids=str
)
def test_shipped_scenarios_are_valid(scenario: Path) -> None:
    config = load(scenario)
    assert config.kafka.bootstrap_servers
