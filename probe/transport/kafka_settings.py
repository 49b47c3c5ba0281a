"""The ``kafka`` section's TLS and SASL as each Kafka client the probe runs names them:
the only module that knows those names.

Three clients, three dialects:

- **aiokafka** (the probe's producer, consumers and admin client, and the connection
  that diagnoses a failed one): kafka-python's names, TLS as one ``ssl.SSLContext``
  (:func:`aiokafka_security`, the login alone :func:`aiokafka_login`);
- **librdkafka** (the ``sla_kafka`` source, on Spark's executors and in its driver-side
  client): librdkafka's own names (:func:`librdkafka_security`), text, which the Spark
  settings carry and the source receives as its ``kafka.*`` options and forwards as they
  are: the executors import no settings (pyproject's import contracts), so they get
  plain strings already translated;
- **Spark's Java connector** (``sink.source: kafka``): its ``kafka.*`` options, the PEM
  files inline and SASL as a JAAS line (:func:`connector_security`), made from the
  librdkafka options the Spark settings carry, so that the sink and reconcile carry one
  form of the section.

**A new SASL mechanism or TLS setting** (OAUTHBEARER, say) touches this module and the
config's field (``SaslConfig.mechanism``'s Literal) only: a branch for each of the three
clients here, each checked in tests/test_kafka_settings.py. The config describes the
settings and speaks no client's dialect; kafka_client, the Spark source and its
connector's options take what these functions return.

**When secrets are read.** Every call reads the SASL password as it is now (from
``kafka.sasl.password_file`` if given: rotation relies on it, kafka_client.
CredentialFiles), and aiokafka's context and the connector's PEM stores read the TLS
files too. aiokafka's options are made when a transport is made and again when a file
changed; the librdkafka options when the sink stage is set up or reconcile's settings
are made (a rotated password then needs a restarted sink, docs/secured-clusters.md);
the connector's when its options are assembled, at each query start or reconcile run,
on the driver: executors on other hosts need no copy of the files. The Spark options that carry a
secret (``kafka.sasl.password``, ``kafka.sasl.jaas.config``, ``kafka.ssl.keystore.key``)
have names that probe.spark.session.CONNECTOR_SECRETS matches, for Spark to redact them
where it prints options; a new one must have such a name too.

A module of its own rather than part of kafka_client: importing it loads no client
library, so Spark's driver and reconcile (which loads aiokafka only to diagnose a
failure) translate the section without aiokafka, and kafka_client stays aiokafka's
runtime (its metadata requests patched at import, credentials renewed in running
clients).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from probe.config import KafkaConfig, SaslConfig, TlsConfig
from probe.core.errors import ConfigError

# -- aiokafka ---------------------------------------------------------------------------


def aiokafka_security(kafka: KafkaConfig) -> dict[str, Any]:
    """TLS and SASL as aiokafka's clients take them: ``security_protocol``,
    ``ssl_context``, and :func:`aiokafka_login`. A TLS file the context cannot use is a
    ConfigError naming its setting, raised here, before any broker is asked.

    >>> sasl = SaslConfig(mechanism="PLAIN", username="probe", password="pw")
    >>> aiokafka_security(KafkaConfig(sasl=sasl))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'security_protocol': 'SASL_PLAINTEXT', 'sasl_mechanism': 'PLAIN',
     'sasl_plain_username': 'probe', 'sasl_plain_password': 'pw'}
    """
    options: dict[str, Any] = {}
    if kafka.tls is not None:
        options["security_protocol"] = "SSL"
        options["ssl_context"] = _tls_context(kafka.tls, kafka.setting("tls"))
    if kafka.sasl is not None:
        options["security_protocol"] = "SASL_SSL" if kafka.tls else "SASL_PLAINTEXT"
    return {**options, **aiokafka_login(kafka.sasl)}


def aiokafka_login(sasl: SaslConfig | None) -> dict[str, str]:
    """The SASL mechanism and credentials as aiokafka takes them (the clients', and
    the diagnosing connection's, which logs in with the password as it is now)."""
    if sasl is None:
        return {}
    return {
        "sasl_mechanism": sasl.mechanism,
        "sasl_plain_username": sasl.username,
        "sasl_plain_password": sasl.password_value(),
    }


def _tls_context(tls: TlsConfig, section: str = "kafka.tls") -> ssl.SSLContext:
    """The clients' TLS context: what aiokafka's create_ssl_context makes (a default
    client context, with the CA file if given, else the system trust store), without
    importing aiokafka; a file it cannot use is a ConfigError naming the setting (in
    ``section``)."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{section}.ca_file", _unusable(tls.ca_file, exc)) from exc
    if tls.cert_file is not None and tls.key_file is not None:
        for field, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
            if not path.is_file():
                raise ConfigError(f"{section}.{field}", f"{path}: no such file")
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_key_password)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{section}.cert_file",
                f"{_unusable(tls.cert_file, exc)} with {section}.key_file {tls.key_file}: "
                "they must be a PEM certificate and its unencrypted private key",
            ) from exc
    context.check_hostname = tls.check_hostname
    return context


def _no_key_password() -> str:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's
    # password, and a service would hang there.
    raise ValueError("the key is encrypted; the probe takes an unencrypted PEM key")


def _unusable(path: object, error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file"
    detail = getattr(error, "reason", None) or getattr(error, "strerror", None) or str(error)
    return f"{path}: cannot be used ({detail})"


# -- librdkafka -------------------------------------------------------------------------

# kafka.tls.check_hostname as librdkafka's ssl.endpoint.identification.algorithm.
_ENDPOINT_IDENTIFICATION = {True: "https", False: "none"}


def librdkafka_security(kafka: KafkaConfig) -> dict[str, str]:
    """TLS and SASL as librdkafka names them, text (as Spark options carry them); the
    files stay paths, read by librdkafka where it runs.

    >>> librdkafka_security(KafkaConfig(tls=TlsConfig(ca_file="/ca.pem")))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'security.protocol': 'SSL', 'ssl.ca.location': '/ca.pem',
     'ssl.endpoint.identification.algorithm': 'https'}
    """
    options: dict[str, str] = {}
    if kafka.tls is not None:
        options["security.protocol"] = "SSL"
        if kafka.tls.ca_file:
            options["ssl.ca.location"] = str(kafka.tls.ca_file)
        if kafka.tls.cert_file and kafka.tls.key_file:
            options["ssl.certificate.location"] = str(kafka.tls.cert_file)
            options["ssl.key.location"] = str(kafka.tls.key_file)
        options["ssl.endpoint.identification.algorithm"] = _ENDPOINT_IDENTIFICATION[
            kafka.tls.check_hostname
        ]
    if kafka.sasl is not None:
        options["security.protocol"] = "SASL_SSL" if kafka.tls else "SASL_PLAINTEXT"
        options["sasl.mechanisms"] = kafka.sasl.mechanism
        options["sasl.username"] = kafka.sasl.username
        options["sasl.password"] = kafka.sasl.password_value()
    return options


def librdkafka_member(
    kafka: KafkaConfig,
    group_id: str,
    *,
    target: str,
    fetch_max_wait: float,
    statistics_every_ms: int,
) -> dict[str, Any]:
    """What each librdkafka member of a group of the probe's own (the group_consumer
    stage's, the share stage's) is built with; its kind of group, its commits and its
    callbacks are its reader's.

    >>> librdkafka_member(KafkaConfig(bootstrap_servers="b:9092"), "g", target="kafka",
    ...                   fetch_max_wait=0.5, statistics_every_ms=2000)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bootstrap.servers': 'b:9092', 'group.id': 'g', 'fetch.wait.max.ms': 500,
     'socket.timeout.ms': 10000, 'statistics.interval.ms': 2000,
     'client.id': 'synthetic-sla-probe-kafka'}
    """
    return {
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": group_id,
        "fetch.wait.max.ms": max(1, round(fetch_max_wait * 1000)),
        "socket.timeout.ms": max(10_000, round(kafka.send_timeout * 1000)),
        "statistics.interval.ms": statistics_every_ms,
        "client.id": f"synthetic-sla-probe-{target}",
        **librdkafka_security(kafka),
    }


# -- Spark's Java connector -------------------------------------------------------------

# The Java client's login modules by SASL mechanism (the probe's kafka.sasl.mechanism).
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Kafka's PEM key store reads PKCS#8 keys only (unencrypted here: no key password).
_PKCS8 = "-----BEGIN PRIVATE KEY-----"


def connector_security(librdkafka: Mapping[str, str]) -> dict[str, str]:
    """Spark's Kafka connector's ``kafka.*`` options for TLS and SASL, from the
    section as :func:`librdkafka_security` gave it (what the Spark settings carry).

    The PEM files (CA, client certificate and key) are read here on the driver and
    travel inline (``ssl.truststore.certificates``, ``ssl.keystore.key``...: PEM
    stores, read by Kafka clients since 2.7). A key Kafka's PEM reader cannot take
    (PKCS#1, encrypted) is refused naming ``kafka.tls.key_file``. Without a CA file the
    JVM's own trust store is used.

    >>> connector_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
    ...                     "sasl.username": "probe", "sasl.password": "pw"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'kafka.security.protocol': 'SASL_PLAINTEXT', 'kafka.sasl.mechanism': 'PLAIN',
     'kafka.sasl.jaas.config': 'org.apache.kafka.common.security.plain.PlainLoginModule
     required username="probe" password="pw";'}
    """
    options: dict[str, str] = {}
    if protocol := librdkafka.get("security.protocol"):
        options["kafka.security.protocol"] = protocol
    if ca_file := librdkafka.get("ssl.ca.location"):
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = _pem(ca_file, "kafka.tls.ca_file")
    cert_file = librdkafka.get("ssl.certificate.location")
    key_file = librdkafka.get("ssl.key.location")
    if cert_file and key_file:
        key = _pem(key_file, "kafka.tls.key_file")
        if _PKCS8 not in key:
            raise ConfigError(
                "kafka.tls.key_file",
                f"{key_file}: Spark's Kafka connector reads unencrypted PKCS#8 keys only "
                f"({_PKCS8}); convert it with `openssl pkcs8 -topk8 -nocrypt -in {key_file}`",
            )
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = _pem(cert_file, "kafka.tls.cert_file")
        options["kafka.ssl.keystore.key"] = key
    if librdkafka.get("ssl.endpoint.identification.algorithm") == "none":
        # The Java client's way of not checking the broker's name: no algorithm.
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    if mechanism := librdkafka.get("sasl.mechanisms"):
        options["kafka.sasl.mechanism"] = mechanism
        username = librdkafka.get("sasl.username", "")
        password = librdkafka.get("sasl.password", "")
        options["kafka.sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required "
            f"username={_jaas_quoted(username)} password={_jaas_quoted(password)};"
        )
    return options


def _jaas_quoted(text: str) -> str:
    """A value inside a JAAS option's double quotes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem(path: str, field: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a PEM file"
        raise ConfigError(field, f"cannot read {path}: {reason}") from exc
