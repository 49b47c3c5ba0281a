"""Compressed record batches: the consumer and bridge stages read gzip, snappy, lz4, zstd.

Whoever writes a topic chooses its codec (an MQTT-to-Kafka bridge writes lz4), and a
topic's ``compression.type`` can recompress on the broker. The records here are
written by librdkafka (confluent-kafka), an independent client that writes all four,
onto the real embedded broker, which keeps the batches as they were compressed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import aiokafka.codec
import aiomqtt
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Producer

from probe.config import ProbeConfig, StageName, load
from probe.core.canary import Canary, encode
from probe.core.errors import RejectReason
from probe.core.judge import Fate, Finding
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.services.report import Tally
from probe.stages.target import TargetProbe
from tests.conftest import until
from tests.mosquitto import Mosquitto

CODECS = ["gzip", "snappy", "lz4", "zstd"]
# Zero padding compresses well: librdkafka sends a batch uncompressed when the codec
# would not make it smaller, and then there would be nothing to decode.
PAD_TO = 512


def _compressing_producer(broker: EmbeddedBroker, codec: str) -> Producer:
    return Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec, "linger.ms": 0}
    )


# --- the consumer stage ------------------------------------------------------------------


def _kafka_config(broker: EmbeddedBroker, topic: str) -> ProbeConfig:
    return load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.create_topic": True,
            "kafka.fetch_max_wait": "20ms",
            "judge.freshness": "60s",
            "judge.loss_timeout": "60s",
        }
    )


def _produce_compressed(
    probe: TargetProbe, keyring: KeyRing, broker: EmbeddedBroker, topic: str, codec: str
) -> int:
    """One canary of this probe to every partition, each its own compressed batch, and
    acknowledged to the stage as the probe's producer would. Returns how many."""
    producer = _compressing_producer(broker, codec)
    for partition in probe.partitions:
        canary = Canary(
            probe.own.probe_id, probe.own.incarnation, probe.target, partition, 0, time.time_ns()
        )
        producer.produce(topic, encode(canary, keyring, pad_to=PAD_TO), partition=partition)
        assert producer.flush(10) == 0
        probe.stage.on_acked(canary, time.time_ns())
    return len(probe.partitions)


def _transport_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "probe.transport.kafka" and text in r.getMessage()
    ]


@pytest.mark.parametrize("codec", CODECS)
async def test_consumer_stage_judges_compressed_canaries(
    broker: EmbeddedBroker, topic: str, codec: str
) -> None:
    tally = Tally("kafka")
    keyring = generate_key_ring()
    probe = TargetProbe(_kafka_config(broker, topic), keyring, [tally])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    try:
        sent = _produce_compressed(probe, keyring, broker, topic, codec)
        await until(lambda: probe.judge.pending_count() == 0, 10, "every canary read")
        await probe.refresh()
        assert probe.readiness()[0], probe.readiness()
    finally:
        consumer.cancel()
        await probe.close()
    assert tally.stages[StageName.CONSUMER].outcomes == {"delivered": sent}


async def test_records_the_consumer_cannot_decode_make_the_target_unready(
    broker: EmbeddedBroker,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the lz4 codec every fetch of an lz4 batch fails: the target is unready
    naming the codec, logged once however often it fails; once the codec is back the
    canaries are read, the problem clears (logged once) and the target is ready."""
    caplog.set_level(logging.INFO, logger="probe.transport.kafka")
    checks: list[None] = []
    monkeypatch.setattr(aiokafka.codec, "has_lz4", lambda: checks.append(None) or False)
    tally = Tally("kafka")
    keyring = generate_key_ring()
    probe = TargetProbe(_kafka_config(broker, topic), keyring, [tally])
    await probe.connect(give_up_after=10)
    consumer = asyncio.create_task(probe.consume())
    transport = probe.transport
    assert transport is not None
    try:
        sent = _produce_compressed(probe, keyring, broker, topic, "lz4")
        await until(lambda: len(checks) >= 3, 15, "three failed fetches")
        await probe.refresh()
        assert probe.readiness() == (
            False,
            "fetch failed: UnsupportedCodecError: Libraries for lz4 compression codec not found",
        )
        assert len(_transport_lines(caplog, "fetch failed")) == 1

        monkeypatch.undo()  # the codec is installed after all
        await until(lambda: transport.read_problem() is None, 15, "the problem to clear")
        await until(lambda: probe.judge.pending_count() == 0, 10, "every canary read")
        await probe.refresh()
        assert probe.readiness()[0], probe.readiness()
    finally:
        consumer.cancel()
        await probe.close()
    assert len(_transport_lines(caplog, "fetching again")) == 1
    assert tally.stages[StageName.CONSUMER].outcomes == {"delivered": sent}


# --- the bridge stage --------------------------------------------------------------------


class FatesByStage:
    """A recorder counting fates per (stage, outcome)."""

    def __init__(self) -> None:
        self.fates: Counter[tuple[str, str]] = Counter()

    def count(self, target: str, stage: str, findings: Sequence[Finding]) -> None:
        for finding in findings:
            if isinstance(finding, Fate):
                self.fates[stage, finding.outcome.value] += 1

    def count_invalid(self, target: str, stage: str, reason: RejectReason) -> None:
        raise AssertionError(f"unexpected invalid record at {stage}: {reason}")

    def of(self, stage: str) -> dict[str, int]:
        return {outcome: n for (st, outcome), n in self.fates.items() if st == stage}


@asynccontextmanager
async def compressing_bridge(
    mosquitto: Mosquitto, prefix: str, kafka: EmbeddedBroker, topic: str, codec: str
) -> AsyncIterator[None]:
    """MQTT `<prefix>/+` -> Kafka `topic`, each message a batch compressed with `codec`,
    as an MQTT-to-Kafka bridge built on librdkafka writes them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    producer = _compressing_producer(kafka, codec)
    subscribed = asyncio.Event()

    async def carry() -> None:
        async with aiomqtt.Client(
            "127.0.0.1", mosquitto.port, identifier=f"test-bridge-{topic}"
        ) as client:
            await client.subscribe(f"{prefix}/+", qos=1)
            subscribed.set()
            async for message in client.messages:
                assert isinstance(message.payload, bytes)
                producer.produce(topic, message.payload, key=message.topic.value.encode())
                assert await asyncio.to_thread(producer.flush, 10) == 0

    task = asyncio.create_task(carry())
    try:
        await asyncio.wait_for(subscribed.wait(), 10)
        yield
    finally:
        task.cancel()


def _bridge_config(
    mosquitto: Mosquitto, prefix: str, kafka: EmbeddedBroker, topic: str
) -> ProbeConfig:
    return load(
        overrides={
            "probe_id": "bridge-codec-test",
            "mqtt.url": mosquitto.url,
            "mqtt.topic_prefix": prefix,
            "mqtt.bridge.topic": topic,
            "kafka.bootstrap_servers": kafka.bootstrap_servers,
            "kafka.fetch_max_wait": "20ms",
            "targets": "mqtt",
            "canary.size": str(PAD_TO),
            "judge.freshness": "5s",
            "judge.loss_timeout": "5s",
        }
    )


async def _decide(probe: TargetProbe, within: float = 15.0) -> None:
    assert await probe.settle(within), "every canary's fate at every stage"


@pytest.mark.parametrize("codec", CODECS)
async def test_bridge_stage_reads_what_a_compressing_bridge_writes(
    mosquitto: Mosquitto, broker: EmbeddedBroker, topic_prefix: str, topic: str, codec: str
) -> None:
    fates = FatesByStage()
    config = _bridge_config(mosquitto, topic_prefix, broker, topic)
    probe = TargetProbe(config, generate_key_ring(), [fates], kind="mqtt")
    async with compressing_bridge(mosquitto, topic_prefix, broker, topic, codec):
        await probe.connect(give_up_after=10)
        consumer = asyncio.create_task(probe.consume())
        try:
            for _ in range(2):
                await probe.produce_round()
            await _decide(probe)
            await probe.refresh()
            assert probe.readiness()[0], probe.readiness()
        finally:
            consumer.cancel()
            await probe.close()
    assert fates.of(StageName.MQTT) == {"delivered": 6}
    assert fates.of(StageName.BRIDGE) == {"delivered": 6}


async def test_a_bridge_codec_the_probe_cannot_read_makes_the_target_unready(
    mosquitto: Mosquitto,
    broker: EmbeddedBroker,
    topic_prefix: str,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reported failure: the bridge writes lz4 and the probe lacks the codec. The
    target says so (the bridge stage's canaries cannot be judged delivered), instead of
    staying ready while every bridge canary is lost."""
    monkeypatch.setattr(aiokafka.codec, "has_lz4", lambda: False)
    fates = FatesByStage()
    config = _bridge_config(mosquitto, topic_prefix, broker, topic)
    probe = TargetProbe(config, generate_key_ring(), [fates], kind="mqtt")
    async with compressing_bridge(mosquitto, topic_prefix, broker, topic, "lz4"):
        await probe.connect(give_up_after=10)
        consumer = asyncio.create_task(probe.consume())
        try:
            await probe.produce_round()

            async def unready() -> bool:
                await probe.refresh()
                return not probe.readiness()[0]

            await until(unready, 15, "the target unready", every=0.1)
        finally:
            consumer.cancel()
            await probe.close()
    assert probe.readiness() == (
        False,
        "bridge: fetch failed: UnsupportedCodecError: Libraries for lz4 compression codec "
        "not found",
    )
