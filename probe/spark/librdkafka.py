"""The librdkafka clients of the sla_kafka source: their settings, their log, a consumer.

Both sides of the source make them: the driver lists offsets with one
(probe.spark.topic_offsets), each executor task reads its ranges with another
(probe.spark.kafka_reads).

**The client.** The driver and the executors use confluent-kafka (librdkafka), chosen
by ``benchmarks/bench_source_read.py``: its executors read 7x more records per
CPU-second than kafka-python did, and a task owing one record on each of 10,000
partitions finishes in seconds where kafka-python's ran out of its minute. Options
prefixed ``kafka.`` are client settings in librdkafka's names (``kafka.ssl.ca.location``,
``kafka.sasl.username``), passed on with the prefix removed: the probe's TLS and SASL
arrive so, translated on the driver (probe.transport.kafka_settings.librdkafka_security).
An unknown name fails the query at once, naming it.

**Nothing here creates a topic.** Every client the source makes is told
``allow.auto.create.topics=false`` (whatever the options say), and asks for the
metadata of its one topic, never of all: a broker that lost its data, or a topic
deleted by hand, is never brought back by a reader, with the broker's default
partition count, behind the back of whoever manages it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from probe.core.errors import TransportError

log = logging.getLogger(__name__)

# Set by the source whatever the options say: a reader never creates a topic, never
# commits offsets (they live in Spark's checkpoint).
FORCED: Mapping[str, str] = {"allow.auto.create.topics": "false", "enable.auto.commit": "false"}
# librdkafka wants a group id for any consumer; the source never joins it (partitions
# are assigned, not subscribed) nor commits to it.
GROUP_ID = "sla_kafka"
# A topic's metadata, or a fetch, saying the topic does not exist.
NO_TOPIC = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from the source options (see the module docstring).

    >>> client_config({"bootstrap.servers": "k:9092", "kafka.security.protocol": "SSL"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bootstrap.servers': 'k:9092', 'security.protocol': 'SSL',
     'allow.auto.create.topics': 'false', 'enable.auto.commit': 'false'}
    """
    config = {"bootstrap.servers": options["bootstrap.servers"]}
    for name, value in options.items():
        # librdkafka's names are lower case; Spark hands its options lower-cased.
        if name.lower().startswith("kafka."):
            config[name[len("kafka.") :].lower()] = value
    return {**config, **FORCED}


# The same client log line (numbers aside) at most once in this many seconds.
CLIENT_LOG_REPEAT_S = 60.0


class ClientLog:
    """librdkafka's log lines for the source's clients, to this module's logger: a
    distinct line at most once a minute (a broker away is retried every second, and
    each retry logs), the last warning or error kept to be named in a failure.

    librdkafka hands its lines to whatever has a ``log(level, format, *args)``
    method, from the client's poll and consume calls.
    """

    def __init__(self) -> None:
        self.last_problem: str | None = None
        self._shown: dict[str, float] = {}

    def log(self, level: int, text: str, *args: object) -> None:
        line = text % args if args else text
        if level >= logging.WARNING:
            self.last_problem = line
        now = time.monotonic()
        key = re.sub(r"\d+", "#", line)
        if now - self._shown.get(key, -CLIENT_LOG_REPEAT_S) < CLIENT_LOG_REPEAT_S:
            return
        if len(self._shown) > 1000:
            self._shown.clear()
        self._shown[key] = now
        log.log(level, "kafka client: %s", line)


def new_consumer(options: Mapping[str, str], client_log: ClientLog, **settings: str) -> Any:
    """A consumer with the source's settings, logging to ``client_log``."""
    config: dict[str, Any] = {
        "group.id": GROUP_ID,
        # kafka-python's default, which the source had: records of open or aborted
        # transactions are read too, as Spark's own Kafka source does by default.
        "isolation.level": "read_uncommitted",
        # Brokers close idle connections; a reconnect is not news.
        "log.connection.close": "false",
        **settings,
        **client_config(options),
        "logger": client_log,
    }
    try:
        return Consumer(config)
    except KafkaException as exc:  # an unknown or invalid setting: name it
        raise TransportError(f"kafka client settings: {kafka_error(exc)}") from exc


def kafka_error(exc: KafkaException) -> str:
    """What librdkafka said, without the exception's wrapping."""
    error = exc.args[0] if exc.args else None
    return str(error.str()) if isinstance(error, KafkaError) else str(exc)
