"""Secrets (the Kafka SASL password, the MQTT password): from exactly one of the
config, a file or the environment; a bad file or two sources exit 2 naming the field;
never shown in a repr, a dump or an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.config import ProbeConfig, load
from probe.core.errors import ConfigError
from tests.test_cli import assert_config_error, sla_probe

SECRET = "pa55-w0rd-not-for-logs"
SASL = {"kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "probe"}
MQTT = {"mqtt.url": "mqtt://127.0.0.1:1883", "mqtt.username": "probe"}
KAFKA_VARIABLE = "SLA_PROBE_KAFKA_SASL_PASSWORD"
MQTT_VARIABLE = "SLA_PROBE_MQTT_PASSWORD"


def _secret_file(tmp_path: Path, text: str = SECRET + "\n") -> Path:
    path = tmp_path / "password"
    path.write_text(text)
    return path


def _kafka_password(config: ProbeConfig) -> str:
    assert config.kafka.sasl is not None
    return config.kafka.sasl.password_value()


def _assert_hidden(config: ProbeConfig) -> None:
    for shown in (repr(config), str(config), config.model_dump_json(), str(config.model_dump())):
        assert SECRET not in shown


# -- each source ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["inline", "file", "environment"])
def test_the_sasl_password_from_each_source(tmp_path: Path, source: str) -> None:
    overrides: dict[str, object] = dict(SASL)
    environ = {}
    if source == "inline":
        overrides["kafka.sasl.password"] = SECRET
    elif source == "file":
        overrides["kafka.sasl.password_file"] = str(_secret_file(tmp_path))
    else:
        environ[KAFKA_VARIABLE] = SECRET
    config = load(overrides=overrides, environ=environ)
    assert _kafka_password(config) == SECRET
    _assert_hidden(config)


@pytest.mark.parametrize("source", ["inline", "file", "environment"])
def test_the_mqtt_password_from_each_source(tmp_path: Path, source: str) -> None:
    overrides: dict[str, object] = dict(MQTT)
    environ = {}
    if source == "inline":
        overrides["mqtt.password"] = SECRET
    elif source == "file":
        overrides["mqtt.password_file"] = str(_secret_file(tmp_path))
    else:
        environ[MQTT_VARIABLE] = SECRET
    config = load(overrides=overrides, environ=environ)
    assert config.mqtt.password_value() == SECRET
    _assert_hidden(config)


def test_no_mqtt_password_is_none() -> None:
    assert load(overrides=MQTT).mqtt.password_value() is None


@pytest.mark.parametrize(
    ("text", "password"),
    [
        (SECRET + "\n", SECRET),
        (SECRET + "\r\n", SECRET),
        (SECRET, SECRET),
        # Only the line end goes: spaces may be part of a password.
        (" " + SECRET + " \n", " " + SECRET + " "),
    ],
)
def test_a_password_file_loses_its_trailing_newline(
    tmp_path: Path, text: str, password: str
) -> None:
    path = _secret_file(tmp_path, text)
    config = load(overrides={**SASL, "kafka.sasl.password_file": str(path)})
    assert _kafka_password(config) == password


def test_a_password_file_is_read_when_a_client_asks(tmp_path: Path) -> None:
    """Rotated in place (a Secret's volume updates), the next client made gets the new one."""
    path = _secret_file(tmp_path)
    config = load(overrides={**SASL, "kafka.sasl.password_file": str(path)})
    path.write_text("rotated\n")
    assert _kafka_password(config) == "rotated"
    path.unlink()
    with pytest.raises(ConfigError) as caught:
        _kafka_password(config)
    assert caught.value.field == "kafka.sasl.password_file"


# -- two sources, none, bad files -----------------------------------------------------------


def _sources(
    tmp_path: Path, section: str, given: tuple[str, ...]
) -> tuple[dict[str, object], dict[str, str]]:
    overrides: dict[str, object] = dict(SASL if section == "kafka.sasl" else MQTT)
    environ: dict[str, str] = {}
    for source in given:
        if source == "inline":
            overrides[f"{section}.password"] = SECRET
        elif source == "file":
            overrides[f"{section}.password_file"] = str(_secret_file(tmp_path))
        else:
            environ[KAFKA_VARIABLE if section == "kafka.sasl" else MQTT_VARIABLE] = SECRET
    return overrides, environ


@pytest.mark.parametrize(
    ("section", "given", "field"),
    [
        ("kafka.sasl", ("inline", "file"), "kafka.sasl.password_file"),
        ("kafka.sasl", ("inline", "environment"), "kafka.sasl.password"),
        ("kafka.sasl", ("file", "environment"), "kafka.sasl.password"),
        ("kafka.sasl", (), "kafka.sasl.password_file"),
        ("mqtt", ("inline", "file"), "mqtt.password_file"),
        ("mqtt", ("inline", "environment"), "mqtt.password"),
        ("mqtt", ("file", "environment"), "mqtt.password"),
    ],
)
def test_one_source_only(tmp_path: Path, section: str, given: tuple[str, ...], field: str) -> None:
    overrides, environ = _sources(tmp_path, section, given)
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides, environ=environ)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        ("", "is empty"),
        ("\n", "is empty"),
        (b"\xff\xfe\x00", "not UTF-8"),
        ("directory", "cannot read"),
    ],
)
@pytest.mark.parametrize("section", ["kafka.sasl", "mqtt"])
def test_a_bad_password_file_names_the_field(
    tmp_path: Path, section: str, content: str | bytes | None, words: str
) -> None:
    path = tmp_path / "password"
    if content == "directory":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    overrides = {
        **(SASL if section == "kafka.sasl" else MQTT),
        f"{section}.password_file": str(path),
    }
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides)
    assert caught.value.field == f"{section}.password_file"
    assert words in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "environ", "field", "words"),
    [
        # The variable fills a section the file must still have (mechanism, user).
        ({}, {KAFKA_VARIABLE: SECRET}, "kafka.sasl", "no kafka.sasl section"),
        (SASL, {KAFKA_VARIABLE: ""}, "kafka.sasl.password", "set but empty"),
        (MQTT, {MQTT_VARIABLE: ""}, "mqtt.password", "set but empty"),
        ({"mqtt.url": "mqtt://127.0.0.1"}, {MQTT_VARIABLE: SECRET}, "mqtt.password", "username"),
        (
            {"mqtt.url": "mqtt://127.0.0.1", "mqtt.password_file": "/nonexistent"},
            {},
            "mqtt.password_file",
            "username",
        ),
    ],
)
def test_environment_mistakes_name_the_field(
    overrides: dict[str, object], environ: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        load(overrides=overrides, environ=environ)
    assert caught.value.field == field


# -- through the command line ----------------------------------------------------------------


def test_two_sources_exit_2_in_one_line_without_the_password(tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(
        "kafka:\n  bootstrap_servers: 127.0.0.1:1\n  sasl:\n    mechanism: PLAIN\n"
        f"    username: probe\n    password_file: {_secret_file(tmp_path)}\n"
    )
    result = sla_probe("once", "--config", str(config), env={KAFKA_VARIABLE: SECRET})
    line = assert_config_error(result, "kafka.sasl.password")
    assert KAFKA_VARIABLE in line
    assert SECRET not in result.stdout + result.stderr


def test_a_missing_password_file_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(
        "mqtt:\n  url: mqtt://127.0.0.1:1\n  username: probe\n"
        f"  password_file: {tmp_path / 'absent'}\n"
    )
    assert_config_error(sla_probe("once", "--config", str(config)), "mqtt.password_file")


def test_no_password_flag() -> None:
    """A flag's value shows in ps: the MQTT password has no flag, only its variable."""
    result = sla_probe("once", "--mqtt-password", SECRET)
    assert result.returncode == 2
    assert "No such option" in result.stderr
