"""Which credential files changed, and what the Kafka clients take anew."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.config import KafkaConfig
from probe.core.credentials import Renewal, changed, renewal
from probe.transport.kafka_client import credential_files

SEEN = {"kafka.sasl.password_file": "a", "kafka.tls.cert_file": "c"}


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (SEEN, ()),
        ({**SEEN, "kafka.sasl.password_file": "b"}, ("kafka.sasl.password_file",)),
        # A file that went (a Secret's swap half done) and one that came are changes.
        ({"kafka.tls.cert_file": "c"}, ("kafka.sasl.password_file",)),
        ({**SEEN, "kafka.tls.ca_file": "d"}, ("kafka.tls.ca_file",)),
        (
            {"kafka.sasl.password_file": "b", "kafka.tls.cert_file": "e"},
            ("kafka.sasl.password_file", "kafka.tls.cert_file"),
        ),
    ],
    ids=["unchanged", "password", "gone", "new", "both"],
)
def test_changed(now: dict[str, str], expected: tuple[str, ...]) -> None:
    assert changed(SEEN, now) == expected


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ((), Renewal(password=False, tls=False)),
        (("kafka.sasl.password_file",), Renewal(password=True, tls=False)),
        (("kafka.tls.ca_file",), Renewal(password=False, tls=True)),
        (("kafka.tls.key_file", "kafka.sasl.password_file"), Renewal(password=True, tls=True)),
    ],
)
def test_renewal(settings: tuple[str, ...], expected: Renewal) -> None:
    assert renewal(settings) == expected
    assert expected.empty is not (expected.password or expected.tls)


def test_credential_files_are_the_ones_the_config_names(tmp_path: Path) -> None:
    for name in ("password", "ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_text("x\n")
    config = KafkaConfig.model_validate({
        "bootstrap_servers": "k:9092",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "probe",
                 "password_file": str(tmp_path / "password")},
        "tls": {"ca_file": str(tmp_path / "ca.crt"), "cert_file": str(tmp_path / "client.crt"),
                "key_file": str(tmp_path / "client.key")},
    })  # fmt: skip
    assert credential_files(config) == {
        "kafka.sasl.password_file": str(tmp_path / "password"),
        "kafka.tls.ca_file": str(tmp_path / "ca.crt"),
        "kafka.tls.cert_file": str(tmp_path / "client.crt"),
        "kafka.tls.key_file": str(tmp_path / "client.key"),
    }
    inline = {"mechanism": "PLAIN", "username": "probe", "password": "p"}
    assert credential_files(KafkaConfig.model_validate({"sasl": inline})) == {}
