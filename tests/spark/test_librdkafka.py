"""The sla_kafka source's librdkafka clients (probe.spark.librdkafka): their settings."""

from __future__ import annotations

import doctest

import pytest

import probe.spark.librdkafka as librdkafka_module
from probe.spark.librdkafka import FORCED, client_config


def test_doctests() -> None:
    assert doctest.testmod(librdkafka_module).failed == 0


@pytest.mark.parametrize(
    ("option", "setting"),
    [
        (("kafka.ssl.ca.location", "/ca.pem"), ("ssl.ca.location", "/ca.pem")),
        (("kafka.sasl.username", "u"), ("sasl.username", "u")),
        (("kafka.client.id", "sink"), ("client.id", "sink")),
        # Spark hands its options lower-cased; a caller's own dict may not be.
        (("KAFKA.Security.Protocol", "SSL"), ("security.protocol", "SSL")),
    ],
)
def test_kafka_options_reach_librdkafka_as_they_are(
    option: tuple[str, str], setting: tuple[str, str]
) -> None:
    """The source forwards its kafka.* options, the prefix removed: the driver gave
    them in librdkafka's names (probe.transport.kafka_settings)."""
    assert client_config({"bootstrap.servers": "k", option[0]: option[1]}) == {
        "bootstrap.servers": "k",
        setting[0]: setting[1],
        **FORCED,
    }
    assert client_config({"bootstrap.servers": "k"}) == {"bootstrap.servers": "k", **FORCED}


def test_a_reader_never_creates_the_topic_whatever_its_options() -> None:
    options = {"bootstrap.servers": "k", "kafka.allow.auto.create.topics": "true"}
    assert client_config(options)["allow.auto.create.topics"] == "false"
