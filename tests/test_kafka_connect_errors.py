"""The pure half of probe.transport.kafka_connect_errors and connect_errors:
addresses, the bytes a listener answers with, verify codes. Each cause provoked for
real on Apache Kafka's listeners (tests/apache_kafka/test_connect_errors.py) and
Mosquitto's (tests/test_mqtt_connect_errors.py)."""

from __future__ import annotations

import ssl
import struct

import pytest

from probe.core.errors import ConnectFailure
from probe.transport.connect_errors import KAFKA, MQTT, answered_tls, certificate_problem
from probe.transport.kafka_connect_errors import answered_kafka, first_address


@pytest.mark.parametrize(
    ("servers", "address"),
    [
        ("b1:9093,b2:9093", ("b1", 9093)),
        ("kafka-0", ("kafka-0", 9092)),
        ("[::1]:19092", ("::1", 19092)),
        ("[fe80::1]", ("fe80::1", 9092)),
    ],
)
def test_the_first_bootstrap_server(servers: str, address: tuple[str, int]) -> None:
    assert first_address(servers) == address


def test_a_kafka_answer_and_a_tls_record_are_told_apart() -> None:
    kafka = struct.pack(">ii", 120, 0x51A0)
    assert answered_kafka(kafka)
    assert not answered_tls(kafka)
    alert = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0A, 0, 0])
    assert answered_tls(alert)
    assert not answered_kafka(alert)
    assert not answered_kafka(struct.pack(">ii", 120, 7))  # another request's answer
    assert not answered_kafka(b"HTTP/1.1")


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    error.verify_code = code
    error.verify_message = message
    return error


@pytest.mark.parametrize(
    ("code", "message", "reason", "setting"),
    [
        (19, "self-signed certificate in certificate chain",
         ConnectFailure.UNTRUSTED_CERTIFICATE, "kafka.tls.ca_file"),
        (20, "unable to get local issuer certificate",
         ConnectFailure.UNTRUSTED_CERTIFICATE, "kafka.tls.ca_file"),
        (62, "hostname mismatch", ConnectFailure.HOSTNAME_MISMATCH, "kafka.tls.check_hostname"),
        (64, "IP address mismatch", ConnectFailure.HOSTNAME_MISMATCH, "kafka.tls.check_hostname"),
        (10, "certificate has expired", ConnectFailure.CERTIFICATE_EXPIRED, "current certificate"),
        (9, "certificate is not yet valid", ConnectFailure.CERTIFICATE_EXPIRED, "clock"),
    ],
)  # fmt: skip
def test_verify_codes_name_their_setting(
    code: int, message: str, reason: ConnectFailure, setting: str
) -> None:
    error = _verify_error(code, message)
    diagnosis = certificate_problem(KAFKA, "b1:9093", "b1", error, "/etc/ca.pem")
    assert diagnosis.reason is reason
    assert diagnosis.message.startswith("cannot connect to b1:9093: ")
    assert message in diagnosis.message
    assert setting in diagnosis.message
    # The same cause, for MQTT: its own settings named.
    mqtt = certificate_problem(MQTT, "b1:8883", "b1", error, "/etc/ca.pem")
    assert mqtt.reason is reason
    assert setting.replace("kafka.", "mqtt.") in mqtt.message
    assert "kafka." not in mqtt.message
