"""Connection settings for real clusters map onto the client's TLS and SASL options.

The embedded broker cannot serve TLS or SCRAM in a test, so this checks the mapping
itself, with a real CA certificate made by openssl.
"""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NotLeaderForPartitionError

from probe.config import load
from probe.spark.kafka_source import client_config
from probe.spark.stage import kafka_client_options
from probe.transport.kafka import connection_options, produce_failure_reason


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    key, cert = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=probe-test-ca",
        ],
        check=True,
        capture_output=True,
    )
    return cert


def test_plaintext_by_default() -> None:
    options = connection_options(load(overrides={"kafka.bootstrap_servers": "k:9092"}).kafka)
    assert "security_protocol" not in options
    assert "ssl_context" not in options
    assert options["request_timeout_ms"] == 10_000


def test_tls_with_a_ca(ca_file: Path) -> None:
    config = load(
        overrides={"kafka.bootstrap_servers": "k:9093", "kafka.tls.ca_file": str(ca_file)}
    )
    options = connection_options(config.kafka)
    assert options["security_protocol"] == "SSL"
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert any(
        c["subject"] == ((("commonName", "probe-test-ca"),),) for c in context.get_ca_certs()
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_over_tls_and_plaintext(ca_file: Path, mechanism: str) -> None:
    sasl = {
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.username": "probe",
        "kafka.sasl.password": "s3cret",
    }
    plain = connection_options(load(overrides={"kafka.bootstrap_servers": "k", **sasl}).kafka)
    assert plain["security_protocol"] == "SASL_PLAINTEXT"
    assert plain["sasl_mechanism"] == mechanism
    assert plain["sasl_plain_username"] == "probe"
    assert plain["sasl_plain_password"] == "s3cret"
    tls = connection_options(
        load(
            overrides={"kafka.bootstrap_servers": "k", "kafka.tls.ca_file": str(ca_file), **sasl}
        ).kafka
    )
    assert tls["security_protocol"] == "SASL_SSL"


def test_produce_failures_map_to_few_reasons() -> None:
    assert produce_failure_reason(KafkaTimeoutError()) == "timeout"
    assert produce_failure_reason(TimeoutError()) == "timeout"
    assert produce_failure_reason(KafkaConnectionError()) == "broker_unavailable"
    assert produce_failure_reason(NotLeaderForPartitionError()) == "not_leader"
    assert produce_failure_reason(RuntimeError()) == "other"


def test_the_spark_source_gets_the_same_security_settings(ca_file: Path) -> None:
    """The sink's executors read with kafka-python: the probe's TLS and SASL settings
    reach it through the source's text options, typed back on the way in."""
    config = load(
        overrides={
            "kafka.bootstrap_servers": "k1:9092,k2:9092",
            "kafka.tls.ca_file": str(ca_file),
            "kafka.tls.check_hostname": False,
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": "s3cret",
        }
    )
    options = {f"kafka.{name}": value for name, value in kafka_client_options(config.kafka).items()}
    client = client_config({"bootstrap.servers": "k1:9092,k2:9092", **options})
    assert client == {
        "bootstrap_servers": ["k1:9092", "k2:9092"],
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(ca_file),
        "ssl_check_hostname": False,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "probe",
        "sasl_plain_password": "s3cret",
    }
    assert client_config({"bootstrap.servers": "k:9092"}) == {"bootstrap_servers": ["k:9092"]}
