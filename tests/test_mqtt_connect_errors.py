"""A connection to an MQTT broker that fails is named in one line with the setting to
change (probe.transport.mqtt_connect_errors), each cause provoked for real on
Mosquitto's own listeners: TLS with a password file, mutual TLS, plaintext."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from probe.config import ProbeConfig, load
from probe.core.errors import ConnectFailed, ConnectFailure
from probe.embedded import free_loopback_port
from probe.transport.mqtt import MqttTransport
from tests.conftest import SLA_PROBE, failure_to_start, target_report
from tests.mosquitto import Mosquitto, TlsFiles, make_tls_files

PASSWORD = "mqtt-secret-5e1f"
WRONG_PASSWORD = "not-the-mqtt-secret"


@dataclass(frozen=True)
class Brokers:
    tls: Mosquitto  # TLS, users from a password file
    mutual: Mosquitto  # TLS, a client certificate required
    plain: Mosquitto  # plaintext, anonymous
    files: TlsFiles
    stranger: TlsFiles  # another CA's


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    root = tmp_path_factory.mktemp("mqtt-tls")
    files = make_tls_files(root / "tls")
    stranger = make_tls_files(root / "stranger", name="stranger")
    with (
        Mosquitto(root / "tls-broker", tls=files, users={"probe": PASSWORD}) as tls,
        Mosquitto(root / "mutual-broker", tls=files, require_certificate=True) as mutual,
        Mosquitto(root / "plain-broker") as plain,
    ):
        yield Brokers(tls, mutual, plain, files, stranger)


def _config(url: str, **mqtt: object) -> ProbeConfig:
    return load(
        overrides={
            "probe_id": "mqtt-errors",
            "mqtt.url": url,
            "mqtt.send_timeout": "3s",
            **{f"mqtt.{k}": v for k, v in mqtt.items()},
        }
    )


def _failure(config: ProbeConfig) -> ConnectFailed:
    return failure_to_start(lambda: MqttTransport(config.mqtt, probe_id="mqtt-errors"))


def _plain_url(broker: Mosquitto) -> str:
    return f"mqtt://127.0.0.1:{broker.port}"


def _tls_url(broker: Mosquitto) -> str:
    return f"mqtts://127.0.0.1:{broker.port}"


def _cases(b: Brokers) -> dict[str, tuple[ProbeConfig, ConnectFailure, list[str]]]:
    login = {"username": "probe", "password": PASSWORD}
    ca = {"tls.ca_file": str(b.files.ca)}
    return {
        "wrong CA": (
            _config(_tls_url(b.tls), **login, **{"tls.ca_file": str(b.stranger.ca)}),
            ConnectFailure.UNTRUSTED_CERTIFICATE,
            ["the broker's certificate is not trusted by mqtt.tls.ca_file",
             "set mqtt.tls.ca_file to the CA that signed it"],
        ),
        "server name mismatch": (
            _config(_tls_url(b.tls), **login, **ca, **{"tls.server_name": "elsewhere.test"}),
            ConnectFailure.HOSTNAME_MISMATCH,
            ["not valid for elsewhere.test", "mqtt.tls.server_name", "mqtt.tls.check_hostname"],
        ),
        "wrong password": (
            _config(_tls_url(b.tls), username="probe", password=WRONG_PASSWORD, **ca),
            ConnectFailure.CREDENTIALS_REFUSED,
            ["the broker refused the login of user 'probe'",
             "check mqtt.username and mqtt.password"],
        ),
        "plaintext client on a TLS listener": (
            _config(_plain_url(b.tls), **login),
            ConnectFailure.TLS_EXPECTED,
            ["the listener may need TLS (an mqtts:// mqtt.url)"],
        ),
        "TLS client on a plaintext listener": (
            _config(_tls_url(b.plain), **ca),
            ConnectFailure.TLS_UNEXPECTED,
            ["answers MQTT requests in plaintext",
             "the listener may not need TLS (an mqtt:// mqtt.url)"],
        ),
        "client certificate required": (
            _config(_tls_url(b.mutual), **ca),
            ConnectFailure.CLIENT_CERTIFICATE,
            ["the broker requires a client certificate",
             "set mqtt.tls.cert_file and mqtt.tls.key_file"],
        ),
        "nothing listening": (
            _config(f"mqtt://127.0.0.1:{free_loopback_port()}"),
            ConnectFailure.UNREACHABLE,
            ["connection refused", "check mqtt.url"],
        ),
    }  # fmt: skip


CASES = [
    "wrong CA",
    "server name mismatch",
    "wrong password",
    "plaintext client on a TLS listener",
    "TLS client on a plaintext listener",
    "client certificate required",
    "nothing listening",
]


@pytest.mark.parametrize("case", CASES)
def test_the_cause_is_named_with_the_setting_to_change(brokers: Brokers, case: str) -> None:
    config, reason, said = _cases(brokers)[case]
    failure = _failure(config)
    line = str(failure)
    print(f"{case}: {line}")
    assert failure.reason is reason, line
    assert "\n" not in line
    assert line.startswith("cannot connect to 127.0.0.1:"), line
    for words in said:
        assert words in line
    assert PASSWORD not in line
    assert WRONG_PASSWORD not in line


def test_once_prints_the_line_and_exits_1(brokers: Brokers, tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text(WRONG_PASSWORD + "\n")
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({
        "mqtt": {"username": "probe", "password_file": str(password),
                 "tls": {"ca_file": str(brokers.files.ca)}},
        "once": {"loss_timeout": "2s"},
    }))  # fmt: skip
    done = subprocess.run(
        [SLA_PROBE, "once", "--mqtt-url", _tls_url(brokers.tls), "--config", str(config),
         "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    error = target_report(done.stdout)["error"]
    print(error)
    assert error.startswith(
        f"cannot connect to 127.0.0.1:{brokers.tls.port}: the broker refused the login of "
        "user 'probe'"
    )
    assert WRONG_PASSWORD not in done.stdout + done.stderr
