"""The ``kafka`` section's TLS and SASL in each Kafka client's names
(probe.transport.kafka_settings): aiokafka's options with their TLS context,
librdkafka's (taken by a real librdkafka client), Spark's connector's.

The embedded broker cannot serve TLS or SCRAM in a test, so this checks the mapping
itself, with real certificates made by openssl; SASL end to end on a cluster that
requires it is tests/spark/test_kafka_connector.py's and
tests/spark/test_kafka_source_on_kafka.py's.
"""

from __future__ import annotations

import doctest
import ssl
import subprocess
from pathlib import Path
from typing import get_args

import pytest
from confluent_kafka import Consumer

import probe.transport.kafka_settings
from probe.config import SaslConfig, load
from probe.core.errors import ConfigError
from probe.transport.kafka_client import connection_options
from probe.transport.kafka_settings import (
    aiokafka_security,
    connector_security,
    librdkafka_security,
)

MECHANISMS = get_args(SaslConfig.model_fields["mechanism"].annotation)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, and a client certificate it signed with its key in PKCS#8 and PKCS#1."""
    tmp_path = tmp_path_factory.mktemp("pem")
    files = {name: tmp_path / name for name in ("ca.crt", "ca.key", "c.csr", "c.crt", "c.key")}
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=probe-test-ca", "-keyout", str(files["ca.key"]),
             "-out", str(files["ca.crt"]))  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=probe",
             "-keyout", str(files["c.key"]), "-out", str(files["c.csr"]))  # fmt: skip
    _openssl("x509", "-req", "-in", str(files["c.csr"]), "-CA", str(files["ca.crt"]),
             "-CAkey", str(files["ca.key"]), "-CAcreateserial", "-days", "1",
             "-out", str(files["c.crt"]))  # fmt: skip
    files["c.rsa.key"] = tmp_path / "c.rsa.key"
    _openssl("rsa", "-in", str(files["c.key"]), "-traditional", "-out", str(files["c.rsa.key"]))
    return files


def test_plaintext_needs_no_option_in_any_client() -> None:
    kafka = load(overrides={"kafka.bootstrap_servers": "k:9092"}).kafka
    options = connection_options(kafka)
    assert "security_protocol" not in options
    assert "ssl_context" not in options
    assert options["request_timeout_ms"] == 10_000
    assert aiokafka_security(kafka) == {}
    assert librdkafka_security(kafka) == {}
    assert connector_security(librdkafka_security(kafka)) == {}


# -- aiokafka ---------------------------------------------------------------------------


def test_aiokafka_gets_tls_as_one_context(pem_files: dict[str, Path]) -> None:
    config = load(
        overrides={
            "kafka.bootstrap_servers": "k:9093",
            "kafka.tls.ca_file": str(pem_files["ca.crt"]),
        }
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


def test_a_tls_file_aiokafka_cannot_use_is_refused_naming_it(
    pem_files: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as refused:
        aiokafka_security(load(overrides={"kafka.tls.ca_file": str(tmp_path / "none")}).kafka)
    assert refused.value.field == "kafka.tls.ca_file"
    mismatched = load(
        overrides={
            "kafka.tls.cert_file": str(pem_files["c.crt"]),
            "kafka.tls.key_file": str(pem_files["ca.key"]),
        }
    )
    with pytest.raises(ConfigError) as refused:
        aiokafka_security(mismatched.kafka)
    assert refused.value.field == "kafka.tls.cert_file"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_logs_in_with_sasl_over_tls_and_plaintext(
    pem_files: dict[str, Path], mechanism: str
) -> None:
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
            overrides={
                "kafka.bootstrap_servers": "k",
                "kafka.tls.ca_file": str(pem_files["ca.crt"]),
                **sasl,
            }
        ).kafka
    )
    assert tls["security_protocol"] == "SASL_SSL"


# -- librdkafka -------------------------------------------------------------------------


def test_librdkafka_takes_the_same_settings_in_its_own_names(pem_files: dict[str, Path]) -> None:
    """The sla_kafka source's executors and driver read with librdkafka, which must
    take what it is given (an unknown name or a bad value fails a client's creation)."""
    config = load(
        overrides={
            "kafka.bootstrap_servers": "k1:9092,k2:9092",
            "kafka.tls.ca_file": str(pem_files["ca.crt"]),
            "kafka.tls.cert_file": str(pem_files["c.crt"]),
            "kafka.tls.key_file": str(pem_files["c.key"]),
            "kafka.tls.check_hostname": False,
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": "s3cret",
        }
    )
    options = librdkafka_security(config.kafka)
    assert options == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pem_files["ca.crt"]),
        "ssl.certificate.location": str(pem_files["c.crt"]),
        "ssl.key.location": str(pem_files["c.key"]),
        "ssl.endpoint.identification.algorithm": "none",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "probe",
        "sasl.password": "s3cret",
    }
    Consumer({"bootstrap.servers": "k1:9092", "group.id": "checked", **options}).close()
    checked = load(overrides={"kafka.tls.ca_file": str(pem_files["ca.crt"])}).kafka
    assert librdkafka_security(checked)["ssl.endpoint.identification.algorithm"] == "https"


# -- Spark's connector ------------------------------------------------------------------


def _connector(**overrides: object) -> dict[str, str]:
    config = load(overrides={"kafka.bootstrap_servers": "k:9093", **overrides})
    return connector_security(librdkafka_security(config.kafka))


def test_tls_files_travel_inline_to_the_connector_as_pem_stores(
    pem_files: dict[str, Path],
) -> None:
    options = _connector(
        **{
            "kafka.tls.ca_file": str(pem_files["ca.crt"]),
            "kafka.tls.cert_file": str(pem_files["c.crt"]),
            "kafka.tls.key_file": str(pem_files["c.key"]),
        }
    )
    assert options == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": pem_files["ca.crt"].read_text(),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": pem_files["c.crt"].read_text(),
        "kafka.ssl.keystore.key": pem_files["c.key"].read_text(),
    }
    assert "BEGIN PRIVATE KEY" in options["kafka.ssl.keystore.key"]


def test_a_key_kafkas_pem_reader_cannot_take_is_refused_naming_it(
    pem_files: dict[str, Path],
) -> None:
    with pytest.raises(ConfigError) as refused:
        _connector(
            **{
                "kafka.tls.cert_file": str(pem_files["c.crt"]),
                "kafka.tls.key_file": str(pem_files["c.rsa.key"]),
            }
        )
    assert refused.value.field == "kafka.tls.key_file"
    assert "openssl pkcs8 -topk8 -nocrypt" in str(refused.value)


def test_no_hostname_check_is_no_endpoint_identification_for_the_connector() -> None:
    options = _connector(**{"kafka.tls.check_hostname": "false"})
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert "kafka.ssl.truststore.type" not in options  # the JVM's own trust store
    assert "kafka.ssl.endpoint.identification.algorithm" not in _connector(
        **{"kafka.tls.check_hostname": "true"}
    )


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_sasl_becomes_one_jaas_line_with_its_values_quoted(mechanism: str, module: str) -> None:
    options = _connector(
        **{
            "kafka.tls.check_hostname": "true",
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": 'pa"ss\\word',
        }
    )
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == mechanism
    assert options["kafka.sasl.jaas.config"] == (
        f'{module} required username="probe" password="pa\\"ss\\\\word";'
    )


# -- every client, every setting --------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_mechanism_the_config_takes_reaches_every_client(mechanism: str) -> None:
    """A mechanism added to the config's Literal fails here until each client's
    translation knows it (the module's rule)."""
    kafka = load(
        overrides={
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.username": "probe",
            "kafka.sasl.password": "s3cret",
        }
    ).kafka
    assert aiokafka_security(kafka)["sasl_mechanism"] == mechanism
    librdkafka = librdkafka_security(kafka)
    assert librdkafka["sasl.mechanisms"] == mechanism
    Consumer({"bootstrap.servers": "k:9092", "group.id": "checked", **librdkafka}).close()
    assert "required" in connector_security(librdkafka)["kafka.sasl.jaas.config"]


def test_the_password_file_is_read_at_each_call(tmp_path: Path) -> None:
    """Rotation (kafka_client.CredentialFiles) relies on it: each call reads the file."""
    password_file = tmp_path / "password"
    password_file.write_text("first\n")
    kafka = load(
        overrides={
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "probe",
            "kafka.sasl.password_file": str(password_file),
        }
    ).kafka
    assert aiokafka_security(kafka)["sasl_plain_password"] == "first"
    password_file.write_text("second\n")
    assert aiokafka_security(kafka)["sasl_plain_password"] == "second"
    assert librdkafka_security(kafka)["sasl.password"] == "second"
    jaas = connector_security(librdkafka_security(kafka))["kafka.sasl.jaas.config"]
    assert 'password="second"' in jaas


def test_doctests() -> None:
    assert doctest.testmod(probe.transport.kafka_settings).failed == 0
