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
from confluent_kafka import Consumer

from probe.config import load
from probe.spark.kafka_source import FORCED, client_config
from probe.spark.stage import kafka_client_options
from probe.transport.kafka import produce_failure_reason
from probe.transport.kafka_client import connection_options


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
    """The sink's executors read with librdkafka: the probe's TLS and SASL settings
    reach it through the source's text options (kafka-python's names, as the sink and
    reconcile write them), translated to librdkafka's on the way in; librdkafka takes
    them (an unknown name or a bad value would fail the consumer's creation)."""
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
        "bootstrap.servers": "k1:9092,k2:9092",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca_file),
        "ssl.endpoint.identification.algorithm": "none",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "probe",
        "sasl.password": "s3cret",
        **FORCED,
    }
    Consumer({**client, "group.id": "checked"}).close()
    assert client_config({"bootstrap.servers": "k:9092"}) == {
        "bootstrap.servers": "k:9092",
        **FORCED,
    }


@pytest.mark.parametrize(
    ("option", "setting"),
    [
        # kafka-python's names, dotted or as kafka-python spells them
        (("kafka.ssl.cafile", "/ca.pem"), ("ssl.ca.location", "/ca.pem")),
        (("kafka.ssl_certfile", "/c.pem"), ("ssl.certificate.location", "/c.pem")),
        (("kafka.ssl_keyfile", "/k.pem"), ("ssl.key.location", "/k.pem")),
        (("kafka.ssl.password", "pw"), ("ssl.key.password", "pw")),
        (("kafka.ssl_check_hostname", "true"), ("ssl.endpoint.identification.algorithm", "https")),
        (("kafka.sasl_mechanism", "PLAIN"), ("sasl.mechanisms", "PLAIN")),
        (("kafka.sasl_plain_username", "u"), ("sasl.username", "u")),
        (("kafka.security_protocol", "SSL"), ("security.protocol", "SSL")),
        # librdkafka's own, as they are
        (("kafka.ssl.ca.location", "/ca.pem"), ("ssl.ca.location", "/ca.pem")),
        (("kafka.sasl.username", "u"), ("sasl.username", "u")),
        (("kafka.client.id", "sink"), ("client.id", "sink")),
    ],
)
def test_the_spark_source_takes_either_clients_names(
    option: tuple[str, str], setting: tuple[str, str]
) -> None:
    assert client_config({"bootstrap.servers": "k", option[0]: option[1]}) == {
        "bootstrap.servers": "k",
        setting[0]: setting[1],
        **FORCED,
    }


def test_the_spark_source_never_lets_a_reader_create_the_topic() -> None:
    options = {"bootstrap.servers": "k", "kafka.allow.auto.create.topics": "true"}
    assert client_config(options)["allow.auto.create.topics"] == "false"
