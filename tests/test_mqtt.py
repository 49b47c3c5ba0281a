"""The MQTT target against real Mosquitto: shards, QoS, security, outages, hostile input."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import pytest
from prometheus_client import CollectorRegistry

from probe import tracing
from probe.config import ProbeConfig, StageName, load
from probe.core.canary import Canary, decode, encode
from probe.core.errors import TransportError
from probe.core.judge import Outcome
from probe.core.keys import generate_key_ring
from probe.metrics import ProbeMetrics
from probe.services.report import Tally
from probe.stages.target import TargetProbe
from tests.conftest import until
from tests.mosquitto import CuttingProxy, Mosquitto, make_tls_files


def _config(url: str, prefix: str, **extra: object) -> ProbeConfig:
    return load(
        overrides={
            "probe_id": "mqtt-test",
            "mqtt.url": url,
            "mqtt.topic_prefix": prefix,
            "judge.loss_timeout": "5s",
            **extra,
        }
    )


async def _probe_rounds(probe: TargetProbe, rounds: int, within: float = 15.0) -> None:
    """Connect, produce rounds, and wait until every canary has its fate at every stage."""
    await probe.connect(give_up_after=5)
    consumer = asyncio.create_task(probe.consume())
    try:
        for _ in range(rounds):
            await probe.produce_round()
        assert await probe.settle(within), "every canary's fate"
    finally:
        consumer.cancel()
        await probe.close()


@pytest.mark.parametrize("qos", [0, 1, 2])
async def test_round_trip_on_every_shard(mosquitto: Mosquitto, topic_prefix: str, qos: int) -> None:
    """Every shard is delivered; the wire carries the canary unretained, at the QoS asked,
    with its trace context as an MQTT 5 user property."""
    tracing.install_tracer_provider()
    keyring = generate_key_ring()
    tally = Tally("mqtt")
    config = _config(mosquitto.url, topic_prefix, **{"mqtt.shards": 5, "mqtt.qos": qos})
    probe = TargetProbe(config, keyring, [tally], kind="mqtt")
    seen: list[aiomqtt.Message] = []

    async def watch() -> None:
        # An independent subscriber, to see what the publisher put on the wire.
        async with aiomqtt.Client(
            "127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            await client.subscribe(f"{topic_prefix}/+", qos=2)
            watching.set()
            async for message in client.messages:
                seen.append(message)

    watching = asyncio.Event()
    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(watching.wait(), 5)
    try:
        await _probe_rounds(probe, rounds=2)
        await until(lambda: len(seen) == 10, 5, "the independent subscriber's copies")
    finally:
        watcher.cancel()
    assert tally.stages[StageName.MQTT].outcomes == {Outcome.DELIVERED.value: 10}
    assert sorted(key.partition for key in probe.judge.streams()) == [0, 1, 2, 3, 4]
    assert probe.readiness() == (True, f"mqtt topics {topic_prefix}/0..4: 5 shards")
    for message in seen:
        canary = decode(message.payload, keyring)  # type: ignore[arg-type]
        assert message.topic.value == f"{topic_prefix}/{canary.partition}"
        assert message.qos == qos
        assert not message.retain
        assert message.properties is not None
        assert canary.trace_context is not None
        assert message.properties.UserProperty == [("traceparent", canary.trace_context)]


async def test_mqtt_3_1_1_works_without_user_properties(
    mosquitto: Mosquitto, topic_prefix: str
) -> None:
    tally = Tally("mqtt")
    config = _config(mosquitto.url, topic_prefix, **{"mqtt.protocol": "3.1.1"})
    probe = TargetProbe(config, generate_key_ring(), [tally], kind="mqtt")
    await _probe_rounds(probe, rounds=2)
    assert tally.stages[StageName.MQTT].outcomes == {Outcome.DELIVERED.value: 6}


def _mosquitto_pub(broker: Mosquitto, topic: str, payload: bytes, tmp_path: Path) -> None:
    """Publish with Mosquitto's own client: independent of the probe's client library."""
    path = tmp_path / "payload.bin"
    path.write_bytes(payload)
    subprocess.run(
        [
            "mosquitto_pub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-q",
            "1",
            "-t",
            topic,
            "-f",
            str(path),
        ],
        check=True,
        timeout=10,
    )


async def test_hostile_payloads_are_counted_invalid_never_delivered(
    mosquitto: Mosquitto, topic_prefix: str, tmp_path: Path
) -> None:
    keyring = generate_key_ring()
    tally = Tally("mqtt")
    config = _config(mosquitto.url, topic_prefix, **{"canary.max_size": 4096})
    probe = TargetProbe(config, keyring, [tally], kind="mqtt")
    await probe.connect(give_up_after=5)
    consumer = asyncio.create_task(probe.consume())
    try:
        tally.declare_stage(StageName.MQTT)
        stage = tally.stages[StageName.MQTT]
        await probe.produce_round()
        await until(lambda: stage.outcomes[Outcome.DELIVERED] == 3, 10, "first round")

        own = probe.own
        canary = Canary(own.probe_id, own.incarnation, "mqtt", 0, 1000, time.time_ns())
        signed = encode(canary, keyring)
        forged_seq = encode(dataclasses.replace(canary, seq=1001), keyring)
        hostile = {
            # Seq changed, the original signature kept: tampering in flight.
            "bad_signature": forged_seq[:-32] + signed[-32:],
            "malformed": random.Random(7).randbytes(200),
            "unknown_key": encode(canary, generate_key_ring("intruder")),
            "oversized": b"\0" * 5000,
            "unsupported_version": signed[:2] + b"\x09" + signed[3:],
        }
        for payload in hostile.values():
            _mosquitto_pub(mosquitto, f"{topic_prefix}/0", payload, tmp_path)
        # Under the prefix but not a shard topic: judged all the same.
        _mosquitto_pub(mosquitto, f"{topic_prefix}/not-a-shard", b"\xca\x9a", tmp_path)
        await until(
            lambda: stage.invalid == {**dict.fromkeys(hostile, 1), "malformed": 2},
            10,
            f"each hostile record counted under its reason (so far {stage.invalid})",
        )
        # Canaries keep flowing after the hostile burst.
        await probe.produce_round()
        await until(lambda: stage.outcomes[Outcome.DELIVERED] == 6, 10, "second round")
    finally:
        consumer.cancel()
        await probe.close()
    # Nothing hostile got a fate: the six fates are the six canaries produced.
    assert stage.outcomes == {Outcome.DELIVERED.value: 6}
    assert sum(stage.anomalies.values()) == 0


@pytest.fixture
def secured_mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path / "secured", users={"probe": "right-password"}) as broker:
        yield broker


async def test_credentials(
    secured_mosquitto: Mosquitto, topic_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong password: one clear line, unready, retried with backoff; the right one works."""
    wrong = _config(
        secured_mosquitto.url,
        topic_prefix,
        **{"mqtt.username": "probe", "mqtt.password": "wrong-password"},
    )
    probe = TargetProbe(wrong, generate_key_ring(), [Tally("mqtt")], kind="mqtt")
    caplog.set_level(logging.WARNING, logger="probe.stages.target")
    with pytest.raises(TransportError) as refused:
        await probe.connect(give_up_after=1.0)
    # Mosquitto 2.0 answers a wrong password with "Not authorized" (MQTT 5 code 0x87).
    expected = (
        f"cannot connect to 127.0.0.1:{secured_mosquitto.port}: the broker refused the login "
        "of user 'probe' (Not authorized): check mqtt.username and mqtt.password"
    )
    assert str(refused.value) == expected
    assert probe.readiness() == (False, expected)
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) >= 2, retries  # backoff, not a single try and not a crash

    tally = Tally("mqtt")
    right = _config(
        secured_mosquitto.url,
        topic_prefix,
        **{"mqtt.username": "probe", "mqtt.password": "right-password"},
    )
    await _probe_rounds(TargetProbe(right, generate_key_ring(), [tally], kind="mqtt"), 1)
    assert tally.stages[StageName.MQTT].outcomes == {Outcome.DELIVERED.value: 3}


async def test_tls_with_client_certificate_and_server_name(
    tmp_path: Path, topic_prefix: str
) -> None:
    """Mutual TLS, the broker verified under a name other than the host dialled; a broker
    whose certificate the probe's CA did not sign gives a clear error and unreadiness."""
    tls = make_tls_files(tmp_path / "tls")
    stranger = make_tls_files(tmp_path / "other-ca", name="stranger")
    with Mosquitto(tmp_path / "tls-broker", tls=tls, require_certificate=True) as broker:
        settings = {
            "mqtt.tls.ca_file": str(tls.ca),
            "mqtt.tls.cert_file": str(tls.client_cert),
            "mqtt.tls.key_file": str(tls.client_key),
            "mqtt.tls.server_name": "mqtt.test",
        }
        tally = Tally("mqtt")
        config = _config(broker.url, topic_prefix, **settings)
        await _probe_rounds(TargetProbe(config, generate_key_ring(), [tally], kind="mqtt"), 1)
        assert tally.stages[StageName.MQTT].outcomes == {Outcome.DELIVERED.value: 3}

        untrusted = _config(
            broker.url, topic_prefix, **{**settings, "mqtt.tls.ca_file": str(stranger.ca)}
        )
        probe = TargetProbe(untrusted, generate_key_ring(), [Tally("mqtt")], kind="mqtt")
        with pytest.raises(TransportError) as refused:
            await probe.connect(give_up_after=0.5)
        message = str(refused.value)
        assert message.startswith(
            f"cannot connect to 127.0.0.1:{broker.port}: the broker's certificate is not "
            "trusted by mqtt.tls.ca_file"
        )
        assert "set mqtt.tls.ca_file" in message
        assert "\n" not in message
        assert probe.readiness() == (False, message)

        wrong_name = _config(
            broker.url, topic_prefix, **{**settings, "mqtt.tls.server_name": "elsewhere.test"}
        )
        probe = TargetProbe(wrong_name, generate_key_ring(), [Tally("mqtt")], kind="mqtt")
        with pytest.raises(TransportError, match=r"not valid for elsewhere\.test"):
            await probe.connect(give_up_after=0.5)


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "clean"])
async def test_canaries_published_while_the_subscriber_was_away(
    tmp_path: Path, topic_prefix: str, persistent: bool
) -> None:
    """The subscriber is cut off and Mosquitto restarts meanwhile; the publisher goes on.

    With a persistent session (and Mosquitto's persistence) the QoS 1 canaries
    published while the subscriber was away are delivered when it is back; with a
    clean session they are lost. Either way the stage reconnects and resubscribes.
    """
    with Mosquitto(tmp_path / "broker", persistence=True) as broker:
        proxy = CuttingProxy(broker.port)
        proxy.start()
        try:
            await _away_and_back(broker, proxy, topic_prefix, persistent)
        finally:
            proxy.stop()


async def _away_and_back(
    broker: Mosquitto, proxy: CuttingProxy, prefix: str, persistent: bool
) -> None:
    registry = CollectorRegistry()
    metrics = ProbeMetrics(registry)
    tally = Tally("mqtt")
    config = _config(
        proxy.url,
        prefix,
        **{
            "mqtt.persistent_session": persistent,
            "mqtt.qos": 1,
            # Long enough for the way back with a persistent session; with a clean one
            # the canaries sent meanwhile never come, so a short wait decides them.
            **dict.fromkeys(
                ("judge.freshness", "judge.loss_timeout", "once.loss_timeout"),
                "30s" if persistent else "3s",
            ),
        },
    )
    probe = TargetProbe(config, generate_key_ring(), [tally, metrics], metrics=metrics, kind="mqtt")

    def reconnects() -> float:
        return registry.get_sample_value("synthetic_sla_reconnects_total", {"target": "mqtt"}) or 0

    tally.declare_stage(StageName.MQTT)
    stage = tally.stages[StageName.MQTT]
    await probe.connect(give_up_after=5)
    consumer = asyncio.create_task(probe.consume())
    try:
        await probe.produce_round()
        await until(lambda: stage.outcomes[Outcome.DELIVERED] == 3, 10, "a first round")

        proxy.cut(b"-sub")
        broker.stop()
        broker.start()
        # Only the publisher can come back while the subscriber is cut off.
        await until(lambda: reconnects() >= 1, 15, "the publisher back")
        for _ in range(2):
            await probe.produce_round()
        assert stage.outcomes.get(Outcome.PRODUCE_FAILED.value, 0) == 0
        proxy.restore()
        await until(lambda: reconnects() >= 2, 20, "the subscriber back")

        assert await probe.settle(35), "every canary's fate"
        # And the stage works again after it all.
        await probe.produce_round()
        assert await probe.settle(10), "a round after the return"
    finally:
        consumer.cancel()
        await probe.close()
    outcomes = stage.outcomes
    if persistent:
        assert outcomes == {Outcome.DELIVERED.value: 12}
    else:
        assert outcomes == {Outcome.DELIVERED.value: 6, Outcome.LOST.value: 6}
