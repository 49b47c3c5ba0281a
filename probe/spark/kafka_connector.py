"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10) as the sink's
and reconcile's source, beside the probe's Python source (``sla_kafka``).

``sink.source: kafka`` swaps the reader and nothing after it: the connector's columns
(key, value, topic, partition, offset, timestamp, timestampType) include the three
the sink decodes (partition, offset, value) and the four reconcile reads (with key),
under the same names and types, so the decoder, the judge and the tables are the same
behind either source.

The probe's connection settings (``kafka.tls``, ``kafka.sasl``: kafka-python's names,
dotted, as the sink and reconcile settings carry them) become the Java client's
``kafka.*`` options here (:func:`client_options`). The jars come from the cache of
``make spark-kafka`` (probe/spark_kafka), put on ``spark.jars`` by the session.

>>> stream_options("k:9092", "synthetic-sla", "latest", 10_000, {})["maxOffsetsPerTrigger"]
'10000'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from probe.core.errors import ConfigError

CONNECTOR_NAME = "kafka"
FETCH_MAX_WAIT_MS = "1"

# The Java client's login modules by SASL mechanism (the probe's kafka.sasl.mechanism).
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Kafka's PEM key store reads PKCS#8 keys only (unencrypted here: no key password).
_PKCS8 = "-----BEGIN PRIVATE KEY-----"


def _jaas_quoted(text: str) -> str:
    """A value inside a JAAS option's double quotes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem(path: str, field: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a PEM file"
        raise ConfigError(field, f"cannot read {path}: {reason}") from exc


def client_options(kafka_options: Mapping[str, str]) -> dict[str, str]:
    """The probe's TLS and SASL settings (``security.protocol``, ``ssl.cafile``,
    ``ssl.certfile``, ``ssl.keyfile``, ``ssl.check.hostname``, ``sasl.mechanism``,
    ``sasl.plain.username``, ``sasl.plain.password``) as the connector's options.

    The PEM files (CA, client certificate and key) are read here on the driver and
    travel inline (``ssl.truststore.certificates``, ``ssl.keystore.key``...: PEM
    stores, read by Kafka clients since 2.7), so executors on other hosts need no copy
    of them. A key Kafka's PEM reader cannot take (PKCS#1, encrypted) is refused
    naming ``kafka.tls.key_file``. Without a CA file the JVM's own trust store is used.

    >>> client_options({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
    ...                 "sasl.plain.username": "probe", "sasl.plain.password": "pw"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'kafka.security.protocol': 'SASL_PLAINTEXT', 'kafka.sasl.mechanism': 'PLAIN',
     'kafka.sasl.jaas.config': 'org.apache.kafka.common.security.plain.PlainLoginModule
     required username="probe" password="pw";'}
    """
    options: dict[str, str] = {}
    if protocol := kafka_options.get("security.protocol"):
        options["kafka.security.protocol"] = protocol
    if ca_file := kafka_options.get("ssl.cafile"):
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = _pem(ca_file, "kafka.tls.ca_file")
    cert_file, key_file = kafka_options.get("ssl.certfile"), kafka_options.get("ssl.keyfile")
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
    if kafka_options.get("ssl.check.hostname") == "false":
        # The Java client's way of not checking the broker's name: no algorithm.
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    if mechanism := kafka_options.get("sasl.mechanism"):
        options["kafka.sasl.mechanism"] = mechanism
        username = kafka_options.get("sasl.plain.username", "")
        password = kafka_options.get("sasl.plain.password", "")
        options["kafka.sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required "
            f"username={_jaas_quoted(username)} password={_jaas_quoted(password)};"
        )
    return options


def _common(bootstrap_servers: str, kafka_options: Mapping[str, str]) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap_servers,
        # A broker that lost its data (a log truncated, a topic deleted and created
        # again, offsets gone by retention) must not stop the probe: with true the
        # connector fails the query. The loss is the judge's to count: canaries that
        # never arrive are judged lost, reconcile's windows count the records missing.
        "failOnDataLoss": "false",
        # The connector fetches only offsets it knows are there, so a fetch waits only
        # on a broker that answers when the wait runs out (the embedded one): with the
        # Java client's 500 ms, every partition read in turn waited that long (100
        # partitions of a record each, counted in 2 tasks: 27 s; at 20 ms 3 s; at 1 ms
        # 1.2 s). Apache Kafka answers as soon as the records are there.
        "kafka.fetch.max.wait.ms": FETCH_MAX_WAIT_MS,
        # What only reads the topic must never create it: an executor's metadata
        # request for a topic deleted meanwhile would have a broker that auto-creates
        # topics make it anew, hiding from the consumer stage that its log started over.
        "kafka.allow.auto.create.topics": "false",
        **client_options(kafka_options),
    }


def _by_topic(topic: str, starting_offsets: str) -> str:
    """Offsets by partition (``{"0": 12}``, as the sla_kafka source and the sink's
    pinned start write them) as the connector takes them: ``{"topic": {"0": 12}}``.

    >>> _by_topic("t", '{"1": 4, "0": 7}')
    '{"t": {"0": 7, "1": 4}}'
    >>> _by_topic("t", "latest")
    'latest'
    """
    if starting_offsets in ("latest", "earliest"):
        return starting_offsets
    offsets = json.loads(starting_offsets)
    return json.dumps({topic: {p: int(offsets[p]) for p in sorted(offsets, key=int)}})


def stream_options(
    bootstrap_servers: str,
    topic: str,
    starting_offsets: str,
    max_records_per_batch: int | None,
    kafka_options: Mapping[str, str],
) -> dict[str, str]:
    """The sink query's options: the topic subscribed (partitions added later are
    read from their start), ``startingOffsets``, and the sink's cap on records per
    batch as ``maxOffsetsPerTrigger``.

    ``starting_offsets``: ``latest``, ``earliest``, or the offsets the sink pinned
    before the query started (a JSON map by partition, probe.spark.sink.SinkJob.
    pin_start): ``latest`` alone would be resolved by the connector only at the
    query's first trigger, after canaries sent meanwhile (the sink's warm-up).
    """
    options = {
        **_common(bootstrap_servers, kafka_options),
        "subscribe": topic,
        "startingOffsets": _by_topic(topic, starting_offsets),
    }
    if max_records_per_batch:
        options["maxOffsetsPerTrigger"] = str(max_records_per_batch)
    return options


def batch_options(
    bootstrap_servers: str,
    topic: str,
    starts: Mapping[str, int],
    ends: Mapping[str, int],
    *,
    min_partitions: int,
    kafka_options: Mapping[str, str],
) -> dict[str, str]:
    """A batch read of exactly the offset ranges ``starts[p]..ends[p]`` (partition
    numbers as text): only those partitions assigned, the others unread."""
    return {
        **_common(bootstrap_servers, kafka_options),
        "assign": json.dumps({topic: sorted(int(p) for p in starts)}),
        "startingOffsets": json.dumps({topic: {p: int(o) for p, o in starts.items()}}),
        "endingOffsets": json.dumps({topic: {p: int(o) for p, o in ends.items()}}),
        "minPartitions": str(min_partitions),
    }
