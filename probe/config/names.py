"""The names a configuration gives things: the kinds of target, the stages that judge
them, and the text every canary carries as a name (the probe id, a target's label).

The kinds and stages are enums because their values are label values on every series
and the keys of the transport map (probe.transport.TRANSPORTS); the stage lists users
write are Literals so that pydantic's message lists them plainly. CanaryText is bounded
here, at load, by what the canary codec can carry, so a probe never starts with a name
none of its canaries could hold.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator

from probe.core.canary import MAX_STRING_BYTES


class TargetKind(StrEnum):
    """What a target is probed through: the names ``targets:`` takes. This is the one
    list of kinds; the transport map (probe.transport.TRANSPORTS) has a factory for
    each, and a test checks that they match."""

    KAFKA = "kafka"
    MQTT = "mqtt"


class StageName(StrEnum):
    """Where a target's canaries are judged; the values are the ``stage`` label values."""

    CONSUMER = "consumer"  # Kafka: a direct consumer of the canary topic
    SINK = "sink"  # Kafka: the Spark sink, judged where it writes its table
    GROUP = "group"  # Kafka: a consumer-group member of the canary topic, committing
    # Kafka: the same on the consumer group protocol (KIP-848), not the classic one
    GROUP_CONSUMER = "group_consumer"
    SHARE = "share"  # Kafka: a member of a share group (KIP-932), acknowledging each
    # Kafka: a read_committed consumer of canaries written in transactions
    TRANSACTIONAL = "transactional"
    # Kafka: the canary topic as MirrorMaker 2 replicated it to another cluster
    MIRROR = "mirror"
    MQTT = "mqtt"  # MQTT: a subscriber to the shard topics
    BRIDGE = "bridge"  # MQTT: the Kafka topic an MQTT-to-Kafka bridge fills


# The stages read by a member of a group of the probe's own (a consumer group, or the
# share stage's share group): their group series (probe.metrics.group) carry the
# stage's name.
GROUP_STAGES = frozenset({StageName.GROUP, StageName.GROUP_CONSUMER, StageName.SHARE})


# The stages whose canaries are not counted per broker (synthetic_sla_broker_*): the
# broker of a canary is its source partition's leader, and what the mirror stage judges
# is the mirror, which reads every source broker alike. Counted per broker, a stopped
# mirror burned every broker's budget at once, and the per-broker ticket named them all.
NOT_PER_BROKER = frozenset({StageName.MIRROR})


# The stages each kind of target may name, as users write them (the messages of a
# Literal list them plainly); held as StageName once validated.
MqttStage = Annotated[Literal["mqtt", "bridge"], AfterValidator(StageName)]
KafkaStage = Annotated[
    Literal["consumer", "sink", "group", "group_consumer", "share", "transactional", "mirror"],
    AfterValidator(StageName),
]


def _fits_a_canary(text: str) -> str:
    # Every canary carries the probe id and the target name behind a one-byte length.
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("must be valid text (it cannot be encoded as UTF-8)") from None
    if size > MAX_STRING_BYTES:
        raise ValueError(f"is {size} bytes in UTF-8; a canary holds at most {MAX_STRING_BYTES}")
    return text


# A name every canary carries: the probe id, a target's label.
CanaryText = Annotated[str, AfterValidator(_fits_a_canary)]
