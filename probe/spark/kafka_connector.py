"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10) as the sink's
and reconcile's source, beside the probe's Python source (``sla_kafka``).

``sink.source: kafka`` swaps the reader and nothing after it: the connector's columns
(key, value, topic, partition, offset, timestamp, timestampType) include the three
the sink decodes (partition, offset, value) and the four reconcile reads (with key),
under the same names and types, so the decoder, the judge and the tables are the same
behind either source.

The probe's connection settings (``kafka.tls``, ``kafka.sasl``, as the sink and
reconcile settings carry them: librdkafka's names) become the Java client's ``kafka.*``
options in probe.transport.kafka_settings (``connector_security``), called here as each
query's or read's options are assembled. The jars come from the cache of ``make
spark-kafka`` (probe/spark_kafka), put on ``spark.jars`` by the session.

>>> stream_options("k:9092", "synthetic-sla", "latest", 10_000, {})["maxOffsetsPerTrigger"]
'10000'
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from probe.transport.kafka_settings import connector_security

CONNECTOR_NAME = "kafka"
FETCH_MAX_WAIT_MS = "1"


def _common(bootstrap_servers: str, kafka_options: Mapping[str, str]) -> dict[str, str]:
    """What every read with the connector is given. ``kafka_options``: TLS and SASL as
    the sink and reconcile settings carry them (kafka_settings.librdkafka_security)."""
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
        **connector_security(kafka_options),
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
